"""What `pip install .` ships: the kernel package and nothing else. The CI harness (harness/), the
asv suite (benchmarks/), the tests and the scripts stay in the repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import nf4kernel

ROOT = Path(__file__).resolve().parents[1]
DIST_INFO = f"nf4kernel-{nf4kernel.__version__}.dist-info/"  # the version's one source: __init__.py
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
    outside = [n for n in names if not n.startswith(("nf4kernel/", DIST_INFO))]
    assert outside == []
    assert not [n for n in names if "harness" in n or "site_assets" in n]


def test_the_wheel_holds_every_module_of_the_kernel_and_its_typing_marker(wheel):
    shipped = {n for n in wheel.namelist() if n.startswith("nf4kernel/")}
    expected = {f"nf4kernel/{p.name}" for p in (ROOT / "nf4kernel").glob("*.py")} | {"nf4kernel/py.typed"}
    assert shipped == expected


def test_the_wheels_metadata_has_one_version_an_spdx_license_and_lower_bounds_only(wheel):
    """The version is __init__.py's (pyproject reads it); the license an SPDX expression with its
    file; torch and Triton bounded below only, so that installing never replaces a newer torch."""
    metadata = wheel.read(DIST_INFO + "METADATA").decode()
    fields = [line.split(": ", 1) for line in metadata.split("\n\n", 1)[0].splitlines() if ": " in line]
    assert ["Version", nf4kernel.__version__] in fields
    assert ["License-Expression", "Apache-2.0"] in fields and ["License-File", "LICENSE"] in fields
    assert DIST_INFO + "licenses/LICENSE" in wheel.namelist()
    runtime = sorted(value for key, value in fields if key == "Requires-Dist" and "extra ==" not in value)
    assert runtime == ["numpy>=2", "torch>=2.11", "triton>=3.6"]
    assert any(key == "Classifier" and value == "Typing :: Typed" for key, value in fields)
    assert any(key == "Project-URL" and value.startswith("Changelog, ") for key, value in fields)


# In a child Python: hide every installed distribution that is not declared (the import fails as in
# a fresh venv holding only what `pip install .` brings), then import the kernel and its API. An
# optional import of torch's (tqdm, dill, opt-einsum, nvidia-ml-py where installed) is refused and
# done without, as it would be there; a hard one of the kernel's path is not.
_IMPORT_WITH_ONLY_THE_DECLARED = """
import importlib.abc, json, sys
from importlib.metadata import packages_distributions
from packaging.utils import canonicalize_name
declared = set(json.loads(sys.argv[1]))
owners = packages_distributions()

class Undeclared(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        dists = owners.get(name.partition(".")[0])
        if dists and not any(canonicalize_name(d) in declared for d in dists):
            raise ModuleNotFoundError(f"No module named {name!r} (installed, but declared by nothing)", name=name)

sys.meta_path.insert(0, Undeclared())
import nf4kernel.kernel, nf4kernel.api
"""


def test_the_kernel_imports_with_only_what_the_wheel_declares(wheel):
    """A package the kernel's import needs must be declared, by the wheel or by what it declares:
    Triton's interpreter imports numpy, which neither torch nor Triton declares, so without the
    wheel's own Requires-Dist a fresh venv with `pip install .` fails on `import nf4kernel`."""
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    metadata = wheel.read(DIST_INFO + "METADATA").decode()
    wanted = [line.split(":", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    declared = {"nf4kernel"}
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
    command = [sys.executable, "-c", _IMPORT_WITH_ONLY_THE_DECLARED, json.dumps(sorted(declared))]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
