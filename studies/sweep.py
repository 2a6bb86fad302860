"""Tile sweep: times the kernel for each (num_warps, tiles per program, eviction policy, 16-byte
stores per thread) on a few weights and prints the fastest. Speed only: each variant is first
checked bit-exact. Launches are replayed from a CUDA graph, so the times are the GPU's, not
Triton's launch path.

    python -m studies.sweep [--json PATH] [--warps 2 4] [--iters 1 2] [--vectors 1 4]

Exit 0 when swept; 2 bad arguments (the kernel's own bounds: num_warps a power of two up to 32,
tiles per program 1 to 64, stores per thread 1, 2, 4 or 8; a --json with no folder to go in); 4 without
a CUDA GPU.
"""

from __future__ import annotations

if __name__ == "__main__":  # before torch is imported: where it is missing, one line, not a traceback
    from harness.core import exits

    exits.require(
        ("torch",),
        "python -m studies.sweep",
        "where torch is installed: the GPU image, or .nox/torch/bin/python",
    )

import itertools
import json
from typing import NamedTuple

import torch

from harness.core import workload
from harness.core.command_output import Parser, check_output, plain_streams
from nf4kernel import kernel as K
from nf4kernel import launch_cache
from nf4kernel.quant_state import read
from studies import utils

SHAPES = ((14336, 4096, torch.bfloat16), (4096, 1024, torch.bfloat16), (8192, 2048, torch.float16))
WARPS = (1, 2, 4, 8)
ITERS = (1, 2, 4, 8)
EVICTS = ("", "evict_first")
VECTORS = (1, 2, 4)
GRAPH_LAUNCHES = 20


class Streaming(NamedTuple):
    """The probes' case: Challenge A's largest weight (down, 4096 x 14336 bf16) and what a variant is
    checked and scaled against."""

    layer: object  # the Linear4bit
    tensors: object  # its state, read (nf4kernel.quant_state.read)
    layout: object
    expected: torch.Tensor  # bitsandbytes' output: every variant must give it bit for bit
    out: torch.Tensor  # a buffer of its shape for the variants to write
    moved: int  # bytes one dequantization reads and writes
    copy_bw: float  # this GPU's device-copy bandwidth, bytes/s


def streaming_case() -> Streaming:
    """Builds the case, and prints the device and its copy bandwidth."""
    copy_bw = workload.copy_bandwidth()
    print(f"{workload.device_name()}: copy {copy_bw / 1e9:.0f} GB/s (256 MB, read + written)")
    layer = workload.build_mlp(4096, 14336, torch.bfloat16, seed=0).layers[2]
    tensors, layout = read(layer.weight, layer.weight.quant_state)
    expected = workload.implementation("bitsandbytes")(layer)
    return Streaming(layer, tensors, layout, expected, torch.empty_like(expected), workload.bytes_moved(layer), copy_bw)


def run_variant(tensors, layout, out, num_warps, iters, evict, vector=1):
    grid, args, constexprs, options = launch_cache.kernel_arguments(
        tensors, layout, out, False, num_warps=num_warps, iters=iters, evict=evict, vector=vector
    )
    return lambda: K.dequantize_4bit_kernel[grid](*args, **constexprs, **options)


def graphed(launch):
    """A CUDA graph of GRAPH_LAUNCHES launches: replaying it times the kernels without host gaps."""
    launch()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_LAUNCHES):
            launch()
    return graph.replay


def main(argv=None) -> int:
    plain_streams()
    parser = Parser(prog="python -m studies.sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write every measurement here")
    warps, vectors = (1, 2, 4, 8, 16, 32), (1, 2, 4, 8)  # what the kernel's tile table admits (kernel._tile_row)
    parser.add_argument(
        "--warps", type=int, nargs="+", default=WARPS, choices=warps, metavar="W", help="num_warps to try (%(default)s)"
    )
    parser.add_argument("--iters", type=int, nargs="+", default=ITERS, help="tiles per program, 1 to 64 (%(default)s)")
    parser.add_argument(
        "--vectors",
        type=int,
        nargs="+",
        default=VECTORS,
        choices=vectors,
        metavar="V",
        help="stores per thread (%(default)s)",
    )
    args = parser.parse_args(argv)
    if not all(1 <= iters <= 64 for iters in args.iters):
        parser.error(f"--iters: tiles per program are 1 to 64, not {' '.join(map(str, args.iters))}")
    check_output(parser, "--json", args.json)
    utils.exit_without_gpu("sweep")
    copy_bw = workload.copy_bandwidth()
    print(f"device: {workload.device_name()}   copy bandwidth: {copy_bw / 1e9:.0f} GB/s")
    results = []
    for rows_out, cols_in, dtype in SHAPES:
        mlp = workload.build_mlp(cols_in, rows_out, dtype, seed=0)
        layer = mlp.layers[0]
        tensors, layout = read(layer.weight, layer.weight.quant_state)
        expected = workload.implementation("bitsandbytes")(layer)
        out = torch.empty_like(expected)
        moved = workload.bytes_moved(layer)
        for num_warps, iters, evict, vector in itertools.product(args.warps, args.iters, EVICTS, args.vectors):
            launch = run_variant(tensors, layout, out, num_warps, iters, evict, vector)
            out.fill_(float("nan"))
            launch()
            if not torch.equal(out, expected):
                raise SystemExit(f"variant {(num_warps, iters, evict, vector)} is not bit-exact on {layout.shape}")
            seconds = workload.event_time(graphed(launch), repeats=20) / GRAPH_LAUNCHES
            results.append(
                {
                    "shape": list(layout.shape),
                    "dtype": str(dtype),
                    "num_warps": num_warps,
                    "iters": iters,
                    "evict": evict,
                    "vector": vector,
                    "us": seconds * 1e6,
                    "copy_fraction": moved / seconds / copy_bw,
                }
            )
        ranked = sorted((r for r in results if r["shape"] == list(layout.shape)), key=lambda r: r["us"])
        tile = K.tile_shape((layout.n_elements + 1) // 2, layout.blocksize, dtype.itemsize, interpreted=False)
        chosen = (tile.num_warps, tile.iters, tile.evict, tile.vector)
        default = [r for r in ranked if (r["num_warps"], r["iters"], r["evict"], r["vector"]) == chosen]
        print(f"\n{tuple(layout.shape)} {dtype}: the fastest of {len(ranked)}, then the default")
        for r in ranked[:6] + default:
            print(
                f"  {r['num_warps']:2d} warps  {r['iters']} tiles/program  {r['vector']}x16 B/thread"
                f"  {r['evict'] or '-':11s}"
                f"  {r['us']:8.2f} us  {100 * r['copy_fraction']:5.1f}% of copy"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": workload.device_name(), "copy_bandwidth": copy_bw, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
