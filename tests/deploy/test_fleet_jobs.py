"""The fleet's scheduled jobs (.github/workflows/fleet.yml), their scripts run against stand-ins on
127.0.0.1 for GitHub's REST API and the container registry (as dev/rehearsal/fake_github.py stands in
for the API the GPU workflows call): update.py refresh (GitHub's meta API), runner_version.py (the
runner's releases and its image's digest), propose.py (a branch and a pull request, or an issue where
the token may not open one). Each runs on a copy of the files it rewrites, never on the checkout's."""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
WORKFLOW = ROOT / ".github" / "workflows" / "fleet.yml"
DIGEST = "sha256:" + "5" * 64


class StandIn:
    """An HTTP server on 127.0.0.1 that answers (method, path) from ``routes`` with (status, headers,
    body) and records every request as (method, path, headers, body)."""

    def __init__(self, routes: dict):
        self.routes, self.requests = routes, []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                stand_in.requests.append((self.command, self.path, dict(self.headers), body))
                status, headers, answer = stand_in.routes.get(
                    (self.command, self.path), (404, {}, {"message": "Not Found"})
                )
                data = json.dumps(answer).encode()
                self.send_response(status)
                for key, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_HEAD = _reply

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    def __enter__(self) -> str:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def run(script: Path, *args: str, env: dict, cwd: Path | None = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    environment.update(env)
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, env=environment, cwd=cwd, timeout=60
    )


# ---- GitHub's published ranges: update.py refresh ----


@pytest.fixture
def arc_copy(tmp_path) -> Path:
    arc = tmp_path / "arc"
    for part in ("github-meta", "base"):
        shutil.copytree(DEPLOY / "arc" / part, arc / part)
    return arc


META = {"web": ["140.82.112.0/20", "192.30.252.0/22"], "api": ["140.82.112.0/20"], "git": ["2a0a:a440::/29"]}


def test_refresh_reads_the_meta_api_and_dates_what_it_read(arc_copy):
    stand_in = StandIn({("GET", "/meta"): (200, {}, {**META, "actions": ["4.0.0.0/8"], "hooks": ["1.2.3.0/24"]})})
    with stand_in as url:
        done = run(arc_copy / "github-meta" / "update.py", "refresh", env={"GITHUB_API_URL": url})
    assert done.returncode == 0, done.stderr
    data = json.loads((arc_copy / "github-meta" / "ranges.json").read_text())
    assert data["read_on"] == datetime.date.today().isoformat() and "note" not in data
    assert data["ranges"] == ["140.82.112.0/20", "192.30.252.0/22", "2a0a:a440::/29"]  # web, api, git only
    policy = yaml.safe_load((arc_copy / "base" / "networkpolicy-runners.yaml").read_text())
    assert [p["ipBlock"]["cidr"] for p in policy["spec"]["egress"][1]["to"]] == data["ranges"]
    assert [r[:2] for r in stand_in.requests] == [("GET", "/meta")]
    assert run(arc_copy / "github-meta" / "update.py", "--check", env={}).returncode == 0


def test_refresh_leaves_the_file_alone_when_the_ranges_are_the_same(arc_copy):
    ranges = arc_copy / "github-meta" / "ranges.json"
    data = json.loads(ranges.read_text())
    data.update(read_on="2026-01-05", ranges=["140.82.112.0/20", "192.30.252.0/22", "2a0a:a440::/29"])
    data.pop("note", None)
    ranges.write_text(json.dumps(data, indent=1) + "\n")
    before = ranges.read_text()
    with StandIn({("GET", "/meta"): (200, {}, META)}) as url:
        done = run(arc_copy / "github-meta" / "update.py", "refresh", env={"GITHUB_API_URL": url})
    assert done.returncode == 0 and "unchanged since 2026-01-05" in done.stdout
    assert ranges.read_text() == before


