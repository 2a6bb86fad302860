"""``python -m harness bench``: what it refuses before measuring, and that each ending has its
documented exit code and one line (its measuring and publishing are test_asv_pipeline.py's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.history import asvrun, bench
from harness.history import store as history

ROOT = Path(__file__).resolve().parents[2]

NO_GPU = {"machine": "cpu-test", "gpu": "none", "cpu": "a test CPU"}
A_GPU = {"machine": "h100-test", "gpu": "NVIDIA H100 (a stand-in)"}


@pytest.fixture
def on(monkeypatch):
    """bench on a machine described as ``info``, with nothing measured, seeded or stored for real:
    each step it takes is recorded, in order."""
    steps = []

    def machine_is(info: dict, measured: int = 1):
        monkeypatch.setattr(asvrun, "register", lambda: info)
        monkeypatch.setattr(asvrun, "one_line", lambda info: f"machine {info['machine']}")
        monkeypatch.setattr(history, "seed", lambda results: steps.append("seed") or 0)
        monkeypatch.setattr(asvrun, "run", lambda *args, **kwargs: steps.append("measure") or 0)
        monkeypatch.setattr(asvrun, "outcome", lambda *args: asvrun.Outcome(measured, [], []))
        return steps

    return machine_is


def test_store_without_a_gpu_is_refused_before_measuring(on, capsys):
    steps = on(NO_GPU)
    assert bench.main(["--store", "--no-publish"]) == 4
    assert steps == []
    refusal = capsys.readouterr().out.splitlines()[-1]
    assert refusal == (
        "bench: --store needs a CUDA GPU; none here: the committed history holds GPU machines only (exit 4)"
    )


def test_without_store_a_cpu_machine_measures_its_smoke_suite(on):
    steps = on(NO_GPU)
    assert bench.main(["--no-publish"]) == 0
    assert steps == ["seed", "measure"]


def test_store_that_finds_nothing_to_store_says_so_and_exits_1(on, monkeypatch, capsys):
    on(A_GPU)

    def no_results(results, machine_name):
        raise ValueError(f"no results for machine {machine_name!r} in {results}")

    monkeypatch.setattr(history, "store", no_results)
    assert bench.main(["--store", "--no-publish"]) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("bench: nothing stored: no results for machine 'h100-test'")


def test_store_on_a_gpu_machine_stores_its_results(on, monkeypatch, capsys):
    stored = []
    on(A_GPU)
    monkeypatch.setattr(history, "store", lambda results, machine_name: stored.append(machine_name) or 3)
    assert bench.main(["--store", "--no-publish"]) == 0
    assert stored == ["h100-test"]
    assert "bench: 3 result files of h100-test in" in capsys.readouterr().out


def test_the_command_refuses_store_in_one_line_on_a_cpu(tmp_path):
    """The real command, the GPU hidden (so on a GPU machine too): one line, exit 4, no traceback,
    nothing measured. asv's machine file goes to a temporary home."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HOME": str(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "harness", "bench", "--store", "--no-publish"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode == 4, said[-2000:]
    assert "Traceback" not in said and "smoke benchmark" not in said
    assert said.splitlines()[-1].endswith("the committed history holds GPU machines only (exit 4)")


def test_help_describes_the_command_in_a_whole_sentence(capsys):
    with pytest.raises(SystemExit) as stopped:
        bench.main(["--help"])
    assert stopped.value.code == 0
    description = " ".join(capsys.readouterr().out.split("\n\n")[1].split())
    assert description == "The main job: the asv suite for the current commit on this machine, then the history site."
