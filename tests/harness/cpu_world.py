"""gpu.yml and history.yml on the CPU, as the rehearsal runs them on a GPU (dev/rehearsal/rehearse.py:
act, the stand-in actions, the stand-in GitHub API), with only the steps that need a GPU put in
place: each measuring step copies a measurement recorded on an H200 to where the real step writes
its own, and the test steps say where they would have run. Everything else is the real step: the
approval, every checkout, every verdict (the gate's and the regression check's, from recorded
timings), the commit status."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import recorded as recorded_samples
import yaml

from dev.rehearsal import rehearsal_world

ROOT = Path(__file__).resolve().parents[2]
GATE_RECORDS = ROOT / "tests" / "fixtures" / "gate" / "issue10" / "planted-and-aa"  # one H200 session
ASV_RECORDED = ROOT / "tests" / "fixtures" / "asv" / "h200-regression-results"  # the push's results
RECORDED_ON = ("h200",)  # the GPU type of those recordings: a world's pull requests run on it alone
NOOP, SLOW_2X = None, recorded_samples.planted_2x()  # the regression check's recorded samples: unchanged, the 2x plant

# Gate records of one H200 session: an unplanted run, the 2x plant (0.894x over Unsloth, 36% below
# the base's speed-up) and a 25% plant.
UNPLANTED = GATE_RECORDS / "planted-base.json"
PLANTED_2X = GATE_RECORDS / "planted-2x.json"


def workflow(world: rehearsal_world.World, name: str) -> dict:
    return yaml.safe_load((world.work / ".github" / "workflows" / name).read_text())


def with_run(step: dict, script: str) -> dict:
    """The step with another script: its id, condition, directory and variables kept."""
    return {**step, "run": script}


def of_commit(record: Path, commit: str, to: Path) -> None:
    """A recorded gate record, as measured of ``commit``'s kernel."""
    found = json.loads(record.read_text())
    found.setdefault("kernel", {}).update(source=commit, commit=commit)
    to.write_text(json.dumps(found))


def gpu_steps_replaced(
    world: rehearsal_world.World,
    candidate: str,
    *,
    pr_record: Path = UNPLANTED,
    slower: dict | None = NOOP,
) -> dict:
    """(job, step id) -> the step that stands in for a GPU one."""
    recorded = world.scratch / "recorded"
    recorded.mkdir(exist_ok=True)
    # The record as the trusted side writes it: it names the commit whose kernel it measured, which
    # the verdict checks (--expect-kernel).
    of_commit(pr_record, candidate, recorded / "gate.json")
    regression = recorded_samples.regression_record(slower, base=world.main, head=candidate)
    (recorded / "regression.json").write_text(json.dumps(regression))
    steps = {}
    for name in ("gpu.yml", "history.yml"):
        for job_id, job in workflow(world, name)["jobs"].items():
            for step in job["steps"]:
                steps[(job_id, step.get("id"))] = step
    replaced = {
        (job, "env"): with_run(steps[(job, "env")], 'echo "(CPU: no GPU to describe)"')
        for job in ("gpu-tests", "gate", "regression", "benchmark")
    }
    replaced[("gpu-tests", "tests")] = with_run(
        steps[("gpu-tests", "tests")], 'echo "(CPU: the tests would run here) $PWD"; test -f ../trusted/noxfile.py'
    )
    replaced[("gate", "measure")] = with_run(steps[("gate", "measure")], f'cp {recorded}/gate.json "$RUNNER_TEMP/"')
    replaced[("regression", "measure")] = with_run(
        steps[("regression", "measure")], f'cp {recorded}/regression.json "$RUNNER_TEMP/"'
    )
    machine = world.scratch / "results-of-the-push"
    results = machine / "h200"
    results.mkdir(parents=True, exist_ok=True)  # a second run in one world writes the same files
    shutil.copy(ASV_RECORDED / "h200" / "machine.json", results / "machine.json")
    shutil.copy(ASV_RECORDED / "benchmarks.json", machine / "benchmarks.json")
    measured = json.loads((ASV_RECORDED / "h200" / "b543b026-existing-py3.12.json").read_text())
    (results / f"{candidate[:8]}-existing-py3.12.json").write_text(json.dumps({**measured, "commit_hash": candidate}))
    replaced[("benchmark", "bench")] = with_run(
        steps[("benchmark", "bench")],
        f"mkdir -p .asv/html && cp -r {machine}/. .asv/results/ && echo '<html></html>' > .asv/html/index.html",
    )
    return replaced


def run(world: rehearsal_world.World, event: str, payload: dict, names: tuple, replaced: dict) -> rehearsal_world.Run:
    """act on the named workflows, with this interpreter (nox, asv and the harness's needs) first on
    the PATH as `python` and `python3`, as the runner's own Python would be."""
    folder = world.workflows(names, replaced)
    here = str(Path(sys.executable).parent)
    return world.run(event, payload, folder, timeout=300, env={"PATH": f"{here}{os.pathsep}{os.environ['PATH']}"})