def test_a_refresh_never_read_is_written_even_with_the_same_ranges(arc_copy):
    ranges = arc_copy / "github-meta" / "ranges.json"
    data = json.loads(ranges.read_text())
    same = {"web": data["ranges"], "api": [], "git": []}
    with StandIn({("GET", "/meta"): (200, {}, same)}) as url:
        assert run(arc_copy / "github-meta" / "update.py", "refresh", env={"GITHUB_API_URL": url}).returncode == 0
    assert json.loads(ranges.read_text())["read_on"] == datetime.date.today().isoformat()


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param((200, {}, {"web": [], "api": [], "git": []}), id="no-ranges"),
        pytest.param((500, {}, {"message": "oops"}), id="server-error"),
        pytest.param((200, {}, {"web": ["not-a-network"], "api": [], "git": []}), id="garbage"),
    ],
)
def test_a_bad_answer_rewrites_nothing(arc_copy, answer):
    files = [arc_copy / "github-meta" / "ranges.json", arc_copy / "base" / "networkpolicy-runners.yaml"]
    before = [f.read_text() for f in files]
    with StandIn({("GET", "/meta"): answer}) as url:
        done = run(arc_copy / "github-meta" / "update.py", "refresh", env={"GITHUB_API_URL": url})
    assert done.returncode != 0
    assert [f.read_text() for f in files] == before


def test_read_on_is_honest():
    """The committed ranges carry the date they were read, or none and a note saying they never were."""
    data = json.loads((DEPLOY / "arc" / "github-meta" / "ranges.json").read_text())
    if data["read_on"] is None:
        assert data["note"].startswith("Never read from the endpoint")
    else:
        datetime.date.fromisoformat(data["read_on"])
        assert "note" not in data


# ---- the runner's version: runner_version.py ----


@pytest.fixture
def image_copy(tmp_path) -> Path:
    shutil.copytree(
        DEPLOY / "runner-image", tmp_path / "deploy" / "runner-image", ignore=shutil.ignore_patterns("build")
    )
    (tmp_path / "deploy" / "arc").mkdir()
    shutil.copy(DEPLOY / "arc" / "kustomization.yaml", tmp_path / "deploy" / "arc" / "kustomization.yaml")
    return tmp_path / "deploy"


def registry_routes(tag: str, digest: str | None) -> dict:
    token = ("GET", "/token?scope=repository:actions/actions-runner:pull&service=ghcr.io")
    routes = {
        ("GET", "/repos/actions/runner/releases/latest"): (200, {}, {"tag_name": tag, "prerelease": False}),
        token: (200, {}, {"token": "anonymous-pull"}),
    }
    manifest = ("HEAD", f"/v2/actions/actions-runner/manifests/{tag.lstrip('v')}")
    routes[manifest] = (200, {"Docker-Content-Digest": digest} if digest else {}, {})
    return routes


def propose_version(image_copy: Path, routes: dict, tmp_path: Path):
    stand_in = StandIn(routes)
    output = tmp_path / "github_output"
    with stand_in as url:
        env = {"GITHUB_API_URL": url, "RUNNER_REGISTRY_URL": url, "GITHUB_OUTPUT": str(output), "GITHUB_TOKEN": "t"}
        done = run(image_copy / "runner-image" / "runner_version.py", "propose", env=env)
    return done, stand_in, output.read_text() if output.exists() else ""


def test_a_new_runner_release_is_pinned_by_version_and_digest(image_copy, tmp_path):
    done, stand_in, output = propose_version(image_copy, registry_routes("v9.400.1", DIGEST), tmp_path)
    assert done.returncode == 0, done.stderr
    dockerfile = (image_copy / "runner-image" / "Dockerfile").read_text()
    assert re.findall(r"^FROM .*$", dockerfile, re.M) == [f"FROM ghcr.io/actions/actions-runner:9.400.1@{DIGEST}"]
    assert output == "version=9.400.1\nchanged=true\n"
    methods = [(m, p.split("?")[0]) for m, p, _, _ in stand_in.requests]
    assert methods == [
        ("GET", "/repos/actions/runner/releases/latest"),
        ("GET", "/token"),
        ("HEAD", "/v2/actions/actions-runner/manifests/9.400.1"),
    ]
    assert stand_in.requests[0][2]["Authorization"] == "Bearer t"
    assert stand_in.requests[2][2]["Authorization"] == "Bearer anonymous-pull"
    assert "application/vnd.oci.image.index.v1+json" in stand_in.requests[2][2]["Accept"]


