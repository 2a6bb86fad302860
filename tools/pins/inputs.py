"""What the pins' check reads, read as GitHub and pip read it: the Pythons the setup-python steps of
ci.yml install (matrix legs expanded as GitHub expands them), and the requirements files' pins and
index options (lines joined, comments and a requirement's own options dropped as pip does).
``BadInput`` where one can't be read: its message names the file and where in it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from pathlib import Path

import yaml
from packaging.requirements import InvalidRequirement, Requirement

from harness.core.paths import ROOT
from tools.pins.package_index import index_urls

CI_WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
REQUIREMENT_FILES = sorted(p for p in (ROOT / "requirements").glob("*.txt") if p.name != "gpu-runner.txt")

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
