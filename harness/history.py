"""The GPU performance history committed with the code: ``benchmarks/history/``.

It is an asv results store (``<machine>/machine.json``, ``<machine>/<commit>-<env>.json`` and the
suite's ``benchmarks.json``) holding GPU machines only. Every harness command that runs or publishes
asv first *seeds* ``.asv/results`` from it (copying each file that is missing there or differs: the
committed history is the record of its commits), so a fresh clone's site shows the real GPU graphs;
``store`` copies a GPU machine's new results back, to be committed. The CPU smoke run's machine
(``cpu-...``) is never stored: its figures would mean nothing beside a GPU's.

    python -m harness.history store [--machine NAME]   # .asv/results -> benchmarks/history
    python -m harness.history list                     # what the committed history holds
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from harness.asvrun import ROOT, load_config

STORE = ROOT / "benchmarks" / "history"


def seed(results_dir: Path, store: Path = STORE) -> int:
    """Copy the committed history into ``results_dir`` where a file is missing or, for a machine's
    files, differs (an older clone's copy of a committed result). The suite's ``benchmarks.json`` is
    copied only where there is none: asv rewrites it from this checkout's suite at every run, and
    that one is current. Returns how many."""
    copied = 0
    for source in sorted(store.rglob("*.json")):
        target = Path(results_dir) / source.relative_to(store)
        stale = source.parent != store and target.exists() and target.read_bytes() != source.read_bytes()
        if not target.exists() or stale:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            copied += 1
    return copied


def is_gpu_machine(machine_dir: Path) -> bool:
    info = json.loads((machine_dir / "machine.json").read_text())
    return info.get("gpu", "none") != "none"


def store(results_dir: Path, machine: str, store_dir: Path = STORE) -> int:
    """Copy ``machine``'s results (and the suite's benchmarks.json) into the committed history."""
    source = Path(results_dir) / machine
    if not (source / "machine.json").is_file():
        raise ValueError(f"no results for machine {machine!r} in {results_dir}")
    if not is_gpu_machine(source):
        raise ValueError(f"{machine} has no GPU: the committed history holds GPU machines only")
    target = store_dir / machine
    target.mkdir(parents=True, exist_ok=True)
    files = sorted(source.glob("*.json"))
    for path in files:
        shutil.copyfile(path, target / path.name)
    shutil.copyfile(Path(results_dir) / "benchmarks.json", store_dir / "benchmarks.json")
    return len(files) - 1  # machine.json is not a result


def commits(machine_dir: Path) -> list[str]:
    """The commit hashes a machine's stored results are for."""
    return sorted(
        json.loads(path.read_text())["commit_hash"]
        for path in machine_dir.glob("*.json")
        if path.name != "machine.json"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.history", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    store_cmd = commands.add_parser("store", help="copy a GPU machine's results into benchmarks/history")
    store_cmd.add_argument("--machine", help="asv machine name (default: every GPU machine in the results)")
    store_cmd.add_argument("--config", default="asv.conf.json")
    commands.add_parser("list", help="the machines and commits in benchmarks/history")
    args = parser.parse_args(argv)
    if args.command == "list":
        for machine_dir in sorted(p for p in STORE.iterdir() if p.is_dir()):
            print(f"{machine_dir.name}: {len(commits(machine_dir))} commits")
        return 0
    results = ROOT / load_config(args.config)["results_dir"]
    machines = [args.machine] if args.machine else [p.name for p in results.iterdir() if (p / "machine.json").is_file()]
    try:
        for machine in machines:
            if args.machine or is_gpu_machine(results / machine):
                print(f"history: {store(results, machine)} result files of {machine} stored in {STORE}")
    except ValueError as error:
        print(f"history: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
