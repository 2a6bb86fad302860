"""harness/github/approval.py: which commit a comment approves, against a stand-in GitHub (no network), and
the status `report` posts. The same code runs under act in test_gpu_workflow_steps.py."""

from __future__ import annotations

import json

import pytest

from dev.rehearsal.fake_github import FakeGitHub, Pull, Serving
from harness.github import approval

REPO = "nf4kernel/nf4kernel"
HEAD, BASE = "a" * 40, "b" * 40
MAIN = "c" * 40  # the default branch's head when the comment is made (GITHUB_SHA)


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


def test_a_writer_approving_the_head_by_its_hash_runs_it_judged_by_the_default_branch_now(github):
    """Judged by main as it is when the comment is made (the event's GITHUB_SHA), against its kernel:
    not by the base the PR was opened on, which keeps an old harness for as long as it isn't rebased."""
    fake, api = github
    decided = approval.approve("issue_comment", comment(f"/gpu-approve {HEAD}\nreviewed all of it"), MAIN, "", api)
    assert (decided.candidate, decided.trusted, decided.base, decided.pr) == (HEAD, MAIN, MAIN, "8")
    assert [path for _, path, _ in fake.requests] == [
        f"/repos/{REPO}/collaborators/maintainer/permission",
        f"/repos/{REPO}/pulls/8",
    ]


def test_admins_approve_too(github):
    _, api = github
    assert approval.approve("issue_comment", comment(f"/gpu-approve {HEAD}", "owner"), MAIN, "", api).candidate == HEAD


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
        approval.approve("issue_comment", event, MAIN, "", api)
    assert why in str(refused.value)


@pytest.mark.parametrize("state,base_ref,why", [("closed", "main", "is closed"), ("open", "dev", "targets dev")])
def test_only_open_prs_to_the_default_branch_run(github, state, base_ref, why):
    fake, api = github
    fake.pulls["8"].state, fake.pulls["8"].base_ref = state, base_ref
    with pytest.raises(approval.Refused) as refused:
        approval.approve("issue_comment", comment(f"/gpu-approve {HEAD}"), MAIN, "", api)
    assert why in str(refused.value)


def test_a_push_or_dispatch_on_the_default_branch_runs_that_commit_judged_by_itself(github):
    _, api = github
    for event in ("push", "workflow_dispatch"):
        decided = approval.approve(event, {"repository": {"default_branch": "main"}}, HEAD, "refs/heads/main", api)
        assert (decided.candidate, decided.trusted, decided.base) == (HEAD, HEAD, "")
        with pytest.raises(approval.Refused, match="only the default branch"):
            approval.approve(event, {"repository": {"default_branch": "main"}}, HEAD, "refs/heads/topic", api)
    # A push names the tip before it: the merge is checked against what it landed on.
    pushed = {"repository": {"default_branch": "main"}, "before": BASE}
    decided = approval.approve("push", pushed, HEAD, "refs/heads/main", api)
    assert (decided.candidate, decided.trusted, decided.base) == (HEAD, HEAD, BASE)
    created = {"repository": {"default_branch": "main"}, "before": "0" * 40}  # a new branch: no tip before
    assert approval.approve("push", created, HEAD, "refs/heads/main", api).base == ""


def test_other_events_approve_nothing(github):
    _, api = github
    with pytest.raises(approval.Refused, match="pull_request_target events approve nothing"):
        approval.approve("pull_request_target", {}, HEAD, "refs/heads/main", api)


