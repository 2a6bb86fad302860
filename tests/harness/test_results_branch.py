"""The asv-results branch's store (harness/history/results_branch.py) against local bare repositories standing
in for GitHub: append-only, adding only what the run measured (test_store_never_rewrites.py: nothing
stored is rewritten), a failed read told apart from a branch that does not exist yet, and a raced push
merged again. history.yml's own steps run these
commands under act in test_history_workflow.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import result_files as rf

from harness.history import results_branch

ROOT = Path(__file__).resolve().parents[2]
A, B, C = rf.fake_commit(0xA), rf.fake_commit(0xB), rf.fake_commit(0xC)
NF4 = rf.NF4KERNEL_ONLY


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


command = rf.results_branch


def store(source: Path, url: Path, *extra: str) -> subprocess.CompletedProcess:
    return command("store", "--from", str(source), "--url", str(url), *extra)


@pytest.fixture
def origin(tmp_path) -> Path:
    bare = tmp_path / "origin.git"
    git("init", "-q", "--bare", str(bare), cwd=tmp_path)
    return bare


def tip(origin: Path) -> str:
    return git("rev-parse", "refs/heads/asv-results", cwd=origin)


def history_of(origin: Path) -> list[str]:
    """The branch's commits, newest first."""
    return git("rev-list", "refs/heads/asv-results", cwd=origin).split()


def on_branch(origin: Path, path: str) -> bytes:
    return subprocess.run(
        ["git", "show", f"refs/heads/asv-results:{path}"], cwd=origin, capture_output=True, check=True
    ).stdout


def started_on_branch(origin: Path, commit: str) -> dict[str, int]:
    doc = json.loads(on_branch(origin, f"h200/{commit[:8]}-{rf.ENV}.json"))
    index = doc["result_columns"].index("started_at")
    return {name: row[index] for name, row in doc["results"].items()}


def run_store(tmp_path: Path, name: str, files: dict, driver: str = "580.159.04") -> Path:
    return rf.write_store(tmp_path / name, files, machine=rf.machine_info(driver=driver))


def test_the_first_store_creates_the_branch_and_names_its_files(tmp_path, origin):
    fetched = command("fetch", "--into", str(tmp_path / "fetched"), "--url", str(origin))
    assert fetched.returncode == 0 and "has no asv-results branch yet" in fetched.stdout
    done = store(run_store(tmp_path, "run", {A: rf.result(A, dict.fromkeys(NF4, rf.T0))}), origin, "--commit", A)
    assert done.returncode == 0, done.stdout + done.stderr
    added = [line for line in done.stdout.splitlines() if line.startswith("results-branch: added ")]
    assert sorted(added) == sorted(
        f"results-branch: added {p}" for p in (f"h200/{A[:8]}-{rf.ENV}.json", "h200/machine.json", "benchmarks.json")
    )
    assert len(history_of(origin)) == 1


def test_an_unreachable_remote_fails_with_exit_3_and_touches_nothing(tmp_path, origin):
    store(run_store(tmp_path, "first", {A: rf.result(A, dict.fromkeys(NF4, rf.T0))}), origin, "--commit", A)
    before = tip(origin)
    into = tmp_path / "fetched"
    for done in (
        command("fetch", "--into", str(into), "--url", str(tmp_path / "nowhere.git")),
        store(
            run_store(tmp_path, "second", {B: rf.result(B, dict.fromkeys(NF4, rf.T0))}),
            tmp_path / "nowhere.git",
            "--commit",
            B,
        ),
    ):
        assert done.returncode == 3 and "Traceback" not in done.stdout + done.stderr
        (line,) = done.stdout.splitlines()
        assert line.startswith(f"results-branch: could not read {tmp_path / 'nowhere.git'}: fatal: ")
    assert tip(origin) == before and not into.exists()


