"""The gate's command line: its table, JSON, summary and exit codes, on recorded timings and on a
machine without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from recorded import record

from nf4kernel.harness import decision, gate


def full_record(ours_s, theirs_s, **kwargs):
    r = record(ours_s, theirs_s, **kwargs)
    r["seconds"]["bitsandbytes"] = [[s * 2 for s in shapes] for shapes in r["seconds"]["unsloth"]]
    sizes = [("2048x8192 float16", 4.2e7), ("1024x4096 bfloat16", 1.05e7), ("4096x14336 bfloat16", 1.47e8)]
    r["shapes"] = [{"label": label, "bytes_per_call": size} for label, size in sizes]
    r["classic"] = {"error": "not run in this test"}
    return r


@pytest.mark.parametrize(
    "ours,theirs,code", [(0.30, 0.45, decision.EXIT_PASS), (0.45, 0.30, decision.EXIT_TOO_SLOW)], ids=["pass", "slow"]
)
def test_replay_prints_the_table_writes_json_and_summary(tmp_path, capsys, ours, theirs, code):
    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps(full_record(ours, theirs)))
    out_json, summary = tmp_path / "gate.json", tmp_path / "summary.md"
    assert gate.main(["--replay", str(recorded), "--json", str(out_json), "--summary", str(summary)]) == code
    text = capsys.readouterr().out
    for label in ("2048x8192 float16", "nf4kernel", "unsloth", "bitsandbytes", "us/call", "% copy", "median"):
        assert label in text
    assert text.strip().splitlines()[-1].startswith("PASS" if code == 0 else "FAIL")
    written = json.loads(out_json.read_text())
    assert written["verdict"]["exit_code"] == code and written["threshold"] == decision.DEFAULT_THRESHOLD
    assert "### nf4kernel speed gate" in summary.read_text() and "| shape" in summary.read_text()


def test_threshold_from_the_command_line_and_the_environment(tmp_path, monkeypatch):
    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps(full_record(0.30, 0.39)))  # a 1.3x speed-up
    assert gate.main(["--replay", str(recorded)]) == decision.EXIT_PASS
    assert gate.main(["--replay", str(recorded), "--threshold", "1.4"]) == decision.EXIT_TOO_SLOW
    monkeypatch.setenv("NF4KERNEL_GATE_THRESHOLD", "1.4")
    assert gate.main(["--replay", str(recorded)]) == decision.EXIT_TOO_SLOW


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what the gate does on a machine without a GPU")
def test_without_a_gpu_the_gate_says_so_and_does_not_pass():
    done = subprocess.run([sys.executable, "-m", "nf4kernel.harness.gate"], capture_output=True, text=True, timeout=300)
    assert done.returncode == decision.EXIT_NO_GPU
    assert "no CUDA GPU" in done.stdout and "FAIL" in done.stdout


def test_without_torch_the_gate_says_so_and_does_not_pass(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    assert gate.main(["--no-classic"]) == decision.EXIT_NO_GPU
    assert "torch is not importable" in capsys.readouterr().out


def test_summary_is_markdown_with_a_chart_of_the_speed_up_per_shape(tmp_path):
    r = full_record(0.30, 0.45)
    # Shape 2 (of 3) made 2x slower for Unsloth in every round: its own bar must show it.
    r["seconds"]["unsloth"] = [[s * (2 if i == 1 else 1) for i, s in enumerate(rnd)] for rnd in r["seconds"]["unsloth"]]
    recorded, summary = tmp_path / "recorded.json", tmp_path / "summary.md"
    recorded.write_text(json.dumps(r))
    assert gate.main(["--replay", str(recorded), "--summary", str(summary)]) == decision.EXIT_PASS
    text = summary.read_text()
    assert text.startswith("### nf4kernel speed gate")
    assert "| 2048x8192 float16" in text and "|------" in text  # the table, as Markdown
    chart = text.split("```mermaid\n", 1)[1].split("```", 1)[0]
    assert chart.startswith("xychart-beta")
    assert 'x-axis ["2048x8192 float16", "1024x4096 bfloat16", "4096x14336 bfloat16"]' in chart
    assert "bar [1.500, 3.000, 1.500]" in chart
    assert "line [1.150, 1.150, 1.150]" in chart
    assert text.rstrip().endswith("**PASS**")


def test_summary_of_a_run_that_measured_nothing_has_no_chart(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    summary = tmp_path / "summary.md"
    assert gate.main(["--no-classic", "--summary", str(summary)]) == decision.EXIT_NO_GPU
    text = summary.read_text()
    assert "mermaid" not in text and "**FAIL" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what nox -s gate does on a machine without a GPU")
def test_nox_passes_the_gates_exit_code_on(tmp_path):
    """nox itself would say 1 for any failure: the session hands the gate's own code (4, no GPU) to
    whoever called nox, with the true cause in the output."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    command = [sys.executable, "-m", "nox", "--no-venv", "-f", str(root / "noxfile.py"), "-s", "gate"]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == decision.EXIT_NO_GPU, done.stdout[-2000:] + done.stderr[-2000:]
    assert "sees no CUDA GPU" in done.stdout + done.stderr


def test_every_nox_session_says_what_it_does_in_one_line():
    """`nox -l` shows the first line of each session's docstring: it must be a whole sentence."""
    import ast

    tree = ast.parse((Path(__file__).resolve().parents[2] / "noxfile.py").read_text())
    sessions = [f for f in tree.body if isinstance(f, ast.FunctionDef) and "nox.session" in ast.unparse(f)]
    assert len(sessions) >= 8
    for function in sessions:
        first = ast.get_docstring(function).splitlines()[0]
        assert first.endswith((".", ".``")) and len(first) <= 110, f"{function.name}: {first!r}"
