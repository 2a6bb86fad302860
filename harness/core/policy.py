"""The verdicts' policy: ``.github/gpu-types.toml``, the one reviewed file that holds every threshold,
minimum change, round count, resample count and seed the gate and the regression check decide by
(``[policy.gate]``, ``[policy.regression]``, the trusted clock's checks, ``[policy.clock]``, and the
history's change points, ``[policy.changepoints]``) beside each GPU type's threshold (``gpu_types.py``).
This module is the one that reads it. Standard library only: the workflows' hosted jobs read the GPU
types with the runner image's Python, before anything is installed.

The trusted checkout's file decides a PR's verdict: a PR that edits its own copy changes nothing of
it (the rehearsal's ``self-pass`` scenario). A file that can't be read, or a field missing, unknown
or of the wrong kind, is a ValueError naming the file and the field.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from harness.core.paths import ROOT

FILE = ROOT / ".github" / "gpu-types.toml"


@dataclass(frozen=True)
class Gate:
    threshold: float  # the least median speed-up over Unsloth, where no GPU type is named
    rounds: int  # interleaved rounds first, and the least a median and its interval need
    max_rounds: int  # where the gate stops adding rounds to an inconclusive interval
    resamples: int  # the bootstrap's
    seed: int  # fixed: a replay reproduces the interval a verdict was decided with


@dataclass(frozen=True)
class Regression:
    min_change: float  # one result: slower by more than this fraction, beyond its noise
    min_group_change: float  # a group's geometric mean: likewise
    min_rounds: int  # a pass of fewer carries no round-to-round noise: no verdict
    first_rounds: int
    second_rounds: int  # the re-measuring pass
    resamples: int
    seed: int


@dataclass(frozen=True)
class Clock:
    checks_per_batch: int  # calls drawn at random in a batch and checked right after they answer
    warmup_repeats: int  # a batch's first repeats, made and checked but not timed
    quiet_factor: float  # after a batch, the reference's copy must take at most this times its time alone,
    quiet_slack_us: float  # or its time alone plus this, whichever is more
    quiet_wait_s: float  # for at most this long, else the batch fails: the GPU stayed busy
    call_timeout_s: float  # a call unanswered this long has failed


@dataclass(frozen=True)
class Changepoints:
    floor: float  # the smallest change called, relative to the earlier level
    noise_factor: float  # times the series' mean change from one commit to the next
    persist: int  # commits a level must hold before it counts


def read(path: Path = FILE) -> dict:
    """The whole file, parsed; ValueError naming it where it can't be read."""
    try:
        return tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ValueError(f"{path}: {error}") from None


def _section(kind, name: str, path: Path):
    tables = read(path).get("policy")
    found = tables.get(name) if isinstance(tables, dict) else None
    where = f"{path}: [policy.{name}]"
    if not isinstance(found, dict):
        raise ValueError(f"{where}: missing")
    wanted = {f.name: f.type for f in fields(kind)}
    missing, unknown = sorted(set(wanted) - set(found)), sorted(set(found) - set(wanted))
    if missing or unknown:
        said = [f"{what} {names}" for what, names in (("missing", missing), ("unknown", unknown)) if names]
        raise ValueError(f"{where}: " + "; ".join(said))
    values = {}
    for field, typed in wanted.items():
        value = found[field]
        if typed == "float" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if typed == "float" and not (isinstance(value, float) and value > 0):
            raise ValueError(f"{where}: {field} = {value!r} is not a number above 0")
        if typed == "int" and not (type(value) is int and value >= 0):
            raise ValueError(f"{where}: {field} = {value!r} is not a whole number")
        values[field] = value
    return kind(**values)


def gate(path: Path = FILE) -> Gate:
    return _section(Gate, "gate", path)


def regression(path: Path = FILE) -> Regression:
    return _section(Regression, "regression", path)


def clock(path: Path = FILE) -> Clock:
    return _section(Clock, "clock", path)


def changepoints(path: Path = FILE) -> Changepoints:
    return _section(Changepoints, "changepoints", path)
