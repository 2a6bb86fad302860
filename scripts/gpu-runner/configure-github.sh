#!/usr/bin/env bash
# Applies policy.json to GitHub: the settings that keep code from forks off the GPU runner unless a
# maintainer approved it (docs/self-hosted-runner.md, docs/gpu-approval.md). Run by an owner of the
# organization, on their own machine, with the GitHub CLI logged in (`gh auth login`); run it again
# after changing policy.json, it converges. Nothing here runs on the GPU host.
#
#   scripts/gpu-runner/configure-github.sh OWNER/REPO
#
# 1. The runner group: only this repository, and only the workflows named in policy.json as they are
#    on the default branch (a job from any other workflow file or ref never reaches the runner).
# 2. "Require approval for all external contributors" for pull_request runs from forks.
# 3. Workflow tokens read-only by default; workflows can't approve pull requests.
# 4. The ruleset on the default branch: a pull request with an approving review (code owners' for
#    the harness, the suite, the noxfile and .github/: .github/CODEOWNERS), stale approvals dismissed
#    on push, the last push approved by someone else, and the `gpu` commit status that gpu.yml's
#    `report` posts on the approved commit; no force push, no deletion.
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
        {"type": "required_status_checks", "parameters": {
            "strict_required_status_checks_policy": False,
            "required_status_checks": [{"context": policy["required_status"]}],
        }},
    ],
}))
PY
)
ruleset_id=$(gh api "repos/$repo/rulesets" --paginate --jq ".[] | select(.name == \"$ruleset_name\") | .id")
if [ -z "$ruleset_id" ]; then
  gh api -X POST "repos/$repo/rulesets" --input - >/dev/null <<<"$ruleset"
  echo "created ruleset \"$ruleset_name\""
else
  gh api -X PUT "repos/$repo/rulesets/$ruleset_id" --input - >/dev/null <<<"$ruleset"
  echo "updated ruleset \"$ruleset_name\" ($ruleset_id)"
fi
echo "main: changes by pull request, reviewed (code owners: .github/CODEOWNERS), with status $(field required_status)"
echo "GPU runs: a maintainer comments \"$(field approval_command) <full commit hash>\" on the PR (docs/gpu-approval.md)"
echo "runner group id for jit-runner.sh: $group_id"
