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
    """Asks for a GPU runner: `gpu`, or a GPU type's label gpu-<type> (from its matrix)."""
    runs_on = job.get("runs-on", [])
    return any(
        label == "gpu" or label.startswith("gpu-") for label in (runs_on if isinstance(runs_on, list) else [runs_on])
    )


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


def checkouts(job) -> list[dict]:
    return [step for step in job.get("steps", []) if step.get("uses", "").startswith("actions/checkout@")]


# What a writing job may write: gpu.yml's commit status, history.yml's results branch and regression
# issue; fleet.yml's proposals (a branch, its pull request or an issue) and the runner image it pushes.
WRITES = {"statuses", "contents", "issues", "pull-requests", "packages"}
PROPOSALS = {"pull-requests", "packages"}  # fleet.yml's alone


def test_a_job_that_may_write_runs_only_its_workflows_own_commit():
    """The jobs that can write are hosted and check out nothing but the commit the workflow itself
    comes from (the default branch's)."""
    for workflow, name, job, _ in jobs():
        writes = {scope for scope, access in (job.get("permissions") or {}).items() if access == "write"}
        if writes - {"pages", "id-token"}:
            assert not is_gpu(job), f"{workflow}:{name}"
            assert all(step["with"]["ref"] == "${{ github.sha }}" for step in checkouts(job)), f"{workflow}:{name}"
            assert writes <= WRITES, f"{workflow}:{name} writes {writes}"
            assert workflow == "fleet.yml" or not writes & PROPOSALS, f"{workflow}:{name} writes {writes}"


def test_no_expression_is_expanded_inside_a_shell_script():
    # Untrusted values (branch names, labels, titles) reach shell steps only through env:.
    for workflow, name, job, _ in jobs():
        for script in runs(job):
            assert "${{" not in script, f"{workflow}:{name} expands an expression inside run:"


def test_no_workflow_names_a_secret():
    for path in WORKFLOWS:
        assert "secrets." not in yaml.safe_dump(yaml.safe_load(path.read_text())), path.name  # comments may say it


# The events under which a PR's code would run with the base repository's context, and under which
# actions/checkout v7 (and its backports) refuses a fork's commit unless allow-unsafe-pr-checkout is set.
PRIVILEGED_PR_EVENTS = {"pull_request_target", "workflow_run"}


def test_no_workflow_runs_on_the_events_checkouts_guard_refuses():
    for path in WORKFLOWS:
        assert not PRIVILEGED_PR_EVENTS & set(yaml.safe_load(path.read_text())[True]), path.name


def test_the_comment_trigger_is_only_in_gpu_yml_and_justified_beside_it():
    for path in WORKFLOWS:
        text = path.read_text()
        if "issue_comment" in yaml.safe_load(text)[True]:
            assert path.name == "gpu.yml", f"{path.name}: only gpu.yml may run on comments"
            assert "issue_comment: # zizmor: ignore[dangerous-triggers]" in text


def test_every_pinned_action_names_its_version_beside_the_hash():
    # Dependabot rewrites both; the version is what the checkout guard's test below reads.
    for path in WORKFLOWS:
        for line in path.read_text().splitlines():
            if re.search(r"uses: [\w.-]+/[\w./-]+@[0-9a-f]{40}", line):
                assert re.search(r"@[0-9a-f]{40} # v\d+\.\d+\.\d+$", line), f"{path.name}: {line.strip()}"


def test_every_checkout_of_the_prs_commit_opts_in_to_it_explicitly():
    """actions/checkout v7 (June 2026; backported to v6.1 and later v4 releases) refuses a fork's commit
    under pull_request_target and workflow_run unless `allow-unsafe-pr-checkout: true`. gpu.yml runs on
    neither, but a bump (Dependabot's) or a trigger added later must not silently stop every fork's
    runs: each checkout of the approved commit says it explicitly."""
    gpu = yaml.safe_load((ROOT / ".github" / "workflows" / "gpu.yml").read_text())
    candidate = [s for job in gpu["jobs"].values() for s in checkouts(job) if s["with"].get("path") == "candidate"]
    assert len(candidate) == 3  # gpu-tests, gate, regression
    for step in candidate:
        assert step["with"]["allow-unsafe-pr-checkout"] is True
    for path in WORKFLOWS:  # nothing else checks out a PR's commit
        for job in yaml.safe_load(path.read_text())["jobs"].values():
            for step in checkouts(job):
                if step["with"].get("path") != "candidate":
                    assert "candidate" not in str(step["with"].get("ref", "")) and "head" not in str(step["with"])


def test_no_workflow_uses_the_actions_cache():
    # A PR's code that runs on the GPU runner could write the default branch's cache scope; with no
    # workflow reading that cache, nothing it writes there is ever used.
    for workflow, name, job, _ in jobs():
        for step in job.get("steps", []):
            assert not step.get("uses", "").startswith("actions/cache"), f"{workflow}:{name}"
            assert "cache" not in step.get("with", {}), f"{workflow}:{name}: {step['uses']} with a cache"


def test_no_workflow_adds_a_package_index():
    # The nox sessions bring torch's CPU build themselves (requirements/torch-cpu.txt), as on a user's
    # machine: an index added by CI would hide an install that fails there.
    for path in WORKFLOWS:
        workflow = yaml.safe_load(path.read_text())
        places = [workflow.get("env")] + [job.get("env") for job in workflow["jobs"].values()]
        places += [step.get("env") for job in workflow["jobs"].values() for step in job.get("steps", [])]
        for env in filter(None, places):
            assert not {"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS"} & set(env), path.name
        assert "--extra-index-url" not in path.read_text() and "--index-url" not in path.read_text(), path.name


