"""The gate record (``python -m harness gate`` writes it; ``--replay`` reads it): its schema
(``check_gate``) and its reader (``read_gate``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.schema import (
    Where,
    a_bool,
    a_list,
    a_number,
    a_string,
    a_string_or_null,
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

# The harness version a gate record is measured by: bump it when a change to the harness changes
# what a record's seconds mean (how a round is timed, what a timing holds), so that a base measured
# the old way is never compared with a PR measured the new way. Records written before the field
# existed are version 1: they were timed as today's gate times (interleaved rounds, 1000 x (up,
# gate, down) per shape per timing, synchronized after every call).
# Version 2: timed by the trusted clock (harness/clock): batches go-to-done from another process, the
# outputs written into slots the reference owns, inputs drawn from copies larger than L2.
HARNESS_VERSION = 2
UNVERSIONED = 1  # what a record without "harness_version" was measured by

GATE_TIMED = ("nf4kernel", "unsloth")  # what the gate's verdict compares; bitsandbytes is shown beside


def read_gate(path: str | Path, name: str | None = None) -> dict:
    name = str(path) if name is None else name
    return check_gate(read_json(path, name), name)


def check_gate(record: Any, file: str = "the gate record") -> dict:
    """``record`` if it is a gate record a verdict can be decided and shown on; RecordError
    otherwise. What is required follows how far the run got: nothing measured without a GPU or
    without Unsloth; correctness checks once both were there; timings once every check passed."""
    where = Where(file)
    an_object(record, where)
    if "mode" in record:  # only the A/A noise check's records had one, and the gate reads none of them
        where.key("mode").fail(f"{shown(record['mode'])}: a gate record has no mode (an A/A record had one)")
    environment = _environment(record, where)
    optional(record, "rounds", where, an_int, minimum=1)
    optional(record, "rounds_first", where, an_int, minimum=1)
    optional(record, "max_rounds", where, an_int, minimum=1)
    optional(record, "harness_version", where, an_int, minimum=1)
    measured = environment["cuda"] and bool(environment.get("unsloth"))
    correct = True
    if measured:
        checks = required(record, "correctness", where, _correctness)
        correct = bool(checks) and all(check["ok"] for check in checks)
    if "seconds" in record or (measured and correct):
        _timings(record, where)
    optional(record, "kernel", where, _kernel)
    return record


def _environment(record: dict, where: Where) -> dict:
    env = required(record, "environment", where, an_object)
    here = where.key("environment")
    cuda = required(env, "cuda", here, a_bool)
    if cuda:
        required(env, "device", here, a_string, nonempty=True)
    for key in ("cuda_error", "unsloth_error"):
        optional(env, key, here, a_string)
    for key in ("device", "torch", "triton", "bitsandbytes", "unsloth"):
        optional(env, key, here, a_string_or_null)
    optional(env, "copy_bytes_per_s", here, a_number, positive=True)
    versions = text_keys(optional(env, "versions", here, an_object) or {}, here.key("versions"))
    for key in versions:
        a_string_or_null(versions[key], here.key("versions").key(key))
    return env


def _correctness(value: Any, where: Where) -> list:
    for i, check in enumerate(a_list(value, where)):
        here = where.at(i)
        an_object(check, here)
        for key in ("shape", "weight", "check"):
            required(check, key, here, a_string)
        required(check, "ok", here, a_bool)
        optional(check, "exact", here, a_bool)
        optional(check, "reason", here, a_string)  # the trusted clock's: what failed, said whole
    return value


def _timings(record: dict, where: Where) -> None:
    """``seconds`` and what reads it: the shapes, the calls per timing, the copy bandwidth, a round
    count that matches, a GPU state per round."""
    shapes = required(record, "shapes", where, _shapes)
    timed = required(record, "seconds", where, _rounds_by_name, names=GATE_TIMED, shapes=len(shapes))
    required(record, "calls_per_timing", where, an_int, minimum=1)
    required(record["environment"], "device", where.key("environment"), a_string, nonempty=True)
    required(record["environment"], "copy_bytes_per_s", where.key("environment"), a_number, positive=True)
    rounds = required(record, "rounds", where, an_int, minimum=1)
    if rounds != timed:
        where.key("rounds").fail(f"{rounds}, but seconds holds {timed} rounds")
    optional(record, "round_states", where, _round_states, rounds=timed)


def _shapes(value: Any, where: Where) -> list:
    for i, shape in enumerate(a_list(value, where, nonempty=True)):
        here = where.at(i)
        an_object(shape, here)
        required(shape, "label", here, a_string, nonempty=True)
        required(shape, "bytes_per_call", here, a_number, positive=True)
    return value


def _rounds_by_name(value: Any, where: Where, names: tuple, shapes: int) -> int:
    """Every implementation's rounds, each a timing per shape; ``names`` required, all of one count
    of rounds. Returns it."""
    an_object(value, where)
    for name in names:
        if name not in value:
            where.key(name).fail("missing: no rounds timed for it")
    counts = {name: _rounds(rounds, where.key(name), shapes) for name, rounds in value.items()}
    first = names[0]
    for name, count in counts.items():
        if count != counts[first]:
            where.key(name).fail(f"{count} rounds, but {first} has {counts[first]}")
    return counts[first]


def _rounds(value: Any, where: Where, shapes: int) -> int:
    rounds = a_list(value, where, nonempty=True)
    for i, timings in enumerate(rounds):
        here = where.at(i)
        seconds_list(timings, here)
        if len(timings) != shapes:
            here.fail(f"{len(timings)} timings, but the record's shapes name {shapes}")
    return len(rounds)


def _round_states(value: Any, where: Where, rounds: int) -> list:
    states = a_list(value, where)
    if len(states) != rounds:
        where.fail(f"{len(states)} states for {rounds} rounds: one per round")
    for i, state in enumerate(states):
        here = where.at(i)
        an_object(state, here)
        required(state, "state_before", here, gpu_state)
        required(state, "state_after", here, gpu_state)
        required(state, "throttled", here, strings)
    return states


def _kernel(value: Any, where: Where) -> dict:
    an_object(value, where)
    for key in ("source", "commit", "staged", "imported_from"):
        optional(value, key, where, a_string)
    if "commit" in value:
        required(value, "source", where, a_string)
    return value