def test_an_unreachable_api_refuses(tmp_path):
    api = approval.GitHub("http://127.0.0.1:9", "token", REPO)  # the discard port: nothing listens
    with pytest.raises(approval.Refused, match="could not be reached"):
        approval.approve("issue_comment", comment(f"/gpu-approve {HEAD}"), MAIN, "", api)


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
    monkeypatch.setenv("GITHUB_SHA", MAIN)
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
    monkeypatch.setenv("GITHUB_REPOSITORY", REPO)
    monkeypatch.setenv("GITHUB_API_URL", api.api_url)
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert approval.main(["approve"]) == 0
    assert outputs.read_text() == f"candidate={HEAD}\ntrusted={MAIN}\nbase={MAIN}\npr=8\n"
    assert "@maintainer approved" in summary.read_text()
    fake.pulls["8"].head = "c" * 40  # pushed to since
    outputs.write_text("")
    assert approval.main(["approve"]) == 1
    assert outputs.read_text() == "" and "Nothing runs on the GPU" in summary.read_text()
    assert "::error::nothing runs on the GPU" in capsys.readouterr().out


# --- Whatever GitHub or the event says, a refusal with its reason: never a traceback ---------------------


class Answering:
    """A stand-in GitHub that answers every request with ``status`` and ``body`` as they are."""

    def __init__(self, status: int, body: bytes, content_type: str = "text/html"):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    def __enter__(self) -> approval.GitHub:
        import threading

        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return approval.GitHub(f"http://127.0.0.1:{self.server.server_address[1]}", "token", REPO)

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize(
    "status,body,why",
    [
        (200, b"<html>a login page</html>", "is not JSON: b'<html>a login page</html>'"),
        (200, b"[]", "@maintainer has no access here"),
        (200, b'{"permission": ["write"]}', "@maintainer has no access here"),
        (500, b"oops", "GitHub answered 500 to GET collaborators/maintainer/permission"),
    ],
    ids=["html", "a-list", "permission-a-list", "500"],
)
def test_an_answer_that_is_not_what_github_sends_is_a_refusal(status, body, why):
    with Answering(status, body) as api, pytest.raises(approval.Refused) as refused:
        approval.approve("issue_comment", comment(f"/gpu-approve {HEAD}"), MAIN, "", api)
    assert why in str(refused.value)


@pytest.mark.parametrize(
    "pull,why",
    [
        ({"state": "open"}, "PR #8's base is missing, not a dict"),
        ({"state": "open", "base": {"ref": "main", "sha": 5}, "head": {"sha": HEAD}}, "base.sha is a int, not a str"),
        ({"state": "open", "base": {"ref": "main", "sha": "x y"}, "head": {"sha": HEAD}}, "is not a full commit hash"),
        ({"state": 1}, "PR #8's state is a int, not a str"),
    ],
)
def test_a_pull_request_answer_without_its_fields_is_a_refusal(github, pull, why):
    _, api = github

    class Partial(approval.GitHub):
        def call(self, method, path, body=None):
            return pull if path.startswith("pulls/") else super().call(method, path, body)

    with pytest.raises(approval.Refused) as refused:
        approval.approve("issue_comment", comment(f"/gpu-approve {HEAD}"), MAIN, "", Partial(api.api_url, "t", REPO))
    assert why in str(refused.value)


@pytest.mark.parametrize(
    "event,why",
    [
        ([1, 2], "the event is a list, not a JSON object"),
        ({**comment(f"/gpu-approve {HEAD}"), "comment": "hi"}, "the event's comment is a str, not a dict"),
        ({**comment(f"/gpu-approve {HEAD}"), "issue": {"number": "8", "pull_request": {}}}, "pull requests only"),
        ({**comment(f"/gpu-approve {HEAD}"), "issue": {"number": "8", "pull_request": {"u": 1}}}, "issue.number is a"),
        ({**comment(f"/gpu-approve {HEAD}"), "comment": {"body": 7}}, "the event's comment.body is a int"),
        (comment(f"/gpu-approve {HEAD}", login="../../../orgs/x"), "is not a GitHub user name"),
        (comment(f"/gpu-approve {HEAD}", login="a b"), "is not a GitHub user name"),
        ({"repository": {"default_branch": 3}}, "the event's repository.default_branch is a int"),
    ],
)
def test_an_event_without_its_fields_is_a_refusal(github, event, why):
    _, api = github
    with pytest.raises(approval.Refused) as refused:
        approval.approve("issue_comment", event, MAIN, "", api)
    assert why in str(refused.value)


