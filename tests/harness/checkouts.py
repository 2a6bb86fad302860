"""Clones of this repository for the tests that need asv's view of git: a `main` branch holding
this checkout's HEAD (whatever branch or detached PR merge this checkout is on), with this working
tree's harness and suite copied over, so that the tests exercise the code as it is now, committed
or not."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ("nf4kernel", "harness", "benchmarks", "asv.conf.json")


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def head() -> str | None:
    """This checkout's HEAD; None where this tree is not a git checkout of its own (a copy of the
    files, or one that sits inside some other repository)."""
    try:
        if Path(git("rev-parse", "--show-toplevel", cwd=ROOT)).resolve() != ROOT:
            return None
        return git("rev-parse", "HEAD", cwd=ROOT)
    except (OSError, subprocess.CalledProcessError):
        return None


def python_path(*front: Path) -> str:
    """PYTHONPATH with ``front`` first and whatever the caller had after (an offline bundle, say)."""
    import os

    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join([*map(str, front), *rest])


def clone_on_main(where: Path, source: Path = ROOT) -> Path:
    """``source`` cloned into ``where`` with `main` at ``source``'s HEAD and this working tree on top."""
    git("clone", "-q", str(source), str(where), cwd=where.parent)
    git("checkout", "-q", "-B", "main", git("rev-parse", "HEAD", cwd=source), cwd=where)
    for name in OVERLAY:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, where / name, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copyfile(path, where / name)
    return where
