"""The regression check's power and false alarms, measured on a GPU: no-op runs and a ladder of
planted slowdowns of known size (``dev/rehearsal/plants/``).

    python -m studies.power noop --runs 10 --out benchmarks/results/regression-power/h100
    python -m studies.power ladder --out DIR [--plants large-5pct large-10pct large-20pct all-5pct]
    python -m studies.power report --out DIR       # the tables from what DIR holds (no GPU)
    python -m studies.power resample --out DIR [--commit C] [--force]
                                              # false alarms, from DIR's no-op runs (no GPU)

``resample`` estimates the false-alarm rate beyond the runs made: it builds no-op runs of the rule's
shape (3 rounds, then 5 for whatever is left open or called) from the processes the recorded no-op runs
timed, drawn without replacement in each run, and decides each. It assumes processes are
interchangeable across runs; real runs pair neighbouring processes, which often share a level (see
the H100 README), so drawing them apart makes pairs noisier than a real run's: the estimate leans
towards more false alarms, not fewer. A draw takes about two seconds on a CPU core (the default 1000:
half an hour or more), so it says how far it has come every 30 s. It writes
``DIR/resampled-noops.json``, and refuses to overwrite one (a committed result, say) without ``--force``.

A no-op run is ``harness.regression HEAD HEAD`` (this commit's kernel staged twice); a ladder run is
``harness.regression HEAD P``, P a commit made here of HEAD with the plant applied. The runs'
files may also hold gate runs, recorded while the gate had a relative check of its own (it has none
now): ``report`` still shows them. Every run appends a line to ``DIR/runs.jsonl`` as soon as it ends, and keeps its
record, so a command cut short keeps what it finished, and several commands add up.

Exit 0: every run made (whatever its verdict: that is the measurement). Exit 2: bad arguments, or an
existing resample result without --force. Exit 4: no CUDA GPU.
"""

from __future__ import annotations

if __name__ == "__main__":  # before torch is imported: where it is missing, one line, not a traceback
    from harness.core import exits

    exits.require(
        ("numpy", "torch"),
        "python -m studies.power",
        "where torch is installed: the GPU image, or .nox/torch/bin/python",
    )

import gzip
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from harness.core import exits, kernel_source, stats
from harness.core.command_output import Parser
from harness.core.paths import ROOT
from harness.regression import cli as regression
from harness.regression import clocked
from harness.regression import rule as regression_rule

PLANTS = ("large-5pct", "large-10pct", "large-20pct", "all-5pct")  # dev/rehearsal/plants/<name>.patch
RESAMPLED = "resampled-noops.json"  # resample's result, in --out
PROGRESS_SECONDS = 30.0  # resample's progress: a line at most this often
_upper_95 = stats.rate_upper_95  # the false-alarm rate's one-sided 95% upper bound (Clopper-Pearson)


def planted_commit(plant: str) -> str:
    """A commit of HEAD with ``dev/rehearsal/plants/<plant>.patch`` applied, made in a throwaway worktree
    (the object stays in this repository; no branch points at it)."""
    patch = ROOT / "dev" / "rehearsal" / "plants" / f"{plant}.patch"
    with tempfile.TemporaryDirectory(prefix=f"plant-{plant}-") as tmp:
        tree = Path(tmp) / "tree"
        git = ["git", "-C", str(ROOT)]
        subprocess.run([*git, "worktree", "add", "--quiet", "--detach", str(tree), "HEAD"], check=True)
        try:
            subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True)
            ident = ["-c", "user.name=nf4kernel power", "-c", "user.email=power@nf4kernel.invalid"]
            subprocess.run(["git", *ident, "commit", "--quiet", "-am", f"planted: {plant}"], cwd=tree, check=True)
            return subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True, check=True
            ).stdout.strip()
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=False)


def summarize(record: dict) -> dict:
    """What a run's verdict was, and how close each result came to being called."""
    verdict = regression_rule.decide(record)
    readings = [*verdict.results, *verdict.groups]
    closest = max(readings, key=lambda r: r.ci_low / r.limit)
    largest = max(verdict.results, key=lambda r: r.change)
    return {
        "failed": verdict.failed,
        "called": [r.name for r in verdict.called],
        "largest_change": {"name": largest.name, "change": largest.change, "noise": largest.noise},
        "closest_to_failing": {"name": closest.name, "ci_low": closest.ci_low, "limit": closest.limit},
        "re_measured": len(record["passes"]) > 1,
        "readings": [r.as_dict() for r in readings],
    }


def append(out: Path, line: dict) -> None:
    with open(out / "runs.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")


def regression_run(out: Path, kind: str, head: str, plant: str | None, n: int) -> None:
    name = f"{kind}-{plant or 'noop'}-{n}-{int(time.time())}"
    record_path = out / f"{name}.json"
    started = time.perf_counter()
    code = regression.main(["HEAD", head, "--measure-only", "--record", str(record_path)])
    line = {"kind": kind, "plant": plant, "run": n, "exit": code, "seconds": round(time.perf_counter() - started)}
    line["commit"] = kernel_source.resolve("HEAD")[:7]  # BASE: the commit a no-op or a plant is measured on
    if code == 0:
        line.update(summarize(read_record(record_path)), record=record_path.name)
    append(out, line)
    print(f"power: {name}: {'FAIL' if line.get('failed') else 'pass'} ({line['seconds']} s)", flush=True)


