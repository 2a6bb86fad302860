"""Every pinned requirement has a wheel for every Python that ci.yml installs it on.

    python -m tools.pins              # exit 0: every pin has a wheel for every leg; 1: lists what has none

The package indexes are asked, nothing downloaded; ci.yml and requirements/*.txt are read by
``inputs.py``, the indexes asked by ``package_index.py``, and this module matches wheels to legs.
How, and why not pip: tools/README.md.

Exit 3 undecided: no index of some requirements file answered, so the file is named ``UNCHECKED``
(a pin found missing elsewhere still exits 1). Exit 2 bad input, one line naming the file and where.
"""

from __future__ import annotations

import sys
from pathlib import Path

from packaging.markers import Marker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from harness.core import command_output
from harness.core.paths import ROOT
from tools.pins.inputs import CI_WORKFLOW, REQUIREMENT_FILES, BadInput, ci_pythons, file_indexes, pins
from tools.pins.package_index import IndexFile, Lister, list_from_indexes

# The hosted runner (ubuntu-latest: 24.04, x86-64, glibc 2.39) accepts manylinux wheels up to 2.39;
# the legacy manylinux1/2010/2014 names are the glibc 2.5/2.12/2.17 ones.
GLIBC_MINORS = range(39, 4, -1)
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in GLIBC_MINORS] + [
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
]


def conflicting_pins(pinned: list[tuple[str, Requirement]]) -> list[str]:
    """Files that pin one project to different versions can't be installed together."""
    specs: dict[str, dict[str, list[str]]] = {}
    for source, requirement in pinned:
        specs.setdefault(canonicalize_name(requirement.name), {}).setdefault(str(requirement.specifier), []).append(
            source
        )
    return [
        f"{name} pinned differently: " + "; ".join(f"{spec} in {', '.join(files)}" for spec, files in seen.items())
        for name, seen in specs.items()
        if len(seen) > 1
    ]


def target_tags(python: str) -> set[Tag]:
    """The wheel tags pip accepts for CPython `python` on the hosted runner (pip builds the same list)."""
    version = tuple(int(part) for part in python.split("."))
    interpreter = f"cp{version[0]}{version[1]}"
    return set(cpython_tags(version, platforms=PLATFORMS)) | set(
        compatible_tags(version, interpreter, platforms=PLATFORMS)
    )


def runner_environment(python: str) -> dict[str, str]:
    """The marker environment of CPython ``python`` on the hosted runner (x86-64 Linux). The patch
    level is unknown (setup-python takes the latest): a marker on python_full_version is read as X.Y.0."""
    return {
        "implementation_name": "cpython",
        "implementation_version": f"{python}.0",
        "os_name": "posix",
        "platform_machine": "x86_64",
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": f"{python}.0",
        "python_version": python,
        "sys_platform": "linux",
        "extra": "",
    }


def installs_on(requirement: Requirement, python: str, source: str) -> bool:
    """Whether pip installs ``requirement`` on ``python``: its marker, if any, admits that Python."""
    marker: Marker | None = requirement.marker
    if marker is None:
        return True
    try:
        return marker.evaluate(runner_environment(python))
    except (UndefinedComparison, UndefinedEnvironmentName) as error:
        raise BadInput(f"{source}: {requirement}: its marker can't be evaluated ({error})") from None


def missing_wheels(pythons: list[str], pinned: list[tuple[str, Requirement]], list_files: Lister) -> list[str]:
    """One line per (pin, Python it installs on) that no listed wheel satisfies; empty when every leg
    installs."""
    problems = []
    for source, requirement in pinned:
        specs = list(requirement.specifier)
        if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
            problems.append(f"{source}: {requirement} is not an exact pin (name==version)")
            continue
        legs = [python for python in pythons if installs_on(requirement, python, source)]
        files = list_files(canonicalize_name(requirement.name)) if legs else []
        for python in legs:
            if not any(_serves(file, requirement.specifier, python) for file in files):
                problems.append(f"{source}: {requirement} has no wheel for CPython {python} on x86-64 Linux")
    return problems


def _serves(file: IndexFile, wanted: SpecifierSet, python: str) -> bool:
    if file.yanked or not file.filename.endswith(".whl"):
        return False
    try:
        _, version, _, tags = parse_wheel_filename(file.filename)
    except (InvalidWheelFilename, InvalidVersion):  # pip skips such a link: "invalid wheel filename"
        return False
    if not wanted.contains(version, prereleases=True):  # ==2.13.0 also takes 2.13.0+cpu, as pip does
        return False
    if not _admits(file.requires_python, python):
        return False
    return bool(tags & target_tags(python))


def _admits(requires_python: str | None, python: str) -> bool:
    """Whether a file's Requires-Python admits ``python``; an invalid one is ignored, as pip ignores
    it ("Ignoring invalid Requires-Python")."""
    if not requires_python:
        return True
    try:
        return SpecifierSet(requires_python).contains(Version(python))
    except InvalidSpecifier:
        return True


def main(argv: list[str] | None = None) -> int:
    command_output.Parser(prog="python -m tools.pins", description=__doc__.split("\n\n")[0]).parse_args(argv)
    try:
        pythons = ci_pythons()
        pinned = pins()
        per_file = [(path, file_indexes(path), pins([path])) for path in REQUIREMENT_FILES]
        print(f"Pythons from {CI_WORKFLOW.relative_to(ROOT)}: {', '.join(pythons)}")
        print(f"{len(pinned)} pins from {', '.join(p.name for p in REQUIREMENT_FILES)}")
        problems, unchecked = conflicting_pins(pinned), []
        for path, urls, file_pins in per_file:
            found = checked(path, urls, file_pins, pythons)
            if found is None:
                unchecked.append(path.name)
            else:
                problems += found
    except BadInput as error:
        print(f"pins: {' '.join(str(error).splitlines())}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"PROBLEM: {problem}")
    if problems:
        print(f"{len(problems)} pin/Python pairs can't install" + (f"; {undecided(unchecked)}" if unchecked else ""))
        return 1
    if unchecked:
        print(f"no pin found missing, but {undecided(unchecked)}: no verdict (exit {EXIT_UNDECIDED})")
        return EXIT_UNDECIDED
    print("every pin has a wheel for every leg")
    return 0


EXIT_UNDECIDED = 3  # no index of a file answered: its pins were checked against nothing


def undecided(names: list[str]) -> str:
    return f"{len(names)} of {len(REQUIREMENT_FILES)} requirements files unchecked ({', '.join(names)})"


def checked(path: Path, urls: list[str], file_pins: list, pythons: list[str]) -> list[str] | None:
    """The problems of one file's pins, from its indexes; None where it has pins to check and no
    index of it answered (nothing is known either way: pip, too, skips such an index, and a pin can
    only be called missing by an index that was asked)."""
    lister = list_from_indexes(urls)
    missing = missing_wheels(pythons, file_pins, lister)
    if missing and lister.unreachable == set(urls):
        print(f"UNCHECKED: {path.name}: no index of it answered ({', '.join(urls)})")
        return None
    return missing
