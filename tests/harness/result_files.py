"""asv result stores for the store's tests, made from a real H200 result of the committed history
(the full suite's six benchmarks, as asv wrote them), with the start times and values a test needs."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HISTORY = ROOT / "benchmarks" / "history"
FULL_SUITE = HISTORY / "h200" / "644a4ed2-existing-py3.12.json"  # six benchmarks
MACHINE = "h200"
ENV = "existing-py3.12"
KERNEL_TIME = "gpu.KernelTime.track_kernel_time"
PEAK_MEMORY = "gpu.PeakGpuMemory.track_peak_gpu_memory"
TIME_OVER_COPY = "gpu.TimeOverCopy.track_time_over_copy"
NF4KERNEL_ONLY = (KERNEL_TIME, PEAK_MEMORY, TIME_OVER_COPY)  # what a backfilled commit holds
ALL = tuple(json.loads(FULL_SUITE.read_text())["results"])
DAY_MS = 86_400_000
T0 = 1_795_000_000_000  # a start time in ms since the epoch, as asv records it


def fake_commit(n: int) -> str:
    return f"{n:02x}" * 20


def result(commit: str, started: dict[str, int], failed: tuple = (), scale: float = 1.0) -> dict:
    """The real file's document for ``commit``, holding the benchmarks ``started`` names, each started
    at its time; ``failed`` ones measured nothing (asv's None), the others' values times ``scale``."""
    doc = copy.deepcopy(json.loads(FULL_SUITE.read_text()))
    columns = doc["result_columns"]
    rows = {}
    for name, at in started.items():
        row = dict(zip(columns, doc["results"][name], strict=False))
        row["started_at"] = at
        row["result"] = [None if name in failed else v * scale for v in row["result"]]
        if name in failed:
            row = {k: v for k, v in row.items() if not k.startswith("stats_")}
        rows[name] = [row.get(c) for c in columns]
        while rows[name][-1] is None:
            rows[name].pop()
    doc.update(commit_hash=commit, results=rows)
    return doc


def machine_info(driver: str = "580.159.04") -> dict:
    info = json.loads((HISTORY / MACHINE / "machine.json").read_text())
    toolchain = info["toolchain"].replace(f"driver {info['driver']}", f"driver {driver}")
    return {**info, "driver": driver, "toolchain": toolchain}


def write_store(root: Path, files: dict[str, dict], machine: dict | None = None, suite: bool = True) -> Path:
    """A store at ``root``: each result document under ``h200/<commit8>-existing-py3.12.json``, the
    machine's description, and the committed suite list."""
    folder = root / MACHINE
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "machine.json").write_text(json.dumps(machine or machine_info(), indent=4, sort_keys=True) + "\n")
    for doc in files.values():
        (folder / f"{doc['commit_hash'][:8]}-{ENV}.json").write_text(json.dumps(doc))
    if suite:
        shutil.copy(HISTORY / "benchmarks.json", root / "benchmarks.json")
    return root


def path_of(root: Path, commit: str) -> Path:
    return root / MACHINE / f"{commit[:8]}-{ENV}.json"


def rows(root: Path, commit: str) -> dict[str, dict]:
    """Each benchmark's row of ``commit``'s file in the store at ``root``, by column."""
    doc = json.loads(path_of(root, commit).read_text())
    return {name: dict(zip(doc["result_columns"], row, strict=False)) for name, row in doc["results"].items()}


def started(root: Path, commit: str) -> dict[str, int]:
    return {name: row["started_at"] for name, row in rows(root, commit).items()}


def results_branch(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m harness results-branch ARGS`` from the repository's root, its output kept."""
    return subprocess.run(
        [sys.executable, "-m", "harness", "results-branch", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
