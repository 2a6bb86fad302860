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
