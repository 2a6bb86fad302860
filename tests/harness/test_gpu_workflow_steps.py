"""gpu.yml's real steps, run by nektos act on the CPU (cpu_world.py): who may approve which commit,
which commits every job checks out, and who gives the verdict. Only the measurements are recorded
ones (an H200's); the rest is what the GPU runner runs. Each test names the hole it closes."""

from __future__ import annotations

import json
import subprocess
import sys

import cpu_world
import pytest
from cpu_world import PLANTED_2X, SLOW_2X, gpu_steps_replaced, run

from dev.rehearsal import act, rehearsal_world, scenarios
from harness.core import sandbox

if (reason := act.why_not_here()) is not None:
    pytest.skip(reason, allow_module_level=True)

PR_JOBS = {"approve", "gpu-tests", "gate", "regression", "report"}


@pytest.fixture
def world(tmp_path):
    return rehearsal_world.World(tmp_path, working_tree=True, gpu_types=cpu_world.RECORDED_ON)


def approve(world, candidate, body=None, login=rehearsal_world.MAINTAINER, **replaced_kwargs):
    replaced = gpu_steps_replaced(world, candidate, **replaced_kwargs)
    payload = world.comment_event(body or f"/gpu-approve {candidate}", login=login)
    return run(world, "issue_comment", payload, ("gpu.yml",), replaced)


def log(result: rehearsal_world.Run) -> str:
    return "\n".join(line for _, line in result.log)


def test_an_approved_commit_runs_every_gpu_job_judged_by_the_base(world):
    head = world.commit_pr(scenarios.no_change)
    result = approve(world, head)
    assert result.results == dict.fromkeys(PR_JOBS, "success"), log(result)[-3000:]
    assert [(sha, body["state"]) for sha, body in world.fake.statuses] == [(head, "success")]
    assert scenarios.wrong_checkouts(result, trusted=world.main, candidate=head) == []
    checked_out = {(job, path) for job, path, _, _ in result.checkouts}
    assert {(job, path) for job in ("gpu-tests", "gate", "regression") for path in ("trusted", "candidate")} <= (
        checked_out
    )
    summary = result.summary_text()
    assert "### nf4kernel speed gate" in summary and "```mermaid" in summary and "**PASS**" in summary
    assert "### Regression check" in summary and "| 28672x8192 bfloat16 |" in summary