GPU_YML = ROOT / ".github" / "workflows" / "gpu.yml"


def gpu_yml() -> dict:
    return yaml.safe_load(GPU_YML.read_text())


def test_a_prs_commit_reaches_the_gpu_runner_only_through_the_approval_job():
    workflow = gpu_yml()
    # Workflow files read from the default branch only (never pull_request, whose file the PR supplies).
    assert workflow[True] == {
        "issue_comment": {"types": ["created"]},
        "push": {"branches": ["main"]},
        "workflow_dispatch": None,
    }
    approve = workflow["jobs"]["approve"]
    assert not is_gpu(approve) and "startsWith(github.event.comment.body, '/gpu-approve')" in approve["if"]
    assert "python3 -m harness approval approve" in runs(approve)
    for name, job in workflow["jobs"].items():
        if is_gpu(job):
            assert "approve" in ([job["needs"]] if isinstance(job["needs"], str) else job["needs"]), name


def test_every_gpu_job_checks_out_the_judge_and_the_approved_commit_side_by_side():
    """The base's harness (trusted/) judges the approved commit (candidate/); neither inside the other."""
    for name, job in gpu_yml()["jobs"].items():
        if not is_gpu(job):
            continue
        got = {step["with"]["path"]: step["with"]["ref"] for step in checkouts(job)}
        assert got == {
            "trusted": "${{ needs.approve.outputs.trusted }}",
            "candidate": "${{ needs.approve.outputs.candidate }}",
        }, name
        for step in job["steps"]:
            assert "continue-on-error" not in step, f"{name}: a step that may fail quietly"


def test_the_verdicts_come_from_the_trusted_checkout():
    jobs_ = gpu_yml()["jobs"]
    tests = next(s for s in jobs_["gpu-tests"]["steps"] if s.get("id") == "tests")
    # No tool runs in the PR's checkout (a PR's nox/ or pytest/ would run in its place there): the
    # default branch's tests judge its staged kernel, and its own suite runs sandboxed.
    assert tests["working-directory"] == "trusted" and tests["run"] == "python -m harness gpu-tests ../candidate"
    for job in jobs_.values():
        for step in job["steps"]:
            assert step.get("working-directory") != "candidate", step.get("name")
    for name in ("gate", "regression"):
        for step in jobs_[name]["steps"]:
            if "run" in step and step.get("id") != "env":
                assert step["working-directory"] == "trusted", f"{name}: {step.get('name')}"


def test_the_gate_measures_the_pr_then_decides_apart_with_no_relative_check():
    """The PR's kernel is measured by the default branch's harness, sandboxed; the verdict is a
    process of its own that reads the record from $RUNNER_TEMP (where no file of the PR lands) and
    checks its commit. No base is measured: the regression job is the one relative check."""
    steps = gpu_yml()["jobs"]["gate"]["steps"]
    order = [s.get("id") for s in steps if "run" in s]
    assert order == ["env", "measure", "decide"]
    pr, decide = (next(s for s in steps if s.get("id") == i) for i in ("measure", "decide"))
    assert "--measure-only" in pr["run"] and "--kernel ../candidate" in pr["run"]
    assert '--replay "$RUNNER_TEMP/gate.json"' in decide["run"] and "--kernel " not in decide["run"]
    assert '--expect-kernel "$CANDIDATE"' in decide["run"]
    assert "BASE" not in gpu_yml()["jobs"]["gate"].get("env", {})
    assert not [s for s in steps if "--baseline" in s.get("run", "")]


def test_the_regression_check_measures_then_decides_from_the_record_alone():
    job = gpu_yml()["jobs"]["regression"]
    assert job["if"] == "needs.approve.outputs.base != ''"
    measure, decide = (next(s for s in job["steps"] if s.get("id") == i) for i in ("measure", "decide"))
    record = '"$RUNNER_TEMP/regression.json"'
    assert f'-s regression -- "$BASE" ../candidate --measure-only --record {record}' in measure["run"]
    assert f"-s regression -- --replay {record}" in decide["run"] and '--expect "$BASE" "$CANDIDATE"' in decide["run"]
    assert measure["working-directory"] == decide["working-directory"] == "trusted"


def test_history_measures_read_only_and_a_hosted_job_pushes_the_results():
    """The GPU jobs read; a hosted job per GPU job writes the results branch, running nothing but the
    workflow's own commit's harness (results_branch.py merges, and never forces a push)."""
    history = yaml.safe_load((ROOT / ".github" / "workflows" / "history.yml").read_text())["jobs"]
    for measures, stores in (("benchmark", "store"), ("backfill", "store-backfilled")):
        assert history[measures]["permissions"] == {"contents": "read"} and is_gpu(history[measures])
        assert history[stores]["permissions"] == {"contents": "write"} and not is_gpu(history[stores])
        assert history[stores]["needs"] == measures
        assert [step["with"]["ref"] for step in checkouts(history[stores])] == ["${{ github.sha }}"]
        assert [script.split(" --")[0] for script in runs(history[stores])] == [
            "python3 -m harness results-branch store"
        ]
        assert all("--force" not in script and "push" not in script for script in runs(history[stores]))
    judge = history["changepoints"]
    assert judge["permissions"] == {"contents": "read", "issues": "write"} and not is_gpu(judge)
    assert judge["needs"] == ["store", "store-backfilled"]
    assert [step["with"]["ref"] for step in checkouts(judge)] == ["${{ github.sha }}"]


def test_every_checkout_keeps_no_credentials():
    for workflow, name, job, _ in jobs():
        for step in checkouts(job):
            assert step["with"]["persist-credentials"] is False, f"{workflow}:{name}"
