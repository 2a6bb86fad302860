"""Regression check between two commits with asv: fails on a slowdown beyond a factor.

    python -m nf4kernel.harness.regression BASE HEAD [--factor 1.10] [--bench REGEX] [--machine NAME]

Each commit's package is checked out into a temporary worktree and benchmarked in this environment
by *this* checkout's suite (one ruler, two kernels), its results stored under that commit; then
asv compares them. ``asv compare`` always exits 0, and ``asv continuous`` builds environments from
a registry, which a GPU runner may not reach; this returns 1 when asv reports a result worse by more
than ``factor`` (and statistically significant), 0 otherwise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

from nf4kernel.harness.bench import asv_env

DEFAULT_BENCH = r"TimeDequantize\.|TrackPeakGpuMemory"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout.strip()


def benchmark(sha: str, args) -> None:
    with tempfile.TemporaryDirectory(prefix=f"nf4kernel-{sha[:8]}-") as tmp:
        worktree = os.path.join(tmp, "src")
        git("worktree", "add", "--detach", worktree, sha)
        try:
            env = asv_env(worktree)  # this commit's nf4kernel first on the benchmark processes' path
            command = [
                sys.executable,
                "-m",
                "asv",
                "run",
                "--python=same",
                "--set-commit-hash",
                sha,
                "--config",
                args.config,
                "--bench",
                args.bench,
                "--show-stderr",
            ]
            command += ["--machine", args.machine] if args.machine else []
            print("+", " ".join(command[1:]), f"(nf4kernel from {sha[:8]})", flush=True)
            subprocess.run(command, check=True, env=env)
        finally:
            git("worktree", "remove", "--force", worktree)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nf4kernel.harness.regression", description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the reference commit (a PR's base)")
    parser.add_argument("head", help="the commit under test")
    parser.add_argument("--factor", type=float, default=1.10, help="slowdown that fails (default %(default)s)")
    parser.add_argument("--bench", default=DEFAULT_BENCH, help="benchmarks to compare (regex)")
    parser.add_argument("--machine", help="asv machine name")
    parser.add_argument("--config", default="asv.conf.json")
    parser.add_argument("--no-run", action="store_true", help="compare results already stored")
    args = parser.parse_args(argv)

    from asv.commands.compare import Compare
    from asv.config import Config

    base, head = git("rev-parse", args.base), git("rev-parse", args.head)
    subprocess.run(
        [sys.executable, "-m", "asv", "machine", "--yes", "--config", args.config]
        + (["--machine", args.machine] if args.machine else []),
        check=True,
    )
    if not args.no_run:
        for sha in (base, head):
            benchmark(sha, args)
    conf = Config.load(args.config)
    machine = args.machine or _only_machine(conf)
    worsened, _improved = Compare.print_table(
        conf, base, head, factor=args.factor, split=False, machine=machine, only_changed=False, sort="ratio"
    )
    if worsened:
        print(f"regression: a benchmark is slower than {args.factor}x of {base[:8]} at {head[:8]}", flush=True)
        return 1
    print(f"regression: nothing slower than {args.factor}x of {base[:8]}", flush=True)
    return 0


def _only_machine(conf) -> str:
    """This host's asv machine name, as ``asv run`` used it."""
    from asv.machine import Machine

    return Machine.load(machine_name=None, use_defaults=True).machine


if __name__ == "__main__":
    raise SystemExit(main())
