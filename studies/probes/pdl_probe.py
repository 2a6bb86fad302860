"""Does programmatic dependent launch close the gap between back-to-back launches?

    python -m studies.probes.pdl_probe [--rounds 5]

14336x4096 bf16 through ``dequantize()`` back to back reached about 90% of copy on an H200 without PDL, while
the kernel replayed from a CUDA graph reaches 92 to 94%: the rest is the gap between one kernel's
last program and the next one's first. The first try (trigger at each program's start, every
launch PDL) made back-to-back launches 1.8x slower (``benchmarks/results/issue10/
pdl-bandwidth-probe-h200.txt``) and nobody found out why. This probe times each PDL mode (``MODES``)
with two tiles (the table's, and one with 8x fewer programs: if
waiting programs cost per program, the second suffers less), launched back to back from the host,
in interleaved rounds, each mode checked bit-exact first; and, for scale, the same launches
without PDL, the graph-replayed kernel and ``dequantize(layer)``.

The tile rows launch through Triton's own path (``kernel[grid](...)``), whose host cost is several
times a planned call's: on a slow host it barely stays ahead of a 38 us kernel, the queue runs
shallow, and PDL (which needs the next launch already queued) shows little. ``dequantize(layer)``
(a planned call) is the row that says what users get (run 19 in ``benchmarks/results/issue10``).

The shipped kernel has modes 0 and 1 (its ``PDL`` constexpr). Modes 2 and 3 trigger the next launch
earlier; they are probes, not shipped: ``early_trigger_kernel`` here wraps the shipped kernel (called
with ``PDL=0``, the same work) between its own wait and trigger. Tiles other than the table's are
built with ``kernel.tile_of`` and launched through ``launch.arguments(..., tile=)``.
"""

from __future__ import annotations

import statistics

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

import nf4kernel
from harness.core import workload
from harness.core.command_output import Parser
from nf4kernel import kernel as K
from nf4kernel import launch
from nf4kernel.kernel import dequantize_4bit_kernel
from studies import sweep

# 0 off; 1 wait, the next kernel scheduled as programs exit (what launches use); 2 wait, then let the
# next kernel be scheduled at once; 3 wait, and let it be scheduled once the program's stores are issued.
MODES = (0, 1, 2, 3)


@triton.jit
def early_trigger_kernel(
    packed_ptr,
    absmax_ptr,
    code_ptr,
    code2_ptr,
    absmax2_ptr,
    offset_ptr,
    out_ptr,
    n_elements,
    n_blocks,
    BLOCKSIZE: tl.constexpr,
    BLOCKSIZE2: tl.constexpr,
    NESTED: tl.constexpr,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
    ITERS: tl.constexpr,
    EVEN: tl.constexpr,
    WIDE: tl.constexpr,
    BF16_RNE: tl.constexpr,
    EVICT: tl.constexpr,
    PDL: tl.constexpr,  # 2 or 3 (MODES)
):
    # The wait the shipped kernel makes under PDL, before any memory access; then its work unchanged.
    gdc_wait()
    if PDL == 2:
        gdc_launch_dependents()
    dequantize_4bit_kernel(
        packed_ptr,
        absmax_ptr,
        code_ptr,
        code2_ptr,
        absmax2_ptr,
        offset_ptr,
        out_ptr,
        n_elements,
        n_blocks,
        BLOCKSIZE,
        BLOCKSIZE2,
        NESTED,
        ROWS,
        COLS,
        ITERS,
        EVEN,
        WIDE,
        BF16_RNE,
        EVICT,
        0,
    )
    if PDL == 3:
        gdc_launch_dependents()


def variant(tensors, layout, out, tile: dict, mode: int):
    chosen = K.tile_of(layout.blocksize, layout.dtype.itemsize, **tile)
    grid, args, constexprs, options = launch.arguments(tensors, layout, out, False, mode > 0, tile=chosen)
    constexprs["PDL"] = mode
    kernel = early_trigger_kernel if mode > K.PDL_MODE else dequantize_4bit_kernel
    return lambda: kernel[grid](*args, **constexprs, **options)


def main(argv=None) -> int:
    parser = Parser(prog="python -m studies.probes.pdl_probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if torch.cuda.get_device_capability() < (9, 0):
        raise SystemExit("programmatic dependent launch needs sm_90 or newer")
    layer, tensors, layout, expected, out, moved, copy_bw = sweep.streaming_case()
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
        for mode in MODES if tile_name in ("table tile", "8x fewer programs") else (0, K.PDL_MODE):
            launch = variant(tensors, layout, out, tile, mode)
            out.fill_(float("nan"))
            launch()
            if not torch.equal(out, expected):
                raise SystemExit(f"{tile_name}, PDL {mode}: not bit-exact")
            runs[f"{tile_name}, PDL {mode}"] = launch
    pdl = launch.pdl_on(torch.cuda.current_device())
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
