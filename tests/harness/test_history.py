"""The GPU history committed under benchmarks/history/: real GPU results across at least ten commits
of main, GPU machines only, readable by the suite as it is today."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import result_files as rf
from checkouts import head

from harness.history import asvrun
from harness.history import store as history

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
    doc = json.loads(stale.read_text())
    column = doc["result_columns"].index("started_at")
    for row in doc["results"].values():
        row[column] -= rf.DAY_MS
    stale.write_text(json.dumps(doc))  # an older clone's copy of a committed result: the committed one wins
    suite = results / "benchmarks.json"
    suite.write_text("{}")  # asv's list of this checkout's suite: asv's, kept
    assert history.seed(results) == 1
    assert stale.read_bytes() == (history.STORE / MACHINES[0].name / stale.name).read_bytes()
    assert suite.read_text() == "{}"


def test_store_refuses_a_machine_without_a_gpu(tmp_path):
    cpu = tmp_path / "results" / "cpu-test"
    cpu.mkdir(parents=True)
    (cpu / "machine.json").write_text(json.dumps({"machine": "cpu-test", "gpu": "none", "version": 1}))
    with pytest.raises(ValueError, match="no GPU"):
        history.store(tmp_path / "results", "cpu-test", store_dir=tmp_path / "store")
    assert not (tmp_path / "store").exists()


# --- Seeding and storing merge, benchmark by benchmark --------------------------------------------------
# Stores made from a real H200 result (result_files.py): the committed history's copy of a commit and
# the local .asv/results copy, each holding the benchmarks and start times a test gives it.

A, B = rf.fake_commit(0xA), rf.fake_commit(0xB)


def test_seeding_keeps_the_richer_local_file_and_adds_the_committed_benchmarks_it_lacks(tmp_path):
    """The hole: a local file holding the full suite was replaced by the committed file of the same
    commit holding three benchmarks (bench, backfill and `site publish` seed the same way)."""
    local_rows = {name: rf.T0 + rf.DAY_MS for name in rf.ALL if name != rf.TIME_OVER_COPY}
    committed_rows = dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0)
    results = rf.write_store(tmp_path / "results", {A: rf.result(A, local_rows)})
    committed = rf.write_store(tmp_path / "committed", {A: rf.result(A, committed_rows)})
    history.seed(results, committed)
    assert set(rf.rows(results, A)) == set(rf.ALL)  # the five local ones, and the one only committed
    kept = rf.started(results, A)
    assert kept[rf.KERNEL_TIME] == rf.T0 + rf.DAY_MS and kept[rf.TIME_OVER_COPY] == rf.T0


def test_where_two_copies_differ_the_newer_measurement_wins_and_a_line_says_why(tmp_path, capsys):
    results = rf.write_store(tmp_path / "results", {A: rf.result(A, dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0))})
    newer = {rf.KERNEL_TIME: rf.T0 + rf.DAY_MS, rf.PEAK_MEMORY: rf.T0 - rf.DAY_MS, rf.TIME_OVER_COPY: rf.T0}
    committed = rf.write_store(tmp_path / "committed", {A: rf.result(A, newer, scale=2.0)})
    history.seed(results, committed)
    got = rf.rows(results, A)
    assert got[rf.KERNEL_TIME]["started_at"] == rf.T0 + rf.DAY_MS  # the committed one, newer
    assert got[rf.PEAK_MEMORY]["started_at"] == rf.T0  # the local one, newer
    assert got[rf.TIME_OVER_COPY] == rf.rows(tmp_path / "results", A)[rf.TIME_OVER_COPY]
    lines = [line for line in capsys.readouterr().out.splitlines() if A[:8] in line]
    assert len(lines) == 3, lines  # one per benchmark the copies disagree on
    (kernel,) = (line for line in lines if rf.KERNEL_TIME in line)
    assert f"{committed}'s measurement wins, the newer" in kernel
    (memory,) = (line for line in lines if rf.PEAK_MEMORY in line)
    assert f"{results}'s measurement wins, the newer" in memory
    (same,) = (line for line in lines if rf.TIME_OVER_COPY in line)
    assert "the copy already there stays" in same


def test_a_benchmark_that_measured_nothing_never_replaces_a_measured_value(tmp_path, capsys):
    failed_later = rf.result(A, dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0 + rf.DAY_MS), failed=(rf.KERNEL_TIME,))
    results = rf.write_store(tmp_path / "results", {A: failed_later})
    committed = rf.write_store(tmp_path / "committed", {A: rf.result(A, dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0))})
    history.seed(results, committed)
    assert rf.rows(results, A)[rf.KERNEL_TIME]["result"] == rf.rows(committed, A)[rf.KERNEL_TIME]["result"]
    assert f"{committed}'s row measured values, {results}'s none" in capsys.readouterr().out


def test_seeding_keeps_the_newest_machine_json(tmp_path, capsys):
    """The hole: the machine.json a run on a new driver wrote was reverted to the committed one."""
    newer_run = rf.result(B, dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0 + rf.DAY_MS))
    results = rf.write_store(tmp_path / "results", {B: newer_run}, machine=rf.machine_info(driver="590.10"))
    committed = rf.write_store(tmp_path / "committed", {A: rf.result(A, dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0))})
    history.seed(results, committed)
    assert json.loads((results / "h200" / "machine.json").read_text())["driver"] == "590.10"
    assert "driver 590.10" in capsys.readouterr().out
    assert (results / "h200" / rf.path_of(results, A).name).is_file()  # and the committed result is added


def test_seeding_takes_the_committed_machine_json_where_its_results_are_newer(tmp_path):
    results = rf.write_store(tmp_path / "results", {A: rf.result(A, dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0))})
    newer = rf.result(B, dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0 + rf.DAY_MS))
    committed = rf.write_store(tmp_path / "committed", {B: newer}, machine=rf.machine_info(driver="590.10"))
    history.seed(results, committed)
    assert json.loads((results / "h200" / "machine.json").read_text())["driver"] == "590.10"


def test_seeding_leaves_a_file_it_cannot_read_and_says_so(tmp_path, capsys):
    results = rf.write_store(tmp_path / "results", {})
    broken = rf.path_of(results, A)
    broken.write_text("{not json")
    committed = rf.write_store(tmp_path / "committed", {A: rf.result(A, dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0))})
    history.seed(results, committed)
    assert broken.read_text() == "{not json"
    out = capsys.readouterr().out
    assert f"{broken}: not JSON" in out and "left as it is" in out


def test_store_names_every_file_it_adds_or_changes_and_keeps_newer_committed_rows(tmp_path, capsys):
    """The hole: `history store` overwrote a committed result with a stale local copy of it, printing
    only a count."""
    committed = rf.write_store(
        tmp_path / "committed", {A: rf.result(A, dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0 + rf.DAY_MS))}
    )
    before = rf.path_of(committed, A).read_bytes()
    stale = rf.result(A, dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0))
    results = rf.write_store(tmp_path / "results", {A: stale, B: rf.result(B, dict.fromkeys(rf.ALL, rf.T0))})
    history.store(results, "h200", store_dir=committed)
    out = capsys.readouterr().out
    assert rf.path_of(committed, A).read_bytes() == before  # the committed rows are the newer
    assert f"added {rf.path_of(committed, B)}" in out
    assert str(rf.path_of(committed, A)) not in out.replace(f"{A[:8]}-{rf.ENV}.json {rf.KERNEL_TIME}", "")
    assert "changed" not in out

    newer = rf.result(A, {**dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0), rf.KERNEL_TIME: rf.T0 + 2 * rf.DAY_MS})
    rf.write_store(results, {A: newer})
    history.store(results, "h200", store_dir=committed)
    out = capsys.readouterr().out
    assert f"changed {rf.path_of(committed, A)}" in out and "added" not in out
    assert rf.started(committed, A)[rf.KERNEL_TIME] == rf.T0 + 2 * rf.DAY_MS
    assert rf.started(committed, A)[rf.PEAK_MEMORY] == rf.T0 + rf.DAY_MS


def test_store_keeps_the_committed_machine_json_over_an_older_one(tmp_path):
    committed = rf.write_store(
        tmp_path / "committed",
        {A: rf.result(A, dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0 + rf.DAY_MS))},
        machine=rf.machine_info(driver="590.10"),
    )
    results = rf.write_store(tmp_path / "results", {A: rf.result(A, dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0))})
    history.store(results, "h200", store_dir=committed)
    assert json.loads((committed / "h200" / "machine.json").read_text())["driver"] == "590.10"


@pytest.mark.parametrize(("text", "said"), [("[]", r"\[\] is not an object"), ("{}", "version: missing")])
def test_store_refuses_a_file_that_is_not_asvs_before_writing_anything(tmp_path, text, said):
    committed = rf.write_store(tmp_path / "committed", {})
    results = rf.write_store(tmp_path / "results", {B: rf.result(B, dict.fromkeys(rf.ALL, rf.T0))})
    rf.path_of(results, A).write_text(text)
    with pytest.raises(ValueError, match=f"{rf.path_of(results, A)}: {said}"):
        history.store(results, "h200", store_dir=committed)
    assert not rf.path_of(committed, B).exists()


def test_the_store_command_names_its_files_and_exits_1_on_a_bad_one(tmp_path):
    committed = rf.write_store(tmp_path / "committed", {})
    results = rf.write_store(tmp_path / "results", {B: rf.result(B, dict.fromkeys(rf.ALL, rf.T0))})
    config = tmp_path / "asv.conf.json"
    config.write_text(json.dumps({"version": 1, "results_dir": str(results)}))
    command = [
        sys.executable,
        "-m",
        "tools.history",
        "store",
        "--config",
        str(config),
        "--history",
        str(committed),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"history: added {rf.path_of(committed, B)}" in done.stdout
    rf.path_of(results, A).write_text("{")
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"history: {rf.path_of(results, A)}: not JSON (")
    assert not rf.path_of(committed, A).exists()


def test_a_merged_file_is_one_asv_reads_with_every_value(tmp_path):
    from asv.results import Results

    local = rf.result(A, {rf.KERNEL_TIME: rf.T0 + rf.DAY_MS, rf.PEAK_MEMORY: rf.T0})
    results = rf.write_store(tmp_path / "results", {A: local})
    committed = rf.write_store(tmp_path / "committed", {A: rf.result(A, dict.fromkeys(rf.ALL, rf.T0))})
    history.seed(results, committed)
    loaded = Results.load(str(rf.path_of(results, A)))
    assert sorted(loaded.get_result_keys(json.loads((committed / "benchmarks.json").read_text()))) == sorted(rf.ALL)
    assert loaded.started_at[rf.KERNEL_TIME] == rf.T0 + rf.DAY_MS
    assert asvrun.outcome(str(results), "h200", A, asvrun.SUITES["gpu"].bench).measured == 6 * 12


def test_a_row_with_a_start_time_beats_one_without(tmp_path):
    no_time = rf.result(A, dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0 + rf.DAY_MS))
    for row in no_time["results"].values():
        row[3] = None  # started_at: asv's column 3
    results = rf.write_store(tmp_path / "results", {A: no_time})
    committed = rf.write_store(tmp_path / "committed", {A: rf.result(A, dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0))})
    history.seed(results, committed)
    assert rf.started(results, A) == dict.fromkeys(rf.NF4KERNEL_ONLY, rf.T0)
