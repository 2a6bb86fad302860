"""harness/approval.py: which commit a comment approves, against a stand-in GitHub (no network), and
the status `report` posts. The same code runs under act in test_gpu_workflow_steps.py."""

from __future__ import annotations

import json

import pytest

from harness import approval
from harness.fake_github import FakeGitHub, Pull, Serving

REPO = "nf4kernel/nf4kernel"
HEAD, BASE = "a" * 40, "b" * 40


@pytest.fixture
def github():
    fake = FakeGitHub(REPO, permissions={"maintainer": "write", "owner": "admin", "reader": "read"})
    fake.pulls["8"] = Pull(head=HEAD, base=BASE, head_repo="someone/nf4kernel")
    with Serving(fake) as url:
        yield fake, approval.GitHub(url, "token", REPO)


def comment(body, login="maintainer", action="created", on_pr=True):
    issue = {"number": 8, **({"pull_request": {"url": "…"}} if on_pr else {})}
    return {
        "action": action,
        "issue": issue,
        "comment": {"body": body, "user": {"login": login}},
        "repository": {"full_name": REPO, "default_branch": "main"},
    }


def test_a_writer_approving_the_head_by_its_hash_runs_it_judged_by_the_base(github):
    fake, api = github
    decided = approval.approve("issue_comment", comment(f"/gpu-approve {HEAD}\nreviewed all of it"), "", "", api)
    assert (decided.candidate, decided.trusted, decided.base, decided.pr) == (HEAD, BASE, BASE, "8")
    assert [path for _, path, _ in fake.requests] == [
        f"/repos/{REPO}/collaborators/maintainer/permission",
        f"/repos/{REPO}/pulls/8",
    ]


def test_admins_approve_too(github):
    _, api = github
    assert approval.approve("issue_comment", comment(f"/gpu-approve {HEAD}", "owner"), "", "", api).candidate == HEAD


@pytest.mark.parametrize(
    "event,why",
    [
        (comment(f"/gpu-approve {HEAD[:12]}"), "full 40-character hash"),
        (comment(f"/gpu-approve {HEAD.upper()}"), "full 40-character hash"),
        (comment(f"/gpu-approve {HEAD} {BASE}"), "full 40-character hash"),
        (comment(f"please /gpu-approve {HEAD}"), "full 40-character hash"),
        (comment(f"/gpu-approve {HEAD}", "reader"), "@reader has read access here"),
        (comment(f"/gpu-approve {HEAD}", "stranger"), "@stranger has none access here"),
        (comment(f"/gpu-approve {HEAD}", action="edited"), "only a new comment approves"),
        (comment(f"/gpu-approve {HEAD}", on_pr=False), "pull requests only"),
        (comment(f"/gpu-approve {BASE}"), f"{BASE[:12]} is not the head of PR #8: its head is {HEAD[:12]}"),
    ],
    ids=["prefix", "upper-case", "two-hashes", "not-first", "reader", "stranger", "edited", "issue", "not-head"],
)
def test_everything_else_is_refused_with_the_reason(github, event, why):
    _, api = github
    with pytest.raises(approval.Refused) as refused:
        approval.approve("issue_comment", event, "", "", api)
    assert why in str(refused.value)


@pytest.mark.parametrize("state,base_ref,why", [("closed", "main", "is closed"), ("open", "dev", "targets dev")])
def test_only_open_prs_to_the_default_branch_run(github, state, base_ref, why):
    fake, api = github
    fake.pulls["8"].state, fake.pulls["8"].base_ref = state, base_ref
    with pytest.raises(approval.Refused) as refused:
        approval.approve("issue_comment", comment(f"/gpu-approve {HEAD}"), "", "", api)
    assert why in str(refused.value)


def test_a_push_or_dispatch_on_the_default_branch_runs_that_commit_judged_by_itself(github):
    _, api = github
    for event in ("push", "workflow_dispatch"):
        decided = approval.approve(event, {"repository": {"default_branch": "main"}}, HEAD, "refs/heads/main", api)
        assert (decided.candidate, decided.trusted, decided.base) == (HEAD, HEAD, "")
        with pytest.raises(approval.Refused, match="only the default branch"):
            approval.approve(event, {"repository": {"default_branch": "main"}}, HEAD, "refs/heads/topic", api)


def test_other_events_approve_nothing(github):
    _, api = github
    with pytest.raises(approval.Refused, match="pull_request_target events approve nothing"):
        approval.approve("pull_request_target", {}, HEAD, "refs/heads/main", api)


def test_an_unreachable_api_refuses(tmp_path):
    api = approval.GitHub("http://127.0.0.1:9", "token", REPO)  # the discard port: nothing listens
    with pytest.raises(approval.Refused, match="could not be reached"):
        approval.approve("issue_comment", comment(f"/gpu-approve {HEAD}"), "", "", api)


@pytest.mark.parametrize(
    "results,state",
    [
        (("success", "success", "success"), "success"),
        (("success", "failure", "success"), "failure"),
        (("success", "success", "skipped"), "failure"),
        (("cancelled", "success", "success"), "failure"),
    ],
)
def test_the_status_is_success_only_when_every_gpu_job_succeeded(github, results, state):
    fake, api = github
    jobs = dict(zip(("GPU tests", "gate", "regression"), results, strict=True))
    posted = approval.report(api, HEAD, jobs, "https://x/runs/1")
    assert posted["state"] == state and fake.statuses == [(HEAD, posted)]
    assert posted["context"] == "gpu"


def test_main_writes_the_outputs_and_the_summary(github, tmp_path, monkeypatch, capsys):
    fake, api = github
    event = tmp_path / "event.json"
    event.write_text(json.dumps(comment(f"/gpu-approve {HEAD}")))
    outputs, summary = tmp_path / "out", tmp_path / "summary"
    monkeypatch.setenv("GITHUB_EVENT_NAME", "issue_comment")
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
    monkeypatch.setenv("GITHUB_REPOSITORY", REPO)
    monkeypatch.setenv("GITHUB_API_URL", api.api_url)
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert approval.main(["approve"]) == 0
    assert outputs.read_text() == f"candidate={HEAD}\ntrusted={BASE}\nbase={BASE}\npr=8\n"
    assert "@maintainer approved" in summary.read_text()
    fake.pulls["8"].head = "c" * 40  # pushed to since
    outputs.write_text("")
    assert approval.main(["approve"]) == 1
    assert outputs.read_text() == "" and "Nothing runs on the GPU" in summary.read_text()
    assert "::error::nothing runs on the GPU" in capsys.readouterr().out
