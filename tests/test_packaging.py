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


def test_the_wheel_declares_every_distribution_importing_the_kernel_loads(wheel):
    """A package the kernel's import pulls in must be declared, by the wheel or by what it declares:
    Triton's interpreter imports numpy, which neither torch nor Triton declares, so without the
    wheel's own Requires-Dist a fresh venv with `pip install .` fails on `import nf4kernel`."""
    from importlib.metadata import PackageNotFoundError, packages_distributions, requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    metadata = wheel.read("nf4kernel-0.1.0.dist-info/METADATA").decode()
    wanted = [line.split(":", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    declared: set[str] = set()
    while wanted:  # the closure of what the wheel declares, read from the installed metadata
        requirement = Requirement(wanted.pop())
        name = canonicalize_name(requirement.name)
        if name in declared or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        declared.add(name)
        try:
            wanted += requires(name) or []
        except PackageNotFoundError:
            pass
    code = "import sys, nf4kernel.kernel, nf4kernel.api; print(' '.join(sorted(m.split('.')[0] for m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    owners = packages_distributions()
    loaded = {canonicalize_name(d) for module in done.stdout.split() for d in owners.get(module, [])}
    # torch.hub imports tqdm where it is installed, and does without it.
    optional = {"nf4kernel", "tqdm"}
    assert loaded - declared - optional == set(), f"loaded but declared by nothing: {loaded - declared - optional}"
