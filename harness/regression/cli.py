"""The regression check between two commits: exit 1 when HEAD's kernel got slower than BASE's.

    python -m harness regression BASE HEAD [--summary PATH]           # measure and decide (GPU)
    python -m harness regression BASE HEAD --measure-only --record R  # measure, write the record, no verdict
    python -m harness regression --replay R [--summary PATH]          # decide from a record (no GPU)
    python -m harness regression BASE HEAD --device cpu               # the CPU smoke run: no verdict

BASE and HEAD are each a commit or another checkout's path; each kernel alone is measured by this
checkout's trusted clock (``clocked.py``) and judged by this checkout's rule (``rule.py``) and limits,
never a record's. How it measures and decides: docs/performance-history.md.

Exit 0 nothing slower (or no verdict asked), 1 something slower (named), 2 bad arguments or a record
that breaks its schema or can't support a verdict (it fails closed), said in one line, 3 a kernel's
output differs from bitsandbytes', 4 no CUDA GPU. A failed measurement (3, or 2 where a kernel's
process never got ready) is written to ``--record`` all the same, and ``--replay`` exits with its code.
"""

from __future__ import annotations

import argparse
import json

from harness.core import command_output, exits, kernel_source, regression_record, schema, workload
from harness.core import markdown as md
from harness.regression import clocked, rule

SHAPES, DTYPES = tuple(workload.SHAPES), workload.DTYPES  # the asv suite's weights
CPU_KEYS = ("1024x512 bfloat16", "1024x512 float16")  # the smoke run's weights, in Triton's interpreter


def say(line: str) -> None:
    print(f"regression: {line}", flush=True)


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def summary(record: dict, verdict: rule.Judgement) -> str:
    """The job summary, in Markdown: the record's strings (its commits, device, result names, and
    the notes that quote them) escaped (``md.text``)."""
    rounds = [len(p["rounds"]) for p in record["passes"]]
    how = f"{rounds[0]} paired rounds" + (f", then {rounds[1]} re-measuring" if len(rounds) > 1 else "")
    said = "FAIL" if verdict.failed else "PASS"
    notes = "".join(f"\n- {md.text(note, limit=None)}" for note in verdict.notes)
    return (
        f"{heading(record)}\n\n"
        f"{md.text(record.get('device', 'an unnamed device'))}; {how}; each result judged against its own noise.\n\n"
        f"{rule.table(verdict)}\n{notes}\n\n**{said}**\n"
    )


def heading(record: dict) -> str:
    base, head = md.text(record.get("base", "?")[:8]), md.text(record.get("head", "?")[:8])
    return f"### Regression check: {base} → {head}"


def appended(summary_path: str | None, text: str) -> bool:
    """``text`` appended to the summary, if one is asked for; False, said in one line, where it
    can't be written (the verdict then reaches no one who reads it: exit 2)."""
    try:
        command_output.written("--summary", summary_path, text, append=True)
    except command_output.Unwritten as error:
        say(f"{error}; no verdict (exit 2)")
        return False
    return True


def report(record: dict, verdict: rule.Judgement, summary_path: str | None) -> int:
    """The table and the verdict's lines on stdout, the summary appended to ``summary_path``. A record's
    strings reach the log as ``md.line``: one line each, no workflow command."""
    print(rule.table(verdict), flush=True)
    for note in verdict.notes:
        say(md.line(note, limit=None))
    for r in verdict.called:
        say(
            f"slower: {md.line(r.name)}: {r.change:.3f}x ({r.ci_low:.3f} to {r.ci_high:.3f}, "
            f"noise ±{r.noise:.1%}; limit {r.limit:.2f}x)"
        )
    for m in verdict.memory:
        say(f"peak memory grew: {md.line(m['name'])}: {m['base_bytes']} -> {m['head_bytes']} bytes")
    if not appended(summary_path, summary(record, verdict)):
        return 2
    base, head = md.line(record.get("base", "?")[:8]), md.line(record.get("head", "?")[:8])
    if verdict.failed:
        say(f"FAIL: {head} against {base}: {len(verdict.called) + len(verdict.memory)} called slower or larger")
        return 1
    say(f"PASS: {head} against {base}: nothing slower beyond its noise")
    return 0


