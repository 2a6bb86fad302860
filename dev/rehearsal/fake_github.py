"""A stand-in for the few GitHub REST endpoints gpu.yml's hosted jobs call, on 127.0.0.1, for the
rehearsal (``dev/rehearsal/rehearse.py``) and the workflows' event tests. It answers from what it was
told (who has which access, each PR's head and base) and records every request, so a run can show
the commit status ``report`` would have posted. It keeps issues as GitHub would (listed, opened,
edited, commented on, closed), for history.yml's change-point job. Point a workflow at it with
``GITHUB_API_URL=http://127.0.0.1:<port>``.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Pull:
    head: str
    base: str
    head_repo: str
    base_ref: str = "main"
    state: str = "open"
    title: str = ""


@dataclass
class Issue:
    title: str
    body: str
    state: str = "open"
    comments: list = field(default_factory=list)  # each comment's body, in order


@dataclass
class FakeGitHub:
    repository: str
    permissions: dict = field(default_factory=dict)  # login -> "admin" | "write" | "read" | "none"
    pulls: dict = field(default_factory=dict)  # number (str) -> Pull
    requests: list = field(default_factory=list)  # (method, path, body) in order
    statuses: list = field(default_factory=list)  # (sha, body) of every POST .../statuses/<sha>
    issues: dict = field(default_factory=dict)  # number (int) -> Issue

    def _issue(self, number: int) -> dict:
        issue = self.issues[number]
        return {"number": number, "title": issue.title, "body": issue.body, "state": issue.state}

    def answer(self, method: str, path: str, body: dict | None) -> tuple[int, dict]:
        self.requests.append((method, path, body))
        prefix = f"/repos/{self.repository}/"
        if not path.startswith(prefix):
            return 404, {"message": "Not Found"}
        rest = path[len(prefix) :]
        if method == "GET" and (m := re.fullmatch(r"collaborators/([^/]+)/permission", rest)):
            return 200, {"permission": self.permissions.get(m.group(1), "none")}
        if method == "GET" and (m := re.fullmatch(r"pulls/(\d+)", rest)) and m.group(1) in self.pulls:
            pull = self.pulls[m.group(1)]
            return 200, {
                "number": int(m.group(1)),
                "state": pull.state,
                "head": {"sha": pull.head, "ref": "topic", "repo": {"full_name": pull.head_repo}},
                "base": {"sha": pull.base, "ref": pull.base_ref, "repo": {"full_name": self.repository}},
            }
        if method == "POST" and (m := re.fullmatch(r"statuses/([0-9a-f]{40})", rest)):
            self.statuses.append((m.group(1), body))
            return 201, {"state": (body or {}).get("state")}
        return self._answer_issues(method, rest, body or {})

    def _answer_issues(self, method: str, rest: str, body: dict) -> tuple[int, dict | list]:
        if method == "GET" and rest == "issues":  # one page: the fake keeps fewer than a page holds
            # GitHub's issues endpoint lists open pull requests too, marked by a pull_request key.
            pulls = [
                {"number": int(n), "title": p.title, "body": "", "state": "open", "pull_request": {}}
                for n, p in self.pulls.items()
                if p.state == "open"
            ]
            return 200, pulls + [self._issue(n) for n, issue in sorted(self.issues.items()) if issue.state == "open"]
        if method == "POST" and rest == "issues":  # issues and pull requests share one series of numbers
            number = max([*self.issues, *map(int, self.pulls)], default=0) + 1
            self.issues[number] = Issue(body.get("title", ""), body.get("body", ""))
            return 201, self._issue(number)
        m = re.fullmatch(r"issues/(\d+)(/comments)?", rest)
        if not m or int(m.group(1)) not in self.issues:
            return 404, {"message": "Not Found"}
        number = int(m.group(1))
        issue = self.issues[number]
        if method == "POST" and m.group(2):
            issue.comments.append(body.get("body", ""))
            return 201, {"body": body.get("body", "")}
        if method == "PATCH" and not m.group(2):
            issue.body = body.get("body", issue.body)
            issue.state = body.get("state", issue.state)
            return 200, self._issue(number)
        return 404, {"message": "Not Found"}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeGitHub

    def _reply(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        status, answer = self.fake.answer(method, self.path.split("?", 1)[0], body)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._reply("GET")

    def do_POST(self):
        self._reply("POST")

    def do_PATCH(self):
        self._reply("PATCH")

    def log_message(self, *args):  # quiet: the fake records requests itself
        pass


class Serving:
    """``with Serving(fake) as url:`` the fake answers on ``url`` (a free port of 127.0.0.1)."""

    def __init__(self, fake: FakeGitHub):
        handler = type("Handler", (_Handler,), {"fake": fake})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
