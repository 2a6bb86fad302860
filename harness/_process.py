"""The processes the harness starts for itself, behind one private entry point: no person types
these, and ``python -m harness`` (the program for people) does not list them.

    python -P -m harness._process reference SOCKET_FD CHANNEL_FD     the clock's reference (clock/reference.py)
    python -P -m harness._process worker IMPL SOCKET_FD CHANNEL_FD   a call process (clock/worker.py)

Started wrongly, each says so in one line and exits 2.
"""

from __future__ import annotations

import importlib
import sys

# name -> the module whose main(argv) it runs
PROCESSES = {
    "reference": "harness.clock.reference",
    "worker": "harness.clock.worker",
}


def main(argv: list[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if not words or words[0] not in PROCESSES:
        names = ",".join(PROCESSES)
        print(f"usage: python -P -m harness._process {{{names}}} ... (started by the harness; exit 2)", file=sys.stderr)
        return 2
    return importlib.import_module(PROCESSES[words[0]]).main(words[1:])


if __name__ == "__main__":
    sys.exit(main())
