"""Every pinned requirement has a wheel for every Python that ci.yml installs it on.

A pin with no wheel for one Python (Triton 3.9.0 has none for CPython 3.10) only fails on GitHub,
minutes into a matrix leg. This asks the package indexes instead, without downloading or installing
anything: for each Python named by a `setup-python` step of ci.yml (matrix legs expanded, so the
legs can't drift from the check) and each `name==version` line of requirements/*.txt, some index must
list a wheel whose tags the hosted Ubuntu runner accepts for that Python, and whose Requires-Python
admits it. `pip download --only-binary=:all: --python-version X` asks the same question, but
downloads every wheel to answer it (torch alone is hundreds of MB per Python).

    python -m harness.github.pins            # exit 0: every pin has a wheel for every leg; 1: lists what has none

Exit 2: bad input, said in one line naming the file and where in it: a requirements line that is no
requirement, a ci.yml it can't read its Pythons from (a python-version that is a YAML number, an
expression other than ``${{ matrix.<key> }}``, a matrix it can't expand).

The indexes are PyPI (or PIP_INDEX_URL) and PIP_EXTRA_INDEX_URL's, as pip would use them, and a
file's own ``--index-url`` (``-i``)/``--extra-index-url`` lines for that file's pins (torch-cpu.txt
names PyTorch's CPU index); file:// entries are skipped. Requirements files are read as pip reads
them: a line ending in a backslash goes on, ``#`` after a space starts a comment, a requirement's own
options (``--hash``) are not part of it, ``-r``/``-c`` and other option lines name no pin. A pin with
a marker is checked on the Pythons its marker admits on the runner (``; python_version < "3.12"``),
as pip installs it only there. Index answers are taken as pip takes them: an index answering with
an error other than 404, or with what is no index page, is skipped with a warning; a listed file
whose wheel name is invalid is no candidate; an invalid Requires-Python is ignored.

gpu-runner.txt is not a CI leg's set: the GPU runner's image has its own Python and torch
(tests/harness/test_install.py resolves that set).
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import yaml
from packaging.markers import Marker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from harness.core import records
from harness.core.paths import ROOT

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
PYTHON_VERSION = re.compile(r"(\d+)\.(\d+)")  # what pins can name a CPython by: X.Y
MATRIX_VALUE = re.compile(r"\$\{\{\s*matrix\.([A-Za-z_][A-Za-z0-9_-]*)\s*\}\}")
COMMENT = re.compile(r"(^|\s+)#.*$")  # pip's: a # at the start of a line or after a space
INDEX_OPTIONS = {"-i": "--index-url", "--index-url": "--index-url", "--extra-index-url": "--extra-index-url"}


class BadInput(ValueError):
    """A requirements file or workflow pins can't read: the message names the file and where (exit 2)."""


# --- ci.yml: the Pythons its setup-python steps install ---------------------------------------------


def ci_pythons(workflow: Path = CI_WORKFLOW) -> list[str]:
    """Every Python version a setup-python step of the workflow asks for, matrix expanded
    (``include`` and ``exclude`` as GitHub applies them). BadInput where it can't be read."""
    name = workflow.name
    jobs = _mapping(_load_yaml(workflow).get("jobs"), f"{name}: jobs")
    versions: set[str] = set()
    for job_name, job in jobs.items():
        job = _mapping(job, f"{name}: jobs.{job_name}")
        steps = job.get("steps") or []
        if not isinstance(steps, list):
            raise BadInput(f"{name}: jobs.{job_name}.steps is not a list")
        for i, step in enumerate(steps):
            where = f"{name}: jobs.{job_name}.steps[{i}]"
            step = _mapping(step, where)
            uses = step.get("uses")
            if isinstance(uses, str) and uses.startswith("actions/setup-python@"):
                versions |= _asked_pythons(step, job, where)
    return sorted(versions, key=lambda v: tuple(int(part) for part in v.split(".")))


def _load_yaml(workflow: Path) -> dict:
    try:
        data = yaml.safe_load(workflow.read_text())
    except (OSError, UnicodeDecodeError) as error:
        raise BadInput(f"{workflow.name}: can't be read ({error})") from None
    except yaml.YAMLError as error:
        raise BadInput(f"{workflow.name}: not YAML ({' '.join(str(error).split())})") from None
    return _mapping(data, f"{workflow.name}: the workflow")


