"""Performance report for nf4kernel against Unsloth's fast_dequantize, all in one process:

1. Challenge A (3 MLPs x up/gate/down, 1000 rounds, synchronize after every call), interleaved rounds;
2. 14336x4096 bf16 back to back: achieved bandwidth as a fraction of this run's device copy;
3. host cost per call on 4096x1024 bf16, back to back.

    python -m studies.perf [--rounds 5] [--json PATH]

Exit 0 when measured; 2 bad arguments (--rounds below 1, a --json with no folder to go in); 4 without
a CUDA GPU.
"""

from __future__ import annotations

if __name__ == "__main__":  # before torch is imported: where it is missing, one line, not a traceback
    from harness.core import exits

    exits.require(
        ("torch",), "python -m studies.perf", "where torch is installed: the GPU image, or .nox/torch/bin/python"
    )

import json
import statistics

import torch

from benchmarks import _timers
from harness.core import workload
from harness.core.command_output import Parser, check_output, plain_streams
from harness.gate import decision
from studies import utils


def main(argv=None) -> int:
    plain_streams()
    parser = Parser(prog="python -m studies.perf", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved Challenge A rounds per implementation")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, not {args.rounds}")
    check_output(parser, "--json", args.json)
    utils.exit_without_gpu("perf")

    impls = {"nf4kernel": workload.implementation("nf4kernel"), "unsloth": workload.implementation("unsloth")}
    report = {"device": workload.device_name(), "torch": torch.__version__, "unsloth": utils.unsloth_version()}
    import triton

    report["triton"] = triton.__version__

    mlps = workload.challenge_a()
    times = _timers.interleaved_rounds(
        impls, [mlp.layers for mlp in mlps], args.rounds, workload.ROUNDS_PER_TIMING, progress=print
    )
    ratios = decision.round_ratios({"seconds": times})
    report["challenge_a"] = {
        "rounds": args.rounds,
        "seconds": times,
        "shapes": [mlp.label for mlp in mlps],
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }
    print(
        f"Challenge A: nf4kernel is {statistics.median(ratios):.3f}x Unsloth (median of {args.rounds};"
        f" min {min(ratios):.3f}, max {max(ratios):.3f})"
    )
    for i, mlp in enumerate(mlps):
        per_call = {name: decision.per_call_us(t, i, workload.ROUNDS_PER_TIMING) for name, t in times.items()}
        print(f"  {mlp.label:22s}" + "".join(f"  {name} {us:7.1f} us/call" for name, us in per_call.items()))
    del mlps

    copy_bw = workload.copy_bandwidth()
    big = workload.build_mlp(4096, 14336, torch.bfloat16, seed=0).layers[2]  # down: 4096 x 14336
    moved = workload.bytes_moved(big)
    report["bandwidth"] = {"shape": list(big.weight.quant_state.shape), "bytes": moved, "copy_bytes_per_s": copy_bw}
    for name, fn in impls.items():
        seconds = workload.event_time(lambda fn=fn: fn(big), repeats=200)
        report["bandwidth"][name] = {
            "us": seconds * 1e6,
            "bytes_per_s": moved / seconds,
            "copy_fraction": moved / seconds / copy_bw,
        }
        print(
            f"14336x4096 bf16 {name:9s}: {seconds * 1e6:7.1f} us, {moved / seconds / 1e9:6.0f} GB/s,"
            f" {100 * moved / seconds / copy_bw:5.1f}% of copy ({copy_bw / 1e9:.0f} GB/s)"
        )

    small = workload.build_mlp(1024, 4096, torch.bfloat16, seed=0).layers[0]  # up: 4096 x 1024
    report["host"] = {"shape": list(small.weight.quant_state.shape)}
    for name, fn in impls.items():
        per_call = statistics.median(utils.host_time(lambda fn=fn: fn(small)) for _ in range(5))
        report["host"][name] = {"us": per_call * 1e6}
        print(f"host cost 4096x1024 {name:9s}: {per_call * 1e6:6.2f} us/call")

    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
