"""Every command the README and docs/ name, on a machine without a GPU: it does its job, or says in
one line why it can't here and exits with the code its documentation gives. No traceback for an
expected condition. The GPU is hidden (CUDA_VISIBLE_DEVICES=""), so this holds on a GPU machine too.

The commands' own jobs are tested elsewhere (the main job in test_asv_pipeline.py, the tests by
running, lint and the CPU CI under act in test_act_ci.py); here, their answers where they can't run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORDED_GATE = ROOT / "benchmarks" / "results" / "issue10" / "planted-and-aa" / "planted-base.json"
NO_GPU = "no CUDA GPU"


def run(*args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    here = str(Path(sys.executable).parent)  # `python` in nox sessions: this environment's
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PATH": f"{here}{os.pathsep}{os.environ['PATH']}"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def said(done: subprocess.CompletedProcess) -> str:
    return done.stdout + done.stderr


# (command, exit code, what the one line says)
CANNOT_RUN_HERE = [
    (["-m", "harness.gate"], 4, "sees no CUDA GPU"),
    (["-m", "harness.gate", "--aa"], 4, "sees no CUDA GPU"),
    (["-m", "harness.gate", "--measure-only", "--kernel", "HEAD"], 4, "sees no CUDA GPU"),
    (["-m", "harness.perf"], 4, NO_GPU),
    (["-m", "harness.sweep"], 4, NO_GPU),
    (["-m", "harness.regression", "HEAD~1", "HEAD"], 4, NO_GPU),
    (["-m", "harness.power", "noop", "--out", "/tmp/nf4kernel-power-unused"], 4, NO_GPU),
    (["-m", "harness.backfill", "HEAD~1..HEAD"], 4, NO_GPU),
    (["-m", "harness.rehearse", "noop"], 4, "no NVIDIA GPU here"),
    (["-m", "harness.bench", "--suite", "gpu", "--no-publish"], 4, "needs a CUDA GPU"),
]


@pytest.mark.parametrize("args,code,why", CANNOT_RUN_HERE, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_a_gpu_command_says_why_in_one_line(args, code, why):
    done = run(sys.executable, *args)
    assert done.returncode == code, said(done)[-2000:]
    assert why in said(done) and "Traceback" not in said(done)
    line = next(line for line in said(done).splitlines() if why in line)
    assert len(line) < 240  # a sentence, not a dump


@pytest.mark.parametrize(
    "args,code,why",
    [
        (["-m", "harness.gate", "--rounds", "2"], 2, "--rounds must be at least 5"),
        (["-m", "harness.gate", "--replay", "nonexistent.json"], 2, "--replay nonexistent.json"),
        (["-m", "harness.regression", "no-such-ref", "HEAD"], 2, "neither a commit"),
        (["-m", "harness.backfill", "nothing..here"], 2, "not a revision range here"),
        (["-m", "harness.rehearse"], 2, "noop"),
    ],
    ids=["gate-rounds", "gate-replay-missing", "regression-unknown-ref", "backfill-bad-range", "rehearse-no-scenario"],
)
def test_bad_arguments_exit_2_with_the_reason(args, code, why):
    done = run(sys.executable, *args)
    assert done.returncode == code and why in said(done) and "Traceback" not in said(done), said(done)[-2000:]


@pytest.mark.parametrize(
    "session,args,code,why",
    [
        ("gate", [], 4, "sees no CUDA GPU"),
        ("regression", ["HEAD~1", "HEAD"], 4, NO_GPU),
        ("backfill", ["HEAD~1..HEAD"], 4, NO_GPU),
        ("backfill", ["nothing..here"], 2, "not a revision range here"),
        ("rehearse", ["noop"], 4, "no NVIDIA GPU here"),
    ],
)
def test_a_nox_session_passes_the_code_on(session, args, code, why):
    """`nox -s` ends with the command's own code (nox alone would say 1). --no-venv: this
    environment, so that the test installs nothing."""
    done = run(sys.executable, "-m", "nox", "--no-venv", "-s", session, "--", *args)
    assert done.returncode == code, said(done)[-2000:]
    assert why in said(done) and "Traceback" not in said(done)


def test_preview_before_any_site_says_how_to_build_one(tmp_path):
    config = tmp_path / "asv.conf.json"
    config.write_text(json.dumps({"version": 1, "html_dir": str(tmp_path / "html"), "results_dir": str(tmp_path)}))
    done = run(sys.executable, "-m", "harness.site", "preview", "--config", str(config))
    assert done.returncode == 1 and "Traceback" not in said(done)
    assert (
        said(done).strip()
        == f"site: no site in {tmp_path / 'html'} yet: build it with `python3 -m nox -s publish` (or `nox -s bench`)"
    )


def test_what_needs_no_gpu_does_its_job():
    replayed = run(sys.executable, "-m", "harness.gate", "--replay", str(RECORDED_GATE))
    assert replayed.returncode == 0 and said(replayed).strip().endswith("PASS")
    listed = run(sys.executable, "-m", "harness.history", "list")
    assert listed.returncode == 0 and listed.stdout.startswith("h200: 16 commits")
    scenarios = run(sys.executable, "-m", "harness.rehearse", "--list")
    assert scenarios.returncode == 0 and len(scenarios.stdout.splitlines()) == 4
    compiled = run(sys.executable, "-m", "nf4kernel.targets", "90")
    assert compiled.returncode == 0 and all(line.split()[-5] == "OK" for line in compiled.stdout.splitlines())
