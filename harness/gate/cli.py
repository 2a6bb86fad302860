"""The PR speed gate: nf4kernel against the real Unsloth ``fast_dequantize`` on the Challenge A workload.

    python -m harness gate [--kernel SOURCE] [--threshold 1.15] [--rounds 5] [--max-rounds 15]
                           [--json gate.json] [--summary summary.md] [--measure-only]
    python -m harness gate --replay gate.json [--threshold 1.3]   # re-decide recorded timings

What ``--kernel``, ``--measure-only`` and the threshold's sources mean, what it measures and how it
decides (``decision.py``): docs/speed-gate.md.

Exit 0 pass, 1 too slow, 2 bad arguments or input (said in one line: a record that breaks its schema,
is of another kernel or GPU, a kernel that can't be staged, an output that can't be written),
3 incorrect, 4 no CUDA GPU, 5 no Unsloth (``--measure-only``: 0 measured, 3, 4, 5).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from harness.core import command_output, exits, gate_record, gpu_state, kernel_source, policy, schema
from harness.core import markdown as md
from harness.gate import decision
from harness.gate.table import markdown, table


def command_line() -> argparse.ArgumentParser:
    parser = command_output.Parser(prog="python -m harness gate", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--threshold",
        type=speed_up,
        help=f"minimum median speed-up over Unsloth (default: the --gpu-type's, else {decision.DEFAULT_THRESHOLD})",
    )
    parser.add_argument(
        "--gpu-type",
        metavar="TYPE",
        help="the GPU type this runs on (.github/gpu-types.toml): its threshold, and its records only",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=decision.MIN_ROUNDS,
        help="interleaved rounds first (at least, and by default, %(default)s)",
    )
    parser.add_argument(
        "--max-rounds",
        type=int,
        default=decision.DEFAULT_MAX_ROUNDS,
        help="at most this many rounds while the interval straddles the threshold (%(default)s)",
    )
    command_output.add_record(parser, "--json", "the record and the verdict")
    command_output.add_summary(parser, "the table")
    parser.add_argument("--replay", help="decide on a recorded JSON instead of measuring")
    # The gate no longer times Unsloth's classic path; the GPU machine's session script still says so.
    parser.add_argument("--no-classic", action="store_true", help="accepted and ignored (older scripts pass it)")
    parser.add_argument(
        "--kernel",
        metavar="SOURCE",
        help="the commit, or the checkout's HEAD, whose nf4kernel/ is measured alone, with this harness "
        "(default: this checkout's HEAD)",
    )
    parser.add_argument(
        "--expect-kernel",
        metavar="SHA",
        help="with --replay: the commit the record's kernel must be (the approved one)",
    )
    parser.add_argument(
        "--measure-only",
        action="store_true",
        help="record, and exit on the measurement alone (0 measured, 3, 4, 5); decide later with --replay",
    )
    return parser


def speed_up(text: str) -> float:
    """A threshold: a finite speed-up above 0 (``float`` alone takes "nan", which passes every record,
    and "inf", which fails every one)."""
    try:
        return decision.check_threshold(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a threshold is a finite speed-up above 0, not {text!r}") from None


def parse(parser: argparse.ArgumentParser, argv) -> argparse.Namespace:
    """The arguments, checked against each other: a bad combination exits 2 before anything is measured."""
    args = parser.parse_args(argv)
    try:
        args.gpu = None if args.gpu_type is None else policy.gpu_type(args.gpu_type)
    except ValueError as error:
        parser.error(f"--gpu-type: {error}")
    if args.threshold is None:
        args.threshold = args.gpu.gate_threshold if args.gpu else decision.DEFAULT_THRESHOLD
    if args.rounds < decision.MIN_ROUNDS:
        parser.error(
            f"--rounds must be at least {decision.MIN_ROUNDS} (a median and its interval need them), not {args.rounds}"
        )
    if args.max_rounds < args.rounds:
        parser.error(f"--max-rounds ({args.max_rounds}) is below --rounds ({args.rounds})")
    if args.replay and (args.kernel or args.measure_only):
        parser.error("--replay decides on a record; --kernel and --measure-only are for measuring")
    if not args.replay and args.kernel is None:
        args.kernel = "HEAD"  # committed code only, as the workflow measures it
    if args.expect_kernel and not args.replay:
        parser.error("--expect-kernel checks a record: give it with --replay")
    command_output.check_output(parser, "--json", args.json)
    command_output.check_output(parser, "--summary", args.summary)
    return args


def write(args, record: dict, text: str, summary: str) -> None:
    print(text, flush=True)
    try:
        command_output.written("--json", args.json, json.dumps(record, indent=1))
        command_output.written("--summary", args.summary, summary, append=True)
    except command_output.Unwritten as error:
        raise ValueError(f"{error}; the verdict above was not written") from None


def main(argv=None) -> int:
    parser = command_line()
    args = parse(parser, argv)
    try:
        return run(args)
    except ValueError as error:  # a malformed record, a record of another kernel, no such kernel
        # Exit 2 with one line: what was wrong, and where (a file and a field where it was a record).
        said = md.line(" ".join(str(error).splitlines()), limit=None)  # it may quote a record's strings
        parser.exit(exits.BAD_INPUT, f"{parser.prog}: error: {said}\n")


def run(args) -> int:
    if args.replay:
        record = gate_record.read_gate(args.replay, f"--replay {args.replay}")
        # --expect-kernel: a record of another kernel (the base's, handed in as the PR's) is refused.
        commit = (record.get("kernel") or {}).get("commit")
        if args.expect_kernel and commit != args.expect_kernel:
            wanted = f"{commit!r}, not the expected {args.expect_kernel}"
            raise schema.RecordError(f"--replay {args.replay}", "kernel.commit", wanted)
    elif not gpu_state.gpu_here():
        record = unmeasured(args)
    else:
        # The trusted clock: the kernel under test runs in a sandboxed call process; this one times
        # and decides, and never imports it (nor torch).
        from harness.gate import sandboxed

        plan = sandboxed.Plan(args.kernel, args.rounds, args.max_rounds, args.threshold, as_run())
        record = sandboxed.measure(plan)
    return report(args, record, decision.decide(record, args.threshold))


def as_run() -> str:
    return " ".join(["python -m harness gate", *sys.argv[1:]])


NO_GPU = "this machine sees no CUDA GPU (nvidia-smi lists none that CUDA_VISIBLE_DEVICES leaves visible)"


def unmeasured(args) -> dict:
    """The record of a run on a machine without a GPU. The kernel is staged all the same, so a source
    that could never be measured is refused here too (exit 2), not only on the GPU runner."""
    with kernel_source.staged(args.kernel) as kernel:
        commit = kernel.commit
    return {
        "command": as_run(),
        "environment": {"cuda": False, "cuda_error": NO_GPU},
        "kernel": {"source": args.kernel, "commit": commit},
        "harness_version": gate_record.HARNESS_VERSION,
    }


MEASUREMENT_FAILURES = (decision.EXIT_INCORRECT, decision.EXIT_NO_GPU, decision.EXIT_NO_UNSLOTH)


def report(args, record: dict, verdict: decision.Verdict) -> int:
    """The table, the record and the summary written; the verdict's exit code. ``--measure-only``:
    the record, with what it would be decided here for reading, and an exit code that says only
    whether it measured: a kernel slower than the threshold still exits 0."""
    # With --gpu-type, a record that timed anything was timed on that type of GPU: a runner carrying
    # the wrong label must not pass a PR against another type's threshold.
    device = record.get("environment", {}).get("device")
    if args.gpu is not None and "seconds" in record and not args.gpu.runs(str(device)):
        wrong = f"{device!r}, not a GPU of type {args.gpu.name} ({args.gpu.device})"
        raise schema.RecordError("the record", "environment.device", wrong)
    text = table(record, verdict, args.threshold)
    if args.measure_only:
        record["measure_only"] = {"threshold": args.threshold, "verdict_here": asdict(verdict)}
        text += "\n(measure only: the verdict above is for reading; the workflow decides with --replay)"
        write(args, record, text, "")
        return verdict.exit_code if verdict.exit_code in MEASUREMENT_FAILURES else decision.EXIT_PASS
    record["threshold"] = args.threshold
    record["verdict"] = asdict(verdict)
    write(args, record, text, markdown(record, verdict, args.threshold, text))
    return verdict.exit_code