def report_failed(record: dict, summary_path: str | None) -> int:
    """A measurement that failed (``regression_record.FAILED_EXITS``)."""
    reason = record["failed"]["reason"]
    say(f"FAIL: {md.line(reason, limit=None)} (exit {record['failed']['exit_code']})")
    if not appended(summary_path, f"{heading(record)}\n\n**FAIL**: {md.text(reason, limit=None)}\n"):
        return 2
    return record["failed"]["exit_code"]


def replay(path: str, args) -> int:
    """The verdict on a record, after its schema (``regression_record.check_regression``)."""
    try:
        record = regression_record.read_regression(path, f"--replay {path}")
        for side, wanted in zip(("base", "head"), args.expect or (), strict=False):
            full = wanted if schema.COMMIT_HASH.fullmatch(wanted) else kernel_source.resolve(wanted)
            if record.get(side) != full:
                raise schema.RecordError(f"--replay {path}", side, f"{record.get(side)}, not the expected {wanted}")
        if "failed" in record:
            return report_failed(record, args.summary)
        verdict = rule.decide(record, args.min_change, args.min_group_change)
    except schema.RecordError as error:
        return no_verdict(str(error))
    except ValueError as error:  # can't support a verdict: a pass of one round, suspects never re-measured
        return no_verdict(f"--replay {path}: {error}")
    return report(record, verdict, args.summary)


def no_verdict(why: str) -> int:
    """A record that can't be read or decided gives no verdict, and no verdict is never a pass."""
    say(f"{md.line(' '.join(why.splitlines()), limit=None)}; no verdict (exit 2)")
    return 2


def command_line() -> argparse.ArgumentParser:
    parser = command_output.Parser(prog="python -m harness regression", description=__doc__.split("\n\n")[0])
    parser.add_argument("base", nargs="?", help="the reference: a commit, or a checkout's path (a PR's base)")
    parser.add_argument("head", nargs="?", help="under test: a commit, or a checkout's path (a PR's head)")
    parser.add_argument("--replay", metavar="RECORD", help="decide from a record written by --record (no GPU)")
    command_output.add_record(parser, "--record", "the measurement")
    parser.add_argument("--measure-only", action="store_true", help="measure and write --record; give no verdict")
    command_output.add_summary(parser, "the verdict's table")
    parser.add_argument("--min-change", type=float, help=f"one result (default {rule.DEFAULT_MIN_CHANGE})")
    parser.add_argument("--min-group-change", type=float, help=f"a group (default {rule.DEFAULT_MIN_GROUP_CHANGE})")
    parser.add_argument("--rounds", type=int, default=clocked.FIRST_ROUNDS, help="first pass (%(default)s)")
    parser.add_argument(
        "--more-rounds", type=int, default=clocked.SECOND_ROUNDS, help="re-measuring pass (%(default)s)"
    )
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=SHAPES, metavar="SHAPE")
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES, metavar="DTYPE")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: the smoke run, no verdict")
    parser.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run each kernel's processes without bubblewrap's sandbox (a machine without it; the workflows never "
        "pass it)",
    )
    parser.add_argument(
        "--expect",
        nargs=2,
        metavar=("BASE", "HEAD"),
        help="with --replay: the commits the record must be of (the workflow's base and approved commit)",
    )
    return parser


