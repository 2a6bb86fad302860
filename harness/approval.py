"""Which commit the GPU runner may run, and the verdict it posts back: gpu.yml's hosted jobs.

    python3 -m harness.approval approve      # job `approve`: outputs candidate, trusted, base, pr
    python3 -m harness.approval report --sha SHA --tests R --gate R --regression R   # job `report`

The rule (docs/gpu-approval.md): a pull request's commit runs on the GPU runner only after someone
with write access comments ``/gpu-approve <hash>``, naming in full the commit they reviewed, and
only while that commit is still the PR's head. A push after the review changes the head, so the
comment no longer matches and nothing runs: the new commit needs its own comment. A prefix is not
accepted: one that matches the reviewed commit can be manufactured for another. The same rule holds
for branches of this repository as for forks. A push to the default branch (merged, so reviewed)
and a dispatch on it run that commit.

The verdict comes from the PR's *base*: ``trusted`` is the commit whose harness, thresholds and asv
suite the GPU jobs run, ``candidate`` the commit whose ``nf4kernel/`` they judge. On a PR, ``base``
is the base commit too (the relative checks need it); on a push it is empty.

Standard library only: the hosted job runs this with the runner's own python3. GitHub is reached at
``GITHUB_API_URL`` with ``GH_TOKEN``, as every step of a workflow can.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass

COMMAND = "/gpu-approve"
APPROVERS = ("admin", "write")  # the permission API's answer; maintainers read as "write"
FULL_HASH = re.compile(r"[0-9a-f]{40}")
STATUS_CONTEXT = "gpu"


class Refused(Exception):
    """The event approves nothing; the message says why and what to do."""


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

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
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
                return json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as error:
            raise Refused(f"GitHub answered {error.code} to {method} {path}: {error.read()[:200]!r}") from None
        except (urllib.error.URLError, OSError) as error:
            raise Refused(f"GitHub could not be reached for {method} {path}: {error}") from None


def approve(event_name: str, event: dict, sha: str, ref: str, github: GitHub) -> Approval:
    """What may run for this event, or Refused."""
    default = (event.get("repository") or {}).get("default_branch", "main")
    if event_name in ("push", "workflow_dispatch"):
        if ref != f"refs/heads/{default}":
            raise Refused(
                f"{event_name} on {ref}: only the default branch ({default}) runs on the GPU without approval"
            )
        return Approval(sha, sha, "", "", f"{event_name} to {default} at {sha[:12]}: merged code, judged by itself")
    if event_name != "issue_comment":
        raise Refused(f"{event_name} events approve nothing")
    return approve_comment(event, default, github)


def approve_comment(event: dict, default: str, github: GitHub) -> Approval:
    if event.get("action") != "created":
        raise Refused("only a new comment approves (an edited one does not)")
    issue = event.get("issue") or {}
    if not issue.get("pull_request"):
        raise Refused(f"{COMMAND} works on pull requests only")
    number = str(issue["number"])
    comment = event.get("comment") or {}
    body = (comment.get("body") or "").strip()
    words = body.splitlines()[0].split() if body else []
    if len(words) != 2 or words[0] != COMMAND or not FULL_HASH.fullmatch(words[1]):
        raise Refused(f"write `{COMMAND} <commit>` with the full 40-character hash of the commit you reviewed")
    approved = words[1]
    login = (comment.get("user") or {}).get("login", "")
    permission = github.call("GET", f"collaborators/{login}/permission").get("permission")
    if permission not in APPROVERS:
        raise Refused(f"@{login} has {permission or 'no'} access here; approval needs write access")
    pull = github.call("GET", f"pulls/{number}")
    if pull.get("state") != "open":
        raise Refused(f"PR #{number} is {pull.get('state')}")
    base, head = pull["base"], pull["head"]
    if base["ref"] != default:
        raise Refused(f"PR #{number} targets {base['ref']}: only PRs to {default} are judged (by {default}'s harness)")
    if head["sha"] != approved:
        raise Refused(
            f"{approved[:12]} is not the head of PR #{number}: its head is {head['sha'][:12]} (pushed after "
            f"the review?). Review that commit, then approve it by its own hash"
        )
    why = f"@{login} approved {approved[:12]}, the head of PR #{number}; judged by its base {base['sha'][:12]}"
    return Approval(approved, base["sha"], base["sha"], number, why)


def report(github: GitHub, sha: str, results: dict[str, str], target_url: str) -> dict:
    """The commit status on the approved commit: success only when every GPU job succeeded."""
    state = "success" if all(result == "success" for result in results.values()) else "failure"
    description = ", ".join(f"{job}: {result}" for job, result in results.items())
    body = {"state": state, "context": STATUS_CONTEXT, "description": description, "target_url": target_url}
    github.call("POST", f"statuses/{sha}", body)
    return body


def _append(variable: str, text: str) -> None:
    path = os.environ.get(variable)
    if path:
        with open(path, "a") as f:
            f.write(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m harness.approval", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("approve", help="decide what runs for this event (GitHub's environment variables)")
    status = commands.add_parser("report", help="post the `gpu` commit status")
    status.add_argument("--sha", required=True)
    for job in ("tests", "gate", "regression"):
        status.add_argument(f"--{job}", required=True, help=f"the {job} job's result")
    args = parser.parse_args(argv)
    env = os.environ
    github = GitHub(
        env.get("GITHUB_API_URL", "https://api.github.com"), env.get("GH_TOKEN", ""), env["GITHUB_REPOSITORY"]
    )
    if args.command == "report":
        run_url = f"{env.get('GITHUB_SERVER_URL', 'https://github.com')}/{env['GITHUB_REPOSITORY']}/actions/runs/"
        results = {"GPU tests": args.tests, "gate": args.gate, "regression": args.regression}
        try:
            posted = report(github, args.sha, results, run_url + env.get("GITHUB_RUN_ID", ""))
        except Refused as error:
            print(f"::error::{error}")
            return 1
        print(f"status {STATUS_CONTEXT!r} on {args.sha}: {posted['state']} ({posted['description']})")
        return 0
    with open(env["GITHUB_EVENT_PATH"]) as f:
        event = json.load(f)
    try:
        approval = approve(
            env["GITHUB_EVENT_NAME"], event, env.get("GITHUB_SHA", ""), env.get("GITHUB_REF", ""), github
        )
    except Refused as error:
        print(f"::error::nothing runs on the GPU: {error}")
        _append("GITHUB_STEP_SUMMARY", f"### GPU approval\n\nNothing runs on the GPU: {error}.\n")
        return 1
    print(approval.why)
    _append("GITHUB_OUTPUT", "".join(f"{k}={v}\n" for k, v in asdict(approval).items() if k != "why"))
    _append("GITHUB_STEP_SUMMARY", f"### GPU approval\n\n{approval.why}.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
