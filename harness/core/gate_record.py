"""The gate record (``python -m harness gate`` writes it; ``--replay`` reads it): its schema
(``check_gate``) and its reader (``read_gate``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.schema import (
    COUNT,
    NONEMPTY,
    POSITIVE,
    Where,
    a_bool,
    a_list,
    a_string,
    an_object,
    each,
    fields,
    gpu_state,
    object_of,
    optional,
    or_null,
    read_json,
    required,
    seconds_list,
    shown,
    strings,
    values,
)

# The harness version a gate record is measured by: bumped when a change to the harness changes what
# a record's seconds mean, so that a base measured the old way is never compared with a PR measured
# the new way (the versions: docs/harness-code.md).
HARNESS_VERSION = 2
UNVERSIONED = 1  # what a record without "harness_version" was measured by

GATE_TIMED = ("nf4kernel", "unsloth")  # what the gate's verdict compares; bitsandbytes is shown beside


ENVIRONMENT = {
    "cuda": a_bool,
    "cuda_error?": a_string,
    "unsloth_error?": a_string,
    **{f"{key}?": or_null(a_string) for key in ("device", "torch", "triton", "bitsandbytes", "unsloth")},
    "copy_bytes_per_s?": POSITIVE,
    "versions?": values(or_null(a_string), text=True),
}
CHECK = {"shape": a_string, "weight": a_string, "check": a_string, "ok": a_bool, "exact?": a_bool, "reason?": a_string}
SHAPE = {"label": NONEMPTY, "bytes_per_call": POSITIVE}
STATE = {"state_before": gpu_state, "state_after": gpu_state, "throttled": strings}
KERNEL = {f"{key}?": a_string for key in ("source", "commit", "staged", "imported_from")}
MEASURED = {"device": NONEMPTY, "copy_bytes_per_s": POSITIVE}  # in the environment of a record that timed


def read_gate(path: str | Path, name: str | None = None) -> dict:
    return check_gate(read_json(path, name), str(path) if name is None else name)


def check_gate(record: Any, file: str = "the gate record") -> dict:
    """``record`` if it is a gate record a verdict can be decided and shown on; RecordError
    otherwise. What is required follows how far the run got: nothing measured without a GPU or
    without Unsloth; correctness checks once both were there; timings once every check passed."""
    where = Where(file)
    an_object(record, where)
    if "mode" in record:  # only the A/A noise check's records had one, and the gate reads none of them
        where.key("mode").fail(f"{shown(record['mode'])}: a gate record has no mode (an A/A record had one)")
    env = required(record, "environment", where, object_of(ENVIRONMENT))
    if env["cuda"]:
        required(env, "device", where.key("environment"), NONEMPTY)
    fields(record, where, {f"{key}?": COUNT for key in ("rounds", "rounds_first", "max_rounds", "harness_version")})
    measured = env["cuda"] and bool(env.get("unsloth"))
    correct = True
    if measured:
        checks = required(record, "correctness", where, each(object_of(CHECK)))
        correct = bool(checks) and all(check["ok"] for check in checks)
    if "seconds" in record or (measured and correct):
        _timings(record, where)
    kernel = optional(record, "kernel", where, object_of(KERNEL))
    if kernel and "commit" in kernel:
        required(kernel, "source", where.key("kernel"), a_string)
    return record


def _timings(record: dict, where: Where) -> None:
    """``seconds`` and what reads it: the shapes, the calls per timing, the copy bandwidth, a round
    count that matches, a GPU state per round."""
    shapes = required(record, "shapes", where, each(object_of(SHAPE), nonempty=True))
    timed = required(record, "seconds", where, _rounds_by_name, shapes=len(shapes))
    required(record, "calls_per_timing", where, COUNT)
    fields(record["environment"], where.key("environment"), MEASURED)
    rounds = required(record, "rounds", where, COUNT)
    if rounds != timed:
        where.key("rounds").fail(f"{rounds}, but seconds holds {timed} rounds")
    optional(record, "round_states", where, _round_states, rounds=timed)


def _rounds_by_name(value: Any, where: Where, shapes: int) -> int:
    """Every implementation's rounds, each a timing per shape; GATE_TIMED's required, all of one
    count of rounds. Returns it."""
    an_object(value, where)
    for name in GATE_TIMED:
        if name not in value:
            where.key(name).fail("missing: no rounds timed for it")
    counts = {name: _rounds(rounds, where.key(name), shapes) for name, rounds in value.items()}
    first = GATE_TIMED[0]
    for name, count in counts.items():
        if count != counts[first]:
            where.key(name).fail(f"{count} rounds, but {first} has {counts[first]}")
    return counts[first]


def _rounds(value: Any, where: Where, shapes: int) -> int:
    for i, timings in enumerate(a_list(value, where, nonempty=True)):
        if len(seconds_list(timings, where.at(i))) != shapes:
            where.at(i).fail(f"{len(timings)} timings, but the record's shapes name {shapes}")
    return len(value)


def _round_states(value: Any, where: Where, rounds: int) -> list:
    if len(a_list(value, where)) != rounds:
        where.fail(f"{len(value)} states for {rounds} rounds: one per round")
    return each(object_of(STATE))(value, where)
