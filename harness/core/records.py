"""The harness's records, each kind checked against its schema before anything is decided on it:
the one module a command imports them from.

* a gate record (``python -m harness gate`` writes it; ``--replay`` reads it): ``check_gate``
  (``gate_record.py``);
* a regression record (``python -m harness regression --record``; ``--replay`` reads it):
  ``check_regression`` (``regression_record.py``);
* an asv result file and an asv ``machine.json``: ``check_asv_result``, ``check_machine`` (``asv_files.py``).

``read_*`` reads a file and checks it. Anything wrong raises ``RecordError`` (``schema.py``), whose one
line names the file and the field; a command prints it and exits with its code for bad input.
Standard library only: the approval job imports it with nothing else installed. Why plain Python and
not JSON Schema: docs/harness-code.md.
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
    GATE_TIMED,
    HARNESS_VERSION,
    UNVERSIONED,
    check_gate,
    read_gate,
)
from harness.core.regression_record import FAILED_EXITS, SIDES, check_pass, check_regression, read_regression
from harness.core.schema import COMMIT_HASH, SECONDS_RANGE, RecordError, Where, read_json

__all__ = [
    "ASV_MACHINE_VERSION",
    "ASV_RESULTS_VERSION",
    "COMMIT_HASH",
    "FAILED_EXITS",
    "GATE_TIMED",
    "HARNESS_VERSION",
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
