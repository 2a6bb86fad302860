"""The asv-results store never rewrites what another commit's run stored.

A merged kernel's benchmark job runs that kernel's code on the runner, so it controls what it
uploads: a result file for any earlier commit, with a later ``started_at`` and other figures, or a
machine.json of its own. history.yml's store jobs are run here as the workflow writes them (their
``run:`` lines, read from the file), against a local bare repository standing in for GitHub, with
the branch written by plain git: the stored bytes of every other commit, and machine.json, must come
out identical, while the measured commit's results are added."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import result_files as rf
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "history.yml"
BRANCH = "refs/heads/asv-results"
A, B, C, D = (rf.fake_commit(n) for n in (0xA, 0xB, 0xC, 0xD))
NF4 = rf.NF4KERNEL_ONLY
MACHINE_JSON = f"{rf.MACHINE}/machine.json"


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def result_path(commit: str) -> str:
    return f"{rf.MACHINE}/{commit[:8]}-{rf.ENV}.json"


@pytest.fixture
def origin(tmp_path) -> Path:
    bare = tmp_path / "origin.git"
    git("init", "-q", "--bare", str(bare), cwd=tmp_path)
    return bare


def put_on_branch(origin: Path, store: Path) -> None:
    """``store``'s files as the branch's first commit, with plain git (not the code under test)."""
    writer = store.parent / f"{store.name}-writer"
    shutil.copytree(store, writer)
    git("init", "-q", "-b", "asv-results", cwd=writer)
    git("add", "-A", cwd=writer)
    git("-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-q", "-m", "stored", cwd=writer)
    git("push", "-q", str(origin), f"HEAD:{BRANCH}", cwd=writer)


def on_branch(origin: Path, path: str) -> bytes:
    done = subprocess.run(["git", "show", f"{BRANCH}:{path}"], cwd=origin, capture_output=True, check=True)
    return done.stdout


def branch_rows(origin: Path, commit: str) -> dict[str, dict]:
    doc = json.loads(on_branch(origin, result_path(commit)))
    return {name: dict(zip(doc["result_columns"], row, strict=False)) for name, row in doc["results"].items()}


def store_job(job: str, results: Path, origin: Path, sha: str) -> subprocess.CompletedProcess:
    """history.yml's ``job`` step that stores, its ``run:`` line as written, in a folder holding the
    downloaded artifacts as ``results``, with GitHub's variables pointing at ``origin``."""
    (line,) = [
        step["run"]
        for step in yaml.safe_load(WORKFLOW.read_text())["jobs"][job]["steps"]
        if "results-branch store" in step.get("run", "")
    ]
    assert results.name == "results" and " --from results " in line
    line = line.replace("python3 ", f"{shlex.quote(sys.executable)} ", 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env.update(
        GITHUB_SHA=sha,
        GITHUB_SERVER_URL=str(origin.parent),
        GITHUB_REPOSITORY=origin.name.removesuffix(".git"),
        PYTHONPATH=str(ROOT),
    )
    return subprocess.run(
        ["bash", "-c", line], cwd=results.parent, env=env, capture_output=True, text=True, timeout=120
    )


def upload(tmp_path: Path, files: dict, machine: dict | None = None) -> Path:
    return rf.write_store(tmp_path / "job" / "results", files, machine=machine)


def forged_suite(results: Path) -> None:
    suite = json.loads((results / "benchmarks.json").read_text())
    suite[rf.KERNEL_TIME]["unit"] = "forged"
    (results / "benchmarks.json").write_text(json.dumps(suite))


def test_a_merge_run_cannot_rewrite_an_earlier_commit_or_the_machine_json(tmp_path, origin):
    """The attack: the run of C uploads, beside C's results, A's result file with later start times and
    half the figures, a machine.json of its own and a suite list of its own."""
    put_on_branch(origin, rf.write_store(tmp_path / "stored", {A: rf.result(A, dict.fromkeys(NF4, rf.T0))}))
    before = {path: on_branch(origin, path) for path in (result_path(A), MACHINE_JSON, "benchmarks.json")}
    results = upload(
        tmp_path,
        {
            A: rf.result(A, dict.fromkeys(NF4, rf.T0 + 2 * rf.DAY_MS), scale=0.5),
            C: rf.result(C, dict.fromkeys(NF4, rf.T0 + rf.DAY_MS)),
        },
        machine=rf.machine_info(driver="999.99"),
    )
    forged_suite(results)
    done = store_job("store", results, origin, sha=C)
    assert done.returncode == 0, done.stdout + done.stderr
    for path, stored in before.items():
        assert on_branch(origin, path) == stored, f"{path} was rewritten:\n{done.stdout}"
    assert {name: row["started_at"] for name, row in branch_rows(origin, C).items()} == dict.fromkeys(
        NF4, rf.T0 + rf.DAY_MS
    )
    said = done.stdout.splitlines()
    assert any(result_path(A) in line and "left out" in line for line in said), done.stdout
    assert any(MACHINE_JSON in line and "kept" in line for line in said), done.stdout


def test_a_rerun_of_the_measured_commit_adds_and_never_replaces_a_stored_figure(tmp_path, origin):
    """C is stored with a failed peak memory; a later run of C, with other figures for every benchmark,
    fills the failed row and adds the benchmarks C lacked: the figures stored stay as they were."""
    stored = rf.result(C, dict.fromkeys(NF4, rf.T0), failed=(rf.PEAK_MEMORY,))
    put_on_branch(origin, rf.write_store(tmp_path / "stored", {C: stored}))
    kept = branch_rows(origin, C)
    results = upload(tmp_path, {C: rf.result(C, dict.fromkeys(rf.ALL, rf.T0 + rf.DAY_MS), scale=2.0)})
    done = store_job("store", results, origin, sha=C)
    assert done.returncode == 0, done.stdout + done.stderr
    now = branch_rows(origin, C)
    assert set(now) == set(rf.ALL)
    for name in (rf.KERNEL_TIME, rf.TIME_OVER_COPY):
        assert now[name] == kept[name], f"{name}'s stored figures were replaced:\n{done.stdout}"
    assert now[rf.PEAK_MEMORY]["started_at"] == rf.T0 + rf.DAY_MS  # measured nothing: filled
    assert all(now[name]["started_at"] == rf.T0 + rf.DAY_MS for name in set(rf.ALL) - set(NF4))


def test_a_backfill_run_fills_only_commits_with_no_measured_value(tmp_path, origin):
    """The nightly run measures commits with no measured value yet (B: stored, every row failed; D:
    none). Its upload also carries A, measured and stored, forged: A stays byte for byte."""
    put_on_branch(
        origin,
        rf.write_store(
            tmp_path / "stored",
            {A: rf.result(A, dict.fromkeys(NF4, rf.T0)), B: rf.result(B, dict.fromkeys(NF4, rf.T0), failed=NF4)},
        ),
    )
    before = {path: on_branch(origin, path) for path in (result_path(A), MACHINE_JSON)}
    results = upload(
        tmp_path,
        {
            A: rf.result(A, dict.fromkeys(NF4, rf.T0 + 2 * rf.DAY_MS), scale=0.5),
            B: rf.result(B, dict.fromkeys(NF4, rf.T0 + rf.DAY_MS)),
            D: rf.result(D, dict.fromkeys(NF4, rf.T0 + rf.DAY_MS)),
        },
        machine=rf.machine_info(driver="999.99"),
    )
    done = store_job("store-backfilled", results, origin, sha=D)
    assert done.returncode == 0, done.stdout + done.stderr
    for path, stored in before.items():
        assert on_branch(origin, path) == stored, f"{path} was rewritten:\n{done.stdout}"
    for commit in (B, D):
        assert {n: r["started_at"] for n, r in branch_rows(origin, commit).items()} == dict.fromkeys(
            NF4, rf.T0 + rf.DAY_MS
        )


def test_a_machine_folder_naming_another_machine_is_left_out(tmp_path, origin):
    """asv's site takes each machine's description from the ``machine`` field of any folder's
    machine.json: a new folder claiming to be h200 would stand in for the stored description."""
    put_on_branch(origin, rf.write_store(tmp_path / "stored", {A: rf.result(A, dict.fromkeys(NF4, rf.T0))}))
    results = upload(tmp_path, {C: rf.result(C, dict.fromkeys(NF4, rf.T0 + rf.DAY_MS))})
    impostor = results / "a-new-gpu"
    impostor.mkdir()
    (impostor / "machine.json").write_text(json.dumps(rf.machine_info(driver="999.99")))  # "machine": "h200"
    shutil.copy(results / result_path(C), impostor)
    done = store_job("store", results, origin, sha=C)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "a-new-gpu" not in git("ls-tree", "-r", "--name-only", BRANCH, cwd=origin)
    assert any(line.startswith("results-branch: a-new-gpu: left out") for line in done.stdout.splitlines())


command = rf.results_branch


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ((), "store needs --commit SHA (each commit this run measured) or --unmeasured"),
        (("--commit", ""), "--commit '': not a full commit hash (40 hex digits)"),
        (("--commit", A[:8]), f"--commit '{A[:8]}': not a full commit hash (40 hex digits)"),
    ],
)
def test_a_store_not_told_what_its_run_measured_is_bad_input(tmp_path, origin, extra, said):
    results = upload(tmp_path, {A: rf.result(A, dict.fromkeys(NF4, rf.T0))})
    done = command("store", "--from", str(results), "--url", str(origin), *extra)
    assert (done.returncode, done.stdout, done.stderr) == (2, f"results-branch: {said}\n", "")
    assert git("for-each-ref", cwd=origin) == ""
