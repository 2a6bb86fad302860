"""The planted slowdowns (harness/plants/*.patch) still plant what they say in this tree.

scripts/gpu-session.sh's ``planted`` and ``regression`` steps apply them on a GPU machine to show
that the gate and the regression check catch a slowdown. A patch that no longer applies, or that
lands off the planned call's launch, would only show there, as a failed step or a gate that passes.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLANTS = ("2x", "25pct")  # every planned launch twice; one in two twice


def _launch_calls(source: str) -> int:
    """How many times ``launch_cache.dequantize`` (the planned path) calls the direct launcher."""
    tree = ast.parse(source)
    function = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "dequantize")
    return sum(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "fast"
        for node in ast.walk(function)
    )


def test_the_unplanted_planned_path_launches_once():
    assert _launch_calls((ROOT / "nf4kernel" / "launch_cache.py").read_text()) == 1


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to apply the patches")
@pytest.mark.parametrize("plant", PLANTS)
def test_a_planted_slowdown_applies_and_adds_launches_to_the_planned_path(tmp_path, plant):
    shutil.copytree(ROOT / "nf4kernel", tmp_path / "nf4kernel")
    patch = ROOT / "harness" / "plants" / f"{plant}.patch"
    # Outside a repository, git apply is a plain patch tool; --check first, as the steps would fail.
    subprocess.run(["git", "apply", "--check", str(patch)], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply", str(patch)], cwd=tmp_path, check=True)
    source = (tmp_path / "nf4kernel" / "launch_cache.py").read_text()
    compile(source, "launch_cache.py", "exec")
    assert _launch_calls(source) == 2  # a second direct launch, always or every other call
