"""Where PyTorch's CPU index can't be reached, `nox -s tests` ends in one line naming the way out
(NF4KERNEL_TORCH), and that way out installs torch's CPU build.

The unreachable index is a closed port on this machine (http://127.0.0.1:9/), and pip's own sources
are closed too (no configuration, PyPI replaced by the same port, no retries), so the run asks nothing
of the network and ends in seconds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import noxfile
from harness.core.paths import ROOT

CLOSED = "http://127.0.0.1:9"
# What nox needs to start the tests session and build the shared environment up to torch's install.
NEEDED = ("noxfile.py", "pyproject.toml", "README.md", "LICENSE", "requirements", "nf4kernel")


def closed_pip_env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PIP_", "NF4KERNEL_TORCH"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=f"{CLOSED}/simple", PIP_RETRIES="0", PIP_TIMEOUT="3")
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


@pytest.fixture
def checkout_with_a_closed_index(tmp_path) -> Path:
    tree = tmp_path / "checkout"
    tree.mkdir()
    for name in NEEDED:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, tree / name)
    torch_cpu = tree / noxfile.TORCH_CPU_REQUIREMENTS
    text = torch_cpu.read_text()
    assert "--index-url https://download.pytorch.org/whl/cpu" in text
    torch_cpu.write_text(text.replace("https://download.pytorch.org/whl/cpu", f"{CLOSED}/whl/cpu"))
    return tree


@pytest.mark.skipif(noxfile.has_nvidia_gpu(), reason="a GPU machine takes PyPI's CUDA build, not the CPU index")
@pytest.mark.parametrize(
    "session",
    [["tests"], ["kernel_tests", "--", "torch==2.11.0", "triton==3.6.0"]],
    ids=["tests", "kernel_tests"],
)
def test_an_unreachable_cpu_index_ends_the_session_in_one_line_naming_the_override(
    checkout_with_a_closed_index, session
):
    """Never a multi-gigabyte CUDA build without being asked: a kernel_tests leg too (CI's legs here
    ask, NF4KERNEL_TORCH=pypi in .ci/run)."""
    tree = checkout_with_a_closed_index
    command = [sys.executable, "-m", "nox", "--envdir", str(tree / ".nox"), "--no-color", "-s", *session]
    start = time.monotonic()
    done = subprocess.run(command, cwd=tree, env=closed_pip_env(), capture_output=True, text=True, timeout=170)
    took = time.monotonic() - start
    output = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode != 0, output[-20:]
    said = [line for line in output if noxfile.TORCH_OVERRIDE in line]
    assert len(said) == 1, output[-20:]
    (line,) = said
    assert f"{CLOSED}/whl/cpu does not answer" in line and "'pypi'" in line and "folder" in line
    assert output[-1] == line, output[-5:]  # the last line: nothing after it buries it
    assert "Retrying" not in done.stdout + done.stderr  # no retry warnings before it
    assert took < 120, f"{took:.0f} s"


def test_the_override_names_a_wheel_a_folder_or_pypi(tmp_path, monkeypatch):
    version = noxfile.pin_of(str(ROOT / noxfile.TORCH_CPU_REQUIREMENTS), "torch")
    wheel = tmp_path / f"torch-{version}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"")
    monkeypatch.delenv(noxfile.TORCH_OVERRIDE, raising=False)
    assert noxfile.torch_from_override(version) is None
    monkeypatch.setenv(noxfile.TORCH_OVERRIDE, "pypi")
    assert noxfile.torch_from_override(version) == []
    monkeypatch.setenv(noxfile.TORCH_OVERRIDE, str(wheel))
    assert noxfile.torch_from_override(version) == [str(wheel)]
    monkeypatch.setenv(noxfile.TORCH_OVERRIDE, str(tmp_path))
    assert noxfile.torch_from_override(version) == ["--no-index", "--find-links", str(tmp_path), f"torch=={version}"]
    for wrong in (str(tmp_path / "missing"), str(tmp_path / "torch-2.0.0-cp311-none-any.whl")):
        monkeypatch.setenv(noxfile.TORCH_OVERRIDE, wrong)
        with pytest.raises(ValueError, match=f"is neither a torch {version} wheel"):
            noxfile.torch_from_override(version)


def local_torch_cpu_wheels(version: str) -> list[Path]:
    """This machine's copies of the CPU build (pip's find-links folders), which the override can name."""
    folders = os.environ.get("PIP_FIND_LINKS", "").split()
    return sorted(w for folder in folders for w in Path(folder).glob(f"torch-{version}+cpu-*.whl"))


def test_the_override_installs_torchs_cpu_build_with_the_index_closed(tmp_path, monkeypatch):
    """A folder holding the wheel, named by NF4KERNEL_TORCH: pip's install of what the override gives
    (a dry run, pip's own resolution) takes that CPU build, with every index closed."""
    version = noxfile.pin_of(str(ROOT / noxfile.TORCH_CPU_REQUIREMENTS), "torch")
    wheels = local_torch_cpu_wheels(version)
    if not wheels:
        pytest.skip(f"no local torch {version}+cpu wheel to point the override at (PIP_FIND_LINKS)")
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / wheels[0].name).symlink_to(wheels[0])
    monkeypatch.setenv(noxfile.TORCH_OVERRIDE, str(folder))
    args = noxfile.torch_from_override(version)
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps", "-q"]
    done = subprocess.run(
        [*command, "--report", str(report), *args], env=closed_pip_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (installed,) = json.loads(report.read_text())["install"]
    assert installed["metadata"]["version"] == f"{version}+cpu"
