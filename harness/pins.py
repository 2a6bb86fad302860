"""Every pinned requirement has a wheel for every Python that ci.yml installs it on.

A pin with no wheel for one Python (Triton 3.9.0 has none for CPython 3.10) only fails on GitHub,
minutes into a matrix leg. This asks the package indexes instead, without downloading or installing
anything: for each Python named by a `setup-python` step of ci.yml (matrix legs expanded, so the
legs can't drift from the check) and each `name==version` line of requirements/*.txt, some index must
list a wheel whose tags the hosted Ubuntu runner accepts for that Python, and whose Requires-Python
admits it. `pip download --only-binary=:all: --python-version X` asks the same question, but
downloads every wheel to answer it (torch alone is hundreds of MB per Python).

    python -m harness.pins            # exit 0: every pin has a wheel for every leg; 1: lists what has none

The indexes are PyPI (or PIP_INDEX_URL) and PIP_EXTRA_INDEX_URL's, as pip would use them, and a
file's own ``--index-url``/``--extra-index-url`` lines for that file's pins (torch-cpu.txt names
PyTorch's CPU index); file:// entries are skipped. gpu-runner.txt is not a CI leg's set: the GPU
runner's image has its own Python and torch (tests/harness/test_install.py resolves that set).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
CI_WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
REQUIREMENT_FILES = sorted(p for p in (ROOT / "requirements").glob("*.txt") if p.name != "gpu-runner.txt")
PYPI = "https://pypi.org/simple"

# The hosted runner (ubuntu-latest: 24.04, x86-64, glibc 2.39) accepts manylinux wheels up to 2.39;
# the legacy manylinux1/2010/2014 names are the glibc 2.5/2.12/2.17 ones.
GLIBC_MINORS = range(39, 4, -1)
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in GLIBC_MINORS] + [
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
]


@dataclass(frozen=True)
class IndexFile:
    filename: str
    requires_python: str | None = None
    yanked: bool = False


Lister = Callable[[str], list[IndexFile]]  # canonical project name -> the files the indexes list


def ci_pythons(workflow: Path = CI_WORKFLOW) -> list[str]:
    """Every Python version a setup-python step of the workflow asks for, matrix expanded."""
    versions: set[str] = set()
    for job in yaml.safe_load(workflow.read_text())["jobs"].values():
        matrix = job.get("strategy", {}).get("matrix", {})
        for step in job.get("steps", []):
            if not step.get("uses", "").startswith("actions/setup-python@"):
                continue
            asked = str(step["with"]["python-version"])
            if asked.replace(" ", "").startswith("${{matrix."):
                key = asked.replace(" ", "")[len("${{matrix.") : -len("}}")]
                versions.update(str(value) for value in matrix[key])
            else:
                versions.add(asked)
    return sorted(versions, key=lambda v: tuple(int(part) for part in v.split(".")))


def pins(files: Iterable[Path] = REQUIREMENT_FILES) -> list[tuple[str, Requirement]]:
    """(file name, requirement) for each requirement line; every one must be an exact `==` pin. Option
    lines are skipped: `-r other.txt` (that file is one of ``files`` itself) and the index options,
    which ``file_indexes`` reads."""
    found = []
    for path in files:
        for line in _lines(path):
            if not line.startswith("-"):
                found.append((path.name, Requirement(line)))
    return found


def _lines(path: Path) -> list[str]:
    stripped = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in stripped if line]


def file_indexes(path: Path, environ: dict[str, str] | None = None) -> list[str]:
    """The indexes pip asks for ``path``'s pins: the file's own ``--index-url`` in place of the
    environment's (or PyPI), and every ``--extra-index-url``, the file's and the environment's."""
    own: dict[str, list[str]] = {"--index-url": [], "--extra-index-url": []}
    for line in _lines(path):
        option, _, value = line.replace("=", " ", 1).partition(" ")
        if option in own:
            own[option].append(value.strip())
    urls = index_urls(environ)
    main, extra = (own["--index-url"][-1:] or urls[:1]), own["--extra-index-url"] + urls[1:]
    return [url.rstrip("/") for url in main + extra if url.startswith(("http://", "https://"))]


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


