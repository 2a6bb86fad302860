"""harness/pins.py: which Pythons ci.yml installs on, which listed wheels serve which Python, and the
real pins against the real index; and the promised Python versions agree everywhere."""

from __future__ import annotations

import re
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from harness import act, pins
from harness.pins import IndexFile

ROOT = pins.ROOT


def lister(files: dict[str, list[str]]):
    def list_files(project):
        return [f if isinstance(f, IndexFile) else IndexFile(f) for f in files.get(project, [])]

    return list_files


def pinned(*lines):
    return [("test.txt", Requirement(line)) for line in lines]


def test_the_pythons_come_from_every_setup_python_step_matrix_expanded(tmp_path):
    workflow = {
        "jobs": {
            "lint": {"steps": [{"uses": "actions/setup-python@abc", "with": {"python-version": "3.12"}}]},
            "tests": {
                "strategy": {"matrix": {"python": ["3.13", "3.11"]}},
                "steps": [{"uses": "actions/setup-python@abc", "with": {"python-version": "${{ matrix.python }}"}}],
            },
            "other": {"steps": [{"run": "true"}]},
        }
    }
    path = tmp_path / "ci.yml"
    path.write_text(yaml.safe_dump(workflow))
    assert pins.ci_pythons(path) == ["3.11", "3.12", "3.13"]


@pytest.mark.parametrize(
    "filename,python,serves",
    [
        ("triton-3.9.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", "3.11", True),
        ("triton-3.9.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", "3.10", False),
        ("triton-3.9.0-cp312-abi3-manylinux_2_27_x86_64.whl", "3.13", True),
        ("triton-3.9.0-cp312-abi3-manylinux_2_27_x86_64.whl", "3.11", False),
        ("triton-3.9.0-cp314-cp314t-manylinux_2_28_x86_64.whl", "3.14", False),  # free-threaded only
        ("triton-3.9.0-py3-none-any.whl", "3.13", True),
        ("triton-3.9.0-cp313-cp313-macosx_14_0_arm64.whl", "3.13", False),
        ("triton-3.9.0-cp313-cp313-manylinux_2_40_x86_64.whl", "3.13", False),  # newer glibc than the runner
        ("triton-3.9.0.tar.gz", "3.13", False),
        ("triton-3.9.1-cp313-cp313-manylinux_2_28_x86_64.whl", "3.13", False),  # another version
    ],
)
def test_which_wheel_serves_which_python(filename, python, serves):
    problems = pins.missing_wheels([python], pinned("triton==3.9.0"), lister({"triton": [filename]}))
    assert (problems == []) == serves, problems


def test_a_local_version_matches_its_pin_as_pip_matches_it():
    files = {"torch": ["torch-2.13.0+cpu-cp313-cp313-manylinux_2_28_x86_64.whl"]}
    assert pins.missing_wheels(["3.13"], pinned("torch==2.13.0"), lister(files)) == []


def test_requires_python_and_yanked_files_are_honoured():
    wheel = "asv-0.6.6-py3-none-any.whl"
    too_new = IndexFile(wheel, requires_python=">=3.12")
    assert pins.missing_wheels(["3.11"], pinned("asv==0.6.6"), lister({"asv": [too_new]})) != []
    assert pins.missing_wheels(["3.12"], pinned("asv==0.6.6"), lister({"asv": [too_new]})) == []
    assert pins.missing_wheels(["3.12"], pinned("asv==0.6.6"), lister({"asv": [IndexFile(wheel, yanked=True)]})) != []


def test_every_pin_must_be_exact_and_pinned_once():
    assert pins.missing_wheels(["3.12"], pinned("nox>=2026"), lister({})) == [
        "test.txt: nox>=2026 is not an exact pin (name==version)"
    ]
    both = [("a.txt", Requirement("PyYAML==6.0.3")), ("b.txt", Requirement("pyyaml==6.0.2"))]
    assert pins.conflicting_pins(both) == ["pyyaml pinned differently: ==6.0.3 in a.txt; ==6.0.2 in b.txt"]
    assert pins.conflicting_pins(both[:1] * 2) == []


def test_only_reachable_http_indexes_are_asked():
    environ = {"PIP_EXTRA_INDEX_URL": "file:///opt/pypi/simple https://download.example/whl/cpu/"}
    assert pins.index_urls(environ) == [pins.PYPI, "https://download.example/whl/cpu"]


def test_a_files_own_index_options_name_where_its_pins_are_looked_up(tmp_path):
    requirements = tmp_path / "torch-cpu.txt"
    requirements.write_text(
        "# torch alone\n--index-url https://download.example/whl/cpu/\n--extra-index-url=https://more.example/simple\n"
        "-r other.txt\ntorch==2.13.0  # the CPU build\n"
    )
    assert [str(r) for _, r in pins.pins([requirements])] == ["torch==2.13.0"]
    environ = {"PIP_EXTRA_INDEX_URL": "https://env.example/simple"}
    assert pins.file_indexes(requirements, environ) == [
        "https://download.example/whl/cpu",
        "https://more.example/simple",
        "https://env.example/simple",
    ]
    plain = tmp_path / "plain.txt"
    plain.write_text("nox==2026.10.20\n")
    assert pins.file_indexes(plain, {}) == [pins.PYPI]


def test_the_promised_pythons_agree_with_the_ci_legs():
    legs = pins.ci_pythons()
    oldest = legs[0]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    requires = SpecifierSet(project["project"]["requires-python"])
    assert all(requires.contains(leg) for leg in legs)
    previous = f"3.{int(oldest.split('.')[1]) - 1}"
    assert not requires.contains(previous), f"pyproject still admits {previous}, which no CI leg installs"
    assert project["tool"]["ruff"]["target-version"] == "py" + oldest.replace(".", "")
    for promised in re.findall(r"Python (3\.\d+)\+", (ROOT / "README.md").read_text()):
        assert promised == oldest, f"README promises Python {promised}+; the oldest CI leg is {oldest}"


@pytest.mark.skipif(not act.ci_tools_installed(), reason="needs the package index; `nox -s tests` or `nox -s pins`")
def test_every_pin_has_a_wheel_for_every_ci_leg_on_the_index(capsys):
    """The real check, against the real index pages (network: the package index only)."""
    assert pins.main([]) == 0, capsys.readouterr().out
