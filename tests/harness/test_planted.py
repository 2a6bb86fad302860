"""The planted slowdowns (dev/rehearsal/plants/*.patch) still plant what they say in this tree.

dev/gpu-machine/gpu-session.sh's ``planted``, ``regression`` and ``regression-plant`` steps apply them
on a GPU machine to show that the gate and the regression check catch a slowdown. A patch that no
longer applies, or that lands off the planned call's launch, would only show there, as a failed step
or a gate that passes.

The ladder (``large-5pct``, ``large-10pct``, ``large-20pct``, ``all-5pct``: ``python -m studies.power``)
plants slowdowns of known size: after the kernel, a copy that moves a stated fraction of the bytes
the kernel moves, on the weights of 16 MB and more packed, or on every weight.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
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
    patch = ROOT / "dev" / "rehearsal" / "plants" / f"{plant}.patch"
    # Outside a repository, git apply is a plain patch tool; --check first, as the steps would fail.
    subprocess.run(["git", "apply", "--check", str(patch)], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply", str(patch)], cwd=tmp_path, check=True)
    source = (tmp_path / "nf4kernel" / "launch_cache.py").read_text()
    compile(source, "launch_cache.py", "exec")
    assert _launch_calls(source) == 2  # a second direct launch, always or every other call


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to apply the patches")
def test_the_host_sync_plant_waits_after_the_planned_launch(tmp_path):
    """host-sync.patch: what the regression check, which times host time too, must call slower."""
    shutil.copytree(ROOT / "nf4kernel", tmp_path / "nf4kernel")
    subprocess.run(
        ["git", "apply", str(ROOT / "dev" / "rehearsal" / "plants" / "host-sync.patch")], cwd=tmp_path, check=True
    )
    source = (tmp_path / "nf4kernel" / "launch_cache.py").read_text()
    compile(source, "launch_cache.py", "exec")
    assert _launch_calls(source) == 1
    assert "fast(_raw_stream(index), pointer)\n                    torch.cuda.synchronize()" in source


LADDER = {"large-5pct": (0.05, 16), "large-10pct": (0.10, 16), "large-20pct": (0.20, 16), "all-5pct": (0.05, 0)}

# Run in the planted copy: the elements each planted copy moves, for an output of each size.
COUNT_COPIES = """
import json, sys, torch
from torch.utils._python_dispatch import TorchDispatchMode
from nf4kernel import api
assert api.__file__.startswith(sys.argv[1]), api.__file__
class Copies(TorchDispatchMode):
    def __init__(self):
        super().__init__(); self.numels = []
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.copy_.default:
            self.numels.append(args[0].numel())
        return func(*args, **(kwargs or {}))
found = {}
for n in (2**20, 2 * 16 * 2**20):  # an output of 2**20 elements (0.5 MB packed); 32 Mi (16 MiB packed)
    out = torch.zeros(n, dtype=torch.bfloat16)
    with Copies() as mode:
        api._planted(out)
    found[n] = mode.numels
print(json.dumps(found))
"""


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to apply the patches")
@pytest.mark.parametrize("plant", sorted(LADDER))
def test_a_ladder_plant_moves_the_bytes_it_says_on_the_weights_it_says(tmp_path, plant):
    fraction, min_mb = LADDER[plant]
    shutil.copytree(ROOT / "nf4kernel", tmp_path / "nf4kernel")
    subprocess.run(
        ["git", "apply", str(ROOT / "dev" / "rehearsal" / "plants" / f"{plant}.patch")], cwd=tmp_path, check=True
    )
    done = subprocess.run(
        [sys.executable, "-c", COUNT_COPIES, str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for n, numels in json.loads(done.stdout).items():
        n = int(n)
        if n // 2 < min_mb * 2**20:
            assert numels == [], (n, numels)
            continue
        moved = n // 2 + n * 2  # packed codes and the bf16 output
        (k,) = numels
        assert abs(2 * k * 2 - fraction * moved) <= 4  # the copy reads and writes k bf16 elements
