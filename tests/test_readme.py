"""The README's usage and QLoRA examples run as they are written, and return what they say: on the CPU in Triton's
interpreter, and on the GPU where there is one."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT, child_env


def example(heading: str) -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return code


def run(code: str, tmp_path) -> subprocess.CompletedProcess:
    script = tmp_path / "example.py"
    script.write_text(code)
    (tmp_path / "tmp").mkdir()
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**child_env(), "TMPDIR": str(tmp_path / "tmp")},  # what the example leaves in a temporary folder
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_usage_example_runs_as_written(tmp_path):
    done = run(example("Use"), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    shape, dtype, _device = done.stdout.splitlines()[0].rsplit(" ", 2)
    assert shape == "torch.Size([4096, 1024])" and dtype == "torch.bfloat16"
    assert done.stdout.splitlines()[1] == "True torch.Size([1024, 4096])"


def test_the_qlora_example_trains_as_written(tmp_path):
    pytest.importorskip("peft", reason="PEFT is not installed (requirements/test.txt has it)")
    done = run(example("Fine-tuning: QLoRA with nf4kernel"), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [line for line in done.stdout.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in steps] == ["step 0", "step 1", "step 2"]
    assert all(0 < float(line.rsplit(" ", 1)[1]) < 20 for line in steps)  # a finite loss near ln(256)
    left = [str(path) for path in (tmp_path / "tmp").rglob("config.json")]
    assert left == [], f"the example leaves its checkpoint behind: {left}"
