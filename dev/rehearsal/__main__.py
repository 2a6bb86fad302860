"""The rehearsal as one program: ``python -m dev.rehearsal COMMAND [ARGUMENTS]``, each command the
``main`` of the module that owns it, as ``python -m harness`` runs the harness's.

    python -m dev.rehearsal rehearse noop      # gpu.yml for real under act, on a GPU machine
    python -m dev.rehearsal act-ci lint tests  # ci.yml's CPU jobs under act, here
"""

from __future__ import annotations

import sys

from harness.core import command_output

COMMANDS = {
    "rehearse": ("dev.rehearsal.rehearse", "gpu.yml and history.yml run for real under act"),
    "act-ci": ("dev.rehearsal.act_ci", "ci.yml's jobs run under act"),
}


def main(argv: list[str] | None = None) -> int:
    return command_output.program("dev.rehearsal", COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
