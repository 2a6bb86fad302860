"""GitHub's part of running a workflow, around the part act does.

For one repository activity (a PR opened, labelled, commented on, a push...), GitHub (1) emits one or
more events, (2) reads the workflow files of a given commit for each (the PR's merge commit for
`pull_request`, the default branch for `pull_request_target` and `issue_comment`), (3) starts the
workflows whose `on:` matches the event with its `types:`, `branches:`, `tags:` and `paths:`, (4) evaluates each job's
`if:` and `needs:`, and (5) hands each job to a runner whose group admits that workflow at that ref.
act does (4), and runs the jobs; it does not do (3) (it ignores `types:` and `branches:`) nor (5), so
this module does those as GitHub documents them, and replaces every job's steps by one marker step
that records, when the job runs, which job it is and the commit its checkout would take.
"""

from __future__ import annotations

import copy
import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
POLICY = json.loads((ROOT / "tools" / "gpu-runner" / "policy.json").read_text())

# Activity types GitHub uses when a trigger lists none.
DEFAULT_TYPES = {
    "pull_request": {"opened", "synchronize", "reopened"},
    "pull_request_target": {"opened", "synchronize", "reopened"},
    "issue_comment": {"created", "edited", "deleted"},
}
# Events whose workflow files come from the PR's merge commit; the default branch's are read for
# DEFAULT_BRANCH_EVENTS, the pushed / dispatched ref's for the others.
FROM_THE_PR = {"pull_request", "pull_request_review", "pull_request_review_comment"}
DEFAULT_BRANCH_EVENTS = {"pull_request_target", "issue_comment"}
# The one step of every stubbed job: file, job id, commit, matrix leg, tab-separated.
MARKER_SCRIPT = 'printf "%s\\t%s\\t%s\\t%s\\n" "$MARK_FILE" "$MARK_JOB" "$MARK_SHA" "$MARK_MATRIX" >> "$ACT_MARKERS"'


def read_workflows(folder: Path = WORKFLOWS) -> dict[str, dict]:
    return {path.name: yaml.safe_load(path.read_text()) for path in sorted(folder.glob("*.yml"))}


def triggers(workflow: dict, event: str, payload: dict) -> bool:
    """Step (3): does GitHub start this workflow for this event?"""
    on = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    if isinstance(on, str):
        on = {on: None}
    elif isinstance(on, list):
        on = dict.fromkeys(on)
    if event not in on:
        return False
    config = on[event] or {}
    types = set(config.get("types", DEFAULT_TYPES.get(event, ())))
    if types and payload.get("action") not in types:
        return False
    if event == "push" and "paths" in config and not touches(payload, config["paths"]):
        return False
    branches = config.get("branches")
    if event == "push" and ("tags" in config or branches):
        # GitHub: with a `tags` filter and no `branches`, a branch push starts nothing, and the other
        # way round (release.yml runs on a version tag only).
        ref = payload["ref"]
        kind, name = ("tags", ref.removeprefix("refs/tags/")) if ref.startswith("refs/tags/") else ("branches", ref)
        name = name.removeprefix("refs/heads/")
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in config.get(kind) or ())
    if branches:
        branch = payload["pull_request"]["base"]["ref"]
        return any(fnmatch.fnmatchcase(branch, pattern) for pattern in branches)
    return True


def touches(payload: dict, patterns: list[str]) -> bool:
    """GitHub's `paths:` on a push: whether a file the push changed matches a pattern (``**`` any
    depth). The files are the push's commits' added, modified and removed ones, as its payload lists
    them; a payload that lists none changed none of them."""
    changed = {
        path
        for commit in payload.get("commits") or ()
        for kind in ("added", "modified", "removed")
        for path in commit.get(kind) or ()
    }
    return any(fnmatch.fnmatchcase(path, pattern.replace("**", "*")) for path in changed for pattern in patterns)


