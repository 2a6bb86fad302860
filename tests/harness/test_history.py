"""The GPU history committed under benchmarks/history/: real GPU results across at least ten commits
of main, GPU machines only, readable by the suite as it is today."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from checkouts import head

from harness import history

ROOT = Path(__file__).resolve().parents[2]
MACHINES = sorted(p for p in history.STORE.iterdir() if p.is_dir())


def git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()


def test_at_least_ten_commits_of_gpu_results():
    assert MACHINES, "benchmarks/history holds no machine"
    assert max(len(history.commits(m)) for m in MACHINES) >= 10


@pytest.mark.parametrize("machine_dir", MACHINES, ids=lambda p: p.name)
def test_only_gpu_machines_with_their_versions(machine_dir):
    info = json.loads((machine_dir / "machine.json").read_text())
    assert history.is_gpu_machine(machine_dir) and not info["machine"].startswith("cpu-")
    for field in ("gpu", "driver", "cuda", "torch", "triton", "bitsandbytes", "unsloth"):
        assert info[field] not in ("", "none", "unknown"), field


@pytest.mark.parametrize("machine_dir", MACHINES, ids=lambda p: p.name)
def test_every_result_is_of_a_commit_in_this_history(machine_dir):
    if head() is None:
        pytest.skip("needs the git checkout")
    known = set(git("rev-list", "HEAD"))
    missing = [c[:8] for c in history.commits(machine_dir) if c not in known]
    assert not missing, f"results for commits not in this checkout's history: {missing}"


def test_the_results_match_the_suite_versions():
    """asv drops a result whose benchmark version differs from the suite's: every stored result must
    carry the version the suite declares today, or the site would silently lose it."""
    suite = json.loads((history.STORE / "benchmarks.json").read_text())
    for machine_dir in MACHINES:
        for path in machine_dir.glob("*.json"):
            if path.name == "machine.json":
                continue
            columns = json.loads(path.read_text())
            index = columns["result_columns"].index("version")
            for name, row in columns["results"].items():
                assert name in suite, f"{path.name}: {name} is not in the suite"
                assert row[index] == suite[name]["version"], f"{path.name}: {name}"


def test_the_suite_declares_the_versions_the_history_was_recorded_with():
    import importlib

    for name, entry in json.loads((history.STORE / "benchmarks.json").read_text()).items():
        if name == "version":
            continue
        module, cls, _ = name.split(".")
        declared = getattr(importlib.import_module(f"benchmarks.{module}"), cls).version
        assert str(declared) == entry["version"], f"{name}: the suite says {declared}, the history {entry['version']}"


def test_seed_copies_what_is_missing_and_what_differs_but_keeps_the_suites_list(tmp_path):
    results = tmp_path / "results"
    first = history.seed(results)
    assert first == len(list(history.STORE.rglob("*.json")))
    assert history.seed(results) == 0
    stale = next((results / MACHINES[0].name).glob("*-existing-*.json"))
    stale.write_text("{}")  # an older clone's copy of a committed result: the committed one wins
    suite = results / "benchmarks.json"
    suite.write_text("{}")  # asv's list of this checkout's suite: asv's, kept
    assert history.seed(results) == 1
    assert stale.read_bytes() == (history.STORE / MACHINES[0].name / stale.name).read_bytes()
    assert suite.read_text() == "{}"


def test_store_refuses_a_machine_without_a_gpu(tmp_path):
    cpu = tmp_path / "results" / "cpu-test"
    cpu.mkdir(parents=True)
    (cpu / "machine.json").write_text(json.dumps({"machine": "cpu-test", "gpu": "none"}))
    with pytest.raises(ValueError, match="no GPU"):
        history.store(tmp_path / "results", "cpu-test", store_dir=tmp_path / "store")
    assert not (tmp_path / "store").exists()
