"""What a command does about its output before and while it writes: a file it will write checked
to have a folder to go in (before minutes of measuring, not after), and stdout and stderr that
never end its one line in an encoding error."""

from __future__ import annotations

import sys
from pathlib import Path


def check_output(parser, option: str, path: str | None) -> None:
    """A file a command writes after minutes of measuring needs a folder to go in: refused through
    ``parser.error`` (one line, exit 2) before, not after."""
    if path is None:
        return
    if "\0" in path:
        parser.error(f"{option} {path!r}: a path holds no NUL character")
    target = Path(path)
    if target.is_dir():
        parser.error(f"{option} {path!r} is a folder, not a file")
    if not target.parent.is_dir():
        parser.error(f"{option} {path}: there is no folder {target.parent} to write it in")


def plain_streams() -> None:
    """stdout and stderr write what they can't encode as an escape: a path that is no UTF-8 (a lone
    surrogate in argv) would otherwise end a command's one line in UnicodeEncodeError, a traceback,
    where stdout is strict UTF-8 (a UTF-8 locale other than C.UTF-8, or PYTHONIOENCODING)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
