"""A history from day one: benchmark earlier commits of main, each commit's nf4kernel alone.

RANGE's first-parent commits, oldest first, or with ``--missing`` those with no result on this
machine yet, newest first, measured by this checkout's ruler; a commit whose kernel can't be
imported is skipped, saying why (docs/performance-history.md, "Earlier commits").

Exit 0 done (or nothing missing); 1 ``--store`` found nothing of this machine to store, or a file
that isn't asv's; 2 no such range, no commit in it, arguments that don't go together, or an asv
configuration that can't be read; 4 no CUDA GPU (with a GPU suite).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from harness.core import command_output, exits, kernel_source
from harness.core.git import GitError
from harness.history import asvrun, store

# nf4kernel imported as the benchmark processes will: from the staged folder, with the ruler's call.
_PROBE = (
    "import os, sys, nf4kernel; "
    "where = os.path.realpath(nf4kernel.__file__); "
    "assert where.startswith(os.path.realpath(sys.argv[1]) + os.sep), f'found at {where}, not in the staged folder'; "
    "nf4kernel.dequantize"
)


def why_not_runnable(tree: str) -> str | None:
    """None if this tree's nf4kernel imports from the tree and has ``dequantize``; else the reason."""
    if not os.path.isfile(os.path.join(tree, "nf4kernel", "__init__.py")):
        return "no nf4kernel package in this commit"
    env = asvrun.asv_env(tree)
    env["PYTHONPATH"] = env.pop("ASV_PYTHONPATH")
    # -P: no current directory first on the path (it would find this checkout's nf4kernel)
    done = subprocess.run(
        [sys.executable, "-P", "-c", _PROBE, tree], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or [f"exit {done.returncode}"]
        return f"nf4kernel does not import: {lines[-1]}"
    return None


def parse(argv) -> argparse.Namespace:
    parser = command_output.Parser(prog="python -m harness backfill", description=__doc__.split("\n\n")[0])
    parser.add_argument("range", nargs="?", help="git revision range of main, e.g. main~10..main")
    parser.add_argument("--suite", default="nf4kernel-only", choices=sorted(asvrun.SUITES))
    asvrun.add_config(parser)
    parser.add_argument("--force", action="store_true", help="benchmark commits already in the results again")
    parser.add_argument("--store", action="store_true", help="merge the results into benchmarks/history")
    parser.add_argument("--missing", action="store_true", help="the commits with no result yet, newest first")
    parser.add_argument("--limit", type=int, default=3, help="--missing: at most this many commits a run (3)")
    parser.add_argument("--list", action="store_true", help="--missing: name them, measure nothing")
    parser.add_argument("--machine", help="--list: the machine whose results count (default: this one)")
    args = parser.parse_args(argv)
    if args.missing:
        if args.limit < 1:
            parser.error(f"--limit must be 1 or more, not {args.limit}")
        if args.force:
            parser.error("--force goes with a RANGE, not --missing (a missing commit has nothing to force)")
        if args.machine and not args.list:
            parser.error("--machine goes with --list: a run measures this machine")
    elif args.range is None:
        parser.error("a RANGE, or --missing")
    elif args.list or args.machine:
        parser.error("--list and --machine go with --missing")
    return args


def missing_commits(newest_first: list[str], results, machine_name: str, bench: str, limit: int) -> list[str]:
    """Of ``newest_first``, the commits with no measured value of ``bench`` on ``machine_name`` in
    ``results`` that are newer than the oldest one with a value, newest first, at most ``limit``."""
    measured = [asvrun.outcome(str(results), machine_name, sha, bench).measured > 0 for sha in newest_first]
    oldest = max((i for i, has in enumerate(measured) if has), default=len(newest_first))
    return [sha for sha, has in zip(newest_first[:oldest], measured, strict=False) if not has][:limit]


def main(argv=None) -> int:
    args = parse(argv)
    spec = args.range or "HEAD"
    try:
        commits = asvrun.git("rev-list", "--first-parent", *([] if args.missing else ["--reverse"]), spec).split()
    except GitError as error:
        reason = error.stderr.splitlines()[0] if error.stderr else error  # git's hints follow its reason
        print(f"backfill: {spec!r} is not a revision range here: {reason}", file=sys.stderr)
        return 2
    if not commits:
        print(f"backfill: no commits in {spec!r}", file=sys.stderr)
        return 2
    bench = asvrun.SUITES[args.suite].bench
    try:
        results = asvrun.results_dir(args.config)
    except asvrun.ConfigError as error:
        print(f"backfill: cannot read the results folder from {error}", file=sys.stderr)
        return 2
    if args.missing and args.list:
        store.seed(results)
        chosen = missing_commits(commits, results, args.machine or asvrun.describe()["machine"], bench, args.limit)
        for sha in chosen:
            print(f"{sha} {asvrun.git('show', '-s', '--format=%s', sha)[:60]}", flush=True)
        print(f"backfill: {len(chosen)} commits of {spec} with no result yet, newest first (--limit {args.limit})")
        return 0
    info = asvrun.register()
    print(f"backfill: {asvrun.one_line(info)}", flush=True)
    if info["gpu"] == "none" and args.suite != "cpu":
        print("backfill: no CUDA GPU here (use --suite cpu for a smoke run)", file=sys.stderr)
        return exits.NO_GPU
    store.seed(results)
    if args.missing:
        commits = missing_commits(commits, results, info["machine"], bench, args.limit)[::-1]  # oldest first
        left = f"{len(commits)} commits of {spec} with no result yet (--limit {args.limit})"
        done = f"every first-parent commit of {spec} has a result on {info['machine']}"
        print(f"backfill: {left if commits else done}", flush=True)
    if commits:
        measure(commits, spec, args, results, info, bench)
    return 0 if not args.store or store.store_and_say(results, info["machine"], "backfill") else 1


def measure(commits: list[str], spec: str, args, results, info: dict, bench: str) -> None:
    done, skipped = [], []
    print(f"backfill: {len(commits)} commits of {spec}: {asvrun.SUITES[args.suite].about}", flush=True)
    for sha in commits:
        subject = asvrun.git("show", "-s", "--format=%s", sha)[:60]
        if not args.force and asvrun.outcome(str(results), info["machine"], sha, bench).measured:
            print(f"backfill: {sha[:8]} already benchmarked on {info['machine']}: {subject}", flush=True)
            continue
        started = time.perf_counter()
        try:
            with kernel_source.staged(sha) as kernel:
                why = why_not_runnable(str(kernel.path))
                if why is None:
                    asvrun.run(sha, args.suite, info, args.config, source=str(kernel.path))
        except kernel_source.SourceError as error:
            why = str(error)
        if why is not None:
            skipped.append((sha, why))
            print(f"backfill: {sha[:8]} skipped: {why} ({subject})", flush=True)
            continue
        found = asvrun.outcome(str(results), info["machine"], sha, bench)
        done.append(sha)
        print(f"backfill: {sha[:8]} {found.line()} in {time.perf_counter() - started:.0f} s ({subject})", flush=True)
    print(f"backfill: {len(done)} benchmarked, {len(skipped)} skipped", flush=True)
    for sha, why in skipped:
        print(f"  skipped {sha[:8]}: {why}", flush=True)
