"""The asv suite for the current commit, then the history site.

    python -m nf4kernel.harness.bench [--machine NAME] [--bench REGEX] [--quick] [--no-publish]

Benchmarks run in this environment (``asv run --python=same``), recorded under the current commit
in .asv/results/<machine>/; ``asv publish`` then builds .asv/html. Without a CUDA GPU only the
CPU-interpreter benchmarks run (the GPU ones are skipped): a smoke run of the pipeline, no verdict.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys


def asv_env(*front: str) -> dict:
    """asv drops PYTHONPATH from its benchmark processes and uses ASV_PYTHONPATH instead: carry it
    over, so a package found through PYTHONPATH (an offline bundle, a worktree) is found there too."""
    paths = [*front, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "ASV_PYTHONPATH": os.pathsep.join(paths)} if paths else dict(os.environ)


def asv(*args: str, config: str = "asv.conf.json") -> None:
    command = [sys.executable, "-m", "asv", *args, "--config", config]
    print("+", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True, env=asv_env())


def commit() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nf4kernel.harness.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--machine", help="asv machine name (default: this host's)")
    parser.add_argument("--bench", help="only benchmarks matching this regex")
    parser.add_argument("--quick", action="store_true", help="one call per benchmark (a smoke run)")
    parser.add_argument("--no-publish", action="store_true", help="skip building the site")
    parser.add_argument("--config", default="asv.conf.json")
    args = parser.parse_args(argv)

    import torch

    gpu = torch.cuda.is_available()
    print(f"bench: {'GPU: ' + torch.cuda.get_device_name() if gpu else 'CPU run (no CUDA GPU)'}", flush=True)
    if not gpu:
        print("bench: only the CPU-interpreter benchmarks run; their times are no speed verdict", flush=True)
    machine = ["--machine", args.machine] if args.machine else []
    asv("machine", "--yes", *machine, config=args.config)
    run = ["run", "--python=same", "--set-commit-hash", commit(), "--show-stderr", *machine]
    run += ["--bench", args.bench] if args.bench else []
    run += ["--quick"] if args.quick else []
    asv(*run, config=args.config)
    if not args.no_publish:
        asv("publish", config=args.config)
        print("bench: the history site is in .asv/html: open index.html, or run `python -m asv preview`")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
