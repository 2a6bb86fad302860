"""The history pipeline on the CPU: asv runs the CPU-mode suite for the current commit through the
harness entry point, ``asv publish`` builds the site, and both outputs hold what they should."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _git_head():
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


@pytest.mark.slow
@pytest.mark.skipif(_git_head() is None, reason="asv records results per commit: needs the git checkout")
def test_bench_entry_point_records_results_and_builds_the_site(tmp_path):
    lines = (ROOT / "asv.conf.json").read_text().splitlines()
    config = json.loads("\n".join(line for line in lines if not line.strip().startswith("//")))
    config.update(
        repo=str(ROOT),
        benchmark_dir=str(ROOT / "benchmarks"),
        results_dir=str(tmp_path / "results"),
        html_dir=str(tmp_path / "html"),
        env_dir=str(tmp_path / "env"),
    )
    config_path = tmp_path / "asv.conf.json"
    config_path.write_text(json.dumps(config))
    env = {**os.environ, "HOME": str(tmp_path)}  # asv keeps its machine file in ~
    command = [
        sys.executable,
        "-m",
        "nf4kernel.harness.bench",
        "--config",
        str(config_path),
        "--machine",
        "ci-cpu",
        "--bench",
        "TimeCpuInterpreter",
        "--quick",
    ]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    head = _git_head()
    results = list((tmp_path / "results" / "ci-cpu").glob(f"{head[:8]}-*.json"))
    assert len(results) == 1, list((tmp_path / "results").rglob("*"))
    recorded = json.loads(results[0].read_text())
    assert recorded["commit_hash"] == head
    timings = recorded["results"]["bench_dequantize.TimeCpuInterpreter.time_interpreter_dequantize"][0]
    assert timings and all(t is not None and t > 0 for t in timings)

    html = tmp_path / "html"
    assert "airspeed velocity" in (html / "index.html").read_text().lower()
    graphs = list(html.glob("graphs/**/bench_dequantize.TimeCpuInterpreter.time_interpreter_dequantize.json"))
    assert graphs, "asv publish made no graph for the benchmark"
    import torch

    assert ("GPU: " if torch.cuda.is_available() else "CPU run (no CUDA GPU)") in done.stdout
