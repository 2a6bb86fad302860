"""What `pip install .` ships: the kernel package and nothing else. The CI harness (harness/), the
asv suite (benchmarks/), the tests and the scripts stay in the repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CI_TOOLS_FLAG = "NF4KERNEL_CI_TOOLS"  # set by `nox -s tests` in its own venv, where setuptools is pinned


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel setuptools builds from a copy of the tracked tree (the build writes build/ and
    *.egg-info, which must not land in the working tree that other tests read)."""
    try:
        import setuptools  # noqa: F401
    except ImportError:
        if os.environ.get(CI_TOOLS_FLAG):
            raise
        pytest.skip("needs setuptools to build the wheel (pinned in requirements/test.txt)")
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    ignore = shutil.ignore_patterns(".git", ".nox", ".asv", ".gpu-bundle", "__pycache__", "build", "dist", "*.egg-info")
    shutil.copytree(ROOT, source, ignore=ignore, dirs_exist_ok=True)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), "."]
    subprocess.run(command, cwd=source, check=True, capture_output=True, text=True)
    (built,) = out.glob("nf4kernel-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_holds_the_kernel_package_and_its_metadata_only(wheel):
    names = wheel.namelist()
    outside = [n for n in names if not n.startswith(("nf4kernel/", "nf4kernel-0.1.0.dist-info/"))]
    assert outside == []
    assert not [n for n in names if "harness" in n or "site_assets" in n]


def test_the_wheel_holds_every_module_of_the_kernel(wheel):
    shipped = {n for n in wheel.namelist() if n.startswith("nf4kernel/")}
    expected = {f"nf4kernel/{p.name}" for p in (ROOT / "nf4kernel").glob("*.py")}
    assert shipped == expected