def test_a_rerun_of_an_older_store_adds_its_commit_and_rewrites_nothing(tmp_path, origin):
    """Run 1 measured b; its store failed. Run 2 measured c, and its upload also held a measurement of
    one benchmark of b on a new driver: left out, b is not run 2's commit. Run 1's store, run again,
    adds b as run 1 measured it; c and the machine.json stored with it stay byte for byte."""
    run1 = run_store(tmp_path, "run1", {B: rf.result(B, dict.fromkeys(NF4, rf.T0))})
    run2 = run_store(
        tmp_path,
        "run2",
        {
            B: rf.result(B, {rf.KERNEL_TIME: rf.T0 + rf.DAY_MS}),
            C: rf.result(C, dict.fromkeys(rf.ALL, rf.T0 + rf.DAY_MS)),
        },
        driver="590.10",
    )
    second = store(run2, origin, "--commit", C)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"results-branch: h200/{B[:8]}-{rf.ENV}.json: left out, not a result of {C[:12]}" in second.stdout
    after_run2 = tip(origin)
    kept = {path: on_branch(origin, path) for path in (f"h200/{C[:8]}-{rf.ENV}.json", "h200/machine.json")}
    done = store(run1, origin, "--commit", B)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"results-branch: added h200/{B[:8]}-{rf.ENV}.json" in done.stdout
    assert "changed" not in done.stdout and "h200/machine.json: asv-results's is kept" in done.stdout
    assert started_on_branch(origin, B) == dict.fromkeys(NF4, rf.T0)
    assert {path: on_branch(origin, path) for path in kept} == kept
    assert json.loads(on_branch(origin, "h200/machine.json"))["driver"] == "590.10"
    assert history_of(origin)[1:] == [after_run2]  # one commit on top: nothing rewritten

    again = store(run1, origin, "--commit", B)
    assert again.returncode == 0 and "nothing new for asv-results" in again.stdout
    assert len(history_of(origin)) == 2


RACER_HOOK = """#!/bin/bash
# Another store lands while this push is under way: between the pusher's fetch and its ref update.
set -e
[ -z "$RACING" ] || exit 0  # the racer's own push
count_file="{state}/pushes"
echo x >> "$count_file"
[ "{race}" = always ] || [ "$(wc -l < "$count_file")" = 1 ] || exit 0
unset $(git rev-parse --local-env-vars) GIT_QUARANTINE_PATH
racer="{state}/racer-$(wc -l < "$count_file")"
git clone -q -b asv-results "{origin}" "$racer"
cp -r "{racer_files}/." "$racer/"
git -C "$racer" add -A
git -C "$racer" -c user.name=racer -c user.email=racer@localhost commit -q --allow-empty -m "the racing store"
RACING=1 git -C "$racer" push -q origin HEAD:refs/heads/asv-results
"""


def install_racer(tmp_path: Path, origin: Path, racer_files: Path, race: str = "once") -> Path:
    state = tmp_path / "hook-state"
    state.mkdir()
    hook = origin / "hooks" / "pre-receive"
    hook.write_text(RACER_HOOK.format(state=state, origin=origin, racer_files=racer_files, race=race))
    hook.chmod(0o755)
    return state


def test_two_stores_racing_both_land(tmp_path, origin):
    store(run_store(tmp_path, "first", {A: rf.result(A, dict.fromkeys(NF4, rf.T0))}), origin, "--commit", A)
    racer = run_store(tmp_path, "racer", {B: rf.result(B, dict.fromkeys(NF4, rf.T0 + rf.DAY_MS))})
    state = install_racer(tmp_path, origin, racer)
    mine = run_store(tmp_path, "mine", {C: rf.result(C, dict.fromkeys(NF4, rf.T0 + rf.DAY_MS))})
    done = store(mine, origin, "--commit", C)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "asv-results moved under this store" in done.stdout
    assert len((state / "pushes").read_text().splitlines()) == 2  # this store's first push, and its second
    for commit in (A, B, C):
        assert started_on_branch(origin, commit) == dict.fromkeys(NF4, rf.T0 if commit == A else rf.T0 + rf.DAY_MS)
    subjects = git("log", "--format=%s", "refs/heads/asv-results", cwd=origin).splitlines()
    assert subjects == ["asv results", "the racing store", "asv results"]


