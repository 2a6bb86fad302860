"""Decisions only from records the trusted side wrote and checked (issue 35, item 2): the sandboxed
gate measurement's answer is refused unless it is one gate record of the staged commit, imported
from the staged folder, of this harness version, with timings that fit in the run; the decide steps
refuse a record of another commit than the one the workflow measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import recorded

from harness.core import kernel_source, records
from harness.gate import sandboxed as gate_sandbox

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "tests" / "fixtures" / "gate" / "issue10" / "planted-and-aa" / "planted-base.json"  # one H200 run
COMMIT = "c" * 40


def answer(tmp_path: Path, **changes) -> tuple[subprocess.CompletedProcess, kernel_source.Staged]:
    """The sandboxed child's stdout for a recorded H200 measurement of the staged commit."""
    record = json.loads(RECORD.read_text())
    record["kernel"] = {"source": "staged", "commit": COMMIT, "imported_from": f"{tmp_path}/nf4kernel/__init__.py"}
    record["harness_version"] = records.HARNESS_VERSION
    record.update(changes)
    return subprocess.CompletedProcess([], 0, json.dumps(record) + "\n", None), kernel_source.Staged(COMMIT, tmp_path)


def test_a_record_of_the_staged_commit_that_fits_its_run_is_taken(tmp_path):
    done, staged = answer(tmp_path)
    record = gate_sandbox.checked(done, staged, "../candidate", wall=60.0)
    assert record["kernel"]["source"] == "../candidate" and record["sandbox"]["reported_s"] < 60


@pytest.mark.parametrize(
    "change,why",
    [
        ({"kernel": {"source": "staged", "commit": "d" * 40}}, "kernel.commit"),
        ({"harness_version": 99}, "harness_version"),
        ({"seconds": {"nf4kernel": [[True]], "unsloth": [[1.0]]}}, "seconds"),
    ],
)
def test_a_record_of_another_kernel_or_version_or_a_broken_one_is_refused(tmp_path, change, why):
    done, staged = answer(tmp_path, **change)
    with pytest.raises(ValueError, match=why):
        gate_sandbox.checked(done, staged, "../candidate", wall=60.0)


def test_a_record_imported_from_elsewhere_is_refused(tmp_path):
    done, staged = answer(tmp_path)
    record = json.loads(done.stdout)
    record["kernel"]["imported_from"] = str(ROOT / "nf4kernel" / "__init__.py")
    done = subprocess.CompletedProcess([], 0, json.dumps(record), None)
    with pytest.raises(ValueError, match="imported_from"):
        gate_sandbox.checked(done, staged, "../candidate", wall=60.0)


def test_timings_that_add_up_to_more_than_the_run_took_are_refused(tmp_path):
    """Unsloth reported slower than the child's own wall clock allowed: more time than it had."""
    done, staged = answer(tmp_path)
    with pytest.raises(ValueError, match="more than it could have timed"):
        gate_sandbox.checked(done, staged, "../candidate", wall=1.0)


@pytest.mark.parametrize("stdout", ["", "not json\n", '{"a": 1}\n{"b": 2}\n'])
def test_anything_but_one_record_on_the_pipe_is_refused(tmp_path, stdout):
    _, staged = answer(tmp_path)
    with pytest.raises(ValueError):
        gate_sandbox.checked(subprocess.CompletedProcess([], 0, stdout, None), staged, "x", wall=60.0)


def gate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.gate", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
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
    command = [sys.executable, "-m", "harness.regression", "--replay", str(path), "--expect"]
    ok = subprocess.run([*command, "b" * 40, "a" * 40], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout[-2000:]
    swapped = subprocess.run([*command, "a" * 40, "b" * 40], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert swapped.returncode == 2 and "not the expected" in swapped.stdout
