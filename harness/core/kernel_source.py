"""The kernel under test, and nothing else of its tree: the ``nf4kernel/`` ``.py`` files of a commit
(a hash, a branch, ``HEAD~1``, or another checkout's HEAD, fetched here so asv can record it),
written byte for byte from its blobs into a folder put first on the measuring process's path.
Anything else in the package (a ``.so``, a data file, a symlink, a submodule) is refused with
SourceError, so every line that runs is one a reviewer can read (docs/gpu-approval.md).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
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
    local fetch: nothing of that tree runs), so the commit can be staged and recorded here."""
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


def _listing(commit: str, repo: Path) -> list[tuple[str, str, str, str]]:
    """(mode, kind, object, path) of every entry under ``commit``'s ``nf4kernel``, in git's order."""
    listing = _git("ls-tree", "-r", "-z", "--full-tree", commit, "--", PACKAGE, cwd=repo, binary=True)
    entries = []
    for entry in listing.decode(errors="replace").split("\0"):
        if entry:
            info, path = entry.split("\t", 1)
            mode, kind, sha = info.split()
            entries.append((mode, kind, sha, path))
    return entries


# PEP 561's marker that the package is typed: a file the package ships, which nothing imports or reads
# at run time. Allowed (a regular file), and never staged: the staged kernel is its .py files alone.
TYPED_MARKER = f"{PACKAGE}/py.typed"


def _others(entries: list[tuple[str, str, str, str]]) -> list[str]:
    return [
        path
        for mode, kind, _, path in entries
        if path.startswith(f"{PACKAGE}/")
        and not (kind == "blob" and mode in REGULAR_FILE and (path.endswith(".py") or path == TYPED_MARKER))
    ]


def _unsafe(path: str) -> bool:
    """A path git itself would not check out: an empty, ``.``, ``..`` or ``.git`` part. git makes no
    such tree, but a crafted commit can hold one (a fetch does not check by default), and written
    as it is, ``nf4kernel/../../x.py`` would land outside the staging folder."""
    return any(part in ("", ".", "..") or part.lower() == ".git" for part in path.split("/"))


def _blobs(shas: list[str], repo: Path) -> list[bytes]:
    """Each blob's bytes as stored, from one ``git cat-file --batch``: without ``--filters`` it reads
    no attribute (no ``.gitattributes`` conversion, no filter driver), whatever the commit or the
    repository's config say."""
    command = ["git", "cat-file", "--batch"]
    asked = "".join(f"{sha}\n" for sha in shas).encode()
    done = subprocess.run(command, cwd=repo, input=asked, capture_output=True, check=False)
    if done.returncode != 0:
        raise SourceError(f"git cat-file --batch (in {repo}): {done.stderr.decode(errors='replace').strip()}")
    out, at, blobs = done.stdout, 0, []
    for _ in shas:  # each answer: "<sha> blob <size>\n", the bytes, "\n"; or "<sha> missing\n"
        end = out.index(b"\n", at)
        header = out[at:end].split()
        if header[1:2] != [b"blob"]:
            raise SourceError(f"git cat-file --batch (in {repo}): {out[at:end].decode(errors='replace')}")
        size = int(header[2])
        blobs.append(out[end + 1 : end + 1 + size])
        at = end + 1 + size + 1
    return blobs


def extract(commit: str, into: Path, repo: Path = ROOT) -> Path:
    """``commit``'s ``nf4kernel/`` (its committed ``.py`` files only, each exactly its blob's bytes)
    into ``into``; returns ``into``. SourceError if the package holds any other file, before anything
    is written."""
    try:
        entries = _listing(commit, repo)
    except SourceError:
        entries = []  # not a commit here: as git archive did, say there is no package to stage
    if not entries:
        raise SourceError(f"commit {commit[:12]} has no {PACKAGE}/ package")
    others = _others(entries)
    if others:
        named = ", ".join(others[:SHOWN]) + (f" and {len(others) - SHOWN} more" if len(others) > SHOWN else "")
        raise SourceError(
            f"commit {commit[:12]}'s {PACKAGE}/ holds what is not a .py file: {named}; only .py files are "
            "staged, so that every line of the kernel under test can be reviewed"
        )
    files = {path: sha for _, _, sha, path in entries if path.startswith(f"{PACKAGE}/") and path != TYPED_MARKER}
    unsafe = [path for path in files if _unsafe(path)]
    if unsafe:
        raise SourceError(f"commit {commit[:12]}'s {PACKAGE}/ holds a path git would not check out: {unsafe[0]}")
    if f"{PACKAGE}/__init__.py" not in files:
        raise SourceError(f"commit {commit[:12]} has no {PACKAGE}/__init__.py")
    for path, content in zip(files, _blobs(list(files.values()), repo), strict=True):
        target = into.joinpath(*path.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    return into


@contextlib.contextmanager
def staged(source: str, repo: Path = ROOT):
    """``Staged`` for ``source``: its commit's nf4kernel alone in a temporary folder, removed after."""
    commit = resolve(source, repo)
    with tempfile.TemporaryDirectory(prefix=f"nf4kernel-{commit[:8]}-") as tmp:
        yield Staged(commit, extract(commit, Path(tmp), repo))
