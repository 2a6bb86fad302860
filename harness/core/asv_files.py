"""asv's files as the history reads them: a result file (``<machine>/<commit>-<env>.json`` in asv's
results and ``benchmarks/history``, the format asv 0.6 writes) and a ``machine.json``: their schemas
(``check_asv_result``, ``check_machine``) and readers (``read_asv_result``, ``read_machine``).
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any

from harness.core.schema import (
    COMMIT_HASH,
    NONEMPTY,
    Where,
    a_list,
    a_number,
    a_string,
    an_int,
    an_object,
    each,
    fields,
    read_json,
    required,
    shown,
    strings,
    values,
)

ASV_RESULTS_VERSION = 2  # the asv result file format asv 0.6 writes and reads
ASV_MACHINE_VERSION = 1


def read_asv_result(path: str | Path, name: str | None = None) -> dict:
    return check_asv_result(read_json(path, name), str(path) if name is None else name)


def read_machine(path: str | Path, name: str | None = None) -> dict:
    return check_machine(read_json(path, name), str(path) if name is None else name)


def check_asv_result(record: Any, file: str = "the asv result") -> dict:
    """``record`` if it is an asv result file of the format asv 0.6 writes (version 2): the commit
    it is for, its environment, and per benchmark a row of ``result_columns``."""
    where = Where(file)
    an_object(record, where)
    version = required(record, "version", where, an_int)
    if version != ASV_RESULTS_VERSION:
        where.key("version").fail(f"{version}: this harness reads asv's result format {ASV_RESULTS_VERSION}")
    commit = required(record, "commit_hash", where, a_string)
    if not COMMIT_HASH.fullmatch(commit):
        where.key("commit_hash").fail(f"{shown(commit)} is not a full commit hash")
    spec = {"env_name": NONEMPTY, "date?": partial(an_int, minimum=0), "python?": a_string}
    spec.update({"params?": values(a_string), "result_columns": strings, "results": an_object})
    fields(record, where, {**spec, "durations?": values(a_number)})
    row = partial(_asv_row, columns=record["result_columns"])
    values(row)(record["results"], where.key("results"))
    return record


def _asv_row(value: Any, where: Where, columns: list[str]) -> None:
    row = a_list(value, where, nonempty=True)
    if len(row) > len(columns):
        where.fail(f"{len(row)} values for {len(columns)} result_columns")
    result = row[0]
    if not isinstance(result, list):
        _asv_value(result, where.at(0))
        return
    each(_asv_value)(result, where.at(0))
    if len(row) > 1:
        names = each(strings)(row[1], where.at(1))
        combinations = math.prod(len(values) for values in names)
        if names and combinations != len(result):
            where.at(0).fail(f"{len(result)} results for {combinations} combinations of the parameters")


def _asv_value(value: Any, where: Where) -> None:
    """One result: a number or null (asv writes null for a benchmark that failed or was skipped,
    and NaN where one returned it)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        where.fail(f"{shown(value)} is not a number or null")


def check_machine(record: Any, file: str = "machine.json") -> dict:
    """``record`` if it is asv's description of a machine (version 1): its name and, as asv and
    ``harness/history/asvrun.py`` write them, every other value a string (``gpu`` is ``"none"`` on a CPU
    machine, or absent where asv alone wrote the file)."""
    where = Where(file)
    an_object(record, where)
    version = required(record, "version", where, an_int)
    if version != ASV_MACHINE_VERSION:
        where.key("version").fail(f"{version}: asv's machine.json is version {ASV_MACHINE_VERSION}")
    required(record, "machine", where, a_string, nonempty=True)
    for key, value in record.items():
        if key != "version":
            a_string(value, where.key(key))
    return record
