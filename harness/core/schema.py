"""The schema machinery every record kind is checked with: ``RecordError`` (a ValueError whose one
line names the file and the field), ``Where`` (a place in a record), the field checkers and
``fields`` (an object checked against a table of them), and ``read_json``. Why: docs/harness-code.md.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

from harness.core.gpu_state import STATE_KEYS

# A timing outside this range is no measurement of this kernel on any GPU: refused, which also keeps
# every ratio and logarithm the rules take finite.
SECONDS_RANGE = (1e-9, 1e5)
SHOWN_CHARS = 60  # how much of a wrong value the error line quotes
COMMIT_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # git's SHA-1 and SHA-256 object names


class RecordError(ValueError):
    """A record that breaks its schema: ``file``, the ``field`` (a path such as
    ``passes[0].rounds[2].head``; empty for the file as a whole) and the ``problem``."""

    def __init__(self, file: str, field: str, problem: str):
        self.file, self.field, self.problem = str(file), field, problem
        super().__init__(f"{self.file}: {field}: {problem}" if field else f"{self.file}: {problem}")


@dataclass(frozen=True)
class Where:
    """A place in a record: its file and the path to the field."""

    file: str
    path: str = ""

    def key(self, name: str) -> Where:
        name = str(name)
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            return Where(self.file, f"{self.path}.{name}" if self.path else name)
        return Where(self.file, f"{self.path}[{json.dumps(name)}]")

    def at(self, index: int) -> Where:
        return Where(self.file, f"{self.path}[{index}]")

    def fail(self, problem: str) -> NoReturn:
        raise RecordError(self.file, self.path, problem)


def shown(value: Any) -> str:
    """A value as the record's JSON writes it (``true``, ``null``, ``"fast"``), cut short."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def an_object(value: Any, where: Where) -> dict:
    if not isinstance(value, dict):
        where.fail(f"{shown(value)} is not an object")
    return value


def a_list(value: Any, where: Where, nonempty: bool = False) -> list:
    if not isinstance(value, list):
        where.fail(f"{shown(value)} is not a list")
    if nonempty and not value:
        where.fail("is empty")
    return value


def a_string(value: Any, where: Where, nonempty: bool = False) -> str:
    if not isinstance(value, str):
        where.fail(f"{shown(value)} is not a string")
    if nonempty and not value:
        where.fail("is an empty string")
    try:
        value.encode()
    except UnicodeEncodeError:  # JSON's "\udcff": printed in a table, it would end the command in a traceback
        where.fail(f"{shown(value)} is not text (it holds a lone surrogate)")
    return value


def a_bool(value: Any, where: Where) -> bool:
    if not isinstance(value, bool):
        where.fail(f"{shown(value)} is not true or false")
    return value


def an_int(value: Any, where: Where, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        where.fail(f"{shown(value)} is not a whole number")
    if minimum is not None and value < minimum:
        where.fail(f"{shown(value)} is below {minimum}")
    return value


def a_number(value: Any, where: Where, positive: bool = False) -> float:
    """A finite JSON number (an int or a float, never a bool); above 0 with ``positive``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        where.fail(f"{shown(value)} is not a number")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        finite = False
    if not finite:
        where.fail(f"{shown(value)} is not a finite number")
    if positive and value <= 0:
        where.fail(f"{shown(value)} is not positive")
    return value


def a_fraction(value: Any, where: Where) -> float:
    if not 0 < a_number(value, where) < 1:
        where.fail(f"{shown(value)} is not a fraction in (0, 1)")
    return value


def seconds_list(value: Any, where: Where) -> list:
    """A nonempty list of timings: a hundred thousand plain floats in range pass in one pass (NaN
    fails both comparisons); only a list with something else in it is walked for the message."""
    a_list(value, where, nonempty=True)
    low, high = SECONDS_RANGE
    if not all(type(v) is float and low <= v <= high for v in value):
        for i, v in enumerate(value):
            if not low <= a_number(v, where.at(i), positive=True) <= high:
                where.at(i).fail(f"{shown(v)} s is outside {low:g} to {high:g} s: no timing of this kernel")
    return value


NONEMPTY = partial(a_string, nonempty=True)
POSITIVE = partial(a_number, positive=True)
COUNT = partial(an_int, minimum=1)


def or_null(check: Callable) -> Callable:
    return lambda value, where: None if value is None else check(value, where)


def each(check: Callable, nonempty: bool = False) -> Callable:
    """A list whose every item passes ``check``."""

    def checked(value: Any, where: Where) -> list:
        for i, item in enumerate(a_list(value, where, nonempty)):
            check(item, where.at(i))
        return value

    return checked


strings = each(a_string)


def values(check: Callable, text: bool = False) -> Callable:
    """An object whose every value passes ``check`` (and, with ``text``, every key is text a table
    can print: see a_string)."""

    def checked(value: Any, where: Where) -> dict:
        an_object(value, where)
        if text:
            for key in value:
                a_string(key, where.key(key))
        for key, item in value.items():
            check(item, where.key(key))
        return value

    return checked


def fields(value: Any, where: Where, spec: dict) -> dict:
    """An object whose fields pass ``spec`` (name -> check, in order; a name ending in ``?`` may be
    absent)."""
    an_object(value, where)
    for name, check in spec.items():
        if name.endswith("?"):
            optional(value, name[:-1], where, check)
        else:
            required(value, name, where, check)
    return value


def object_of(spec: dict) -> Callable:
    return lambda value, where: fields(value, where, spec)


def required(record: dict, key: str, where: Where, check: Callable, **options) -> Any:
    if key not in record:
        where.key(key).fail("missing")
    return check(record[key], where.key(key), **options)


def optional(record: dict, key: str, where: Where, check: Callable, **options) -> Any:
    return check(record[key], where.key(key), **options) if key in record else None


def read_json(path: str | Path, name: str | None = None) -> Any:
    """A file's JSON; RecordError naming the file (as ``name``, by default its path) when it can't be
    read or is no JSON."""
    name = str(path) if name is None else name
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise RecordError(name, "", error.strerror or str(error)) from None
    except ValueError as error:  # a path with a NUL character in it
        raise RecordError(name, "", f"not a path ({error})") from None
    try:
        return json.loads(data)
    except json.JSONDecodeError as error:
        raise RecordError(name, "", f"not JSON ({error})") from None
    except UnicodeDecodeError:
        raise RecordError(name, "", "not JSON (not UTF-8 text)") from None
    except ValueError as error:  # an integer of more digits than Python converts
        raise RecordError(name, "", f"not JSON this harness reads ({error})") from None
    except RecursionError:
        raise RecordError(name, "", "not JSON this harness reads (nested too deeply)") from None


GPU_STATE = {
    "source": a_string,
    **{f"{key}?": or_null(a_number) for key in STATE_KEYS},
    "throttle_mask?": or_null(partial(an_int, minimum=0)),
    "throttle_reasons?": or_null(strings),
}


def gpu_state(value: Any, where: Where) -> dict:
    """A snapshot of the GPU (``gpu_state.snapshot``): its readings, or why there are none."""
    if "unavailable" in an_object(value, where):
        a_string(value["unavailable"], where.key("unavailable"))
        return value
    return fields(value, where, GPU_STATE)