def _mapping(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise BadInput(f"{where} is not a mapping")
    return value


def _asked_pythons(step: dict, job: dict, where: str) -> set[str]:
    """The versions one setup-python step installs: its python-version, or its matrix key's values."""
    asked = _mapping(step.get("with"), f"{where}.with").get("python-version")
    where = f"{where}.with.python-version"
    if not isinstance(asked, str):
        raise BadInput(f"{where}: {asked!r} is not a string: quote it (YAML reads 3.10 unquoted as 3.1)")
    expression = MATRIX_VALUE.fullmatch(asked.strip())
    if expression:
        return {_python(value, where) for value in matrix_values(job, expression.group(1), where)}
    if "${{" in asked:
        raise BadInput(f"{where}: {asked!r}: pins expands ${{{{ matrix.<key> }}}} only")
    return {_python(asked, where)}


def _python(value, where: str) -> str:
    if not isinstance(value, str) or not PYTHON_VERSION.fullmatch(value.strip()):
        raise BadInput(f'{where}: {value!r} is no CPython version pins can check (a quoted X.Y, such as "3.12")')
    return value.strip()


def matrix_values(job: dict, key: str, where: str) -> list:
    """``key``'s value in every leg of the job's matrix, as GitHub expands it: the product of its
    lists, less the legs an ``exclude`` entry matches, with each ``include`` entry added to every leg
    whose original values it doesn't change, or as a leg of its own where it fits none."""
    strategy = job.get("strategy") or {}
    matrix = _mapping(strategy.get("matrix") if isinstance(strategy, dict) else None, f"{where}: the job's matrix")
    legs = expand_matrix(matrix, where)
    missing = [leg for leg in legs if key not in leg]
    if not legs or missing:
        raise BadInput(f"{where}: a leg of the job's matrix has no {key!r}")
    return [leg[key] for leg in legs]


def expand_matrix(matrix: dict, where: str) -> list[dict]:
    axes = {name: values for name, values in matrix.items() if name not in ("include", "exclude")}
    for name, values in axes.items():
        if not isinstance(values, list) or not values:
            raise BadInput(f"{where}: matrix.{name} is not a list of values pins can expand")
    legs = [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())] if axes else []
    excluded = _entries(matrix.get("exclude"), f"{where}: matrix.exclude")
    legs = [leg for leg in legs if not any(all(leg.get(k) == v for k, v in e.items()) for e in excluded)]
    originals = list(legs)  # an include entry extends the matrix's own legs, never another entry's
    for entry in _entries(matrix.get("include"), f"{where}: matrix.include"):
        fits = [leg for leg in originals if all(leg.get(k) == v for k, v in entry.items() if k in axes)]
        for leg in fits:
            leg.update(entry)
        if not fits:
            legs.append(dict(entry))
    return legs


def _entries(value, where: str) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(entry, dict) for entry in value):
        raise BadInput(f"{where} is not a list of mappings")
    return value


# --- Requirements files, as pip reads them -----------------------------------------------------------


def pins(files: Iterable[Path] = REQUIREMENT_FILES) -> list[tuple[str, Requirement]]:
    """(file name, requirement) for each requirement line; every one must be an exact `==` pin. Option
    lines are skipped: `-r other.txt` (that file is one of ``files`` itself), ``-c``, and the index
    options, which ``file_indexes`` reads. BadInput naming the file and line for a line that is no
    requirement."""
    found = []
    for path in files:
        for number, line in _lines(path):
            if line.startswith("-"):
                continue
            text, _ = _requirement_and_options(line)
            try:
                found.append((path.name, Requirement(text)))
            except InvalidRequirement as error:
                why = str(error).splitlines()[0]  # packaging's next lines point at the place with a caret
                raise BadInput(f"{path.name}:{number}: {text!r} is not a requirement ({why})") from None
    return found


def _lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of each logical line, as pip joins and strips them: a line ending in a
    backslash goes on into the next; a comment is dropped; empty lines are skipped."""
    try:
        physical = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise BadInput(f"{path.name}: can't be read ({error})") from None
    logical, pending, first = [], [], 0
    for number, line in enumerate(physical, 1):
        if line.endswith("\\") and not COMMENT.match(line):
            first = first or number
            pending.append(line[:-1])
            continue
        logical.append((first or number, "".join([*pending, line])))
        pending, first = [], 0
    if pending:
        logical.append((first, "".join(pending)))
    stripped = ((number, COMMENT.sub("", line).strip()) for number, line in logical)
    return [(number, line) for number, line in stripped if line]


def _requirement_and_options(line: str) -> tuple[str, list[str]]:
    """pip's split of a requirement line: the words up to the first that starts with "-" are the
    requirement (a marker may hold spaces), the rest its options (``--hash=sha256:...``)."""
    words = line.split(" ")
    cut = next((i for i, word in enumerate(words) if word.startswith("-")), len(words))
    return " ".join(words[:cut]).strip(), [word for word in words[cut:] if word]


def _index_options(path: Path) -> dict[str, list[str]]:
    """The file's --index-url (-i) and --extra-index-url values, ``--opt URL`` or ``--opt=URL``."""
    own: dict[str, list[str]] = {"--index-url": [], "--extra-index-url": []}
    for _, line in _lines(path):
        words = line.split()
        option, _, attached = words[0].partition("=")
        if option not in INDEX_OPTIONS:
            continue
        value = attached or (words[1] if len(words) > 1 else "")
        own[INDEX_OPTIONS[option]].append(value.strip())
    return own