@pytest.mark.parametrize("tag", ["v2.337.0", "v2.300.0"])
def test_the_pinned_runner_or_an_older_release_changes_nothing(image_copy, tmp_path, tag):
    before = (image_copy / "runner-image" / "Dockerfile").read_text()
    done, stand_in, output = propose_version(image_copy, registry_routes(tag, DIGEST), tmp_path)
    assert done.returncode == 0 and output == "version=2.337.0\nchanged=false\n"
    assert (image_copy / "runner-image" / "Dockerfile").read_text() == before
    assert len(stand_in.requests) == 1  # no registry lookup


@pytest.mark.parametrize(
    ("tag", "digest"),
    [
        pytest.param("v9.400.1", None, id="no-digest"),
        pytest.param("v9.400.1", "sha256:short", id="bad-digest"),
        pytest.param("v9.400.1-rc.1", DIGEST, id="not-a-release-tag"),
    ],
)
def test_a_release_without_a_digest_to_pin_changes_nothing(image_copy, tmp_path, tag, digest):
    before = (image_copy / "runner-image" / "Dockerfile").read_text()
    done, _, output = propose_version(image_copy, registry_routes(tag, digest), tmp_path)
    assert done.returncode != 0 and "changed=true" not in output
    assert (image_copy / "runner-image" / "Dockerfile").read_text() == before


def test_the_built_digest_goes_into_the_manifests(image_copy):
    script = image_copy / "runner-image" / "runner_version.py"
    assert run(script, "set-digest", DIGEST, env={}).returncode == 0
    kustomization = yaml.safe_load((image_copy / "arc" / "kustomization.yaml").read_text())
    assert kustomization["images"] == [
        {"name": "nf4kernel-gpu-runner", "newName": "ghcr.io/OWNER/nf4kernel-gpu-runner", "digest": DIGEST}
    ]
    assert run(script, "set-digest", "latest", env={}).returncode != 0


