"""The regression record (``python -m harness regression --record`` writes it; ``--replay`` reads
it): its schema (``check_regression``, one pass of paired rounds at a time) and its reader
(``read_regression``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.schema import (
    Where,
    a_fraction,
    a_list,
    a_string,
    an_int,
    an_object,
    gpu_state,
    optional,
    read_json,
    required,
    seconds_list,
    shown,
    strings,
    text_keys,
)

SIDES = ("base", "head")
FAILED_EXITS = (2, 3)  # a measurement that failed: a kernel's process never ready (2), a wrong output (3)


def read_regression(path: str | Path, name: str | None = None) -> dict:
    name = str(path) if name is None else name
    return check_regression(read_json(path, name), name)


def check_regression(record: Any, file: str = "the regression record") -> dict:
    """``record`` if it is a regression record (``clocked.measure``, with BASE and HEAD) a
    verdict can be decided on; RecordError otherwise. Its ``rule`` (the limits it was measured with)
    is checked, never applied: the limits are the deciding harness's own. A measurement that failed
    (a kernel's output wrong, 3; a kernel's process that never got ready, 2) has no passes, only
    ``failed``: its exit code and what was wrong."""
    where = Where(file)
    an_object(record, where)
    for key in ("base", "head", "device"):
        optional(record, key, where, a_string)
    if "failed" in record:
        failed = an_object(record["failed"], where.key("failed"))
        if required(failed, "exit_code", where.key("failed"), an_int) not in FAILED_EXITS:
            where.key("failed").key("exit_code").fail(f"{shown(failed['exit_code'])} is not 2 or 3")
        required(failed, "reason", where.key("failed"), a_string, nonempty=True)
        return record
    optional(record, "environment", where, an_object)
    rule = optional(record, "rule", where, an_object) or {}
    for key in ("min_change", "min_group_change"):
        optional(rule, key, where.key("rule"), a_fraction)
    passes = required(record, "passes", where, a_list, nonempty=True)
    for i, found in enumerate(passes):
        check_pass(found, where.key("passes").at(i))
    return record


def check_pass(value: Any, where: Where) -> dict:
    """One pass of paired rounds: every round timed the same results, for BASE and for HEAD."""
    an_object(value, where)
    rounds = required(value, "rounds", where, a_list, nonempty=True)
    keys = None
    for i, paired in enumerate(rounds):
        timed = _paired_round(paired, where.key("rounds").at(i))
        if keys is not None and timed != keys:
            where.key("rounds").at(i).fail(f"timed {_named(timed)}, but round 1 timed {_named(keys)}")
        keys = timed
    optional(value, "bytes", where, _counts)
    peak = optional(value, "peak_bytes", where, an_object) or {}
    for side in SIDES:
        optional(peak, side, where.key("peak_bytes"), _counts)
    optional(value, "states", where, _probe_states, rounds=len(rounds))
    return value


def _named(keys: set) -> str:
    return shown(sorted(keys))


def _paired_round(value: Any, where: Where) -> set:
    an_object(value, where)
    order = optional(value, "order", where, strings)
    if order is not None and sorted(order) != sorted(SIDES):
        where.key("order").fail(f"{shown(order)} is not base and head in some order")
    found = {}
    for side in SIDES:
        samples = text_keys(required(value, side, where, an_object), where.key(side))
        if not samples:
            where.key(side).fail(f"timed nothing for {side}")
        for key, calls in samples.items():
            seconds_list(calls, where.key(side).key(key))
        found[side] = set(samples)
    if found["base"] != found["head"]:
        where.key("head").fail(f"timed {_named(found['head'])}, but base timed {_named(found['base'])}")
    return found["base"]


def _counts(value: Any, where: Where) -> dict:
    """Bytes per result: whole numbers, 0 or more."""
    text_keys(an_object(value, where), where)
    for key, count in value.items():
        an_int(count, where.key(key), minimum=0)
    return value


def _probe_states(value: Any, where: Where, rounds: int) -> list:
    """Per round, per side, per result: the GPU's state before and after it was timed."""
    states = a_list(value, where)
    if len(states) > rounds:
        where.fail(f"{len(states)} rounds of states for {rounds} rounds")
    for i, sides in enumerate(states):
        here = where.at(i)
        an_object(sides, here)
        for side, results in sides.items():
            for key, around in an_object(results, here.key(side)).items():
                for moment, state in an_object(around, here.key(side).key(key)).items():
                    gpu_state(state, here.key(side).key(key).key(moment))
    return states