def test_a_push_without_a_full_commit_hash_is_a_refusal(github):
    _, api = github
    with pytest.raises(approval.Refused, match="GITHUB_SHA '' is not a full commit hash"):
        approval.approve("push", {"repository": {"default_branch": "main"}}, "", "refs/heads/main", api)


def test_main_refuses_a_non_json_answer_with_the_reason_in_the_summary(tmp_path, monkeypatch, capsys):
    event = tmp_path / "event.json"
    event.write_text(json.dumps(comment(f"/gpu-approve {HEAD}")))
    summary = tmp_path / "summary"
    monkeypatch.setenv("GITHUB_EVENT_NAME", "issue_comment")
    monkeypatch.setenv("GITHUB_SHA", MAIN)
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
    monkeypatch.setenv("GITHUB_REPOSITORY", REPO)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    with Answering(200, b"<html>maintenance</html>") as api:
        monkeypatch.setenv("GITHUB_API_URL", api.api_url)
        assert approval.main(["approve"]) == 1
    assert "is not JSON: b'<html>maintenance</html>'" in summary.read_text()
    assert "::error::nothing runs on the GPU: GitHub's answer to GET" in capsys.readouterr().out


@pytest.mark.parametrize(
    "unset,event_text,why",
    [
        ("GITHUB_REPOSITORY", None, "GITHUB_REPOSITORY is not set"),
        ("GITHUB_EVENT_PATH", None, "GITHUB_EVENT_PATH is not set"),
        (None, "{truncated", "can't be read as JSON"),
        (None, "[]", "holds no JSON object"),
    ],
)
def test_main_without_its_environment_exits_2_in_one_line(tmp_path, monkeypatch, capsys, unset, event_text, why):
    event = tmp_path / "event.json"
    event.write_text(event_text if event_text is not None else json.dumps(comment(f"/gpu-approve {HEAD}")))
    monkeypatch.setenv("GITHUB_EVENT_NAME", "issue_comment")
    monkeypatch.setenv("GITHUB_SHA", MAIN)
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
    monkeypatch.setenv("GITHUB_REPOSITORY", REPO)
    monkeypatch.setenv("GITHUB_API_URL", "http://127.0.0.1:9")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    if unset:
        monkeypatch.delenv(unset)
    assert approval.main(["approve"]) == 2
    out = capsys.readouterr().out
    assert why in out and len(out.splitlines()) == 1 and out.startswith("::error::")


@pytest.mark.parametrize("sha", ["", HEAD[:12], HEAD.upper(), HEAD + "\n", f"../{HEAD}"])
def test_report_refuses_a_sha_that_is_no_full_commit_hash(capsys, sha):
    with pytest.raises(SystemExit) as stopped:
        approval.main(["report", "--sha", sha, "--tests", "success", "--gate", "success", "--regression", "success"])
    assert stopped.value.code == 2 and "is not a full 40-character commit hash" in capsys.readouterr().err


def test_a_failing_push_to_main_opens_one_issue_comments_on_it_and_a_passing_one_closes_it(github):
    fake, api = github
    passed = {"GPU tests": "success", "gate": "success", "regression": "skipped"}
    assert approval.on_main(api, HEAD, passed, "run") == "every GPU check passed; no open issue"
    failed = {**passed, "regression": "failure"}
    assert approval.on_main(api, HEAD, failed, "run").startswith("opened #")
    assert approval.on_main(api, BASE, failed, "run").startswith("commented on #")
    ((number, issue),) = fake.issues.items()
    assert issue.title == approval.MAIN_TITLE and HEAD in issue.body and BASE in issue.comments[-1]
    assert approval.on_main(api, MAIN, passed, "run").startswith("closed #")
    assert fake.issues[number].state == "closed" and len(fake.issues) == 1
