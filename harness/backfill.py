"""A history from day one: benchmark earlier commits of main, each commit's nf4kernel alone.

    python -m harness.backfill RANGE [--suite nf4kernel-only] [--store] [--force]

RANGE is a git revision range (``c0dfe69~12..c0dfe69``, ``main~10..main``); its first-parent commits
are benchmarked oldest first, each commit's nf4kernel (and nothing else of its tree:
``kernel_source.py``) measured by *this* checkout's ruler, as the regression check does. A commit
whose nf4kernel can't be imported from its own tree (it predates the package, or fails to import)
is skipped, and the run says so and why. Commits already benchmarked on this machine are skipped
unless ``--force``.

The default suite is nf4kernel's own figures (kernel time, time over copy, memory peak): no baseline
is imported, so a commit takes seconds, not Unsloth's 30 s import. ``--store`` then copies the
machine's results into benchmarks/history/ to be committed.

Exit 0 done; 2 no such range, or no commit in it; 4 no CUDA GPU (with a GPU suite).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from harness import asvrun, history, kernel_source, machine

# Imports nf4kernel as the benchmark processes will (the staged folder first on the path) and checks
# that it came from there and has the call the ruler uses.
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.backfill", description=__doc__.splitlines()[0])
    parser.add_argument("range", help="git revision range of main, e.g. main~10..main")
    parser.add_argument("--suite", default="nf4kernel-only", choices=sorted(asvrun.SUITES))
    parser.add_argument("--config", default="asv.conf.json")
    parser.add_argument("--force", action="store_true", help="benchmark commits already in the results again")
    parser.add_argument("--store", action="store_true", help="copy the results into benchmarks/history")
    args = parser.parse_args(argv)

    try:
        commits = asvrun.git("rev-list", "--first-parent", "--reverse", args.range).split()
    except subprocess.CalledProcessError as error:
        print(f"backfill: {args.range} is not a revision range here: {error.stderr.strip()}", file=sys.stderr)
        return 2
    if not commits:
        print(f"backfill: no commits in {args.range}", file=sys.stderr)
        return 2
    info = machine.register()
    print(f"backfill: {machine.one_line(info)}", flush=True)
    if info["gpu"] == "none" and args.suite != "cpu":
        print("backfill: no CUDA GPU here (use --suite cpu for a smoke run)", file=sys.stderr)
        return 4
    results = asvrun.ROOT / asvrun.load_config(args.config)["results_dir"]
    history.seed(results)
    bench = asvrun.SUITES[args.suite].bench
    done, skipped = [], []
    print(f"backfill: {len(commits)} commits of {args.range}: {asvrun.SUITES[args.suite].about}", flush=True)
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
    if args.store:
        print(f"backfill: {history.store(results, info['machine'])} result files stored in {history.STORE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
