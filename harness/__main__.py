"""The harness as one program: ``python -m harness COMMAND [ARGUMENTS]``, each command the ``main`` of
the module that owns it (its arguments, ``--help`` and exit codes are that module's; the exit codes
every command shares are ``core/exits.py``'s). The nox sessions run these; so can a person.

    python -m harness                       # the commands, one line each
    python -m harness gate --replay R
    python -m harness regression BASE HEAD
"""

from __future__ import annotations

import sys

from harness.core import command_output

# command -> (module whose main(argv) it runs, what it does)
COMMANDS = {
    "gate": ("harness.gate.cli", "the speed gate: nf4kernel against Unsloth, and correctness"),
    "regression": ("harness.regression.cli", "the regression check: HEAD's kernel against BASE's"),
    "bench": ("harness.history.bench", "the asv suite on this checkout, for the history"),
    "backfill": ("harness.history.backfill", "asv on earlier commits of main"),
    "results-branch": ("harness.history.results_branch", "the asv-results branch, append-only: fetch, store"),
    "changepoints": ("harness.history.changepoints", "main's history judged for change points"),
    "site": ("harness.history.site", "the history's site: publish"),
    "approval": ("harness.github.approval", "a /gpu-approve comment checked; the gpu status posted"),
    "gpu-tests": ("harness.github.gpu_tests", "main's tests on a PR's staged kernel, sandboxed"),
    "gpu-types": ("harness.core.policy", "the GPU types and their thresholds"),
    "sandbox": ("harness.core.sandbox", "a command in the sandbox a PR's code runs in (a runner's check)"),
}


def main(argv: list[str] | None = None) -> int:
    return command_output.program("harness", COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
