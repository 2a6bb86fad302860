"""What a command does about its output: its parser (``Parser``: a refused argument is one line and
exit 2, as every other bad input), its ``--json``/``--record`` and ``--summary`` options
(``add_record``, ``add_summary``), a file it will write checked to have a folder to go in (before
minutes of measuring, not after), the one way every command writes a record or appends a summary
(``written``: a failure names the option and the path, never a traceback), and stdout and stderr
that never end its one line in an encoding error."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


class Parser(argparse.ArgumentParser):
    """Every command's parser: a refused argument is one line, ``PROG: error: MESSAGE``, and exit 2
    (``exits.BAD_INPUT``), not argparse's usage block; ``--help`` as argparse gives it."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {' '.join(message.splitlines())}\n")


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


class Unwritten(ValueError):
    """An output a command was asked for could not be written: the message names the option (or
    the variable) and the path, and why."""


def add_record(parser, option: str, what: str) -> None:
    parser.add_argument(option, metavar="PATH", help=f"write {what} here (JSON)")


def add_summary(parser, what: str) -> None:
    parser.add_argument("--summary", metavar="PATH", help=f"append {what} as Markdown here (e.g. $GITHUB_STEP_SUMMARY)")


def written(option: str, path: str | None, text: str, append: bool = False) -> bool:
    """``text`` written to ``path`` (appended where ``append``: a job summary); False where no path
    was asked for. Unwritten where it can't be written."""
    if not path:
        return False
    try:
        with open(path, "a" if append else "w") as f:
            f.write(text)
    except (OSError, ValueError) as error:  # ValueError: a path with a NUL character
        raise Unwritten(f"{option} {path}: {getattr(error, 'strerror', None) or error}") from None
    return True


def plain_streams() -> None:
    """stdout and stderr write what they can't encode as an escape: a path that is no UTF-8 (a lone
    surrogate in argv) would otherwise end a command's one line in UnicodeEncodeError, a traceback,
    where stdout is strict UTF-8 (a UTF-8 locale other than C.UTF-8, or PYTHONIOENCODING)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


def program(name: str, commands: dict, argv: list[str] | None = None) -> int:
    """``python -m NAME COMMAND [ARGUMENTS]``: COMMAND's module's ``main(ARGUMENTS)`` (``commands``:
    command -> (module, what it does)); alone, or with --help, the commands one line each (exit 2
    alone, 0 for --help); an unknown command is one line and exit 2. The harness's program and the
    workshop's (``dev/rehearsal``) are this one."""
    import importlib

    from harness.core import exits

    plain_streams()  # every command's: an argument that is no UTF-8 is quoted back, not an error
    words = list(sys.argv[1:] if argv is None else argv)
    if not words or words[0] in ("-h", "--help"):
        width = max(map(len, commands))
        lines = [f"  {command:{width}s}  {about}" for command, (_, about) in commands.items()]
        print(f"usage: python -m {name} COMMAND [ARGUMENTS]  (COMMAND --help: its own)\n\n" + "\n".join(lines))
        return exits.OK if words else exits.BAD_INPUT
    command, rest = words[0], words[1:]
    if command not in commands:
        print(f"{name}: no command {command!r}; the commands: {', '.join(commands)} (exit 2)", file=sys.stderr)
        return exits.BAD_INPUT
    return importlib.import_module(commands[command][0]).main(rest)
