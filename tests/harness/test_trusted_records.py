"""Decisions only on records of the commits the workflow measured: the decide
steps refuse a record of another commit. (The gate's record is written by the trusted clock since
the trusted clock: no process that imported the candidate writes one; tests/harness/test_clock.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import recorded

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "tests" / "fixtures" / "gate" / "issue10" / "planted-and-aa" / "planted-base.json"  # one H200 run
COMMIT = "c" * 40


def gate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", "gate", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_the_gate_decides_only_on_records_of_the_commits_it_expects(tmp_path):
    record = json.loads(RECORD.read_text())
    record["kernel"] = {"source": "x", "commit": COMMIT}
    mine = tmp_path / "gate.json"
    mine.write_text(json.dumps(record))
    assert gate("--replay", str(mine), "--expect-kernel", COMMIT).returncode == 0
    refused = gate("--replay", str(mine), "--expect-kernel", "d" * 40)
    assert refused.returncode == 2 and "kernel.commit" in refused.stderr and "Traceback" not in refused.stderr
    # No base records: the gate makes no relative check (the regression check is the one).
    assert gate("--replay", str(mine), "--baseline", str(mine)).returncode == 2


def test_the_regression_check_decides_only_on_a_record_of_the_commits_it_expects(tmp_path):
    path = tmp_path / "regression.json"
    path.write_text(json.dumps(recorded.regression_record(base="b" * 40, head="a" * 40)))
    command = [sys.executable, "-m", "harness", "regression", "--replay", str(path), "--expect"]
    ok = subprocess.run([*command, "b" * 40, "a" * 40], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout[-2000:]
    swapped = subprocess.run([*command, "a" * 40, "b" * 40], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert swapped.returncode == 2 and "not the expected" in swapped.stdout
