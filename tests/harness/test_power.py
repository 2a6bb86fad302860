"""harness/power.py on the CPU: the planted commits it measures, and its report from runs (built
here from the H200 runs, as the rule's tests build them). Its measurements need a GPU."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import recorded

from harness import power

ROOT = Path(__file__).resolve().parents[2]
LARGE = [k for k in recorded.history_run(recorded.SAME_KERNEL[0]) if recorded.packed_bytes(k) >= 16 * 2**20]


def test_a_planted_commit_is_head_with_the_plant_and_nothing_else():
    commit = power.planted_commit("large-10pct")
    changed = subprocess.run(
        ["git", "diff", "--name-only", "HEAD", commit], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert changed == ["nf4kernel/api.py"]
    source = subprocess.run(["git", "show", f"{commit}:nf4kernel/api.py"], cwd=ROOT, capture_output=True, text=True)
    assert "int(0.10 * moved" in source.stdout
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "plant-large-10pct" not in worktrees  # the throwaway worktree is gone


def test_the_report_says_each_runs_verdict_and_how_close_it_came(tmp_path):
    runs = [
        {"kind": "noop", "plant": None, "run": 1, "exit": 0, **power.summarize(recorded.regression_record())},
        {
            "kind": "ladder",
            "plant": "large-10pct",
            "run": 1,
            "exit": 0,
            **power.summarize(recorded.regression_record(dict.fromkeys(LARGE, 1.10))),
        },
        {"kind": "noop", "plant": None, "run": 2, "exit": 4},
    ]
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    lines = power.report(tmp_path).splitlines()
    assert lines[2].startswith("| noop  #1 | pass | 0 | ")
    assert lines[3].startswith("| ladder large-10pct #1 | FAIL | ")
    assert "limit 1.05" in lines[3] or "limit 1.02" in lines[3]
    assert lines[4] == "| noop  #2 | measurement exit 4 | | | |"


def test_report_without_runs_says_measure_first(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        power.main(["report", "--out", str(tmp_path)])
    assert stopped.value.code == 2 and "measure first" in capsys.readouterr().err


# --- False alarms beyond the runs made: no-op runs built from recorded processes ---------------------


def _h100_noops() -> list[dict]:
    """The six no-op runs of 637a7c4, on one machine (the directory also holds later commits' runs)."""
    return power.noop_records(recorded.H100_LADDER, "637a7c4")


def test_resampled_no_ops_are_built_from_whole_processes_of_one_commit():
    records = _h100_noops()
    pool = power.noop_processes(records)
    assert len(pool) >= 36 and all(len(p) == 12 for p in pool)
    found = power.resampled_noops(records, draws=3, seed=1)
    assert found["draws"] == 3 and found["processes"] == len(pool)
    assert found == power.resampled_noops(records, draws=3, seed=1)  # the seed names the draws


def test_resampling_refuses_records_of_two_commits():
    records = _h100_noops()
    other = {**records[0], "base": "f" * 40, "head": "f" * 40}
    with pytest.raises(ValueError, match="one commit"):
        power.resampled_noops([*records[:2], other], draws=1)


def test_resampling_counts_the_false_alarms_a_rule_without_a_practical_minimum_raises():
    """No-op runs drawn from the H100's real processes: called where any change beyond the noise is
    called, never under the rule's 5%. The estimate can fail, and the 5% minimum is what it shows
    matters (the same ten draws, one seed)."""
    records = _h100_noops()
    lax = power.resampled_noops(records, draws=10, seed=2, min_change=1e-9)
    assert lax["failed"] > 0 and sum(lax["called"].values()) >= lax["failed"], lax
    assert power.resampled_noops(records, draws=10, seed=2)["failed"] == 0


def test_the_upper_bound_of_a_rate_never_seen():
    assert power._upper_95(0, 1000) == pytest.approx(0.0030, abs=0.0001)  # the "rule of three"
    assert power._upper_95(5, 1000) == pytest.approx(0.0105, abs=0.0002)
