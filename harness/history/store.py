"""The GPU performance history committed with the code: ``benchmarks/history/``, GPU machines only.
Every harness command that runs or publishes asv first *seeds* ``.asv/results`` from it; ``store``
copies a GPU machine's new results back, to be committed (``bench --store``, ``backfill --store``,
``python -m tools.history store``). Both merge by ``result_merge.py``'s rules (docs/performance-history.md,
"The store's guarantees").
"""

from __future__ import annotations

from pathlib import Path

from harness.core import asv_files
from harness.history import result_merge
from harness.history.asvrun import ROOT
from harness.history.result_merge import is_gpu_machine

STORE = ROOT / "benchmarks" / "history"


def say(message: str) -> None:
    print(f"history: {message}", flush=True)


def label(path: Path) -> str:
    """A store's name in the lines: its path from the checkout's root where it is inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def seed(results_dir: Path, store: Path = STORE) -> int:
    """Merge the committed history into ``results_dir`` (benchmarks.json only where there is none: asv
    rewrites it at every run). A file that can't be read is left as it is, said in one line: seeding
    never stops a run. Returns how many files were added or changed."""
    merged = result_merge.merge_tree(
        Path(store), Path(results_dir), incoming_label=label(store), target_label=label(results_dir), strict=False
    )
    for line in merged.decisions + [f"{problem}: left as it is" for problem in merged.problems]:
        say(line)
    return merged.written


def store(results_dir: Path, machine: str, store_dir: Path = STORE) -> int:
    """Merge ``machine``'s results (and benchmarks.json) into the committed history, naming each file
    added or changed. Returns how many result files of ``machine`` it holds. ValueError where there is
    nothing to store, or (RecordError) a file isn't asv's, before anything is written."""
    source = Path(results_dir) / machine
    if not (source / "machine.json").is_file():
        raise ValueError(f"no results for machine {machine!r} in {results_dir}")
    if not is_gpu_machine(source):
        raise ValueError(f"{machine} has no GPU: the committed history holds GPU machines only")
    merged = result_merge.merge_tree(
        Path(results_dir),
        Path(store_dir),
        incoming_label=label(results_dir),
        target_label=label(store_dir),
        machines=[machine],
        suite="newest",
    )
    for line in merged.lines(lambda relative: label(Path(store_dir) / relative)):
        say(line)
    return sum(path.name != "machine.json" for path in (Path(store_dir) / machine).glob("*.json"))


def store_and_say(results_dir: Path, machine: str, who: str) -> bool:
    """``store`` for a command (``bench --store``, ``backfill --store``): False, said in one line, where it fails."""
    try:
        count = store(results_dir, machine)
    except ValueError as error:
        print(f"{who}: nothing stored: {error}", flush=True)
        return False
    print(f"{who}: {count} result files of {machine} in {label(STORE)}", flush=True)
    return True


def commits(machine_dir: Path) -> list[str]:
    paths = [path for path in machine_dir.glob("*.json") if path.name != "machine.json"]
    return sorted(asv_files.read_asv_result(path)["commit_hash"] for path in paths)
