"""How close 14336x4096 bf16 gets to copy bandwidth, and what stands between (the target: 93%).

    python -m studies.probes.bandwidth_probe [--quick]

For each tile variant (num_warps, tiles per program, 16-byte stores per thread, eviction), checked
bit-exact first: the kernel's time replayed from a CUDA graph (no launch gaps). Then, for the
default tile, the same launches back to back from the host, and ``dequantize()`` back to back (what
``studies.perf`` reports): the difference is what launching costs the GPU between kernels.
"""

from __future__ import annotations

import itertools

import torch

import nf4kernel
from harness.core import workload
from harness.core.command_output import Parser
from nf4kernel import kernel as K
from studies import sweep


def main(argv=None) -> int:
    parser = Parser(prog="python -m studies.probes.bandwidth_probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer variants")
    args = parser.parse_args(argv)
    layer, tensors, layout, expected, out, moved, copy_bw = sweep.streaming_case()

    def report(label, seconds):
        print(f"  {label:44s} {seconds * 1e6:8.2f} us  {100 * moved / seconds / copy_bw:5.1f}% of copy", flush=True)

    warps, iters, vectors = ((2, 4), (1, 2), (1, 4)) if args.quick else ((2, 4, 8), (1, 2), (1, 2, 4))
    results = []
    for nw, it, vec, evict in itertools.product(warps, iters, vectors, ("", "evict_first")):
        launch = sweep.run_variant(tensors, layout, out, nw, it, evict, vec)
        out.fill_(float("nan"))
        launch()
        if not torch.equal(out, expected):
            raise SystemExit(f"variant {(nw, it, vec, evict)} is not bit-exact")
        seconds = workload.event_time(sweep.graphed(launch), repeats=20) / sweep.GRAPH_LAUNCHES
        results.append((seconds, nw, it, vec, evict))
    results.sort()
    print("graph-replayed kernel, fastest 10:")
    for seconds, nw, it, vec, evict in results[:10]:
        report(f"{nw} warps, {it} tiles, {vec}x16 B/thread, {evict or '-'}", seconds)
    tile = K.tile_shape((layout.n_elements + 1) // 2, layout.blocksize, 2, interpreted=False)
    default = [r for r in results if r[1:] == (tile.num_warps, tile.iters, tile.vector, tile.evict)]
    for seconds, *_ in default:
        report(f"default tile {tile}", seconds)
    # Back to back from the host: the launch gap between kernels counts. (Programmatic dependent
    # launch, tried to close that gap, made it 1.8x slower: issue10/pdl-bandwidth-probe-h200.txt.)
    best = results[0][1:]
    for _ in range(2):
        for label, (nw, it, vec, evict) in (("default tile", tile_of(tile)), ("fastest tile", best)):
            launch = sweep.run_variant(tensors, layout, out, nw, it, evict, vec)
            launch()
            report(f"{label}, launches back to back", workload.event_time(launch, repeats=200))
        report("dequantize(layer) back to back", workload.event_time(lambda: nf4kernel.dequantize(layer), 200))
    copy = workload.event_time(lambda: out.copy_(expected), repeats=200)
    share = 100 * 2 * out.nbytes / copy / copy_bw
    print(f"  {'copy of the output (out.copy_), for scale':44s} {copy * 1e6:8.2f} us  {share:5.1f}% of copy")
    return 0


def tile_of(tile):
    return tile.num_warps, tile.iters, tile.vector, tile.evict


if __name__ == "__main__":
    raise SystemExit(main())
