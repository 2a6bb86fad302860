"""A stand-in for the few GitHub REST endpoints gpu.yml's hosted jobs call, on 127.0.0.1, for the
rehearsal (``harness/rehearse.py``) and the workflows' event tests. It answers from what it was
told (who has which access, each PR's head and base) and records every request, so a run can show
the commit status ``report`` would have posted. Point a workflow at it with
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


@dataclass
class FakeGitHub:
    repository: str
    permissions: dict = field(default_factory=dict)  # login -> "admin" | "write" | "read" | "none"
    pulls: dict = field(default_factory=dict)  # number (str) -> Pull
    requests: list = field(default_factory=list)  # (method, path, body) in order
    statuses: list = field(default_factory=list)  # (sha, body) of every POST .../statuses/<sha>

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
