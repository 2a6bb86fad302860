"""Tile sweep: times the kernel for each (num_warps, tiles per program, eviction policy) on a few
weights and prints the fastest. Speed only: each variant is first checked bit-exact. Launches are
replayed from a CUDA graph, so the times are the GPU's, not Triton's launch path.

    python -m nf4kernel.harness.sweep [--json PATH]
"""

from __future__ import annotations

import argparse
import itertools
import json

import torch

from nf4kernel import kernel as K
from nf4kernel import launch_cache
from nf4kernel.harness import workload
from nf4kernel.quant_state import read

SHAPES = ((14336, 4096, torch.bfloat16), (4096, 1024, torch.bfloat16), (8192, 2048, torch.float16))
WARPS = (2, 4, 8, 16)
ITERS = (1, 2, 4, 8)
EVICTS = ("", "evict_first")
GRAPH_LAUNCHES = 20


def run_variant(tensors, layout, out, num_warps, iters, evict):
    grid, args, constexprs, options = launch_cache.kernel_arguments(
        tensors, layout, out, interpreted=False, num_warps=num_warps, iters=iters
    )
    constexprs = {**constexprs, "EVICT": evict}
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write every measurement here")
    args = parser.parse_args(argv)
    copy_bw = workload.copy_bandwidth()
    print(f"device: {workload.device_name()}   copy bandwidth: {copy_bw / 1e9:.0f} GB/s")
    results = []
    for rows_out, cols_in, dtype in SHAPES:
        mlp = workload.build_mlp(cols_in, rows_out, dtype, seed=0)
        layer = mlp.layers[0]
        tensors, layout = read(layer.weight, layer.weight.quant_state)
        expected = workload.bitsandbytes_impl()(layer)
        out = torch.empty_like(expected)
        moved = workload.bytes_moved(layer)
        for target, num_warps, evict in itertools.product(TARGETS, WARPS, EVICTS):
            launch = run_variant(tensors, layout, out, target, num_warps, evict)
            out.fill_(float("nan"))
            launch()
            if not torch.equal(out, expected):
                raise SystemExit(f"variant {(target, num_warps, evict)} is not bit-exact on {layout.shape}")
            seconds = workload.event_time(launch, repeats=200)
            results.append(
                {
                    "shape": list(layout.shape),
                    "dtype": str(dtype),
                    "target_bytes": target,
                    "num_warps": num_warps,
                    "evict": evict,
                    "us": seconds * 1e6,
                    "copy_fraction": moved / seconds / copy_bw,
                }
            )
        best = sorted((r for r in results if r["shape"] == list(layout.shape)), key=lambda r: r["us"])[:6]
        print(f"\n{tuple(layout.shape)} {dtype}: fastest of {len(TARGETS) * len(WARPS) * len(EVICTS)}")
        for r in best:
            print(
                f"  {r['target_bytes']:5d} B/program  {r['num_warps']} warps  {r['evict'] or '-':11s}"
                f"  {r['us']:8.2f} us  {100 * r['copy_fraction']:5.1f}% of copy"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": workload.device_name(), "copy_bandwidth": copy_bw, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
