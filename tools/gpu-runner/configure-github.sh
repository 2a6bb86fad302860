#!/usr/bin/env bash
# Applies policy.json to GitHub: the settings that keep code from forks off the GPU runner unless a
# maintainer approved it (docs/self-hosted-runner.md, docs/gpu-approval.md). Run by an owner of the
# organization, on their own machine, with the GitHub CLI logged in (`gh auth login`); run it again
# after changing policy.json, it converges. Nothing here runs on the GPU host.
#
#   tools/gpu-runner/configure-github.sh OWNER/REPO
#
# 1. The runner group: only this repository, and only the workflows named in policy.json as they are
#    on the default branch (a job from any other workflow file or ref never reaches the runner).
# 2. "Require approval for all external contributors" for pull_request runs from forks.
# 3. Workflow tokens read-only by default; workflows can't approve pull requests.
# 4. The ruleset on the default branch: a pull request with an approving review (code owners' for
#    the harness, the suite, the noxfile and .github/: .github/CODEOWNERS), stale approvals dismissed
#    on push, the last push approved by someone else, and the `gpu` commit status that gpu.yml's
#    `report` posts on the approved commit, counted only from GitHub Actions (integration id in
#    policy.json) and only on a branch up to date with main; no force push, no deletion.
# 5. It reads the runner group and the ruleset back and exits non-zero, one line per setting not in
#    force and the GitHub plan that setting needs, where GitHub didn't keep what was sent (a plan
#    without the feature may take the request and drop the setting).
set -euo pipefail

