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
# 4. The approval label.
set -euo pipefail

repo=${1:?usage: configure-github.sh OWNER/REPO}
owner=${repo%%/*}
policy="$(dirname "$0")/policy.json"

field() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$policy" "$1"; }
group=$(field runner_group)
label=$(field approval_label)
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

gh label create "$label" --repo "$repo" --force --color 0e8a16 \
  --description "A maintainer ran this PR's head commit on the GPU runner (comes off on every push)"
echo "label $label ready: only people with triage rights or more can add it"
echo "runner group id for jit-runner.sh: $group_id"
