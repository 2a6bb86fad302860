"""The kernel under test, and nothing else of its tree.

The harness judges a kernel with its own code: the gate, the regression check and the backfill run
from *this* checkout, and take from the tree under test only its ``nf4kernel/`` package, copied
out of git (``git archive``: the committed files, no symlink followed out of the tree) into a
temporary folder that is put first on the measuring process's path. Nothing else of that tree is
importable: not its ``harness/``, ``benchmarks/``, ``conftest.py`` or a ``sitecustomize.py`` it
might add. That is what lets a pull request's verdict come from its base's harness: on a PR the
workflows check out the base (this checkout) and the PR's commit side by side and point here at the
PR's checkout.

Only ``.py`` files are staged (and the folders that hold them). A commit whose ``nf4kernel/`` holds
anything else (a compiled ``.so`` or ``.pyd``, a ``.pth``, a data file, a symlink, a submodule) is
refused with SourceError: such a file could be imported or read by the kernel, and no reviewer can
read it, so a verdict on it would be a verdict on code nobody has seen. Every line of the kernel
under test is then a line of Python in the pull request's diff.

A *source* is a commit of this repository (a hash, a branch, ``HEAD~1``) or the path of another
git checkout (the PR's, beside this one), whose HEAD commit is then fetched into this repository
so that asv can record results under it.
"""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.core import git
from harness.core.paths import ROOT

PACKAGE = "nf4kernel"


class SourceError(ValueError):
    """The source names no commit, or its commit has no nf4kernel package, or one with a file in it
    that is not Python source."""


def _git(*args: str, cwd: Path = ROOT, binary: bool = False):
    return git.output(*args, cwd=cwd, binary=binary, error=SourceError)


def resolve(source: str, repo: Path = ROOT) -> str:
    """The full hash of the commit ``source`` names. A checkout's HEAD is fetched into ``repo`` (a
    local fetch: nothing of that tree runs), so the commit can be archived and recorded here."""
    path = Path(source)
    if path.is_dir() and (path / ".git").exists():
        sha = _git("rev-parse", "--verify", "HEAD^{commit}", cwd=path)
        if path.resolve() != repo.resolve():
            with contextlib.suppress(SourceError):
                _git("cat-file", "-e", f"{sha}^{{commit}}", cwd=repo)
                return sha
            _git("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", str(path.resolve()), f"{sha}", cwd=repo)
        return sha
    try:
        return _git("rev-parse", "--verify", f"{source}^{{commit}}", cwd=repo)
    except SourceError:
        raise SourceError(f"{source!r} is neither a commit of {repo} nor a git checkout") from None


def python_path(*front: Path | str, behind: tuple[Path | str, ...] = ()) -> str:
    """The PYTHONPATH of a process started from here: ``front`` first (a staged kernel, then the
    trusted checkout), then the caller's own PYTHONPATH (where the runner's packages may come from,
    bitsandbytes on the GPU image's bundle: kept, never ahead of the kernel under test), then
    ``behind``."""
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join([*map(str, front), *inherited, *map(str, behind)])


@dataclass(frozen=True)
class Staged:
    commit: str
    path: Path  # a folder holding nf4kernel/ alone: what goes first on the path

    def describe(self) -> str:
        return f"nf4kernel of {self.commit[:12]}, alone in {self.path}"


# Git's modes for a regular file, plain and executable: a symlink (120000) or a submodule (160000)
# is neither, whatever its name ends with.
REGULAR_FILE = ("100644", "100755")
SHOWN = 3  # offending paths named in the error; the rest are counted


def not_python(commit: str, repo: Path = ROOT) -> list[str]:
    """The paths under ``commit``'s ``nf4kernel/`` that are not a regular ``*.py`` file, in git's
    order: what ``extract`` refuses to stage. An ``nf4kernel`` that is itself a file is left out
    here: that commit has no package at all, and ``extract`` says so."""
    listing = _git("ls-tree", "-r", "-z", "--full-tree", commit, "--", PACKAGE, cwd=repo, binary=True)
    found = []
    for entry in listing.decode(errors="replace").split("\0"):
        if not entry:
            continue
        info, path = entry.split("\t", 1)
        mode, kind, _ = info.split()
        if path.startswith(f"{PACKAGE}/") and not (kind == "blob" and mode in REGULAR_FILE and path.endswith(".py")):
            found.append(path)
    return found


def extract(commit: str, into: Path, repo: Path = ROOT) -> Path:
    """``commit``'s ``nf4kernel/`` (its committed ``.py`` files only) into ``into``; returns ``into``.
    SourceError if the package holds any other file, before anything is written."""
    try:
        archive = _git("archive", "--format=tar", commit, "--", PACKAGE, cwd=repo, binary=True)
    except SourceError:
        raise SourceError(f"commit {commit[:12]} has no {PACKAGE}/ package") from None
    others = not_python(commit, repo)
    if others:
        named = ", ".join(others[:SHOWN]) + (f" and {len(others) - SHOWN} more" if len(others) > SHOWN else "")
        raise SourceError(
            f"commit {commit[:12]}'s {PACKAGE}/ holds what is not a .py file: {named}; only .py files are "
            "staged, so that every line of the kernel under test can be reviewed"
        )
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        # The listing above has been checked; this keeps the archive to the same promise on its own.
        members = [m for m in tar.getmembers() if m.isdir() or (m.isfile() and m.name.endswith(".py"))]
        tar.extractall(into, members=members, filter="data")
    if not (into / PACKAGE / "__init__.py").is_file():
        raise SourceError(f"commit {commit[:12]} has no {PACKAGE}/__init__.py")
    return into


@contextlib.contextmanager
def staged(source: str, repo: Path = ROOT):
    """``Staged`` for ``source``: its commit's nf4kernel alone in a temporary folder, removed after."""
    commit = resolve(source, repo)
    with tempfile.TemporaryDirectory(prefix=f"nf4kernel-{commit[:8]}-") as tmp:
        yield Staged(commit, extract(commit, Path(tmp), repo))


def imported_from(staged_dir: Path) -> str:
    """Imports nf4kernel (``staged_dir`` must be first on sys.path) and checks where it came from;
    SourceError if another copy (this checkout's, an installed one) shadowed it."""
    import nf4kernel

    where = os.path.realpath(nf4kernel.__file__)
    if not where.startswith(os.path.realpath(staged_dir) + os.sep):
        raise SourceError(f"nf4kernel was imported from {where}, not from the kernel under test in {staged_dir}")
    return where
