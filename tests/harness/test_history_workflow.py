"""history.yml's real steps under act (cpu_world.py's way: the rehearsal's world, a local bare
repository standing in for GitHub), with only the GPU steps replaced by ones that put recorded
results where asv would write them. The asv-results branch must never lose a result: a failed read
fails the job, a re-run of an older store or two stores racing keep everything, and the nightly job
measures the commits no merge run did. A store adds only its run's commit and rewrites nothing
stored (test_store_never_rewrites.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import cpu_world
import pytest
import result_files as rf
import yaml
from cpu_world import run as run_workflows
from cpu_world import with_run, workflow

from dev.rehearsal import act, rehearsal_world
from dev.rehearsal.rehearsal_world import git  # harness.core.git's, as the rehearsal's bot (commits)
from harness.core import git as core_git

if (reason := act.why_not_here()) is not None:
    pytest.skip(reason, allow_module_level=True)

NF4 = rf.NF4KERNEL_ONLY
BRANCH = "refs/heads/asv-results"


@pytest.fixture
def world(tmp_path):
    return rehearsal_world.World(tmp_path, working_tree=True, gpu_types=cpu_world.RECORDED_ON)


@pytest.fixture
def abc(world) -> tuple[str, str, str]:
    """Three commits on top of main, main now the last: the commits the stores' results are of (the
    change-point job after each store judges main's first-parent history)."""
    return on_main(world, "a", "b", "c")


def log(result: rehearsal_world.Run) -> str:
    return "\n".join(line for _, line in result.log)


def steps(world: rehearsal_world.World) -> dict:
    return {
        (job_id, step.get("id")): step
        for job_id, job in workflow(world, "history.yml")["jobs"].items()
        for step in job["steps"]
    }


def measured_by(
    world: rehearsal_world.World, results: Path, env_step: str = 'echo "(CPU: no GPU to describe)"'
) -> dict:
    """The benchmark job's GPU steps replaced: its measurement copies ``results`` into .asv/results,
    as asv would have written them, and writes a one-page site."""
    found = steps(world)
    script = f"mkdir -p .asv/html && cp -r {results}/. .asv/results/ && echo '<html></html>' > .asv/html/index.html"
    return {
        ("benchmark", "env"): with_run(found[("benchmark", "env")], env_step),
        ("benchmark", "bench"): with_run(found[("benchmark", "bench")], script),
    }


def push(world: rehearsal_world.World, results: Path, **kwargs) -> rehearsal_world.Run:
    """A push to main whose benchmark job measured ``results``; the artifacts of any earlier run are
    gone (each run has its own on GitHub)."""
    shutil.rmtree(world.artifacts)
    world.artifacts.mkdir()
    return run_workflows(world, "push", world.push_event(), ("history.yml",), measured_by(world, results, **kwargs))


def only_job(world: rehearsal_world.World, job_id: str, event: str, payload: dict) -> rehearsal_world.Run:
    """One job of history.yml run again alone, with the artifacts the folder holds (GitHub's re-run of
    a job reuses its run's artifacts): its `needs:` are that run's, already done."""
    folder = world.scratch / f"only-{job_id}"
    folder.mkdir(exist_ok=True)
    full = workflow(world, "history.yml")
    job = {k: v for k, v in full["jobs"][job_id].items() if k not in ("needs", "if")}
    alone = {"name": full["name"], "on": full[True], "permissions": full["permissions"], "jobs": {job_id: job}}
    (folder / "history.yml").write_text(yaml.safe_dump(alone, sort_keys=False))
    here = str(Path(sys.executable).parent)
    return world.run(event, payload, folder, timeout=300, env={"PATH": f"{here}{os.pathsep}{os.environ['PATH']}"})


def on_main(world: rehearsal_world.World, *messages: str) -> list[str]:
    """Commits of main's tree on top of main, one per message, pushed; main is the last."""
    tree = git("rev-parse", f"{world.main}^{{tree}}", cwd=world.origin)
    chain = [world.main]
    for message in messages:
        chain.append(git("commit-tree", tree, "-p", chain[-1], "-m", message, cwd=world.origin))
    git("update-ref", "refs/heads/main", chain[-1], cwd=world.origin)
    git("fetch", "-q", str(world.origin), "main", cwd=world.work)
    git("checkout", "-q", "-B", "main", "FETCH_HEAD", cwd=world.work)
    world.main = chain[-1]
    return chain[1:]


# --- The branch, read and written with plain git (what the test knows without the code under test) ----


