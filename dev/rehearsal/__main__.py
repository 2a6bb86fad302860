"""The rehearsal as one program: ``python -m dev.rehearsal COMMAND [ARGUMENTS]``, each command the
``main`` of the module that owns it, as ``python -m harness`` runs the harness's.

    python -m dev.rehearsal rehearse noop      # gpu.yml for real under act, on a GPU machine
    python -m dev.rehearsal act-ci lint tests  # ci.yml's CPU jobs under act, here
"""

from __future__ import annotations

import importlib
import sys

from harness.core import command_output, exits

COMMANDS = {
    "rehearse": ("dev.rehearsal.rehearse", "gpu.yml and history.yml run for real under act"),
    "act-ci": ("dev.rehearsal.act_ci", "ci.yml's jobs run under act"),
}


def main(argv: list[str] | None = None) -> int:
    command_output.plain_streams()
    words = list(sys.argv[1:] if argv is None else argv)
    if not words or words[0] in ("-h", "--help"):
        width = max(map(len, COMMANDS))
        print("usage: python -m dev.rehearsal COMMAND [ARGUMENTS]  (COMMAND --help: its own)\n")
        print("\n".join(f"  {name:{width}s}  {about}" for name, (_, about) in COMMANDS.items()))
        return 0 if words else exits.BAD_INPUT
    name, rest = words[0], words[1:]
    if name not in COMMANDS:
        print(f"dev.rehearsal: no command {name!r}; the commands: {', '.join(COMMANDS)} (exit 2)", file=sys.stderr)
        return exits.BAD_INPUT
    return importlib.import_module(COMMANDS[name][0]).main(rest)


if __name__ == "__main__":
    sys.exit(main())