def parse(parser: argparse.ArgumentParser, argv) -> argparse.Namespace:
    """The arguments, checked against each other; a bad one ends here (exit 2), before anything runs."""
    args = parser.parse_args(argv)
    command_output.check_output(parser, "--record", args.record)
    command_output.check_output(parser, "--summary", args.summary)
    for name in ("min_change", "min_group_change"):
        value = getattr(args, name)
        if value is not None and not 0 < value < 1:
            parser.error(f"--{name.replace('_', '-')} is a fraction in (0, 1), not {value}")
    if args.expect and not args.replay:
        parser.error("--expect checks a record: give it with --replay")
    if args.replay:
        if args.base or args.head or args.measure_only:
            parser.error("--replay decides a record: give it no BASE, HEAD or --measure-only")
        return args
    if not (args.base and args.head):
        parser.error("give BASE and HEAD (or --replay RECORD)")
    if args.measure_only and not args.record:
        parser.error("--measure-only writes the measurement to --record PATH: name one")
    if args.rounds < 2 or args.more_rounds < 2:
        parser.error("--rounds and --more-rounds must be at least 2: a round's noise is judged against another's")
    return args


def main(argv=None) -> int:
    parser = command_line()
    args = parse(parser, argv)
    if args.replay:
        return replay(args.replay, args)
    exits.torch_here("python -m harness regression", "regression")
    try:
        base, head = kernel_source.resolve(args.base), kernel_source.resolve(args.head)
    except ValueError as error:  # SourceError: no such commit; or a NUL character git can't be given
        parser.error(str(error))
    found = measure(args, base, head)
    if isinstance(found, int):  # measured nothing: the exit code
        return found
    record = {"base": base, "head": head, **found}
    if args.record:
        try:
            command_output.written("--record", args.record, json.dumps(record))
        except command_output.Unwritten as error:
            say(f"{error}; nothing kept (exit 2)")
            return 2
        say(f"the measurement is in {args.record}")
    if "failed" in record:
        return report_failed(record, None if args.measure_only else args.summary)
    if args.device == "cpu":
        say("the CPU smoke run times Triton's interpreter: no speed verdict (exit 0)")
        return 0
    if args.measure_only:
        say(f"{base[:8]} and {head[:8]} measured; no verdict asked")
        return 0
    return report(record, rule.decide(record, args.min_change, args.min_group_change), args.summary)


def measure(args, base: str, head: str) -> dict | int:
    """Both commits' kernels staged, then paired rounds by the trusted clock (``clocked.measure``); or the exit code
    where nothing could be measured: 2 (no nf4kernel package in one, a probe's answer unreadable),
    3 (wrong output), 4 (no CUDA GPU)."""
    weights = (
        list(CPU_KEYS)
        if args.device == "cpu"
        else [workload.key(shape, dtype) for shape in args.shapes for dtype in args.dtypes]
    )
    try:
        # Staged first: a BASE or HEAD with no nf4kernel package is bad input (2) on any machine.
        with kernel_source.staged(base) as staged_base, kernel_source.staged(head) as staged_head:
            if args.device == "cuda" and not cuda_available():
                say("no CUDA GPU here: nothing to measure (--device cpu for the smoke run)")
                return exits.NO_GPU
            for sha, kernel in ((base, staged_base), (head, staged_head)):
                say(f"{sha[:8]}: {kernel.describe()}")
            return clocked.measure(
                {"base": staged_base, "head": staged_head},
                weights,
                device=args.device,
                first_rounds=args.rounds,
                second_rounds=args.more_rounds,
                min_change=args.min_change or rule.DEFAULT_MIN_CHANGE,
                min_group_change=args.min_group_change or rule.DEFAULT_MIN_GROUP_CHANGE,
                sandboxed=not args.no_sandbox,
            )
    except clocked.MeasureError as error:  # it may quote what a kernel's process said
        if error.exit_code in regression_record.FAILED_EXITS:  # a finding on a kernel, kept for the verdict's step
            return {"device": args.device, "failed": {"exit_code": error.exit_code, "reason": str(error)}}
        say(md.line(error, limit=None))
        return error.exit_code if error.exit_code == exits.NO_GPU else 2
    except kernel_source.SourceError as error:  # its nf4kernel is a file, or missing: nothing to measure
        say(f"{' '.join(str(error).splitlines())} (exit 2)")
        return 2