def put_on_branch(world: rehearsal_world.World, store: Path, message: str) -> str:
    """``store``'s files committed on top of the branch (made where there is none) and pushed."""
    writer = world.scratch / "branch-writer"
    shutil.rmtree(writer, ignore_errors=True)
    writer.mkdir()
    git("init", "-q", "-b", "asv-results", cwd=writer)
    if git("ls-remote", str(world.origin), BRANCH, cwd=writer):
        git("fetch", "-q", str(world.origin), BRANCH, cwd=writer)
        git("checkout", "-q", "-B", "asv-results", "FETCH_HEAD", cwd=writer)
    shutil.copytree(store, writer, dirs_exist_ok=True)
    git("add", "-A", cwd=writer)
    git("commit", "-q", "-m", message, cwd=writer)
    git("push", "-q", str(world.origin), f"HEAD:{BRANCH}", cwd=writer)
    return git("rev-parse", "HEAD", cwd=writer)


def tip(world: rehearsal_world.World) -> str:
    return git("rev-parse", BRANCH, cwd=world.origin)


def on_branch(world: rehearsal_world.World) -> set[str]:
    return set(git("ls-tree", "-r", "--name-only", BRANCH, cwd=world.origin).splitlines())


def branch_store(world: rehearsal_world.World) -> Path:
    """The branch's files, as a store to read."""
    folder = world.scratch / "branch-now"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    archive = core_git.output("archive", BRANCH, cwd=world.origin, binary=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def is_ancestor(world: rehearsal_world.World, older: str, newer: str) -> bool:
    try:
        core_git.output("merge-base", "--is-ancestor", older, newer, cwd=world.origin)
    except core_git.GitError:  # 1: not an ancestor; anything else: git could not tell
        return False
    return True


def result_file(commit: str) -> str:
    return f"h200/{commit[:8]}-{rf.ENV}.json"


# --- The tests ------------------------------------------------------------------------------------------


def test_a_failed_fetch_fails_the_job_and_leaves_the_branch_as_it_was(world, abc):
    """The hole: `git fetch origin asv-results` failing (unreachable, auth, a blip) left the step green
    with no earlier results, and the store then force-pushed this run's alone: a branch holding a
    and b held only c."""
    A, B, C = abc
    earlier = rf.write_store(world.scratch / "earlier", {c: rf.result(c, dict.fromkeys(NF4, rf.T0)) for c in (A, B)})
    before = put_on_branch(world, earlier, "a and b")
    unreachable = world.scratch / "unreachable.gitconfig"  # GitHub, as far as the rest of the job can tell
    unreachable.write_text(f'[url "{world.scratch}/no-such-host.git"]\n\tinsteadOf = {rehearsal_world.SERVER}/\n')
    cut_off = f'echo "GIT_CONFIG_GLOBAL={unreachable}" >> "$GITHUB_ENV"'
    this_run = rf.write_store(world.scratch / "run", {C: rf.result(C, dict.fromkeys(NF4, rf.T0 + rf.DAY_MS))})
    result = push(world, this_run, env_step=cut_off)
    assert result.results.get("benchmark") == "failure", log(result)[-3000:]
    assert not {"store", "site", "deploy", "changepoints"} & set(result.results)
    assert "results-branch: could not read" in log(result)
    assert tip(world) == before and {result_file(A), result_file(B)} <= on_branch(world)


def test_the_first_run_creates_the_branch(world, abc):
    C = abc[-1]  # main's tip: the commit the push's run measures
    assert git("ls-remote", str(world.origin), BRANCH, cwd=world.scratch) == ""
    this_run = rf.write_store(world.scratch / "run", {C: rf.result(C, dict.fromkeys(NF4, rf.T0))})
    result = push(world, this_run)
    assert result.results == dict.fromkeys(
        ("types", "benchmark", "store", "site", "deploy", "changepoints"), "success"
    ), log(result)[-3000:]
    assert f"h200: 36 series judged up to {C[:12]}: no regression" in log(result)  # its 3 benchmarks' figures
    assert "h200: no regression, no open issue" in log(result)
    assert "has no asv-results branch yet" in log(result)
    assert {result_file(C), "h200/machine.json", "benchmarks.json"} <= on_branch(world)
    assert len(git("rev-list", BRANCH, cwd=world.origin).split()) == 1


def test_a_rerun_of_an_older_store_adds_its_commit_and_rewrites_nothing(world):
    """The hole: run 2 stored c; run 1's store, run again, force-pushed run 1's results: c was gone
    and the branch's history with it. Here run 1, of b, failed to store (a refused push); run 2, of c,
    stored c, its upload also holding a re-measurement of b on a new driver (left out: not its
    commit); then run 1's store is run again: it adds b, and the stored files stay as they were."""
    A, B = on_main(world, "a", "b")
    put_on_branch(world, rf.write_store(world.scratch / "a", {A: rf.result(A, dict.fromkeys(NF4, rf.T0))}), "a")
    refuse = world.origin / "hooks" / "pre-receive"
    refuse.write_text("#!/bin/sh\necho 'refused for this test' >&2\nexit 1\n")
    refuse.chmod(0o755)
    run1 = rf.write_store(world.scratch / "run1", {B: rf.result(B, dict.fromkeys(NF4, rf.T0 + rf.DAY_MS))})
    first = push(world, run1)
    assert first.results.get("store") == "failure", log(first)[-3000:]
    assert "changepoints" not in first.results  # nothing new stored: nothing to judge
    refuse.unlink()
    kept_artifact = world.scratch / "run1-artifact"
    shutil.copytree(world.artifacts / f"asv-results-{cpu_world.RECORDED_ON[0]}", kept_artifact)

    (C,) = on_main(world, "c")
    run2 = rf.write_store(
        world.scratch / "run2",
        {
            B: rf.result(B, {rf.KERNEL_TIME: rf.T0 + 2 * rf.DAY_MS}),
            C: rf.result(C, dict.fromkeys(rf.ALL, rf.T0 + 2 * rf.DAY_MS)),
        },
        machine=rf.machine_info(driver="590.10"),
    )
    second = push(world, run2)
    assert second.results.get("store") == "success", log(second)[-3000:]
    assert f"results-branch: {result_file(B)}: left out, not a result of {C[:12]}" in log(second)
    after_run2 = tip(world)
    stored = branch_store(world)
    kept = {path: (stored / path).read_bytes() for path in (result_file(A), result_file(C), "h200/machine.json")}

    shutil.rmtree(world.artifacts)
    shutil.copytree(kept_artifact, world.artifacts / f"asv-results-{cpu_world.RECORDED_ON[0]}")
    git("checkout", "-q", "--detach", B, cwd=world.work)  # GitHub's re-run: run 1's event, its github.sha
    again = only_job(world, "store", "push", {**world.push_event(), "after": B})
    assert again.results == {"store": "success"}, log(again)[-3000:]
    stored = branch_store(world)
    assert rf.started(stored, B) == dict.fromkeys(NF4, rf.T0 + rf.DAY_MS)
    assert {path: (stored / path).read_bytes() for path in kept} == kept
    assert tip(world) != after_run2 and is_ancestor(world, after_run2, tip(world))
    assert len(git("rev-list", BRANCH, cwd=world.origin).split()) == 3  # a, run 2's store, run 1's


RACER_HOOK = """#!/bin/bash
# Another store lands between this push's fetch and its ref update, once.
set -e
[ -z "$RACING" ] || exit 0
[ ! -e "{marker}" ] || exit 0
touch "{marker}"
unset $(git rev-parse --local-env-vars) GIT_QUARANTINE_PATH
git clone -q -b asv-results "{origin}" "{racer}"
cp -r "{files}/." "{racer}/"
git -C "{racer}" add -A
git -C "{racer}" -c user.name=racer -c user.email=racer@localhost commit -q -m "the racing store"
RACING=1 git -C "{racer}" push -q origin HEAD:refs/heads/asv-results
"""


def test_two_stores_racing_both_land(world, abc):
    A, B, C = abc
    put_on_branch(world, rf.write_store(world.scratch / "a", {A: rf.result(A, dict.fromkeys(NF4, rf.T0))}), "a")
    other = rf.write_store(world.scratch / "other", {B: rf.result(B, dict.fromkeys(NF4, rf.T0 + rf.DAY_MS))})
    marker = world.scratch / "raced"
    hook = world.origin / "hooks" / "pre-receive"
    racer = world.scratch / "racer"
    hook.write_text(RACER_HOOK.format(marker=marker, origin=world.origin, racer=racer, files=other))
    hook.chmod(0o755)
    this_run = rf.write_store(world.scratch / "run", {C: rf.result(C, dict.fromkeys(NF4, rf.T0 + rf.DAY_MS))})
    result = push(world, this_run)
    assert marker.exists()
    assert result.results.get("store") == "success", log(result)[-3000:]
    assert "asv-results moved under this store" in log(result)
    assert {result_file(A), result_file(B), result_file(C)} <= on_branch(world)
    subjects = git("log", "--format=%s", BRANCH, cwd=world.origin).splitlines()
    assert subjects[1:] == ["the racing store", "a"] and subjects[0].startswith("asv results of ")


def test_the_nightly_job_measures_the_newest_commits_with_no_result_at_most_its_limit(world):
    """main: r c1 c2 c3 c4 c5, with results for r and c2 (a merge burst's runs cancelled c1, c3, c4,
    c5). The scheduled run measures c5, c4 and c3 (its limit) and stores them; c1 is left to the next."""
    chain = on_main(world, "r", "c1", "c2", "c3", "c4", "c5")
    r, c1, c2, c3, c4, c5 = chain
    done = {sha: rf.result(sha, dict.fromkeys(NF4, rf.T0)) for sha in (r, c2)}
    put_on_branch(world, rf.write_store(world.scratch / "done", done), "r and c2")
    measured = rf.write_store(
        world.scratch / "measured", {sha: rf.result(sha, dict.fromkeys(rf.ALL, rf.T0)) for sha in chain}
    )

    found = steps(world)
    real = found[("backfill", "backfill")]["run"]
    nox = "python -m nox --no-venv -s backfill --"
    assert real.startswith(nox)
    listed = world.scratch / "listed.txt"
    listing = real.replace(nox, "python -m harness backfill") + " --list --machine h200"
    stand_in = (
        f'{listing} | grep -oE "^[0-9a-f]{{40}}" > {listed}\n'
        f"mkdir -p .asv/results/h200 && cp {measured}/h200/machine.json .asv/results/h200/\n"
        f'while read -r sha; do cp "{measured}/h200/${{sha:0:8}}-{rf.ENV}.json" .asv/results/h200/; done < {listed}'
    )
    replaced = {
        ("backfill", "env"): with_run(found[("backfill", "env")], 'echo "(CPU: no GPU to describe)"'),
        ("backfill", "backfill"): with_run(found[("backfill", "backfill")], stand_in),
    }
    payload = {
        "schedule": "17 3 * * *",
        "repository": {"full_name": rehearsal_world.REPOSITORY, "default_branch": "main"},
    }
    result = run_workflows(world, "schedule", payload, ("history.yml",), replaced)
    expected = {"types": "success", "backfill": "success", "store-backfilled": "success", "changepoints": "success"}
    assert result.results == expected, log(result)[-3000:]
    assert listed.read_text().split() == [c5, c4, c3]
    stored = on_branch(world)
    assert {result_file(sha) for sha in (r, c2, c3, c4, c5)} <= stored and result_file(c1) not in stored


def test_after_each_store_a_slowdown_on_main_opens_one_issue_and_a_recovery_closes_it(world):
    """history.yml's change-point job, against the stand-in GitHub: main's first-parent history with
    an 8% step at its sixth commit opens the issue naming the step's commit; two commits back at the
    earlier level (a verdict counts once two stores in a row reach it) close it."""
    chain = on_main(world, *(f"m{i}" for i in range(10)))
    scale = [1.0] * 5 + [1.08] * 5
    stored = {
        sha: rf.result(sha, dict.fromkeys(NF4, rf.T0 + i), scale=s)
        for i, (sha, s) in enumerate(zip(chain, scale, strict=True))
    }
    put_on_branch(world, rf.write_store(world.scratch / "m0-m8", {sha: stored[sha] for sha in chain[:-1]}), "m0-m8")
    slow = push(world, rf.write_store(world.scratch / "m9", {chain[-1]: stored[chain[-1]]}))
    assert slow.results.get("changepoints") == "success", log(slow)[-3000:]
    ((number, issue),) = world.fake.issues.items()
    assert issue.title == "Performance regression on main (h200)" and issue.state == "open"
    assert f"**First bad commit's range:** {chain[4][:12]}...{chain[5][:12]}" in issue.body
    assert f"`{rf.KERNEL_TIME}(28672x8192, bfloat16)` |" in issue.body and "| +8.0% |" in issue.body
    assert f"h200: opened #{number}" in log(slow)

    back = on_main(world, "m10", "m11", "m12")
    earlier = {sha: rf.result(sha, dict.fromkeys(NF4, rf.T0 + 10 + i)) for i, sha in enumerate(back)}
    put_on_branch(world, rf.write_store(world.scratch / "m10-m11", {sha: earlier[sha] for sha in back[:2]}), "m10-m11")
    recovered = push(world, rf.write_store(world.scratch / "m12", {back[-1]: earlier[back[-1]]}))
    assert recovered.results.get("changepoints") == "success", log(recovered)[-3000:]
    assert world.fake.issues[number].state == "closed" and len(world.fake.issues) == 1
    assert "closing" in world.fake.issues[number].comments[-1]
    assert f"h200: closed #{number}" in log(recovered)