def missing_wheels(pythons: list[str], pinned: list[tuple[str, Requirement]], list_files: Lister) -> list[str]:
    """One line per (pin, Python) that no listed wheel satisfies; empty when every leg installs."""
    problems = []
    for source, requirement in pinned:
        specs = list(requirement.specifier)
        if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
            problems.append(f"{source}: {requirement} is not an exact pin (name==version)")
            continue
        files = list_files(canonicalize_name(requirement.name))
        for python in pythons:
            if not any(_serves(file, requirement.specifier, python) for file in files):
                problems.append(f"{source}: {requirement} has no wheel for CPython {python} on x86-64 Linux")
    return problems


def _serves(file: IndexFile, wanted: SpecifierSet, python: str) -> bool:
    if file.yanked or not file.filename.endswith(".whl"):
        return False
    _, version, _, tags = parse_wheel_filename(file.filename)
    if not wanted.contains(version, prereleases=True):  # ==2.13.0 also takes 2.13.0+cpu, as pip does
        return False
    if file.requires_python and not SpecifierSet(file.requires_python).contains(Version(python)):
        return False
    return bool(tags & target_tags(python))


def index_urls(environ: dict[str, str] | None = None) -> list[str]:
    environ = os.environ if environ is None else environ
    urls = [environ.get("PIP_INDEX_URL") or PYPI, *environ.get("PIP_EXTRA_INDEX_URL", "").split()]
    return [url.rstrip("/") for url in urls if url.startswith(("http://", "https://"))]


class _Anchors(HTMLParser):
    """The files of a PEP 503 (HTML) project page: each link's text and data-* attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.files: list[IndexFile] = []
        self._attrs: dict[str, str | None] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._attrs = dict(attrs)

    def handle_data(self, data):
        if self._attrs is not None and data.strip():
            attrs = self._attrs
            self.files.append(IndexFile(data.strip(), attrs.get("data-requires-python"), "data-yanked" in attrs))
            self._attrs = None


def list_from_indexes(urls: list[str], timeout: float = 20) -> Lister:
    unreachable: set[str] = set()

    def list_files(project: str) -> list[IndexFile]:
        files: list[IndexFile] = []
        for url in urls:
            if url in unreachable:
                continue
            request = urllib.request.Request(
                f"{url}/{project}/",
                headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"},
            )
            try:
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    body = response.read().decode()
                    kind = response.headers.get("Content-Type", "")
            except urllib.error.HTTPError as error:
                if error.code == 404:  # this index doesn't have the project; another may
                    continue
                raise
            except (urllib.error.URLError, TimeoutError) as error:
                # As pip does: an index it can't reach is skipped with a warning; a pin then passes
                # only if another index has its wheel.
                print(f"WARNING: skipping index {url}: {error}", file=sys.stderr)
                unreachable.add(url)
                continue
            if "json" in kind:
                files += [
                    IndexFile(f["filename"], f.get("requires-python"), bool(f.get("yanked")))
                    for f in json.loads(body)["files"]
                ]
            else:
                parser = _Anchors()
                parser.feed(body)
                files += parser.files
        return files

    list_files.unreachable = unreachable  # type: ignore[attr-defined]
    return list_files


def main(argv: list[str] | None = None) -> int:
    pythons = ci_pythons()
    pinned = pins()
    print(f"Pythons from {CI_WORKFLOW.relative_to(ROOT)}: {', '.join(pythons)}")
    print(f"{len(pinned)} pins from {', '.join(p.name for p in REQUIREMENT_FILES)}")
    problems = conflicting_pins(pinned)
    for path in REQUIREMENT_FILES:
        urls = file_indexes(path)
        lister = list_from_indexes(urls)
        missing = missing_wheels(pythons, pins([path]), lister)
        if missing and lister.unreachable == set(urls):
            # No index answered: nothing is known either way (pip, too, skips such an index), and a
            # pin can only be called missing by an index that was asked.
            print(f"UNCHECKED: {path.name}: no index of it answered ({', '.join(urls)})")
        else:
            problems += missing
    for problem in problems:
        print(f"PROBLEM: {problem}")
    print("every pin has a wheel for every leg" if not problems else f"{len(problems)} pin/Python pairs can't install")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
