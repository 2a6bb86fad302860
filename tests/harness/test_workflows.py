"""The GitHub Actions workflows against the harness: every nox session they name exists, every GPU
job has a timeout and a concurrency group, and the rules that keep the self-hosted runner safe hold."""

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
        assert yaml.safe_load(path.read_text())["permissions"] == {"contents": "read"}, path.name


def test_no_expression_is_expanded_inside_a_shell_script():
    # Untrusted values (branch names, labels, titles) reach shell steps only through env:.
    for workflow, name, job, _ in jobs():
        for script in runs(job):
            assert "${{" not in script, f"{workflow}:{name} expands an expression inside run:"


def test_no_secret_reaches_a_pull_request_job():
    for path in WORKFLOWS:
        workflow = yaml.safe_load(path.read_text())
        if "pull_request" in workflow[True] or "pull_request_target" in workflow[True]:  # YAML reads `on` as True
            assert "secrets." not in path.read_text(), path.name
            assert "pull_request_target" not in workflow[True], path.name


def test_fork_code_reaches_the_gpu_runner_only_after_approval():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "gpu.yml").read_text())
    gpu_jobs = {name: job for name, job in workflow["jobs"].items() if is_gpu(job)}
    gated = [name for name, job in gpu_jobs.items() if "needs" not in job]
    assert len(gated) == 1, "exactly one GPU job starts the chain; the others need it"
    condition = gpu_jobs[gated[0]]["if"]
    assert "github.event.label.name == 'gpu-approved'" in condition
    assert "github.event.pull_request.head.repo.full_name == github.repository" in condition
    for name, job in gpu_jobs.items():
        checkout = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@"))
        assert checkout["with"]["persist-credentials"] is False, name
        if name in gated or "pull_request" in str(job.get("if", "")) or name == "regression":
            assert "github.event.pull_request.head.sha" in checkout["with"]["ref"], name
