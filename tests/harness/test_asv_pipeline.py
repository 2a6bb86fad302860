"""The history pipeline on the CPU, end to end through the harness's entry points: ``bench`` runs
the CPU smoke suite for a commit and stores it under this machine's name and a path-independent
environment; two checkouts at different paths, run by interpreters at different paths, add to one
series; ``site publish`` builds a self-contained site of the committed GPU history, leaving the CPU
machine's interpreter times out of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from checkouts import clone_on_main, git, head, python_path

from harness.history import store as history

ROOT = Path(__file__).resolve().parents[2]
SMOKE = "cpu_interpreter.CpuInterpreter.time_interpreter_dequantize"
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


def interpreter_alias(where: Path) -> Path:
    """This venv's Python under another path (as another nox venv or runner work directory would
    be): asv's own environment would name the series after that path."""
    prefix = Path(sys.prefix)
    (where / "bin").mkdir(parents=True)
    (where / "bin" / "python").symlink_to(Path(sys.executable).resolve())
    if (prefix / "pyvenv.cfg").is_file():  # a venv: its packages, found through pyvenv.cfg and lib/
        (where / "pyvenv.cfg").write_text((prefix / "pyvenv.cfg").read_text())
        (where / "lib").symlink_to(prefix / "lib")
        return where / "bin" / "python"
    pytest.skip("needs to run in a virtual environment (nox -s tests makes one)")


def config(path: Path, repo: Path, checkout: Path, tmp: Path) -> Path:
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "project": "nf4kernel",
                "repo": str(repo),
                "branches": ["main"],
                "dvcs": "git",
                "environment_type": "existing",
                "plugins": [".harness.history.asvrun", ".harness.history.site"],
                "benchmark_dir": str(checkout / "benchmarks"),
                "results_dir": str(tmp / "results"),
                "html_dir": str(tmp / "html"),
            }
        )
    )
    return path


def run(python: Path, checkout: Path, env: dict, *args: str) -> str:
    done = subprocess.run(
        [str(python), "-m", *args],
        cwd=checkout,
        env={**env, "PYTHONPATH": python_path(checkout)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


def graph_points(html: Path, benchmark: str, machine: str) -> list[tuple]:
    """The (revision, value) points of every graph file asv made for ``benchmark`` on ``machine``."""
    files = [p for p in html.glob(f"graphs/**/{benchmark}.json") if f"machine-{machine}" in p.parts]
    return files, [point for path in files for point in json.loads(path.read_text())]


@pytest.mark.slow
@pytest.mark.skipif(head() is None, reason="asv records results per commit: needs the git checkout")
def test_two_checkouts_at_different_paths_add_to_one_series(tmp_path):
    # Two clones, b one commit ahead of a, each on a `main` that asv can read branches from.
    a = clone_on_main(tmp_path / "a")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "a's own", cwd=a)
    b = clone_on_main(tmp_path / "b", source=a)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "another", cwd=b)
    # asv keeps its machine file in ~. No GPU is visible: on a GPU machine the default suite would be
    # the GPU one, Unsloth and all, and the machine would be named after the GPU.
    env = {**os.environ, "HOME": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}

    outputs = []
    for checkout in (a, b):
        python = interpreter_alias(checkout / ".venv-elsewhere")
        conf = config(checkout / "asv-test.conf.json", b, checkout, tmp_path)
        args = ("harness", "bench", "--config", str(conf), "--suite", "cpu", "--quick", "--no-publish")
        outputs.append(run(python, checkout, env, *args))
    assert "CPU-interpreter smoke benchmarks" in outputs[0] and "2 measured, 0 skipped, 0 failed" in outputs[0]

    machines = [p for p in (tmp_path / "results").iterdir() if p.name.startswith("cpu-")]
    assert len(machines) == 1, "one machine, whatever the checkout"
    results = sorted(p.name for p in machines[0].glob("*.json") if p.name != "machine.json")
    expected = sorted(f"{git('rev-parse', 'HEAD', cwd=c)[:8]}-existing-py{PY}.json" for c in (a, b))
    assert results == expected, "one environment name, whatever the interpreter's path"
    recorded = [json.loads((machines[0] / name).read_text()) for name in results]
    for one in recorded:
        assert one["params"]["python"] == PY and one["env_name"] == f"existing-py{PY}"
        assert one["results"][SMOKE][0] and None not in one["results"][SMOKE][0]
    # asv splits series on a result's parameters: the same ones, so one series.
    assert recorded[0]["params"] == recorded[1]["params"], "one series, not one per checkout"

    out = run(Path(sys.executable), b, env, "harness", "site", "publish", "--config", str(b / "asv-test.conf.json"))
    html = tmp_path / "html"
    assert f"{machines[0].name}'s results are not graphed" in out
    assert graph_points(html, SMOKE, machines[0].name) == ([], [])
    assert "nox -s preview" in out  # a next step that works
    # The committed GPU history was seeded and published.
    for machine_dir in (p for p in history.STORE.iterdir() if p.is_dir()):
        files, points = graph_points(html, "gpu.KernelTime.track_kernel_time", machine_dir.name)
        assert len(files) == 1 and len(points) == len(history.commits(machine_dir))
    index = (html / "index.html").read_text()
    assert "https://cdn" not in index and "vendor/jquery/jquery.min.js" in index


def test_the_benchmark_processes_find_this_checkouts_kernel_without_an_install(monkeypatch):
    """On the GPU runner nothing installs nf4kernel (nox --no-venv) and asv starts its benchmark
    processes elsewhere: the checkout (or the staged kernel under test) goes first on their path, and
    this checkout (the measuring stack, harness/core) behind a staged kernel."""
    from harness.history import asvrun

    seen = {}
    monkeypatch.setattr(asvrun, "ensure_branches", lambda config: None)
    monkeypatch.setattr(asvrun, "asv", lambda *args, config, env: seen.update(env) or 0)
    monkeypatch.setattr(asvrun, "record", lambda results_dir, info: None)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    asvrun.run("f" * 40, "cpu", {"machine": "m"}, "asv.conf.json")
    assert seen["ASV_PYTHONPATH"] == str(asvrun.ROOT)
    asvrun.run("f" * 40, "cpu", {"machine": "m"}, "asv.conf.json", source="/staged")
    assert seen["ASV_PYTHONPATH"] == os.pathsep.join(["/staged", str(asvrun.ROOT)])
