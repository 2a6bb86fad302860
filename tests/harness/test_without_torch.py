"""The README's venv holds nox and asv, not torch: a command that measures with torch, run there,
says in one line which environment has it and exits 4 (as the gate does), never a traceback. Here, the
commands no page gives, with torch hidden from this environment; test_commands_in_the_readme_venv.py
runs the pages' own in a venv made as the README's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Runs a module as ``python -m`` would, with torch and Triton hidden from every import.
WITHOUT_TORCH = """
import runpy, sys


class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "triton"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, NoTorch())
module, sys.argv = sys.argv[1], [sys.argv[1], *sys.argv[2:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["harness", "bench"], "nox -s bench"),
        (["harness", "regression", "HEAD", "HEAD"], "nox -s regression"),
        (["harness", "gpu-tests", str(ROOT)], "nox -s tests"),
        (["nf4kernel.targets"], ".nox/torch/bin/python"),
    ],
)
def test_a_command_that_needs_torch_says_where_it_is_in_one_line_and_exits_4(argv, said):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 4, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs torch" in lines[0] and said in lines[0], done.stderr
    assert "Traceback" not in done.stdout + done.stderr
