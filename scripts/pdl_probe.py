"""Does programmatic dependent launch close the gap between back-to-back launches? (issue 10, item 7)

    python scripts/pdl_probe.py [--rounds 5]

14336x4096 bf16 through ``dequantize()`` back to back reached about 90% of copy on an H200 without PDL, while
the kernel replayed from a CUDA graph reaches 92 to 94%: the rest is the gap between one kernel's
last program and the next one's first. The first try (trigger at each program's start, every
launch PDL) made back-to-back launches 1.8x slower (``benchmarks/results/issue10/
pdl-bandwidth-probe-h200.txt``) and nobody found out why. This probe times each ``PDL`` mode of the
kernel (``kernel.PDL_MODES``) with two tiles (the table's, and one with 8x fewer programs: if
waiting programs cost per program, the second suffers less), launched back to back from the host,
in interleaved rounds, each mode checked bit-exact first; and, for scale, the same launches
without PDL, the graph-replayed kernel and ``dequantize(layer)``.

The tile rows launch through Triton's own path (``kernel[grid](...)``), whose host cost is several
times a planned call's: on a slow host it barely stays ahead of a 38 us kernel, the queue runs
shallow, and PDL (which needs the next launch already queued) shows little. ``dequantize(layer)``
(a planned call) is the row that says what users get (run 19 in ``benchmarks/results/issue10``).
"""

from __future__ import annotations

import argparse
import statistics

import torch

import nf4kernel
from harness.core import workload
from harness.tuning import sweep
from nf4kernel import kernel as K
from nf4kernel import launch_cache
from nf4kernel.quant_state import read


def variant(tensors, layout, out, tile: dict, mode: int):
    grid, args, constexprs, options = launch_cache.kernel_arguments(tensors, layout, out, False, mode > 0, **tile)
    constexprs["PDL"] = mode
    return lambda: K.dequantize_4bit_kernel[grid](*args, **constexprs, **options)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if torch.cuda.get_device_capability() < (9, 0):
        raise SystemExit("programmatic dependent launch needs sm_90 or newer")
    copy_bw = workload.copy_bandwidth()
    print(f"{workload.device_name()}: copy {copy_bw / 1e9:.0f} GB/s (256 MB, read + written)")
    layer = workload.build_mlp(4096, 14336, torch.bfloat16, seed=0).layers[2]
    tensors, layout = read(layer.weight, layer.weight.quant_state)
    expected = workload.bitsandbytes_impl()(layer)
    out = torch.empty_like(expected)
    moved = workload.bytes_moved(layer)
    table = K.tile_shape((layout.n_elements + 1) // 2, layout.blocksize, 2, interpreted=False)
    tiles = {
        "table tile": dict(num_warps=table.num_warps, iters=table.iters, evict=table.evict, vector=table.vector),
        "8x fewer programs": {"num_warps": 4, "iters": 4, "evict": table.evict, "vector": table.vector},
        # Near the table's tile in the graph-replayed sweeps: does PDL change which is fastest?
        "4 warps": {"num_warps": 4, "iters": 1, "evict": table.evict, "vector": table.vector},
        "2 stores per thread": {"num_warps": 2, "iters": 1, "evict": table.evict, "vector": 2},
        "no eviction hint": {"num_warps": 2, "iters": 1, "evict": "", "vector": table.vector},
    }
    runs = {}
    for tile_name, tile in tiles.items():
        for mode in K.PDL_MODES if tile_name in ("table tile", "8x fewer programs") else (0, K.PDL_MODE):
            launch = variant(tensors, layout, out, tile, mode)
            out.fill_(float("nan"))
            launch()
            if not torch.equal(out, expected):
                raise SystemExit(f"{tile_name}, PDL {mode}: not bit-exact")
            runs[f"{tile_name}, PDL {mode}"] = launch
    pdl = launch_cache._pdl_on(torch.cuda.current_device())
    runs[f"dequantize(layer), PDL {K.PDL_MODE if pdl else 0}"] = lambda: nf4kernel.dequantize(layer)
    graph = sweep.graphed(variant(tensors, layout, out, tiles["table tile"], 0))
    times = {name: [] for name in runs}
    graphed = []
    for r in range(args.rounds):
        for name, launch in runs.items():
            times[name].append(workload.event_time(launch, repeats=200))
        graphed.append(workload.event_time(graph, repeats=20) / sweep.GRAPH_LAUNCHES)
        print(f"round {r + 1}/{args.rounds} done", flush=True)

    def report(label, samples):
        us = statistics.median(samples)
        spread = f"({min(samples) * 1e6:.2f} to {max(samples) * 1e6:.2f})"
        print(f"  {label:44s} {us * 1e6:8.2f} us {spread:20s} {100 * moved / us / copy_bw:5.1f}% of copy")

    print(f"back to back, median of {args.rounds} interleaved rounds of 200 launches (min to max):")
    for name, samples in times.items():
        report(name, samples)
    report("table tile, PDL 0, replayed from a CUDA graph", graphed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
