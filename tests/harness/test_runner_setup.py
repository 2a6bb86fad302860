"""scripts/gpu-runner/: configure-github.sh asks GitHub for what policy.json says (run against a fake
`gh` that records each call): the runner group, the fork and token settings, and the ruleset that
requires review (code owners' for what judges a PR: .github/CODEOWNERS) and the `gpu` status. The
policy names every workflow with a GPU job and no other, and the runner loop's shell parses."""

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


def test_configure_github_requires_review_code_owners_and_the_gpu_status_on_main(tmp_path):
    ruleset = call(run_configure(tmp_path), "POST", f"repos/{REPO}/rulesets")
    assert ruleset["name"] == gh.POLICY["ruleset"] and ruleset["enforcement"] == "active"
    assert ruleset["conditions"]["ref_name"]["include"] == ["~DEFAULT_BRANCH"]
    rules = {rule["type"]: rule.get("parameters") for rule in ruleset["rules"]}
    assert {"deletion", "non_fast_forward"} <= set(rules)
    review = rules["pull_request"]
    assert review["required_approving_review_count"] >= 1 and review["require_code_owner_review"] is True
    assert review["dismiss_stale_reviews_on_push"] is True and review["require_last_push_approval"] is True
    assert rules["required_status_checks"]["required_status_checks"] == [{"context": gh.POLICY["required_status"]}]


def test_code_owners_cover_everything_that_judges_a_pr():
    owners = {}
    for line in (gh.ROOT / ".github" / "CODEOWNERS").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            path, *who = line.split()
            owners[path] = who
    team = f"@nf4kernel/{gh.POLICY['maintainers_team']}"
    for path in ("/harness/", "/benchmarks/", "/noxfile.py", "/.github/", "/asv.conf.json", "/scripts/gpu-runner/"):
        assert owners.get(path) == [team], path


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
