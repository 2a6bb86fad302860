"""The GitHub Actions workflows against the harness: every nox session they name exists, every GPU
job has a timeout and a concurrency group, and the rules that keep the self-hosted runner safe hold
(statically here; test_workflow_events.py runs the event logic)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def nox_sessions() -> set[str]:
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    sessions = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if ast.unparse(target) == "nox.session":
                    sessions.add(node.name)
    return sessions


def jobs():
    for path in WORKFLOWS:
        workflow = yaml.safe_load(path.read_text())
        for name, job in workflow["jobs"].items():
            yield path.name, name, job, workflow


def is_gpu(job) -> bool:
    runs_on = job.get("runs-on", [])
    return "gpu" in (runs_on if isinstance(runs_on, list) else [runs_on])


def runs(job):
    return [step["run"] for step in job.get("steps", []) if "run" in step]


def test_there_are_workflows_and_gpu_jobs():
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "gpu.yml", "history.yml"}
    assert sum(is_gpu(job) for _, _, job, _ in jobs()) >= 4


@pytest.mark.parametrize("workflow,job_name,job", [(w, n, j) for w, n, j, _ in jobs()], ids=lambda v: str(v)[:20])
def test_every_nox_session_named_exists(workflow, job_name, job):
    sessions = nox_sessions()
    for script in runs(job):
        for named in re.findall(r"\bnox\b[^\n]*?\s-s\s+([\w-]+)", script):
            assert named in sessions, f"{workflow}:{job_name} runs nox session {named!r}, not in the noxfile"


def test_every_gpu_job_has_a_timeout_and_a_concurrency_group():
    for workflow, name, job, _ in jobs():
        if is_gpu(job):
            assert isinstance(job.get("timeout-minutes"), int), f"{workflow}:{name} has no timeout"
            assert job.get("concurrency", {}).get("group"), f"{workflow}:{name} has no concurrency group"


def test_every_job_has_a_timeout():
    for workflow, name, job, _ in jobs():
        assert isinstance(job.get("timeout-minutes"), int), f"{workflow}:{name}"


def test_actions_are_pinned_by_commit_sha():
    for workflow, name, job, _ in jobs():
        for step in job.get("steps", []):
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", step["uses"]), (
                    f"{workflow}:{name}: {step['uses']}"
                )


def test_permissions_are_read_only_by_default():
    for path in WORKFLOWS:
        assert yaml.safe_load(path.read_text())["permissions"] in ({"contents": "read"}, {}), path.name


def test_a_job_that_may_write_runs_no_code_from_a_pull_request():
    # In gpu.yml (pull_request_target) only the hosted jobs that check nothing out may write (a
    # label, a commit status); every job that checks out the PR's commit has a read-only token.
    for workflow, name, job, whole in jobs():
        writes = {scope for scope, access in (job.get("permissions") or {}).items() if access == "write"}
        if writes and "pull_request_target" in whole[True]:
            assert not is_gpu(job), f"{workflow}:{name}"
            assert not any("uses" in step for step in job["steps"]), f"{workflow}:{name} uses an action"
            assert writes <= {"pull-requests", "statuses"}, f"{workflow}:{name} writes {writes}"


def test_no_expression_is_expanded_inside_a_shell_script():
    # Untrusted values (branch names, labels, titles) reach shell steps only through env:.
    for workflow, name, job, _ in jobs():
        for script in runs(job):
            assert "${{" not in script, f"{workflow}:{name} expands an expression inside run:"


def test_no_secret_reaches_a_pull_request_job():
    for path in WORKFLOWS:
        workflow = yaml.safe_load(path.read_text())
        if "pull_request" in workflow[True] or "pull_request_target" in workflow[True]:  # YAML reads `on` as True
            assert "secrets." not in yaml.safe_dump(workflow), path.name  # comments may say the word


def test_pull_request_target_is_only_in_gpu_yml_and_justified_beside_it():
    for path in WORKFLOWS:
        text = path.read_text()
        if "pull_request_target" in yaml.safe_load(text)[True]:
            assert path.name == "gpu.yml", f"{path.name}: only gpu.yml may run in the base's context"
            assert "pull_request_target: # zizmor: ignore[dangerous-triggers]" in text


def test_no_workflow_uses_the_actions_cache():
    # Code from a PR that runs under pull_request_target can write the default branch's cache scope;
    # with no workflow reading that cache, nothing it writes there is ever used.
    for workflow, name, job, _ in jobs():
        for step in job.get("steps", []):
            assert not step.get("uses", "").startswith("actions/cache"), f"{workflow}:{name}"
            assert "cache" not in step.get("with", {}), f"{workflow}:{name}: {step['uses']} with a cache"


def test_the_torch_index_is_set_only_on_the_steps_that_install_torch():
    # Set for a whole workflow or job, every pip lookup waits on it (85 s of a 2-minute lint job).
    for path in WORKFLOWS:
        workflow = yaml.safe_load(path.read_text())
        assert "PIP_EXTRA_INDEX_URL" not in (workflow.get("env") or {}), path.name
        for name, job in workflow["jobs"].items():
            assert "PIP_EXTRA_INDEX_URL" not in (job.get("env") or {}), f"{path.name}:{name}"
            for step in job.get("steps", []):
                if "PIP_EXTRA_INDEX_URL" in (step.get("env") or {}):
                    assert re.search(r"nox\b.*-s (tests|pins)\b", step.get("run", "")), f"{path.name}:{name}"


def test_fork_code_reaches_the_gpu_runner_only_after_approval():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "gpu.yml").read_text())
    # Only triggers whose workflow file comes from the default branch or from this repository's own
    # refs: never pull_request, where a fork's PR supplies the file (test_workflow_events runs them).
    assert set(workflow[True]) == {"pull_request_target", "push", "workflow_dispatch"}
    assert workflow[True]["push"] == {"branches": ["main"]}
    gpu_jobs = {name: job for name, job in workflow["jobs"].items() if is_gpu(job)}
    gated = [name for name, job in gpu_jobs.items() if "needs" not in job]
    assert len(gated) == 1, "exactly one GPU job starts the chain; the others need it"
    condition = gpu_jobs[gated[0]]["if"]
    assert "github.event.label.name == 'gpu-approved'" in condition
    assert "github.event.pull_request.head.repo.full_name == github.repository" in condition
    for name, job in gpu_jobs.items():
        checkout = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@"))
        assert checkout["with"]["persist-credentials"] is False, name
        # The commit in the event (the approved one), not whatever the PR's branch points at now.
        assert "github.event.pull_request.head.sha" in checkout["with"]["ref"], name
        assert "head.ref" not in str(checkout["with"]), name


def test_every_checkout_keeps_no_credentials():
    for workflow, name, job, _ in jobs():
        for step in job.get("steps", []):
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False, f"{workflow}:{name}"


def test_the_gate_measures_the_prs_base_first_and_compares_with_it():
    """The relative check (README, "The speed gate"): on a PR, the base commit (this repository's own,
    never the PR's) is checked out beside the PR's and its gate runs before the PR's code does; the
    PR's gate then gets its record as --baseline. Pushes to main have no base and run the gate alone."""
    gate = yaml.safe_load((ROOT / ".github" / "workflows" / "gpu.yml").read_text())["jobs"]["gate"]
    steps = gate["steps"]
    checkouts = [s for s in steps if s.get("uses", "").startswith("actions/checkout@")]
    head, base = checkouts  # the PR's first, at the root: a later checkout there would wipe .gate-base
    assert "head.sha" in head["with"]["ref"] and "path" not in head["with"]
    assert base["with"]["ref"] == "${{ github.event.pull_request.base.sha }}"
    assert base["with"]["path"] == ".gate-base" and base["if"] == "github.event_name == 'pull_request_target'"
    runs_gate = [i for i, s in enumerate(steps) if "-s gate" in s.get("run", "")]
    base_run, pr_run = (steps[i] for i in runs_gate)
    assert runs_gate[0] < runs_gate[1] and base_run["working-directory"] == ".gate-base"
    assert base_run["if"] == base["if"] and base_run["continue-on-error"] is True
    # The base only needs --json (and --no-classic): flags every gate since the first has known.
    assert "--json" in base_run["run"] and "--baseline" not in base_run["run"]
    assert "--baseline base-gate.json" in pr_run["run"] and "base-gate.json" in base_run["run"]