def file_indexes(path: Path, environ: dict[str, str] | None = None) -> list[str]:
    """The indexes pip asks for ``path``'s pins: the file's own ``--index-url`` in place of the
    environment's (or PyPI), and every ``--extra-index-url``, the file's and the environment's."""
    own = _index_options(path)
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

    def skip(url: str, why) -> None:
        # As pip does: an index it can't reach, or that answers with an error, is skipped with a
        # warning; a pin then passes only if another index has its wheel.
        print(f"WARNING: skipping index {url}: {why}", file=sys.stderr)
        unreachable.add(url)

    def list_files(project: str) -> list[IndexFile]:
        files: list[IndexFile] = []
        for url in urls:
            if url in unreachable:
                continue
            try:
                body, kind = _project_page(url, project, timeout)
            except urllib.error.HTTPError as error:
                if error.code != 404:  # 404: this index doesn't have the project; another may
                    skip(url, f"HTTP {error.code} for {project}")
                continue
            except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as error:
                skip(url, error)
                continue
            try:
                files += _files_of(body, kind)
            except ValueError as error:
                skip(url, f"its page for {project} is no index page ({error})")
        return files

    list_files.unreachable = unreachable  # type: ignore[attr-defined]
    return list_files


def _project_page(url: str, project: str, timeout: float) -> tuple[str, str]:
    request = urllib.request.Request(
        f"{url}/{project}/", headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read().decode(errors="replace"), response.headers.get("Content-Type", "")


def _files_of(body: str, kind: str) -> list[IndexFile]:
    """The files a PEP 691 (JSON) or PEP 503 (HTML) page lists; ValueError for JSON that is no such
    page. An entry without a filename is no file."""
    if "json" not in kind:
        parser = _Anchors()
        parser.feed(body)
        return parser.files
    try:
        page = json.loads(body)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    listed = page.get("files") if isinstance(page, dict) else None
    if not isinstance(listed, list):
        raise ValueError("no list of files")
    return [
        IndexFile(f["filename"], _string_or_none(f.get("requires-python")), bool(f.get("yanked")))
        for f in listed
        if isinstance(f, dict) and isinstance(f.get("filename"), str)
    ]


def _string_or_none(value) -> str | None:
    return value if isinstance(value, str) else None


def main(argv: list[str] | None = None) -> int:
    records.plain_streams()
    argparse.ArgumentParser(prog="python -m harness.github.pins", description=__doc__.splitlines()[0]).parse_args(argv)
    try:
        pythons = ci_pythons()
        pinned = pins()
        per_file = [(path, file_indexes(path), pins([path])) for path in REQUIREMENT_FILES]
        print(f"Pythons from {CI_WORKFLOW.relative_to(ROOT)}: {', '.join(pythons)}")
        print(f"{len(pinned)} pins from {', '.join(p.name for p in REQUIREMENT_FILES)}")
        problems = conflicting_pins(pinned)
        for path, urls, file_pins in per_file:
            problems += checked(path, urls, file_pins, pythons)
    except BadInput as error:
        print(f"pins: {' '.join(str(error).splitlines())}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"PROBLEM: {problem}")
    print("every pin has a wheel for every leg" if not problems else f"{len(problems)} pin/Python pairs can't install")
    return 1 if problems else 0


def checked(path: Path, urls: list[str], file_pins: list, pythons: list[str]) -> list[str]:
    """The problems of one file's pins, from its indexes; none where no index of it answered."""
    lister = list_from_indexes(urls)
    missing = missing_wheels(pythons, file_pins, lister)
    if missing and lister.unreachable == set(urls):
        # No index answered: nothing is known either way (pip, too, skips such an index), and a
        # pin can only be called missing by an index that was asked.
        print(f"UNCHECKED: {path.name}: no index of it answered ({', '.join(urls)})")
        return []
    return missing


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
