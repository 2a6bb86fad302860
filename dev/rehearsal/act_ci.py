"""ci.yml's CPU jobs, run on this machine by nektos act exactly as the workflow says, before GitHub does.

    python -m dev.rehearsal act-ci                 # the lint job and the tests leg of this machine's Python
    python -m dev.rehearsal act-ci lint harness    # any of ci.yml's jobs by id

The workflow file is the real one. Two things differ from GitHub, both because this machine reaches
no GitHub: act copies this working tree into the job's workspace in place of actions/checkout, and
actions/setup-python is mapped to a labelled local stand-in (dev/rehearsal/standins/setup-python) that uses a
Python already installed here. The matrix leg run for `tests` is the one of this machine's Python.
Exit 0 when every job asked for succeeded (and for ``--help``); 1 when one failed; 2 bad arguments
(a job ci.yml doesn't have, an option this command doesn't take), said in one line.
"""

from __future__ import annotations

import sys

import yaml

from dev.rehearsal import act
from harness.core import command_output
from harness.core.paths import ROOT

CI_WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
SETUP_PYTHON_STANDIN = ROOT / "dev" / "rehearsal" / "standins" / "setup-python"


def setup_python_refs(workflow: dict) -> set[str]:
    """Every pinned actions/setup-python the workflow uses (each is mapped to the stand-in)."""
    return {
        step["uses"]
        for job in workflow["jobs"].values()
        for step in job.get("steps", [])
        if step.get("uses", "").startswith("actions/setup-python@")
    }


def host_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def run_job(job: str, workflow: dict, *, timeout: float = 1800) -> bool:
    extra = ["-j", job]
    matrix = workflow["jobs"][job].get("strategy", {}).get("matrix", {})
    if "python" in matrix:
        if host_python() not in [str(v) for v in matrix["python"]]:
            print(f"{job}: ci.yml has no leg for this machine's Python {host_python()}", file=sys.stderr)
            return False
        extra += ["--matrix", f"python:{host_python()}"]
    labels = {label for j in workflow["jobs"].values() for label in _labels(j)}
    result = act.run(
        "push",  # ci.yml runs every job on a push to main
        repo=ROOT,
        workflows=CI_WORKFLOW,
        labels=labels,
        payload={"ref": "refs/heads/main"},
        local_actions={ref: SETUP_PYTHON_STANDIN for ref in setup_python_refs(workflow)},
        extra=extra,
        timeout=timeout,
        capture=False,
        env_remove=("PYTEST_", "NOX_"),  # a nested pytest or nox must not think it is a worker of ours
    )
    return result.returncode == 0


def _labels(job: dict) -> list[str]:
    runs_on = job.get("runs-on", [])
    return runs_on if isinstance(runs_on, list) else [runs_on]


def main(argv: list[str]) -> int:
    parser = command_output.Parser(prog="python -m dev.rehearsal act-ci", description=__doc__.split("\n\n")[0])
    parser.add_argument("jobs", nargs="*", metavar="JOB", help="ci.yml's job ids (default: lint tests)")
    jobs = parser.parse_args(argv).jobs or ["lint", "tests"]
    workflow = yaml.safe_load(CI_WORKFLOW.read_text())
    unknown = [job for job in jobs if job not in workflow["jobs"]]
    if unknown:
        print(f"not jobs of ci.yml: {', '.join(unknown)} (it has {', '.join(workflow['jobs'])})", file=sys.stderr)
        return 2
    failed = [job for job in jobs if not run_job(job, workflow)]
    print(f"act, ci.yml: {len(jobs) - len(failed)} of {len(jobs)} jobs succeeded", f"(failed: {failed})" * bool(failed))
    return 1 if failed else 0
