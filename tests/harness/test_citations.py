"""Evidence a clone can open (benchmarks/results/README.md, "Where the files are").

* Every raw file a Markdown file of the repository cites by a commit, ``git show <commit>:<path>``
  or a code span ``<commit>:<path>``, resolves here (``git cat-file -e``), and the commit is one of
  HEAD's history: main's, not a branch a clone never gets. A shallow clone lacks the history, so
  these tests skip there, saying so; anywhere else an unresolved citation fails.
* No page cites the ``results`` branch (``results:<path>``, "the `results` branch"): it was never
  delivered, and a clone has no such branch.
* The raw files kept on main, under ``benchmarks/results/``, stay within the stated size budget.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"

# The size budget benchmarks/results/README.md states: each file as committed, and the folder in all.
MAX_FILE_BYTES = 100 * 1024
MAX_FOLDER_BYTES = 2 * 1024 * 1024

COMMIT = r"[0-9a-f]{7,40}"
# ``git show 418dba5:benchmarks/results/issue10/`` anywhere (prose, a code span, a code block) ...
# A path has a letter, a slash or an underscore in it (a PCI bus id, 00000000:17:00.0, has none).
PATH = r"(?=[^\s`'\"]*[A-Za-z_/])[^\s`'\"]+"
GIT_SHOW = re.compile(rf"git show ({COMMIT}):({PATH})")
# ... and a code span that is a commit's path and nothing else: `418dba5:benchmarks/results/x.log`.
SPAN = re.compile(rf"`({COMMIT}):({PATH})`")
# The undelivered branch: a path on it as git names it (``results:benchmarks/...``, not
# ``asv-results:...``), or the branch named in prose, across a line break too.
RESULTS_PATH = re.compile(r"(?<![\w.-])results:(?=[\w./-])")
RESULTS_BRANCH = re.compile(r"`results`\s+branch")


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)


@cache
def history_problem() -> str | None:
    """Why this checkout can't resolve a commit's citation, or None where it can."""
    inside = git("rev-parse", "--is-inside-work-tree")
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return "not a git checkout: no history to resolve a commit's citation in"
    if git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        return (
            "a shallow clone: the commits that hold the raw files may be missing "
            "(`git fetch --unshallow` to check the citations)"
        )
    return None


def markdown_files() -> list[Path]:
    listed = git("ls-files", "-z", "--", "*.md")
    if listed.returncode == 0:
        return [ROOT / name for name in listed.stdout.split("\0") if name]
    return sorted(path for path in ROOT.rglob("*.md") if ".git" not in path.parts)


def citations(text: str) -> list[tuple[int, str, str]]:
    """(line, commit, path) of every commit's citation in a page, each once."""
    found = {}
    for pattern in (GIT_SHOW, SPAN):
        for match in pattern.finditer(text):
            commit, path = match.group(1), match.group(2).rstrip(".,;:)")
            found.setdefault((commit, path), text.count("\n", 0, match.start()) + 1)
    return [(line, commit, path) for (commit, path), line in sorted(found.items(), key=lambda item: item[1])]


def every_citation() -> list[tuple[str, int, str, str]]:
    return [
        (str(page.relative_to(ROOT)), line, commit, path)
        for page in markdown_files()
        for line, commit, path in citations(page.read_text(encoding="utf-8", errors="replace"))
    ]


def citation_problem(commit: str, path: str) -> str | None:
    if git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        return f"{commit} is no commit of this repository"
    if git("merge-base", "--is-ancestor", commit, "HEAD").returncode != 0:
        return f"{commit} is not in HEAD's history (a clone of main would lack it)"
    if git("cat-file", "-e", f"{commit}:{path.rstrip('/')}").returncode != 0:
        return f"{commit} holds no {path}"
    return None


def test_the_pages_cite_files_by_commit():
    """The pattern finds the citations the pages give: a test that matched nothing would pass."""
    cited = {(page, path) for page, _, _, path in every_citation()}
    assert ("benchmarks/results/README.md", "benchmarks/results/issue10/") in cited
    assert any(page.startswith("docs/") for page, _ in cited)


def test_every_cited_commit_holds_its_file():
    why = history_problem()
    if why:
        pytest.skip(why)
    problems = [
        f"{page}:{line}: `{commit}:{path}`: {problem}"
        for page, line, commit, path in every_citation()
        if (problem := citation_problem(commit, path))
    ]
    assert not problems, "\n".join(problems)


def test_no_page_cites_the_undelivered_results_branch():
    problems = []
    for page in markdown_files():
        text = page.read_text(encoding="utf-8", errors="replace")
        for pattern in (RESULTS_PATH, RESULTS_BRANCH):
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                problems.append(f"{page.relative_to(ROOT)}:{line}: {match.group(0)!r}")
    assert not problems, (
        "the `results` branch was never delivered: cite a file on main, `git show <commit>:<path>` of "
        "main's history, or say the raw file was lost:\n" + "\n".join(problems)
    )


@pytest.mark.parametrize(
    "text,cited",
    [
        (
            "Raw: `git show 418dba5:benchmarks/results/perf-h200.log` (and more).",
            [("418dba5", "benchmarks/results/perf-h200.log")],
        ),
        ("in `418dba5:benchmarks/results/x/`.", [("418dba5", "benchmarks/results/x/")]),
        ("`bash scripts/gpu-session.sh repo host-ab:f73259b:16`", []),  # a session step's words, no citation
        ("the bus id `00000000:17:00.0`", []),
    ],
)
def test_what_counts_as_a_citation(text, cited):
    assert [(commit, path) for _, commit, path in citations(text)] == cited


@pytest.mark.parametrize(
    "text,flagged",
    [
        ("`git show results:benchmarks/results/x.log`", True),
        ("on the `results`\nbranch", True),
        ("the `asv-results` branch", False),
        ("`asv-results:h200/machine.json`", False),
        ("One commit's results: there is no earlier level", False),
    ],
)
def test_what_counts_as_citing_the_results_branch(text, flagged):
    assert bool(RESULTS_PATH.search(text) or RESULTS_BRANCH.search(text)) == flagged


def files_under_results() -> list[Path]:
    listed = git("ls-files", "-z", "--", "benchmarks/results")
    if listed.returncode == 0 and listed.stdout:
        return [ROOT / name for name in listed.stdout.split("\0") if name and (ROOT / name).is_file()]
    return [path for path in RESULTS.rglob("*") if path.is_file()]


def test_raw_files_on_main_within_the_size_budget():
    files = files_under_results()
    assert files, "benchmarks/results/ holds no file: the budget checked nothing"
    over = [
        f"{path.relative_to(ROOT)}: {path.stat().st_size} bytes"
        for path in files
        if path.stat().st_size > MAX_FILE_BYTES
    ]
    assert not over, (
        f"over the budget of {MAX_FILE_BYTES} bytes a file (benchmarks/results/README.md): compress it "
        "(gzip, or a folder as .tgz) or keep it off main:\n" + "\n".join(over)
    )
    total = sum(path.stat().st_size for path in files)
    assert total <= MAX_FOLDER_BYTES, f"benchmarks/results/ holds {total} bytes, over its budget of {MAX_FOLDER_BYTES}"