def workflow_ref(event: str, payload: dict) -> str:
    """The ref GitHub runs the workflow file from (what a runner group's workflow list names)."""
    if event in FROM_THE_PR:
        return f"refs/pull/{payload['pull_request']['number']}/merge"
    if event in DEFAULT_BRANCH_EVENTS:
        return f"refs/heads/{payload['repository']['default_branch']}"
    return payload["ref"]


def labels(job: dict) -> list[str]:
    runs_on = job.get("runs-on", [])
    return runs_on if isinstance(runs_on, list) else [runs_on]


def self_hosted(job_labels: list[str]) -> bool:
    """A self-hosted runner's job: the label itself, or a GPU type's (gpu-<type>, the one label an
    actions-runner-controller scale set matches)."""
    return any(label == "self-hosted" or label.startswith("gpu") for label in job_labels)


def runner_takes(job_labels: list[str], workflow_file: str, ref: str) -> bool:
    """Step (5): hosted runners take any job; the GPU runner's group only its listed workflows at
    the listed ref (tools/gpu-runner/policy.json, applied by configure-github.sh)."""
    if not self_hosted(job_labels):
        return True
    return ref == POLICY["workflow_ref"] and f".github/workflows/{workflow_file}" in POLICY["workflows"]


def checkout_ref(job: dict) -> str:
    """The commit under test in the job, as an expression: the ref of its checkout into `candidate`
    (gpu.yml's PR commit) or else of its first checkout, or the event's commit (github.sha) when the
    checkout names none; '' for a job that checks nothing out."""
    checkouts = [s for s in job.get("steps", []) if s.get("uses", "").startswith("actions/checkout@")]
    if not checkouts:
        return ""
    step = next((s for s in checkouts if s.get("with", {}).get("path") == "candidate"), checkouts[0])
    return str(step.get("with", {}).get("ref", "${{ github.sha }}"))


def stub(workflow: dict, file_name: str, outputs: dict | None = None) -> dict:
    """A copy whose every job, if it runs, only appends `file<TAB>job<TAB>sha<TAB>matrix` to $ACT_MARKERS.
    A job with `outputs:` gives the values ``outputs`` names for it (what the real job would decide)."""
    # YAML 1.1 read the key `on` as True; write it back as `on`.
    copied = {("on" if key is True else key): value for key, value in copy.deepcopy(workflow).items()}
    for job_id, job in copied["jobs"].items():
        job.pop("environment", None)  # deployment protection is GitHub's, not the event logic's
        given = (outputs or {}).get(job_id, {})
        if "outputs" in job:
            job["outputs"] = {name: f"${{{{ steps.marker.outputs.{name} }}}}" for name in job["outputs"]}
        job["steps"] = [
            {
                "id": "marker",
                "name": "marker",
                "run": MARKER_SCRIPT + "".join(f"\necho '{k}={v}' >> \"$GITHUB_OUTPUT\"" for k, v in given.items()),
                "env": {
                    "MARK_FILE": file_name,
                    "MARK_JOB": job_id,
                    "MARK_SHA": checkout_ref(job),
                    "MARK_MATRIX": "${{ matrix.python }}${{ matrix.gpu }}${{ matrix.torch }}",
                },
            }
        ]
    return copied


@dataclass(frozen=True)
class Ran:
    """One job act ran: `taken` says whether a runner would take it (False: refused, never runs)."""

    workflow: str
    job: str
    sha: str
    matrix: str
    event: str
    gpu: bool
    taken: bool


def write_stubs(folder: Path, workflows: dict[str, dict], outputs: dict | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, workflow in workflows.items():
        (folder / name).write_text(yaml.safe_dump(stub(workflow, name, outputs), sort_keys=False))


def read_markers(path: Path, workflows: dict[str, dict], event: str, ref: str) -> list[Ran]:
    ran = []
    for line in path.read_text().splitlines() if path.exists() else []:
        file_name, job_id, sha, matrix = line.split("\t")
        job_labels = labels(workflows[file_name]["jobs"][job_id])
        gpu = self_hosted(job_labels)
        ran.append(Ran(file_name, job_id, sha, matrix, event, gpu, runner_takes(job_labels, file_name, ref)))
    return ran
