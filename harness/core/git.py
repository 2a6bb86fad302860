"""git from the harness: one way to run it and read its answer. (The results branch's pushes and
fetches keep their own runner in ``history/results_branch.py``: they carry a token, a timeout and a
bot's identity, and read git's whole answer.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

from harness.core.paths import ROOT


class GitError(RuntimeError):
    """git failed: the message names the command, the folder and git's reason; ``stderr`` is git's own."""

    def __init__(self, message: str, stderr: str = ""):
        super().__init__(message)
        self.stderr = stderr


def output(
    *args: str,
    cwd: Path | str = ROOT,
    config: tuple[str, ...] = (),
    check: bool = True,
    binary: bool = False,
    error: type[Exception] = GitError,
) -> str | bytes:
    """What ``git ARGS`` prints (stripped text, or bytes), run in ``cwd`` with ``-c`` for each of
    ``config``. Where git fails: ``error`` raised with one line naming the command, the folder and
    git's reason (GitError, or the caller's own kind of bad input); with ``check=False``, its output
    all the same."""
    command = ["git", *(word for pair in config for word in ("-c", pair)), *args]
    done = subprocess.run(command, cwd=cwd, capture_output=True, check=False)
    if check and done.returncode != 0:
        stderr = done.stderr.decode(errors="replace").strip()
        message = f"git {' '.join(args)} (in {cwd}): {'; '.join(stderr.splitlines())}"  # one line
        raise error(message, stderr) if issubclass(error, GitError) else error(message)
    return done.stdout if binary else done.stdout.decode(errors="replace").strip()