repo=${1:?usage: configure-github.sh OWNER/REPO}
owner=${repo%%/*}
policy="$(dirname "$0")/policy.json"

field() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$policy" "$1"; }
group=$(field runner_group)
# "OWNER/REPO/.github/workflows/gpu.yml@refs/heads/main", as the runner-group API names a workflow.
workflows=$(python3 - "$policy" "$repo" <<'PY'
import json, sys
policy, repo = json.load(open(sys.argv[1])), sys.argv[2]
print(json.dumps([f"{repo}/{workflow}@{policy['workflow_ref']}" for workflow in policy["workflows"]]))
PY
)

repo_id=$(gh api "repos/$repo" --jq .id)
group_id=$(gh api "orgs/$owner/actions/runner-groups" --paginate \
  --jq ".runner_groups[] | select(.name == \"$group\") | .id")

# A public repository's runner group must allow public repositories; the workflow list, the fork
# approval and the label are what keep that safe.
settings=$(printf '{"name": "%s", "visibility": "selected", "allows_public_repositories": true, "restricted_to_workflows": true, "selected_workflows": %s}' "$group" "$workflows")
if [ -z "$group_id" ]; then
  group_id=$(gh api -X POST "orgs/$owner/actions/runner-groups" --input - --jq .id <<<"$settings")
  echo "created runner group $group ($group_id)"
else
  gh api -X PATCH "orgs/$owner/actions/runner-groups/$group_id" --input - >/dev/null <<<"$settings"
  echo "updated runner group $group ($group_id)"
fi
gh api -X PUT "orgs/$owner/actions/runner-groups/$group_id/repositories" --input - \
  <<<"{\"selected_repository_ids\": [$repo_id]}"
echo "runner group $group: only $repo, only $workflows"

gh api -X PUT "repos/$repo/actions/permissions/fork-pr-contributor-approval" --input - \
  <<<'{"approval_policy": "all_external_contributors"}'
echo "fork pull requests: every run from an external contributor waits for a maintainer's approval"

gh api -X PUT "repos/$repo/actions/permissions/workflow" --input - \
  <<<'{"default_workflow_permissions": "read", "can_approve_pull_request_reviews": false}'
echo "workflow tokens: read-only unless a job asks for more"

# The ruleset, found by name: created once, then updated in place (the script converges).
ruleset_name=$(field ruleset)
ruleset=$(python3 - "$policy" <<'PY'
import json, sys
policy = json.load(open(sys.argv[1]))
print(json.dumps({
    "name": policy["ruleset"],
    "target": "branch",
    "enforcement": "active",
    "conditions": {"ref_name": {"include": ["~DEFAULT_BRANCH"], "exclude": []}},
    "rules": [
        {"type": "deletion"},
        {"type": "non_fast_forward"},
        {"type": "pull_request", "parameters": {
            "required_approving_review_count": policy["required_reviews"],
            "require_code_owner_review": True,
            "dismiss_stale_reviews_on_push": True,
            "require_last_push_approval": True,
            "required_review_thread_resolution": False,
        }},
        # "Up to date" (strict) rather than a merge queue: the gpu status comes only after a
        # maintainer's /gpu-approve comment on the PR, which a merge queue's merge_group run can't
        # wait for. Up to date, the approved commit's parent is main's tip, which the workflow
        # judges against. integration_id: only GitHub Actions' `gpu` status counts, not one a
        # personal token with statuses permission posts.
        {"type": "required_status_checks", "parameters": {
            "strict_required_status_checks_policy": policy["require_up_to_date"],
            "required_status_checks": [{
                "context": policy["required_status"],
                "integration_id": policy["required_status_integration_id"],
            }],
        }},
    ],
}))
PY
)
ruleset_id=$(gh api "repos/$repo/rulesets" --paginate --jq ".[] | select(.name == \"$ruleset_name\") | .id")
if [ -z "$ruleset_id" ]; then
  ruleset_id=$(gh api -X POST "repos/$repo/rulesets" --input - --jq .id <<<"$ruleset")
  echo "created ruleset \"$ruleset_name\" ($ruleset_id)"
else
  gh api -X PUT "repos/$repo/rulesets/$ruleset_id" --input - >/dev/null <<<"$ruleset"
  echo "updated ruleset \"$ruleset_name\" ($ruleset_id)"
fi
# Read back what GitHub kept: a setting the organization's plan lacks can be dropped without an
# error. One line per setting not in force, naming the plan it needs; then a non-zero exit.
group_now=$(gh api "orgs/$owner/actions/runner-groups/$group_id")
ruleset_now=$(gh api "repos/$repo/rulesets/$ruleset_id")
if ! problems=$(GROUP_SENT="$settings" GROUP_NOW="$group_now" RULESET_SENT="$ruleset" RULESET_NOW="$ruleset_now" \
    python3 - "$group" <<'PY'
import json, os, sys
group = sys.argv[1]
group_sent, group_now = json.loads(os.environ["GROUP_SENT"]), json.loads(os.environ["GROUP_NOW"])
ruleset_sent, ruleset_now = json.loads(os.environ["RULESET_SENT"]), json.loads(os.environ["RULESET_NOW"])
WORKFLOWS_PLAN = ("GitHub Enterprise Cloud (a runner group restricted to selected workflows; "
                  "organizations on GitHub Free or GitHub Team don't have it)")
GROUPS_PLAN = "an organization (runner groups: GitHub Free, Team or Enterprise Cloud organizations)"
RULESET_PLAN = ("rulesets: GitHub Free or Free for organizations for a public repository; "
                "GitHub Pro, Team or Enterprise Cloud for a private one")
problems = []

def need(setting, wanted, found, plan):
    if found != wanted:
        problems.append(f"not in force: {setting} is {json.dumps(found)}, wants {json.dumps(wanted)}; needs {plan}")

need(f"runner group {group}: visibility", "selected", group_now.get("visibility"), GROUPS_PLAN)
need(f"runner group {group}: restricted_to_workflows", True, group_now.get("restricted_to_workflows"), WORKFLOWS_PLAN)
need(f"runner group {group}: selected_workflows", sorted(group_sent["selected_workflows"]),
     sorted(group_now.get("selected_workflows") or []), WORKFLOWS_PLAN)

name = ruleset_sent["name"]
for key in ("enforcement", "target", "conditions"):
    need(f"ruleset \"{name}\": {key}", ruleset_sent[key], ruleset_now.get(key), RULESET_PLAN)
rules_now = {rule.get("type"): rule.get("parameters") or {} for rule in ruleset_now.get("rules") or []}
for rule in ruleset_sent["rules"]:
    kind = rule["type"]
    if kind not in rules_now:
        problems.append(f"not in force: ruleset \"{name}\": rule {kind} is missing; needs {RULESET_PLAN}")
        continue
    for key, wanted in rule.get("parameters", {}).items():
        found = rules_now[kind].get(key)
        if key == "required_status_checks":  # each status with the app that must post it
            wanted = sorted([c["context"], c.get("integration_id")] for c in wanted)
            found = sorted([c.get("context"), c.get("integration_id")] for c in found or [])
            key = "required_status_checks [context, integration_id]"
        need(f"ruleset \"{name}\": {kind}.{key}", wanted, found, RULESET_PLAN)
print("\n".join(problems))
sys.exit(1 if problems else 0)
PY
); then
  echo "$problems" >&2
  echo "configure-github.sh: $(wc -l <<<"$problems") setting(s) not in force on GitHub (lines above)" >&2
  exit 1
fi
echo "read back: the runner group and the ruleset are in force as sent"
echo "main: changes by pull request, reviewed (code owners: .github/CODEOWNERS), up to date with main, with status $(field required_status) from GitHub Actions"
echo "GPU runs: a maintainer comments \"$(field approval_command) <full commit hash>\" on the PR (docs/gpu-approval.md)"
echo "runner group id for jit-runner.sh: $group_id"
