"""Which commit the GPU runner may run, and the verdict it posts back: gpu.yml's hosted jobs.

    python -m harness approval approve      # job `approve`: outputs candidate, trusted, base, pr
    python -m harness approval report --sha SHA --tests R --gate R --regression R   # job `report`
    python -m harness approval main --sha SHA --tests R --gate R --regression R     # job `on-main`

A PR's commit runs only after a ``/gpu-approve <full hash>`` comment by someone with write access
while it is the PR's head (the rule and why: docs/gpu-approval.md). GitHub is reached at
``GITHUB_API_URL`` with ``GH_TOKEN``; standard library only (docs/harness-code.md).

Exit 0 approved, or the status posted; 1 nothing runs (the reason on the ``::error::`` line and in the
job summary), or the status could not be posted; 2 bad arguments or environment, said in one line.
Whatever GitHub answers is a refusal with its reason, never a traceback.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass

from harness.core import command_output, exits  # standard library only, as this module

COMMAND = "/gpu-approve"
APPROVERS = ("admin", "write")  # the permission API's answer; maintainers read as "write"
FULL_HASH = re.compile(r"[0-9a-f]{40}")
LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?")  # GitHub's user names; apps end in [bot]
STATUS_CONTEXT = "gpu"


class Refused(Exception):
    """The event approves nothing; the message says why and what to do."""


def read(container, key: str, kind: type, what: str):
    """``container[key]`` if it is a ``kind``; Refused naming ``what`` otherwise (an event or an answer
    of GitHub's without the field, or with another type there)."""
    value = container.get(key) if isinstance(container, dict) else None
    if isinstance(value, bool) or not isinstance(value, kind):
        found = "missing" if value is None else f"a {type(value).__name__}"
        raise Refused(f"{what} is {found}, not a {kind.__name__}")
    return value


@dataclass(frozen=True)
class Approval:
    candidate: str  # the commit whose nf4kernel is judged
    trusted: str  # the commit whose harness judges it
    base: str  # the PR's base commit ("" on a push: no relative check)
    pr: str  # the PR's number ("" on a push)
    why: str


class GitHub:
    """The few REST calls the two jobs make."""

    def __init__(self, api_url: str, token: str, repository: str):
        self.api_url, self.token, self.repository = api_url.rstrip("/"), token, repository

    def call(self, method: str, path: str, body: dict | None = None) -> dict | list:
        request = urllib.request.Request(
            f"{self.api_url}/repos/{self.repository}/{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={
                "Accept": "application/vnd.github+json",
                "Authorization": f"Bearer {self.token}",
                "X-GitHub-Api-Version": "2022-11-28",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                data = answer.read()
        except urllib.error.HTTPError as error:
            raise Refused(f"GitHub answered {error.code} to {method} {path}: {error.read()[:200]!r}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
            raise Refused(f"GitHub could not be reached for {method} {path}: {error}") from None
        except ValueError as error:  # GITHUB_API_URL is no http(s) address
            raise Refused(f"GitHub's API at {self.api_url!r} can't be asked: {error}") from None
        try:
            return json.loads(data or b"{}")  # an object or, for a listing, a list: the caller reads it
        except (ValueError, RecursionError):
            raise Refused(f"GitHub's answer to {method} {path} is not JSON: {data[:200]!r}") from None


def approve(event_name: str, event: dict, sha: str, ref: str, github: GitHub) -> Approval:
    """What may run for this event, or Refused."""
    if not isinstance(event, dict):
        raise Refused(f"the event is a {type(event).__name__}, not a JSON object")
    repository = event.get("repository") or {}
    default = read(repository, "default_branch", str, "the event's repository.default_branch") if repository else "main"
    if event_name in ("push", "workflow_dispatch"):
        if ref != f"refs/heads/{default}":
            raise Refused(
                f"{event_name} on {ref}: only the default branch ({default}) runs on the GPU without approval"
            )
        if not FULL_HASH.fullmatch(sha):  # GITHUB_SHA: the commit the GPU jobs check out and trust
            raise Refused(f"{event_name}: GITHUB_SHA {sha[:60]!r} is not a full commit hash")
        before = event.get("before") if event_name == "push" else None
        if isinstance(before, str) and FULL_HASH.fullmatch(before) and before.strip("0"):
            why = (
                f"push to {default} at {sha[:12]}: merged code, judged by itself against {before[:12]}, the tip before"
            )
            return Approval(sha, sha, before, "", why)
        return Approval(sha, sha, "", "", f"{event_name} to {default} at {sha[:12]}: merged code, judged by itself")
    if event_name != "issue_comment":
        raise Refused(f"{event_name} events approve nothing")
    if not FULL_HASH.fullmatch(sha):  # GITHUB_SHA: the default branch's head, which judges
        raise Refused(f"{event_name}: GITHUB_SHA {sha[:60]!r} is not a full commit hash")
    return approve_comment(event, default, sha, github)


def approve_comment(event: dict, default: str, main: str, github: GitHub) -> Approval:
    if event.get("action") != "created":
        raise Refused("only a new comment approves (an edited one does not)")
    issue = event.get("issue") or {}
    if not isinstance(issue, dict) or not issue.get("pull_request"):
        raise Refused(f"{COMMAND} works on pull requests only")
    number = str(read(issue, "number", int, "the event's issue.number"))
    comment = read(event, "comment", dict, "the event's comment")
    body = read(comment, "body", str, "the event's comment.body").strip()
    words = body.splitlines()[0].split() if body else []
    if len(words) != 2 or words[0] != COMMAND or not FULL_HASH.fullmatch(words[1]):
        raise Refused(f"write `{COMMAND} <commit>` with the full 40-character hash of the commit you reviewed")
    approved = words[1]
    login = read(read(comment, "user", dict, "the event's comment.user"), "login", str, "the commenter's login")
    if not LOGIN.fullmatch(login):  # it goes into the API's path: nothing but a user name may
        raise Refused(f"{login[:60]!r} is not a GitHub user name")
    answer = github.call("GET", f"collaborators/{login}/permission")
    permission = answer.get("permission") if isinstance(answer, dict) else None
    if permission not in APPROVERS:
        said = permission if isinstance(permission, str) and permission else "no"
        raise Refused(f"@{login} has {said} access here; approval needs write access")
    pull = github.call("GET", f"pulls/{number}")
    state = read(pull, "state", str, f"GitHub's PR #{number}'s state")
    if state != "open":
        raise Refused(f"PR #{number} is {state}")
    base, head = read(pull, "base", dict, f"PR #{number}'s base"), read(pull, "head", dict, f"PR #{number}'s head")
    base_ref = read(base, "ref", str, f"PR #{number}'s base.ref")
    base_sha = read(base, "sha", str, f"PR #{number}'s base.sha")
    head_sha = read(head, "sha", str, f"PR #{number}'s head.sha")
    if not FULL_HASH.fullmatch(base_sha):  # it becomes the commit the GPU jobs check out and trust
        raise Refused(f"PR #{number}'s base.sha {base_sha[:60]!r} is not a full commit hash")
    if base_ref != default:
        raise Refused(f"PR #{number} targets {base_ref}: only PRs to {default} are judged (by {default}'s harness)")
    if head_sha != approved:
        raise Refused(
            f"{approved[:12]} is not the head of PR #{number}: its head is {head_sha[:12]} (pushed after "
            f"the review?). Review that commit, then approve it by its own hash"
        )
    why = (
        f"@{login} approved {approved[:12]}, the head of PR #{number} (opened on {base_sha[:12]}); judged by "
        f"{default} at {main[:12]}, against its kernel"
    )
    return Approval(approved, main, main, number, why)


def report(github: GitHub, sha: str, results: dict[str, str], target_url: str) -> dict:
    """The commit status on the approved commit: success only when every GPU job succeeded."""
    state = "success" if all(result == "success" for result in results.values()) else "failure"
    description = ", ".join(f"{job}: {result}" for job, result in results.items())
    body = {"state": state, "context": STATUS_CONTEXT, "description": description, "target_url": target_url}
    github.call("POST", f"statuses/{sha}", body)
    return body


MAIN_TITLE = "GPU checks fail on main"
FAILED = ("failure", "cancelled")  # a job skipped (no tip before a push: no regression check) is no failure


def on_main(github: GitHub, sha: str, results: dict[str, str], run_url: str) -> str:
    """After a push to main: one open issue while its GPU checks fail (opened, then a comment per
    failing push), closed by the first push whose checks all pass. Says what it did."""
    failed = {job: result for job, result in results.items() if result in FAILED}
    found = github.call("GET", "issues?state=open&per_page=100")
    if not isinstance(found, list):
        raise Refused(f"GitHub's list of issues was not a list: {str(found)[:80]}")
    issue = next((i for i in found if i.get("title") == MAIN_TITLE and "pull_request" not in i), None)
    what = ", ".join(f"{job}: {result}" for job, result in results.items())
    if failed:
        text = f"The GPU checks of {sha} on main: {what} ([run]({run_url}))."
        if issue is None:
            made = github.call("POST", "issues", {"title": MAIN_TITLE, "body": text})
            return f"opened #{made.get('number')} {MAIN_TITLE!r}"
        github.call("POST", f"issues/{issue['number']}/comments", {"body": text})
        return f"commented on #{issue['number']} {MAIN_TITLE!r}"
    if issue is None:
        return "every GPU check passed; no open issue"
    github.call("POST", f"issues/{issue['number']}/comments", {"body": f"Passing again at {sha}: {what}."})
    github.call("PATCH", f"issues/{issue['number']}", {"state": "closed", "state_reason": "completed"})
    return f"closed #{issue['number']} {MAIN_TITLE!r}"


class BadEnvironment(Exception):
    """A variable the job needs is unset, or the event file can't be read: exit 2."""


def _append(variable: str, text: str) -> None:
    try:
        command_output.written(variable, os.environ.get(variable), text, append=True)
    except command_output.Unwritten as error:
        raise BadEnvironment(str(error)) from None


def variable(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise BadEnvironment(f"{name} is not set: GitHub sets it in every workflow step")
    return value


def read_event(path: str) -> dict:
    """The event's JSON object from GITHUB_EVENT_PATH."""
    try:
        with open(path, "rb") as f:
            event = json.load(f)
    except (OSError, ValueError, RecursionError) as error:
        raise BadEnvironment(f"the event file {path} can't be read as JSON: {error}") from None
    if not isinstance(event, dict):
        raise BadEnvironment(f"the event file {path} holds no JSON object")
    return event


def full_hash(text: str) -> str:
    if not FULL_HASH.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a full 40-character commit hash")
    return text


def command_line() -> argparse.ArgumentParser:
    parser = command_output.Parser(prog="python -m harness approval", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=command_output.Parser)
    commands.add_parser("approve", help="decide what runs for this event (GitHub's environment variables)")
    status = commands.add_parser("report", help="post the `gpu` commit status")
    status.add_argument("--sha", required=True, type=full_hash)
    pushed = commands.add_parser("main", help="after a push to main: open, comment on or close its issue")
    pushed.add_argument("--sha", required=True, type=full_hash)
    for command in (status, pushed):
        for job in ("tests", "gate", "regression"):
            command.add_argument(f"--{job}", required=True, help=f"the {job} job's result")
    return parser


def main(argv=None) -> int:
    args = command_line().parse_args(argv)
    try:
        github = GitHub(
            os.environ.get("GITHUB_API_URL", "https://api.github.com"),
            os.environ.get("GH_TOKEN", ""),
            variable("GITHUB_REPOSITORY"),
        )
        return decide_approval(github) if args.command == "approve" else post_results(args, github)
    except BadEnvironment as error:
        print(f"::error::{' '.join(str(error).splitlines())}")
        return exits.BAD_INPUT


def post_results(args, github: GitHub) -> int:
    """``report`` (the commit status on a PR's approved commit) or ``main`` (the issue after a push):
    the GPU jobs' results, passed on; exit 1 where GitHub refused, or where a check failed on main."""
    run_url = f"{os.environ.get('GITHUB_SERVER_URL', 'https://github.com')}/{github.repository}/actions/runs/"
    run_url += os.environ.get("GITHUB_RUN_ID", "")
    results = {"GPU tests": args.tests, "gate": args.gate, "regression": args.regression}
    try:
        if args.command == "main":
            print(on_main(github, args.sha, results, run_url))
            return 1 if any(result in FAILED for result in results.values()) else 0  # red on main
        posted = report(github, args.sha, results, run_url)
    except Refused as error:
        print(f"::error::{error}")
        return 1
    print(f"status {STATUS_CONTEXT!r} on {args.sha}: {posted['state']} ({posted['description']})")
    return 0


def decide_approval(github: GitHub) -> int:
    try:
        event = read_event(variable("GITHUB_EVENT_PATH"))
        name = variable("GITHUB_EVENT_NAME")
        approval = approve(name, event, os.environ.get("GITHUB_SHA", ""), os.environ.get("GITHUB_REF", ""), github)
    except BadEnvironment as error:
        _append("GITHUB_STEP_SUMMARY", f"### GPU approval\n\nNothing runs on the GPU: {error}.\n")
        raise
    except Refused as error:
        print(f"::error::nothing runs on the GPU: {error}")
        _append("GITHUB_STEP_SUMMARY", f"### GPU approval\n\nNothing runs on the GPU: {error}.\n")
        return 1
    print(approval.why)
    _append("GITHUB_OUTPUT", "".join(f"{k}={v}\n" for k, v in asdict(approval).items() if k != "why"))
    _append("GITHUB_STEP_SUMMARY", f"### GPU approval\n\n{approval.why}.\n")
    return 0
