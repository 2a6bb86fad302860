"""The regression record (``python -m harness regression --record`` writes it; ``--replay`` reads
it): its schema (``check_regression``, one pass at a time: ``check_pass``) and its reader."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from harness.core.schema import (
    NONEMPTY,
    Where,
    a_fraction,
    a_list,
    a_string,
    an_int,
    an_object,
    each,
    fields,
    gpu_state,
    object_of,
    optional,
    read_json,
    required,
    seconds_list,
    shown,
    strings,
    values,
)

SIDES = ("base", "head")
FAILED_EXITS = (2, 3)  # a measurement that failed: a kernel's process never ready (2), a wrong output (3)


def read_regression(path: str | Path, name: str | None = None) -> dict:
    return check_regression(read_json(path, name), str(path) if name is None else name)


def check_regression(record: Any, file: str = "the regression record") -> dict:
    """``record`` if it is a regression record (``clocked.measure``, with BASE and HEAD) a
    verdict can be decided on; RecordError otherwise. Its ``rule`` (the limits it was measured with)
    is checked, never applied: the limits are the deciding harness's own. A measurement that failed
    (a kernel's output wrong, 3; a kernel's process that never got ready, 2) has no passes, only
    ``failed``: its exit code and what was wrong."""
    where = Where(file)
    fields(record, where, {f"{key}?": a_string for key in ("base", "head", "device")})
    if "failed" in record:
        return fields(record, where, {"failed": object_of({"exit_code": _failed_exit, "reason": NONEMPTY})})
    rule = object_of({"min_change?": a_fraction, "min_group_change?": a_fraction})
    return fields(record, where, {"environment?": an_object, "rule?": rule, "passes": each(check_pass, nonempty=True)})


def _failed_exit(value: Any, where: Where) -> int:
    if an_int(value, where) not in FAILED_EXITS:
        where.fail(f"{shown(value)} is not 2 or 3")
    return value


def check_pass(value: Any, where: Where) -> dict:
    """One pass of paired rounds: every round timed the same results, for BASE and for HEAD."""
    rounds = required(an_object(value, where), "rounds", where, a_list, nonempty=True)
    keys = None
    for i, paired in enumerate(rounds):
        timed = _paired_round(paired, where.key("rounds").at(i))
        if keys is not None and timed != keys:
            where.key("rounds").at(i).fail(f"timed {shown(sorted(timed))}, but round 1 timed {shown(sorted(keys))}")
        keys = timed
    fields(value, where, {"bytes?": _counts, "peak_bytes?": object_of({f"{side}?": _counts for side in SIDES})})
    optional(value, "states", where, _probe_states, rounds=len(rounds))
    return value


def _paired_round(value: Any, where: Where) -> set:
    an_object(value, where)
    order = optional(value, "order", where, strings)
    if order is not None and sorted(order) != sorted(SIDES):
        where.key("order").fail(f"{shown(order)} is not base and head in some order")
    found = {}
    for side in SIDES:
        samples = required(value, side, where, values(seconds_list, text=True))
        if not samples:
            where.key(side).fail(f"timed nothing for {side}")
        found[side] = set(samples)
    if found["base"] != found["head"]:
        where.key("head").fail(f"timed {shown(sorted(found['head']))}, but base timed {shown(sorted(found['base']))}")
    return found["base"]


_counts = values(partial(an_int, minimum=0), text=True)  # bytes per result


def _probe_states(value: Any, where: Where, rounds: int) -> list:
    """Per round, per side, per result: the GPU's state before and after it was timed."""
    if len(a_list(value, where)) > rounds:
        where.fail(f"{len(value)} rounds of states for {rounds} rounds")
    return each(values(values(values(gpu_state))))(value, where)
