"""tools/gpu-runner/: configure-github.sh asks GitHub for what policy.json says (run against a fake
`gh` that records each call): the runner group, the fork and token settings, and the ruleset that
requires review (code owners' for what judges a PR: .github/CODEOWNERS) and the `gpu` status from
GitHub Actions on an up-to-date branch; then it reads the group and the ruleset back and fails,
naming the setting and the plan it needs, where GitHub didn't keep one. The policy names every
workflow with a GPU job and no other, and the runner loop's shell parses."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import github_model as gh

SCRIPTS = gh.ROOT / "tools" / "gpu-runner"
REPO = "acme/nf4kernel"

# Answers `gh api repos/...` with an id, lists no runner group or ruleset, gives each new one the id
# 7, records every call (its arguments and what came on stdin) as one JSON line. Asked for the group
# or the ruleset (a GET), it answers what was last sent for it, with its id, passed through
# $GH_READBACK's `edit(path, answer)` where set: a GitHub that drops a setting.
FAKE_GH = """#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
body = sys.stdin.read() if "--input" in args else ""
with open(os.environ["GH_CALLS"], "a") as log:
    log.write(json.dumps({"args": args, "body": body}) + "\\n")
READS = {
    "orgs/acme/actions/runner-groups/7": "orgs/acme/actions/runner-groups",
    "repos/%(repo)s/rulesets/7": "repos/%(repo)s/rulesets",
}
if args[:2] == ["api", "repos/%(repo)s"]:
    print(42)
elif "-X" in args and args[args.index("-X") + 1] == "POST":
    print(7)
elif "-X" not in args and len(args) == 2 and args[1] in READS:
    with open(os.environ["GH_CALLS"]) as log:
        calls = [json.loads(line) for line in log]
    sent = [c["body"] for c in calls if "-X" in c["args"] and {args[1], READS[args[1]]} & set(c["args"])]
    answer = {**json.loads(sent[-1]), "id": 7}
    if os.environ.get("GH_READBACK"):
        scope = {}
        exec(open(os.environ["GH_READBACK"]).read(), scope)
        answer = scope["edit"](args[1], answer)
    print(json.dumps(answer))
"""


def configure(tmp_path: Path, readback: str | None = None) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """Runs the script against the fake; `readback` is Python defining edit(path, answer)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(FAKE_GH % {"repo": REPO})
    (bin_dir / "gh").chmod(0o755)
    calls = tmp_path / "calls.jsonl"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "GH_CALLS": str(calls)}
    if readback is not None:
        (tmp_path / "readback.py").write_text(readback)
        env["GH_READBACK"] = str(tmp_path / "readback.py")
    done = subprocess.run(["bash", str(SCRIPTS / "configure-github.sh"), REPO], env=env, capture_output=True, text=True)
    return done, [json.loads(line) for line in calls.read_text().splitlines()]


def run_configure(tmp_path: Path) -> list[dict]:
    done, calls = configure(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    return calls


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
    assert rules["required_status_checks"]["required_status_checks"] == [
        {"context": gh.POLICY["required_status"], "integration_id": gh.POLICY["required_status_integration_id"]}
    ]


def test_configure_github_requires_up_to_date_branches_and_the_gpu_status_from_github_actions(tmp_path):
    ruleset = call(run_configure(tmp_path), "POST", f"repos/{REPO}/rulesets")
    checks = {rule["type"]: rule.get("parameters") for rule in ruleset["rules"]}["required_status_checks"]
    assert checks["strict_required_status_checks_policy"] is True
    assert gh.POLICY["required_status_integration_id"] == 15368  # the GitHub Actions app
    assert checks["required_status_checks"] == [{"context": "gpu", "integration_id": 15368}]


def test_configure_github_reads_its_settings_back_and_passes_when_all_are_in_force(tmp_path):
    done, calls = configure(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    reads = [c["args"][1:] for c in calls if "-X" not in c["args"] and c["args"][1].endswith("/7")]
    assert reads == [["orgs/acme/actions/runner-groups/7"], [f"repos/{REPO}/rulesets/7"]]
    assert "read back: the runner group and the ruleset are in force" in done.stdout
    assert "not in force" not in done.stdout + done.stderr


def test_configure_github_fails_naming_the_plan_where_the_workflow_restriction_is_dropped(tmp_path):
    # A plan without "selected workflows" for runner groups: GitHub keeps the group, not the list.
    done, _ = configure(
        tmp_path,
        readback="""
def edit(path, answer):
    if "runner-groups" in path:
        answer.update(restricted_to_workflows=False, selected_workflows=[])
    return answer
""",
    )
    assert done.returncode != 0
    problems = [line for line in done.stderr.splitlines() if line.startswith("not in force:")]
    assert len(problems) == 2, done.stderr
    assert "restricted_to_workflows" in problems[0] and "GitHub Enterprise Cloud" in problems[0]
    assert "selected_workflows" in problems[1] and "GitHub Enterprise Cloud" in problems[1]
    assert "read back: the runner group and the ruleset are in force" not in done.stdout


def test_configure_github_fails_where_the_gpu_status_is_not_pinned_or_not_strict(tmp_path):
    done, _ = configure(
        tmp_path,
        readback="""
def edit(path, answer):
    for rule in answer.get("rules", []):
        if rule["type"] == "required_status_checks":
            rule["parameters"]["strict_required_status_checks_policy"] = False
            for check in rule["parameters"]["required_status_checks"]:
                check.pop("integration_id")
    return answer
""",
    )
    assert done.returncode != 0
    problems = [line for line in done.stderr.splitlines() if line.startswith("not in force:")]
    assert len(problems) == 2, done.stderr
    assert all("ruleset" in line and "GitHub Pro, Team or Enterprise Cloud" in line for line in problems)
    assert any("strict_required_status_checks_policy" in line for line in problems)
    assert any("integration_id" in line and "15368" in line for line in problems)


def test_configure_github_fails_where_the_ruleset_is_not_active_or_loses_a_rule(tmp_path):
    done, _ = configure(
        tmp_path,
        readback="""
def edit(path, answer):
    if "rulesets" in path:
        answer["enforcement"] = "disabled"
        answer["rules"] = [rule for rule in answer["rules"] if rule["type"] != "non_fast_forward"]
    return answer
""",
    )
    assert done.returncode != 0
    name = gh.POLICY["ruleset"]
    assert f'ruleset "{name}": enforcement is "disabled", wants "active"' in done.stderr
    assert "rule non_fast_forward is missing" in done.stderr


def test_code_owners_cover_everything_that_judges_a_pr():
    owners = {}
    for line in (gh.ROOT / ".github" / "CODEOWNERS").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            path, *who = line.split()
            owners[path] = who
    team = f"@nf4kernel/{gh.POLICY['maintainers_team']}"
    for path in ("/harness/", "/benchmarks/", "/noxfile.py", "/.github/", "/asv.conf.json", "/tools/gpu-runner/"):
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
                assert gh.labels(job) == [gh.POLICY["runner_label"]]


def test_the_runner_scripts_parse():
    for script in SCRIPTS.glob("*.sh"):
        subprocess.run(["bash", "-n", str(script)], check=True)