# ---- proposing a change: propose.py ----


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A clone of a bare origin with one commit, as actions/checkout leaves it (no credentials)."""
    origin, work = tmp_path / "origin.git", tmp_path / "work"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", "--bare", str(origin)], check=True)
    subprocess.run([*git, "init", "-q", str(work)], check=True)
    (work / "ranges.json").write_text("{}\n")
    (work / "other.txt").write_text("x\n")
    subprocess.run([*git, "-C", str(work), "add", "."], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-q", "-m", "start"], check=True)
    subprocess.run(["git", "-C", str(work), "remote", "add", "origin", str(origin)], check=True)
    subprocess.run(["git", "-C", str(work), "push", "-q", "origin", "HEAD:refs/heads/main"], check=True)
    return work


def propose(checkout: Path, routes: dict, *paths: str, branch: str = "fleet/github-meta"):
    stand_in = StandIn(routes)
    with stand_in as url:
        env = {"GITHUB_API_URL": url, "GITHUB_REPOSITORY": "octo/nf4kernel", "GH_TOKEN": "tok"}
        done = run(
            DEPLOY / "propose.py", "--branch", branch, "--title", "T", "--body", "B", *paths, env=env, cwd=checkout
        )
    return done, stand_in


def origin_branches(checkout: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(checkout), "ls-remote", "--heads", "origin"], capture_output=True, text=True)
    return sorted(line.split("refs/heads/")[1] for line in out.stdout.splitlines())


LIST = ("GET", "/repos/octo/nf4kernel/pulls?state=open&head=octo:fleet/github-meta")


def test_an_unchanged_file_proposes_nothing(checkout):
    (checkout / "other.txt").write_text("changed, but not named\n")
    done, stand_in = propose(checkout, {}, "ranges.json")
    assert done.returncode == 0 and "unchanged" in done.stdout
    assert stand_in.requests == [] and origin_branches(checkout) == ["main"]


def test_a_change_is_pushed_alone_and_proposed_as_a_pull_request(checkout):
    (checkout / "ranges.json").write_text('{"read_on": "2026-11-30"}\n')
    (checkout / "other.txt").write_text("not named: stays out of the commit\n")
    pulls = ("POST", "/repos/octo/nf4kernel/pulls")
    done, stand_in = propose(checkout, {LIST: (200, {}, []), pulls: (201, {}, {"html_url": "pr/7"})}, "ranges.json")
    assert done.returncode == 0, done.stderr
    assert "opened pr/7" in done.stdout and origin_branches(checkout) == ["fleet/github-meta", "main"]
    shown = subprocess.run(
        ["git", "-C", str(checkout), "show", "--name-only", "--format=%s", "origin/fleet/github-meta"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert shown == ["T", "ranges.json"]
    posted = [body for method, path, _, body in stand_in.requests if method == "POST"]
    assert posted == [{"title": "T", "head": "fleet/github-meta", "base": "main", "body": "B"}]
    assert all(headers["Authorization"] == "Bearer tok" for _, _, headers, _ in stand_in.requests)


def test_an_open_pull_request_is_updated_not_duplicated(checkout):
    (checkout / "ranges.json").write_text('{"read_on": "2026-12-07"}\n')
    done, stand_in = propose(checkout, {LIST: (200, {}, [{"html_url": "pr/7"}])}, "ranges.json")
    assert done.returncode == 0 and "already open: pr/7" in done.stdout
    assert [m for m, *_ in stand_in.requests] == ["GET"]


def test_where_workflows_may_not_open_pull_requests_an_issue_names_the_branch(checkout):
    (checkout / "ranges.json").write_text('{"read_on": "2026-11-30"}\n')
    refusal = {"message": "GitHub Actions is not permitted to create or approve pull requests."}
    routes = {
        LIST: (200, {}, []),
        ("POST", "/repos/octo/nf4kernel/pulls"): (403, {}, refusal),
        ("POST", "/repos/octo/nf4kernel/issues"): (201, {}, {"html_url": "issue/8"}),
    }
    done, stand_in = propose(checkout, routes, "ranges.json")
    assert done.returncode == 0 and "opened issue/8" in done.stdout
    issue = stand_in.requests[-1][3]
    assert "`fleet/github-meta`" in issue["body"] and "not permitted" in issue["body"]


def test_nothing_opened_is_a_failure(checkout):
    (checkout / "ranges.json").write_text('{"read_on": "2026-11-30"}\n')
    done, _ = propose(checkout, {LIST: (200, {}, [])}, "ranges.json")
    assert done.returncode == 1


def test_only_the_jobs_own_branches_are_force_pushed(checkout):
    (checkout / "ranges.json").write_text('{"read_on": "2026-11-30"}\n')
    done, stand_in = propose(checkout, {}, "ranges.json", branch="main")
    assert done.returncode == 2 and stand_in.requests == [] and origin_branches(checkout) == ["main"]


# ---- the workflow ----


def test_the_workflow_runs_these_scripts_on_a_schedule_with_least_privilege():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert triggers["schedule"] and "workflow_dispatch" in triggers
    assert workflow["permissions"] == {}
    jobs = workflow["jobs"]
    runs = {name: "\n".join(step.get("run", "") for step in job["steps"]) for name, job in jobs.items()}
    assert "update.py refresh" in runs["github-meta"] and "propose.py --branch fleet/github-meta" in runs["github-meta"]
    assert "runner_version.py propose" in runs["runner-version"]
    assert "propose.py --branch fleet/actions-runner" in runs["runner-version"]
    assert "offline-bundle.sh" in runs["runner-image"] and "set-digest" in runs["runner-image"]
    for name, job in jobs.items():
        assert job["runs-on"] == "ubuntu-latest", f"{name}: the fleet's jobs never run on a GPU runner"
        assert set(job["permissions"]) <= {"contents", "pull-requests", "issues", "packages"}, name
        checkout = next(step for step in job["steps"] if step.get("uses", "").startswith("actions/checkout@"))
        assert checkout["with"]["persist-credentials"] is False, name
    assert jobs["runner-image"]["permissions"]["packages"] == "write"
    assert "packages" not in jobs["github-meta"]["permissions"]
    assert "schedule" in jobs["runner-image"]["if"] and "refs/heads/main" in jobs["runner-image"]["if"]
