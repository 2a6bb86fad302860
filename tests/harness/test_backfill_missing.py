"""backfill --missing: which of main's commits have no result yet, newest first and bounded, so the
nightly job measures what a merge burst's cancelled runs never did. history.yml's scheduled job runs
it under act in test_history_workflow.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import result_files as rf

from harness.history import asvrun, backfill

ROOT = Path(__file__).resolve().parents[2]
GPU_SUITE = asvrun.SUITES["gpu"].bench
COMMITS = [rf.fake_commit(n) for n in range(1, 8)]  # newest first


def results_with(tmp_path: Path, measured: list[str], failed: list[str] = ()) -> Path:
    files = {c: rf.result(c, dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0)) for c in measured}
    files |= {c: rf.result(c, dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0), failed=rf.NF4KERNEL_ONLY) for c in failed}
    return rf.write_store(tmp_path / "results", files)


def test_the_newest_commits_without_a_result_since_the_oldest_with_one(tmp_path):
    # 0 1 2 3 4 5 6 (newest first): results for 2 and 5; 6 predates the history.
    results = results_with(tmp_path, [COMMITS[2], COMMITS[5]])
    found = backfill.missing_commits(COMMITS, results, "h200", GPU_SUITE, limit=10)
    assert found == [COMMITS[0], COMMITS[1], COMMITS[3], COMMITS[4]]
    assert backfill.missing_commits(COMMITS, results, "h200", GPU_SUITE, limit=3) == found[:3]


def test_a_result_that_measured_nothing_is_missing_and_another_machines_does_not_count(tmp_path):
    results = results_with(tmp_path, [COMMITS[4]], failed=[COMMITS[1]])
    assert backfill.missing_commits(COMMITS, results, "h200", GPU_SUITE, limit=10) == COMMITS[:4]
    assert backfill.missing_commits(COMMITS, results, "h100-80gb-hbm3", GPU_SUITE, limit=3) == COMMITS[:3]


def test_nothing_is_missing_where_every_commit_has_a_result(tmp_path):
    results = results_with(tmp_path, COMMITS)
    assert backfill.missing_commits(COMMITS, results, "h200", GPU_SUITE, limit=3) == []


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", "backfill", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    "args,says",
    [
        (["--missing", "--limit", "0"], "--limit must be 1 or more, not 0"),
        (["--missing", "--force"], "--force goes with a RANGE, not --missing"),
        (["--missing", "--machine", "h200"], "--machine goes with --list"),
        (["--list"], "a RANGE, or --missing"),
        (["HEAD~1..HEAD", "--list"], "--list and --machine go with --missing"),
    ],
    ids=["limit-0", "force", "machine-without-list", "no-range", "list-without-missing"],
)
def test_arguments_that_do_not_go_together_are_refused_with_exit_2(args, says):
    done = run(*args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert says in done.stderr.strip().splitlines()[-1]


def test_list_names_the_missing_commits_of_a_range_and_measures_nothing(tmp_path):
    """On this checkout's own history, into a results folder of the test's."""
    commits = subprocess.run(
        ["git", "rev-list", "--first-parent", "-n", "6", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    if len(commits) < 6:
        pytest.skip("needs six commits of history (a shallow checkout has fewer)")
    results = results_with(tmp_path, [commits[3]])
    config = tmp_path / "asv.conf.json"
    config.write_text(json.dumps({"version": 1, "results_dir": str(results)}))
    done = run(
        "--missing",
        "--list",
        "--machine",
        "h200",
        "--limit",
        "2",
        "--config",
        str(config),
        f"{commits[5]}..{commits[0]}",
    )
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines() if not line.startswith(("backfill:", "history:"))]
    assert listed == commits[:2]
    assert done.stdout.splitlines()[-1].startswith("backfill: 2 commits of ")
    assert sorted(p.name for p in (results / "h200").glob(f"{commits[0][:8]}-*")) == []  # nothing measured


def test_a_configuration_that_cannot_be_read_is_one_line_and_exit_2(tmp_path):
    done = run("--missing", "--list", "--machine", "h200", "--config", str(tmp_path / "none.json"), "HEAD")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"backfill: cannot read the results folder from {tmp_path / 'none.json'}: ")