def test_a_branch_that_moves_under_every_attempt_fails_with_exit_3(tmp_path, origin):
    store(run_store(tmp_path, "first", {A: rf.result(A, dict.fromkeys(NF4, rf.T0))}), origin, "--commit", A)
    install_racer(tmp_path, origin, run_store(tmp_path, "racer", {}), race="always")
    mine = run_store(tmp_path, "mine", {C: rf.result(C, dict.fromkeys(NF4, rf.T0))})
    done = store(mine, origin, "--commit", C, "--attempts", "2")
    assert done.returncode == 3
    assert done.stdout.splitlines()[-1] == (
        "results-branch: asv-results moved under each of 2 attempts to store; nothing was written"
    )
    assert f"h200/{C[:8]}-{rf.ENV}.json" not in git("ls-tree", "-r", "--name-only", "asv-results", cwd=origin)


def test_a_push_refused_while_the_branch_stayed_put_is_not_retried(tmp_path, origin):
    store(run_store(tmp_path, "first", {A: rf.result(A, dict.fromkeys(NF4, rf.T0))}), origin, "--commit", A)
    before = tip(origin)
    state = tmp_path / "refusals"
    hook = origin / "hooks" / "pre-receive"
    hook.write_text(f'#!/bin/sh\necho x >> "{state}"\necho "protected branch" >&2\nexit 1\n')
    hook.chmod(0o755)
    done = store(run_store(tmp_path, "mine", {C: rf.result(C, dict.fromkeys(NF4, rf.T0))}), origin, "--commit", C)
    assert done.returncode == 3 and len(state.read_text().splitlines()) == 1
    assert done.stdout.splitlines()[-1].startswith(f"results-branch: {origin} refused the push of asv-results: ")
    assert tip(origin) == before


def test_bad_input_is_one_line_and_exit_2(tmp_path, origin):
    empty = tmp_path / "empty"
    empty.mkdir()
    done = store(empty, origin, "--commit", A)
    assert (done.returncode, done.stdout) == (
        2,
        f"results-branch: nothing to store: {empty} holds no <machine>/machine.json\n",
    )
    broken = run_store(tmp_path, "broken", {A: rf.result(A, dict.fromkeys(NF4, rf.T0))})
    rf.path_of(broken, A).write_text("[1, 2]")
    done = store(broken, origin, "--commit", A)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stdout == f"results-branch: {rf.path_of(broken, A)}: [1, 2] is not an object; nothing was written\n"
    assert git("for-each-ref", cwd=origin) == ""  # no branch was made
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY")}
    done = command("store", "--from", str(broken), env=env)
    assert done.returncode == 2 and done.stdout.startswith("results-branch: no --url")


def test_a_machine_without_a_gpu_is_left_out(tmp_path, origin):
    source = run_store(tmp_path, "run", {A: rf.result(A, dict.fromkeys(NF4, rf.T0))})
    cpu = source / "cpu-some-processor"
    cpu.mkdir()
    (cpu / "machine.json").write_text(json.dumps({"version": 1, "machine": cpu.name, "gpu": "none"}))
    done = store(source, origin, "--commit", A)
    assert done.returncode == 0 and "cpu-some-processor: left out" in done.stdout
    assert "cpu-some-processor" not in git("ls-tree", "-r", "--name-only", "asv-results", cwd=origin)


def test_fetch_merges_the_branch_into_a_folder_without_replacing_newer_local_rows(tmp_path, origin):
    store(run_store(tmp_path, "stored", {A: rf.result(A, dict.fromkeys(NF4, rf.T0))}), origin, "--commit", A)
    local = run_store(tmp_path, "local", {A: rf.result(A, {rf.KERNEL_TIME: rf.T0 + rf.DAY_MS})})
    done = command("fetch", "--into", str(local), "--url", str(origin))
    assert done.returncode == 0, done.stdout + done.stderr
    assert rf.started(local, A) == {**dict.fromkeys(NF4, rf.T0), rf.KERNEL_TIME: rf.T0 + rf.DAY_MS}


def test_the_token_reaches_git_as_a_header_and_never_on_a_command_line(monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "secret-token")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    env = results_branch.git_env()
    assert env["GIT_CONFIG_COUNT"] == "2" and env["GIT_CONFIG_KEY_1"] == "http.extraHeader"
    assert env["GIT_CONFIG_VALUE_1"].startswith("Authorization: basic ") and env["GIT_TERMINAL_PROMPT"] == "0"
    assert "secret-token" not in env["GIT_CONFIG_VALUE_1"]