def test_a_pr_that_edits_the_harness_to_pass_itself_still_gets_the_bases_verdict(world):
    """The hole: the gate, its thresholds, the regression check and the noxfile came from the PR's
    checkout, so a two-line edit turned a recorded planted 2x slowdown into a PASS."""
    head = world.commit_pr(scenarios.plant_and_pass_myself)
    result = approve(world, head, pr_record=PLANTED_2X, slower=SLOW_2X)
    assert result.results["gate"] == "failure" and result.results["regression"] == "failure", log(result)[-3000:]
    assert [(sha, body["state"]) for sha, body in world.fake.statuses] == [(head, "failure")]
    assert "median speed-up 0.894x over Unsloth is below the threshold 1.20x" in log(result)
    # ...where the PR's own harness, given the same measurements, passes it: what the old workflow ran.
    pr_tree = world.scratch / f"pr-{rehearsal_world.PR_NUMBER}"
    own = [sys.executable, "-P", "-m", "harness", "gate", "--replay", str(PLANTED_2X)]
    done = subprocess.run(own, cwd=pr_tree, env={"PYTHONPATH": str(pr_tree)}, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_a_wrong_output_fails_both_checks_and_each_summary_says_why(world):
    """The hole (the clock's rehearsals on H200s): a measuring step that found a wrong output exited
    3 and the verdict steps were skipped, so the summary a maintainer reads said nothing of why."""
    head = world.commit_pr(scenarios.no_change)
    replaced = gpu_steps_replaced(world, head)
    recorded = world.scratch / "recorded"
    wrong = "nf4kernel's output differs from bitsandbytes' (reference process)"
    gate = json.loads((recorded / "gate.json").read_text())
    gate["correctness"].append(
        {"shape": "2048x8192 float16", "weight": "up #0", "check": "the trusted clock", "ok": False, "exact": False}
        | {"reason": wrong}
    )
    (recorded / "gate.json").write_text(json.dumps(gate))
    failed = {
        "base": world.main,
        "head": head,
        "device": "cuda",
        "failed": {"exit_code": 3, "reason": f"head: {wrong}"},
    }
    (recorded / "regression.json").write_text(json.dumps(failed))
    for job in ("gate", "regression"):  # as the real steps do: the record written, then exit 3
        replaced[(job, "measure")] = {
            **replaced[(job, "measure")],
            "run": replaced[(job, "measure")]["run"] + "; exit 3",
        }
    result = run(world, "issue_comment", world.comment_event(f"/gpu-approve {head}"), ("gpu.yml",), replaced)
    assert result.results["gate"] == result.results["regression"] == "failure", log(result)[-3000:]
    assert [(sha, body["state"]) for sha, body in world.fake.statuses] == [(head, "failure")]
    summary = result.summary_text()
    assert "### nf4kernel speed gate" in summary and wrong in summary, summary
    assert "### Regression check" in summary and f"**FAIL**: head: {wrong}" in summary, summary


def test_files_the_pr_adds_at_its_root_are_not_read(world):
    """The hole: a PR that added a *directory* named base-gate.json made the base step's `rm -f`
    fail, and the PR's gate then ran with no base at all. Records now live in $RUNNER_TEMP and the
    PR's tree is only ever read for its nf4kernel/; the self-pass commit adds both names."""
    head = world.commit_pr(scenarios.plant_and_pass_myself)
    assert (world.scratch / f"pr-{rehearsal_world.PR_NUMBER}" / "base-gate.json").is_dir()
    result = approve(world, head, pr_record=PLANTED_2X, slower=SLOW_2X)
    assert result.results["gate"] == "failure"
    assert "median speed-up 0.894x over Unsloth is below the threshold 1.20x" in log(result)


def test_a_commit_pushed_after_the_review_does_not_run_on_the_approval_of_the_reviewed_one(world):
    """The hole: the label event ran whatever the head was at the click, so a force-push between the
    review (of A) and the click ran B, which nobody reviewed."""
    reviewed = world.commit_pr(scenarios.no_change)
    pushed = world.commit_pr(scenarios.plant_2x)  # the head moves on
    result = approve(world, pushed, body=f"/gpu-approve {reviewed}")
    assert result.results == {"approve": "failure"}, log(result)[-3000:]
    assert f"{reviewed[:12]} is not the head of PR #8: its head is {pushed[:12]}" in log(result)
    assert world.fake.statuses == [] and result.checkouts[1:] == []  # only approve's own checkout


def test_the_new_head_runs_once_approved_by_its_own_hash(world):
    world.commit_pr(scenarios.no_change)
    pushed = world.commit_pr(scenarios.no_change)
    result = approve(world, pushed)
    assert result.results["approve"] == "success"
    assert {commit for _, path, _, commit in result.checkouts if path == "candidate"} == {pushed}


@pytest.mark.parametrize(
    "body,login,why",
    [
        ("/gpu-approve {short}", rehearsal_world.MAINTAINER, "full 40-character hash"),
        ("/gpu-approve {head}", "passer-by", "@passer-by has none access here"),
    ],
    ids=["a-short-hash", "no-write-access"],
)
def test_only_a_full_hash_from_someone_with_write_access_approves(world, body, login, why):
    head = world.commit_pr(scenarios.no_change)
    result = approve(world, head, body=body.format(short=head[:12], head=head), login=login)
    assert result.results == {"approve": "failure"} and why in log(result)
    assert world.fake.statuses == []


def test_a_comment_that_is_not_an_approval_starts_nothing(world):
    head = world.commit_pr(scenarios.no_change)
    result = approve(world, head, body="LGTM, thanks!")
    assert result.results == {} and world.fake.requests == []


def test_a_checkout_of_anything_but_the_approved_commit_is_caught(world):
    """The approval named B, then the PR's branch moved to C before the jobs started. gpu.yml checks
    out B by its hash; a workflow that checked out the PR's ref instead would take C, and the check
    on every checkout (the rehearsal's) names it."""
    approved = world.commit_pr(scenarios.no_change)
    later = world.commit_pr(scenarios.plant_2x)
    world.fake.pulls[rehearsal_world.PR_NUMBER].head = approved  # the API answered before the push landed
    replaced = gpu_steps_replaced(world, approved)
    payload = world.comment_event(f"/gpu-approve {approved}")
    result = run(world, "issue_comment", payload, ("gpu.yml",), replaced)
    assert scenarios.wrong_checkouts(result, trusted=world.main, candidate=approved) == []

    gpu = (world.work / ".github" / "workflows" / "gpu.yml").read_text()
    moving = gpu.replace("ref: ${{ needs.approve.outputs.candidate }}", "ref: refs/pull/8/head")
    assert moving != gpu
    (world.work / ".github" / "workflows" / "gpu.yml").write_text(moving)
    result = run(world, "issue_comment", payload, ("gpu.yml",), replaced)
    caught = scenarios.wrong_checkouts(result, trusted=world.main, candidate=approved)
    assert caught and all(f"checked out {later[:12]} into candidate" in line for line in caught)


def test_a_push_to_main_runs_the_gpu_jobs_and_stores_the_history_at_that_commit(world):
    replaced = gpu_steps_replaced(world, world.main)
    result = run(world, "push", world.push_event(), ("gpu.yml", "history.yml"), replaced)
    expected = {
        "approve",
        "gpu-tests",
        "gate",
        "types",
        "benchmark",
        "store",
        "site",
        "deploy",
        "changepoints",
        "on-main",
    }
    assert result.results == dict.fromkeys(expected, "success"), log(result)[-3000:]
    assert scenarios.wrong_checkouts(result, trusted=world.main, candidate=world.main) == []
    stored = rehearsal_world.git("ls-tree", "-r", "--name-only", "asv-results", cwd=world.origin)
    assert f"h200/{world.main[:8]}-existing-py3.12.json" in stored.splitlines()
    assert world.fake.statuses == []  # a push has no PR to report to


def hostile_import(world, head: str, sandboxed: bool) -> rehearsal_world.Run:
    """gpu.yml for the hostile PR, with its kernel imported where the gate's measuring step imports
    it, in the job itself (act's real $RUNNER_TEMP and file-command files, the trusted checkout as the
    working directory, another kernel's staged copy in the temporary folder): sandboxed, as the step
    now runs it, or plainly, as the measuring process ran it before. Each route that worked says so;
    the recorded 2x measurement then stands in for the timing."""
    replaced = gpu_steps_replaced(world, head, pr_record=PLANTED_2X, slower=SLOW_2X)
    step = replaced[("gate", "measure")]
    staged = '"$staged"'  # beside $RUNNER_TEMP, not through it: the sandbox shows no folder of $RUNNER_TEMP
    where = f"python -m harness sandbox --read {staged} --read . --cwd . -- " if sandboxed else ""
    script = f"""staged="$(dirname "$RUNNER_TEMP")/staged-kernel"
rm -rf {staged} && mkdir -p {staged} && cp -r ../candidate/nf4kernel {staged}/
other=$(mktemp -d /tmp/nf4kernel-other-XXXX) && mkdir "$other/nf4kernel" && : > "$other/nf4kernel/__init__.py"
{where}python -c 'import sys; sys.path.insert(0, sys.argv[1]); import nf4kernel' {staged}
if [ -s "$other/nf4kernel/__init__.py" ]; then echo "ROUTE: the other kernel's staged copy was changed"; fi
if ! git diff --quiet -- harness .github; then
  echo "ROUTE: the trusted harness was changed"; git checkout -- harness .github
fi
rm -rf "$other"
{step["run"]}"""
    replaced[("gate", "measure")] = {**step, "run": script}
    payload = world.comment_event(f"/gpu-approve {head}")
    return run(world, "issue_comment", payload, ("gpu.yml",), replaced)


@pytest.mark.skipif(sandbox.why_not() is not None, reason="no sandbox here (Debian's bubblewrap)")
def test_a_hostile_kernels_routes_work_plainly_and_none_from_the_sandbox(world):
    """The hole: an approved nf4kernel/__init__.py, imported by the measuring process as the job's user,
    wrote BASH_ENV into $GITHUB_ENV (every later step sourced its script, which handed in the base's
    record as the PR's), rewrote the trusted harness and the other kernel's staged copy. Plainly, each
    route still works; from the sandbox none does, and the 2x plant fails on its own figures."""
    head = world.commit_pr(scenarios.plant_hostile)
    plain = hostile_import(world, head, sandboxed=False)
    assert plain.results["gate"] == "failure", log(plain)[-3000:]
    assert "ROUTE-OPEN BASH_ENV: a later step sourced the kernel's script" in log(plain)
    assert "ROUTE: the other kernel's staged copy was changed" in log(plain)
    assert "ROUTE: the trusted harness was changed" in log(plain)
    # What the sandbox's review found, plainly: the runner's files read, a nested user namespace with every
    # capability (and a mount in it), the verdict's words masked and an annotation made by the runner.
    hostile = scenarios.SCENARIOS["hostile"]
    found = scenarios.leaks(hostile, plain, world)
    assert "the runner's credentials (the world's canary) are in the log" in found, found
    assert any("nested user namespace: CapEff 000001ffffffffff tmpfs mounted True" in line for line in found), found
    assert "the runner acted on the kernel's ::error:: command (an annotation)" in found, found
    assert [word for word in hostile.unmasked if any(repr(word) in line for line in found)] == list(hostile.unmasked)
    world.fake.statuses.clear()
    boxed = hostile_import(world, head, sandboxed=True)
    assert boxed.results["gate"] == "failure", log(boxed)[-3000:]
    assert "not the expected" not in log(boxed) and "ROUTE:" not in log(boxed)
    assert scenarios.leaks(hostile, boxed, world) == [], log(boxed)[-3000:]
    # decided on the PR's own (2x) record
    assert "median speed-up 0.894x over Unsloth is below the threshold 1.20x" in log(boxed)
    assert [(sha, body["state"]) for sha, body in world.fake.statuses] == [(head, "failure")]
