"""The README's usage example runs as it is written, and returns what it says: on the CPU in Triton's
interpreter, and on the GPU where there is one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def usage_example() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Use\n", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return code


def test_the_usage_example_runs_as_written(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(usage_example())
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # installed or not
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    shape, dtype, _device = done.stdout.splitlines()[0].rsplit(" ", 2)
    assert shape == "torch.Size([4096, 1024])" and dtype == "torch.bfloat16"
    assert done.stdout.splitlines()[1] == "True torch.Size([1024, 4096])"
