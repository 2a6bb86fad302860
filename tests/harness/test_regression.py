"""The regression check's decision on results recorded on an H200 (benchmarks/results/asv-h200/):
BASE b543b026, HEAD a scratch commit that launched every planned kernel twice (planted ~2x), and a
no-op scratch commit. The same runs gave 'exit 1' and, under the first design (which also compared
asv's timed synchronized call), a false 'exit 1' on the no-op; these tests pin today's rule."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness import regression

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "benchmarks" / "results" / "asv-h200" / "regression-results"
BASE = "b543b026a53d5b7b60f3c261d6cadcca46cf1076"
SLOW = "21cb5f2f861217f5b81907b8a15674fdd0eb201f"  # every planned launch made twice
KERNEL_TIME = "gpu.KernelTime.track_kernel_time"


def head_of(prefix: str) -> str:
    return json.loads(next((RECORDED / "h200").glob(f"{prefix}-*.json")).read_text())["commit_hash"]


@pytest.fixture
def recorded(tmp_path):
    """A copy of the recorded results and a config that reads them (nothing is measured)."""
    results = tmp_path / "results"
    shutil.copytree(RECORDED, results)
    config = tmp_path / "asv.conf.json"
    config.write_text(
        json.dumps(
            {
                "version": 1,
                "project": "nf4kernel",
                "repo": str(ROOT),
                "branches": ["main"],
                "dvcs": "git",
                "environment_type": "existing",
                "benchmark_dir": str(ROOT / "benchmarks"),
                "results_dir": str(results),
                "html_dir": str(tmp_path / "html"),
            }
        )
    )
    return config, results


def replay(config, head, *extra, summary=None):
    argv = [BASE, head, "--no-run", "--machine", "h200", "--config", str(config), *extra]
    return regression.main(argv + (["--summary", str(summary)] if summary else []))


def test_the_planted_2x_slowdown_fails_and_is_named(recorded, tmp_path, capsys):
    config, _ = recorded
    summary = tmp_path / "summary.md"
    assert replay(config, SLOW, summary=summary) == 1
    out = capsys.readouterr().out
    named = out.split("result(s) worse than 1.2x", 1)[1]  # the list after the table names each one
    assert f"  - {KERNEL_TIME}('28672x8192', 'bfloat16'): 162" in named
    assert "kernel time over 12 shapes: 1.837x" in out
    text = summary.read_text()
    assert text.startswith(f"### asv regression check: {BASE[:8]} → {SLOW[:8]}")
    assert "Benchmarks that have got worse:" in text and "| +" in text  # asv's table, as Markdown
    assert text.rstrip().endswith("**FAIL**")


def test_the_no_op_passes(recorded, tmp_path, capsys):
    config, _ = recorded
    summary = tmp_path / "summary.md"
    assert replay(config, head_of("c9936ee0"), summary=summary) == 0
    assert "kernel time over 12 shapes: 1.012x" in capsys.readouterr().out
    assert summary.read_text().rstrip().endswith("**PASS**")


def test_the_limits_are_the_ones_applied(recorded):
    """The no-op's worst single result is 1.09x: a tighter --factor catches it."""
    config, _ = recorded
    assert replay(config, head_of("c9936ee0"), "--factor", "1.05") == 1


def test_a_small_slowdown_everywhere_fails_on_the_geometric_mean(recorded, capsys):
    """8% slower on every shape: no single result passes 1.20x, the mean does pass 1.07x."""
    config, results = recorded
    base = json.loads(next((results / "h200").glob(f"{BASE[:8]}-*.json")).read_text())
    head = "e" * 40
    base["commit_hash"] = head
    values = base["results"][KERNEL_TIME][0]
    base["results"][KERNEL_TIME][0] = [v * 1.08 for v in values]
    (results / "h200" / f"{head[:8]}-existing-py3.12.json").write_text(json.dumps(base))
    assert replay(config, head) == 1
    out = capsys.readouterr().out
    assert "0 result(s) worse than 1.2x" in out and "1.080x" in out


def test_a_checkout_of_one_commit_gets_the_branch_asv_needs(tmp_path):
    """The workflows check out the base by its hash (no local branch); asv then refused to run
    ("Unknown branch main in configuration"), which only the rehearsal on a GPU showed."""
    import subprocess

    from harness import asvrun

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(ROOT), str(clone)], check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    subprocess.run(["git", "checkout", "-q", "--detach", head], cwd=clone, check=True)
    subprocess.run(["git", "branch", "-D", "main"], cwd=clone, capture_output=True, check=False)
    config = tmp_path / "asv.conf.json"
    config.write_text(json.dumps({"version": 1, "repo": str(clone), "branches": ["main"], "dvcs": "git"}))
    asvrun.ensure_branches(str(config))
    made = subprocess.run(["git", "rev-parse", "refs/heads/main"], cwd=clone, capture_output=True, text=True)
    assert made.stdout.strip() == head