def read_record(path: Path) -> dict:
    """A run's record, as written or gzipped for committing."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def noop_records(out: Path, commit: str = "") -> list[dict]:
    """The no-op records ``out`` holds (as written or gzipped), those of ``commit`` (a prefix) if given."""
    records = [read_record(p) for p in sorted(out.glob("noop-*.json*"))]
    return [r for r in records if r["head"].startswith(commit)]


def noop_processes(records: list[dict]) -> list[dict]:
    """Every process of the no-op records (BASE and HEAD one commit) that timed every result:
    ``{result: [seconds per call]}``. Refuses records of more than one commit."""
    noops = [r for r in records if r["base"] == r["head"]]
    commits = {r["head"] for r in noops}
    if len(commits) != 1:
        named = ", ".join(sorted(c[:7] for c in commits)) or "none"
        raise ValueError(
            f"no-op records of one commit are needed, got {len(commits)} commits ({named}): choose with --commit"
        )
    timed = [rnd[side] for r in noops for p in r["passes"] for rnd in p["rounds"] for side in ("base", "head")]
    every = max(len(t) for t in timed)
    return [t for t in timed if len(t) == every]


def only(found: dict, keys) -> dict:
    """A pass cut down to ``keys``, as a second pass re-measures only what the first left to it (the
    regression check measures only those; a resampled or recorded run is cut down after)."""
    rounds = [
        {**rnd, **{side: {k: v for k, v in rnd[side].items() if k in keys} for side in ("base", "head")}}
        for rnd in found["rounds"]
    ]
    return {**found, "rounds": rounds, "bytes": {k: v for k, v in found.get("bytes", {}).items() if k in keys}}


def resampled_noops(
    records: list[dict],
    draws: int,
    seed: int = 0,
    resamples: int = 500,
    min_change: float | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict:
    """The rule's verdict on ``draws`` no-op runs built from the records' processes (module docstring).
    ``resamples`` per interval is fewer than the rule's 2000 to make many draws affordable;
    ``min_change`` replaces the rule's practical minimum per result (to see what a laxer one costs);
    ``progress`` is called with the number of draws decided after each one."""
    if draws < 1:
        raise ValueError(f"draws must be at least 1, got {draws}")
    limit = min_change or regression_rule.DEFAULT_MIN_CHANGE
    pool = noop_processes(records)
    first_n, second_n = clocked.FIRST_ROUNDS, clocked.SECOND_ROUNDS
    need = 2 * (first_n + second_n)
    if len(pool) < need:
        raise ValueError(f"{len(pool)} whole processes recorded; a run of the rule's shape draws {need}")
    shape = next(r for r in records if r["base"] == r["head"])["passes"][0]
    extra = {"bytes": shape["bytes"], "peak_bytes": {}}
    # Python's random, not stats.generator: a draw of whole processes without replacement, not a
    # bootstrap, and the seed names the draws of the recorded result (resampled-noops.json under
    # benchmarks/results/regression-power/h100/ at 418dba5, main before 6b57a45): another library, other draws.
    rng = random.Random(seed)
    failed, re_measured, called = [], 0, {}
    for draw in range(draws):
        picked = rng.sample(pool, need)
        rounds = [{"base": picked[2 * i], "head": picked[2 * i + 1]} for i in range(first_n + second_n)]
        first = {"rounds": rounds[:first_n], **extra}
        again = regression_rule.suspects(regression_rule.judge(first, limit, resamples=resamples))
        passes = [first]
        if again:
            re_measured += 1
            passes.append(only({"rounds": rounds[first_n:], **extra}, again))
        verdict = regression_rule.decide({"passes": passes}, limit, resamples=resamples)
        if verdict.failed:
            failed.append(draw)
            for r in verdict.called:
                called[r.name] = called.get(r.name, 0) + 1
        if progress is not None:
            progress(draw + 1)
    return {
        "draws": draws,
        "processes": len(pool),
        "seed": seed,
        "resamples": resamples,
        "min_change": limit,
        "failed": len(failed),
        "failed_draws": failed,
        "re_measured": re_measured,
        "called": called,
        "upper_95": _upper_95(len(failed), draws),
    }


def progress_line(draws: int, every: float = PROGRESS_SECONDS, clock: Callable[[], float] = time.perf_counter):
    """A ``resampled_noops`` progress callback that prints the draws done and the time taken: when
    ``every`` seconds have passed since its last line, and after the last draw."""
    started = last = clock()

    def report(done: int) -> None:
        nonlocal last
        now = clock()
        if done == draws or now - last >= every:
            last = now
            print(f"power: resample: {done} of {draws} draws, {now - started:.0f} s", flush=True)

    return report


def report(out: Path) -> str:
    """Markdown: the no-op runs (the largest change each saw, how close it came), the ladder, the gate."""
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines() if line.strip()]
    lines = [
        "| run | verdict | called | largest per-result change | closest to its limit |",
        "| --- | --- | --- | --- | --- |",
    ]
    seen: dict[str, int] = {}  # runs numbered per kind and plant in the file's order (commands restart at 1)
    for r in runs:
        if r["kind"] == "gate":
            continue
        what = f"{r['kind']} {r['plant'] or ''}"
        seen[what] = seen.get(what, 0) + 1
        name = f"{what} #{seen[what]}" + (f" ({r['commit']})" if r.get("commit") else "")
        if r["exit"] != 0:
            lines.append(f"| {name} | measurement exit {r['exit']} | | | |")
            continue
        big, near = r["largest_change"], r["closest_to_failing"]
        lines.append(
            f"| {name} | {'FAIL' if r['failed'] else 'pass'} | {len(r['called'])} "
            f"| {big['name']} {big['change']:.3f}x (noise ±{big['noise']:.1%}) "
            f"| {near['name']}: interval from {near['ci_low']:.3f}, limit {near['limit']:.2f} |"
        )
    gates = [r for r in runs if r["kind"] == "gate"]
    if gates:
        lines += ["", "| gate plant | exit | speed-up vs the base | interval |", "| --- | --- | --- | --- |"]
        for g in gates:
            rel = g.get("relative") or {}
            ratio = f"{rel['ratio']:.3f}x" if "ratio" in rel else ""
            interval = f"{rel['ci_low']:.3f} to {rel['ci_high']:.3f}" if "ci_low" in rel else ""
            lines.append(f"| {g['plant']} | {g['exit']} | {ratio} | {interval} |")
    return "\n".join(lines)


def paragraph(text: str, index: int) -> str:
    """The docstring's ``index``-th paragraph on one line: ``--help`` shows whole sentences (its first
    spans two lines)."""
    return " ".join(text.split("\n\n")[index].split())


def parser() -> Parser:
    cli = Parser(prog="python -m studies.power", description=paragraph(__doc__, 0), epilog=paragraph(__doc__, -1))
    cli.add_argument(
        "what",
        choices=("noop", "ladder", "report", "resample"),
        help="noop, ladder: measure on a GPU; report: the tables from --out's runs; "
        f"resample: false alarms from --out's no-op records, into --out's {RESAMPLED} (no GPU)",
    )
    cli.add_argument("--out", required=True, type=Path, help="where the records and runs.jsonl go")
    cli.add_argument("--runs", type=int, default=10, help="noop: how many (%(default)s)")
    cli.add_argument("--plants", nargs="+", default=list(PLANTS), choices=PLANTS, help="ladder: which plants")
    cli.add_argument("--draws", type=int, default=1000, help="resample: no-op runs to build (%(default)s)")
    cli.add_argument("--seed", type=int, default=0, help="resample: which draws (%(default)s)")
    cli.add_argument("--commit", default="", help="resample: only the no-op records of this commit (a prefix)")
    cli.add_argument("--force", action="store_true", help=f"resample: overwrite an existing {RESAMPLED}")
    return cli


def resample(args, cli: Parser) -> int:
    """``resample``: refused before any work where its result exists (without --force) or it has
    nothing to draw from."""
    result = args.out / RESAMPLED
    if result.exists() and not args.force:
        print(f"power: {result} exists: pass --force to overwrite it", file=sys.stderr)
        return 2
    if args.draws < 1:
        cli.error(f"--draws must be at least 1, got {args.draws}")
    records = noop_records(args.out, args.commit)
    if not records:
        of = f" of {args.commit}" if args.commit else ""
        cli.error(f"{args.out} holds no no-op records{of}: measure first")
    print(
        f"power: resample: {args.draws} no-op runs to build from {len(records)} no-op records in {args.out}, "
        f"a line every {PROGRESS_SECONDS:.0f} s",
        flush=True,
    )
    try:
        found = resampled_noops(records, args.draws, args.seed, progress=progress_line(args.draws, PROGRESS_SECONDS))
    except ValueError as error:
        cli.error(str(error))
    result.write_text(json.dumps(found, indent=1) + "\n")
    print(
        f"power: {found['failed']} of {found['draws']} no-op runs built from {found['processes']} recorded "
        f"processes failed (95% upper bound {found['upper_95']:.2%}); {found['re_measured']} re-measured; "
        f"called: {found['called'] or 'nothing'}"
    )
    return 0


def main(argv=None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    if args.what == "resample":
        return resample(args, cli)
    if args.what == "report":
        if not (args.out / "runs.jsonl").is_file():
            cli.error(f"{args.out} holds no runs.jsonl: measure first")
        print(report(args.out))
        return 0
    if not regression.cuda_available():
        print("power: no CUDA GPU here: nothing to measure", flush=True)
        return exits.NO_GPU
    args.out.mkdir(parents=True, exist_ok=True)
    if args.what == "noop":
        head = kernel_source.resolve("HEAD")
        for n in range(1, args.runs + 1):
            regression_run(args.out, "noop", head, None, n)
    for plant in args.plants if args.what == "ladder" else ():
        regression_run(args.out, "ladder", planted_commit(plant), plant, 1)
    print(report(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
