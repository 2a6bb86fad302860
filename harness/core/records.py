"""The harness's records, each kind checked against its schema before anything is decided on it:
the one module a command imports them from. Each kind lives in a module of its own; this one names
them, and what every command shares about them.

Four kinds, one checker each:

* a gate record (``python -m harness gate`` writes it; ``--replay`` reads it), the
  A/A record (``"mode": "aa"``) among them: ``check_gate`` (``gate_record.py``);
* a regression record (``python -m harness regression --record``; ``--replay`` reads it):
  ``check_regression`` (``regression_record.py``);
* an asv result file (``<machine>/<commit>-<env>.json`` in asv's results and ``benchmarks/history``):
  ``check_asv_result`` (``asv_files.py``);
* an asv ``machine.json``: ``check_machine`` (``asv_files.py``).

``read_*`` reads a file and checks it. Anything wrong raises ``RecordError`` (``schema.py``), a ValueError whose one
line names the file and the field: ``gate-base.json: seconds.nf4kernel[3][0]: true is not a number``.
A command prints that line and exits with its code for bad input (2 for the gate and the regression
check): never a traceback, whose exit 1 is what the gate and the regression check say for "slower".
``check_output`` (``command_output.py``) and the program's ``plain_streams`` keep a command's own
output to that one line.

The schemas are plain Python rather than JSON Schema: the rules that matter most relate fields to
one another (as many rounds per implementation, a timing per shape the record names, one GPU state
per round), which JSON Schema can't state; the approval job and the GPU runner run with the
standard library and the pinned set, and no validator is pinned there; and the errors are written
in the one line above. A bool is not a number here, though Python's bool is an int, and a time is a
finite number of seconds in ``SECONDS_RANGE``. Fields a decision doesn't read (the verdict a record
was written with, the command line) are not checked: they are what the record says, not what it
decides on.

Every module behind this one is standard library only: the approval job imports it with nothing
else installed.
"""

from harness.core.asv_files import (
    ASV_MACHINE_VERSION,
    ASV_RESULTS_VERSION,
    check_asv_result,
    check_machine,
    read_asv_result,
    read_machine,
)
from harness.core.command_output import check_output
from harness.core.gate_record import (
    AA_MODE,
    AA_TIMED,
    GATE_TIMED,
    HARNESS_VERSION,
    IN_PROCESS_VERSION,
    UNVERSIONED,
    check_gate,
    read_gate,
)
from harness.core.regression_record import FAILED_EXITS, SIDES, check_pass, check_regression, read_regression
from harness.core.schema import COMMIT_HASH, SECONDS_RANGE, RecordError, Where, read_json

__all__ = [
    "AA_MODE",
    "AA_TIMED",
    "ASV_MACHINE_VERSION",
    "ASV_RESULTS_VERSION",
    "COMMIT_HASH",
    "FAILED_EXITS",
    "GATE_TIMED",
    "HARNESS_VERSION",
    "IN_PROCESS_VERSION",
    "SECONDS_RANGE",
    "SIDES",
    "UNVERSIONED",
    "RecordError",
    "Where",
    "check_asv_result",
    "check_gate",
    "check_machine",
    "check_output",
    "check_pass",
    "check_regression",
    "read_asv_result",
    "read_gate",
    "read_json",
    "read_machine",
    "read_regression",
]
