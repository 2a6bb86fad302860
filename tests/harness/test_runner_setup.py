"""scripts/gpu-runner/: configure-github.sh asks GitHub for what policy.json says (run against a fake
`gh` that records each call), the policy names every workflow with a GPU job and no other, and the
runner loop's shell parses."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import github_model as gh

SCRIPTS = gh.ROOT / "scripts" / "gpu-runner"
REPO = "acme/nf4kernel"

# Answers `gh api repos/...` with an id, lists no runner group, gives the new group id 7, records
# every call (its arguments and what came on stdin) as one JSON line.
FAKE_GH = """#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
body = sys.stdin.read() if "--input" in args else ""
with open(os.environ["GH_CALLS"], "a") as log:
    log.write(json.dumps({"args": args, "body": body}) + "\\n")
if args[:2] == ["api", "repos/%s"]:
    print(42)
elif "-X" in args and args[args.index("-X") + 1] == "POST":
    print(7)
"""


def run_configure(tmp_path: Path) -> list[dict]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(FAKE_GH % REPO)
    (bin_dir / "gh").chmod(0o755)
    calls = tmp_path / "calls.jsonl"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "GH_CALLS": str(calls)}
    subprocess.run(["bash", str(SCRIPTS / "configure-github.sh"), REPO], check=True, env=env, capture_output=True)
    return [json.loads(line) for line in calls.read_text().splitlines()]


def call(calls: list[dict], method: str, path: str) -> dict:
    matches = [c for c in calls if path in c["args"] and method in c["args"]]
    assert len(matches) == 1, f"expected one {method} {path}, got {[c['args'] for c in calls]}"
    return json.loads(matches[0]["body"])


def test_configure_github_restricts_the_runner_group_to_the_policy(tmp_path):
    calls = run_configure(tmp_path)
    group = call(calls, "POST", "orgs/acme/actions/runner-groups")
    assert group["name"] == gh.POLICY["runner_group"]
    assert group["visibility"] == "selected" and group["restricted_to_workflows"] is True
    assert group["selected_workflows"] == [
        f"{REPO}/{workflow}@{gh.POLICY['workflow_ref']}" for workflow in gh.POLICY["workflows"]
    ]
    assert call(calls, "PUT", "orgs/acme/actions/runner-groups/7/repositories") == {"selected_repository_ids": [42]}


def test_configure_github_requires_approval_for_forks_and_read_only_tokens(tmp_path):
    calls = run_configure(tmp_path)
    approval = call(calls, "PUT", f"repos/{REPO}/actions/permissions/fork-pr-contributor-approval")
    assert approval == {"approval_policy": "all_external_contributors"}
    tokens = call(calls, "PUT", f"repos/{REPO}/actions/permissions/workflow")
    assert tokens == {"default_workflow_permissions": "read", "can_approve_pull_request_reviews": False}
    assert any(c["args"][:3] == ["label", "create", gh.POLICY["approval_label"]] for c in calls)


def test_the_policy_names_exactly_the_workflows_with_gpu_jobs():
    with_gpu = {
        f".github/workflows/{name}"
        for name, workflow in gh.read_workflows().items()
        if any(gh.self_hosted(gh.labels(job)) for job in workflow["jobs"].values())
    }
    assert with_gpu == set(gh.POLICY["workflows"])
    for workflow in gh.read_workflows().values():
        for job in workflow["jobs"].values():
            if gh.self_hosted(gh.labels(job)):
                assert set(gh.POLICY["runner_labels"]) <= set(gh.labels(job))


def test_the_runner_scripts_parse():
    for script in SCRIPTS.glob("*.sh"):
        subprocess.run(["bash", "-n", str(script)], check=True)
