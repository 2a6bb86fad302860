"""The harness's records, each kind checked against its schema before anything is decided on it.

Four kinds, one checker each:

* a gate record (``gate.py`` writes it; ``--replay`` and ``--baseline`` read it), the A/A record
  (``"mode": "aa"``) among them: ``check_gate``;
* a regression record (``regression.py --record``; ``--replay`` reads it): ``check_regression``;
* an asv result file (``<machine>/<commit>-<env>.json`` in asv's results and ``benchmarks/history``):
  ``check_asv_result``;
* an asv ``machine.json``: ``check_machine``.

``read_*`` reads a file and checks it; ``same_workload`` says whether a base's gate record and a PR's
can be compared at all. Anything wrong raises ``RecordError``, a ValueError whose one line names the
file and the field: ``gate-base.json: seconds.nf4kernel[3][0]: true is not a number``. A command
prints that line and exits with its code for bad input (2 for the gate and the regression check):
never a traceback, whose exit 1 is what the gate and the regression check say for "slower".

The schemas are plain Python rather than JSON Schema: the rules that matter most relate fields to
one another (as many rounds per implementation, a timing per shape the record names, one GPU state
per round), which JSON Schema can't state; the approval job and the GPU runner run with the
standard library and the pinned set, and no validator is pinned there; and the errors are written
in the one line above. A bool is not a number here, though Python's bool is an int, and a time is a
finite number of seconds in ``SECONDS_RANGE``. Fields a decision doesn't read (the verdict a record
was written with, the command line) are not checked: they are what the record says, not what it
decides on.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

# The harness version a gate record is measured by: bump it when a change to the harness changes
# what a record's seconds mean (how a round is timed, what a timing holds), so that a base measured
# the old way is never compared with a PR measured the new way. Records written before the field
# existed are version 1: they were timed as today's gate times (interleaved rounds, 1000 x (up,
# gate, down) per shape per timing, synchronized after every call).
HARNESS_VERSION = 1
UNVERSIONED = 1  # what a record without "harness_version" was measured by

# A timing outside this range is no measurement of this kernel on any GPU (the gate's per-round
# totals are tenths of a second, the regression check's calls microseconds; the interpreter's
# milliseconds): refused, which also keeps every ratio and logarithm the rules take finite.
SECONDS_RANGE = (1e-9, 1e5)

AA_MODE = "aa"
GATE_TIMED = ("nf4kernel", "unsloth")  # what the gate's verdict compares; bitsandbytes is shown beside
AA_TIMED = ("A", "B")
SIDES = ("base", "head")
SHOWN_CHARS = 60  # how much of a wrong value the error line quotes
STATE_NUMBERS = ("sm_clock_mhz", "mem_clock_mhz", "max_sm_clock_mhz", "temperature_c", "power_w", "power_limit_w")
COMMIT_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # git's SHA-1 and SHA-256 object names
ASV_RESULTS_VERSION = 2  # the asv result file format asv 0.6 writes and reads
ASV_MACHINE_VERSION = 1


class RecordError(ValueError):
    """A record that breaks its schema: ``file``, the ``field`` (a path such as
    ``passes[0].rounds[2].head``; empty for the file as a whole) and the ``problem``."""

    def __init__(self, file: str, field: str, problem: str):
        self.file, self.field, self.problem = str(file), field, problem
        super().__init__(f"{self.file}: {field}: {problem}" if field else f"{self.file}: {problem}")


# --- Where in a record, and what is wrong there ----------------------------------------------------


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


def text_keys(value: dict, where: Where) -> dict:
    """An object whose keys are text a table can print (see a_string)."""
    for key in value:
        a_string(key, where.key(key))
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
    """A number strictly between 0 and 1."""
    a_number(value, where)
    if not 0 < value < 1:
        where.fail(f"{shown(value)} is not a fraction in (0, 1)")
    return value


def seconds(value: Any, where: Where) -> float:
    a_number(value, where, positive=True)
    low, high = SECONDS_RANGE
    if not low <= value <= high:
        where.fail(f"{shown(value)} s is outside {low:g} to {high:g} s: no timing of this kernel")
    return value


def seconds_list(value: Any, where: Where) -> list:
    """A nonempty list of timings. The H100's regression records hold a hundred thousand of them:
    a plain float in range is accepted in one pass (NaN fails both comparisons), and only a list with
    something else in it is walked value by value for the message."""
    a_list(value, where, nonempty=True)
    low, high = SECONDS_RANGE
    if not all(type(v) is float and low <= v <= high for v in value):
        for i, v in enumerate(value):
            seconds(v, where.at(i))
    return value


def a_string_or_null(value: Any, where: Where) -> str | None:
    return None if value is None else a_string(value, where)


def a_number_or_null(value: Any, where: Where) -> float | None:
    return None if value is None else a_number(value, where)


def strings(value: Any, where: Where) -> list[str]:
    for i, item in enumerate(a_list(value, where)):
        a_string(item, where.at(i))
    return value


def required(record: dict, key: str, where: Where, check: Callable, **options) -> Any:
    if key not in record:
        where.key(key).fail("missing")
    return check(record[key], where.key(key), **options)


def optional(record: dict, key: str, where: Where, check: Callable, **options) -> Any:
    return check(record[key], where.key(key), **options) if key in record else None


def check_output(parser, option: str, path: str | None) -> None:
    """A file a command writes after minutes of measuring needs a folder to go in: refused through
    ``parser.error`` (one line, exit 2) before, not after."""
    if path is None:
        return
    if "\0" in path:
        parser.error(f"{option} {path!r}: a path holds no NUL character")
    target = Path(path)
    if target.is_dir():
        parser.error(f"{option} {path!r} is a folder, not a file")
    if not target.parent.is_dir():
        parser.error(f"{option} {path}: there is no folder {target.parent} to write it in")


def plain_streams() -> None:
    """stdout and stderr write what they can't encode as an escape: a path that is no UTF-8 (a lone
    surrogate in argv) would otherwise end a command's one line in UnicodeEncodeError, a traceback,
    where stdout is strict UTF-8 (a UTF-8 locale other than C.UTF-8, or PYTHONIOENCODING)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


# --- Reading a file -----------------------------------------------------------------------------


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


def read_gate(path: str | Path, name: str | None = None) -> dict:
    name = str(path) if name is None else name
    return check_gate(read_json(path, name), name)


def read_regression(path: str | Path, name: str | None = None) -> dict:
    name = str(path) if name is None else name
    return check_regression(read_json(path, name), name)


def read_asv_result(path: str | Path, name: str | None = None) -> dict:
    name = str(path) if name is None else name
    return check_asv_result(read_json(path, name), name)


def read_machine(path: str | Path, name: str | None = None) -> dict:
    name = str(path) if name is None else name
    return check_machine(read_json(path, name), name)


# --- The gate record ------------------------------------------------------------------------------


def check_gate(record: Any, file: str = "the gate record") -> dict:
    """``record`` if it is a gate record (or an A/A record) a verdict can be decided and shown on;
    RecordError otherwise. What is required follows how far the run got: nothing measured without a
    GPU (or, for the gate, without Unsloth); correctness checks once both were there; timings once
    every check passed."""
    where = Where(file)
    an_object(record, where)
    mode = optional(record, "mode", where, a_string)
    if mode is not None and mode != AA_MODE:
        where.key("mode").fail(f"{shown(mode)} is no record mode (an A/A record says {shown(AA_MODE)})")
    aa = mode == AA_MODE
    environment = _environment(record, where)
    optional(record, "rounds", where, an_int, minimum=1)
    optional(record, "rounds_first", where, an_int, minimum=1)
    optional(record, "max_rounds", where, an_int, minimum=1)
    optional(record, "harness_version", where, an_int, minimum=1)
    measured = environment["cuda"] and (aa or bool(environment.get("unsloth")))
    correct = True
    if measured and not aa:
        checks = required(record, "correctness", where, _correctness)
        correct = bool(checks) and all(check["ok"] for check in checks)
    shapes = _timings(record, where, aa) if "seconds" in record or (measured and correct) else None
    optional(record, "classic", where, _classic, shapes=shapes)
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
    return value


def _timings(record: dict, where: Where, aa: bool) -> int | None:
    """``seconds`` and what reads it: the shapes, the calls per timing, the copy bandwidth, a round
    count that matches, a GPU state per round. Returns how many shapes the record names."""
    shapes = required(record, "shapes", where, _shapes) if not aa else optional(record, "shapes", where, _shapes)
    count = len(shapes) if shapes else None
    names = AA_TIMED if aa else GATE_TIMED
    timed = required(record, "seconds", where, _rounds_by_name, names=names, shapes=count)
    required(record, "calls_per_timing", where, an_int, minimum=1)
    required(record["environment"], "device", where.key("environment"), a_string, nonempty=True)
    if not aa:
        required(record["environment"], "copy_bytes_per_s", where.key("environment"), a_number, positive=True)
    rounds = required(record, "rounds", where, an_int, minimum=1)
    if rounds != timed:
        where.key("rounds").fail(f"{rounds}, but seconds holds {timed} rounds")
    optional(record, "round_states", where, _round_states, rounds=timed)
    return count


def _shapes(value: Any, where: Where) -> list:
    for i, shape in enumerate(a_list(value, where, nonempty=True)):
        here = where.at(i)
        an_object(shape, here)
        required(shape, "label", here, a_string, nonempty=True)
        required(shape, "bytes_per_call", here, a_number, positive=True)
    return value


def _rounds_by_name(value: Any, where: Where, names: tuple, shapes: int | None) -> int:
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


def _rounds(value: Any, where: Where, shapes: int | None) -> int:
    rounds = a_list(value, where, nonempty=True)
    width = shapes
    for i, timings in enumerate(rounds):
        here = where.at(i)
        seconds_list(timings, here)
        if width is None:
            width = len(timings)
        elif len(timings) != width:
            named = "the record's shapes name" if shapes else "round 1 timed"
            here.fail(f"{len(timings)} timings, but {named} {width}")
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


def gpu_state(value: Any, where: Where) -> dict:
    """A snapshot of the GPU (``gpu_state.snapshot``): its readings, or why there are none."""
    an_object(value, where)
    if "unavailable" in value:
        a_string(value["unavailable"], where.key("unavailable"))
        return value
    required(value, "source", where, a_string)
    for key in STATE_NUMBERS:
        optional(value, key, where, a_number_or_null)
    if value.get("throttle_mask") is not None:
        an_int(value["throttle_mask"], where.key("throttle_mask"), minimum=0)
    if value.get("throttle_reasons") is not None:
        strings(value["throttle_reasons"], where.key("throttle_reasons"))
    return value


def _classic(value: Any, where: Where, shapes: int | None) -> dict:
    """Unsloth's classic path, timed in its own process: its timings, or why not."""
    an_object(value, where)
    if "seconds" not in value:
        optional(value, "error", where, a_string)
        return value
    required(value, "seconds", where, _rounds_by_name, names=("nf4kernel", "unsloth_classic"), shapes=shapes)
    required(value, "calls_per_timing", where, an_int, minimum=1)
    return value


def _kernel(value: Any, where: Where) -> dict:
    an_object(value, where)
    for key in ("source", "commit", "staged", "imported_from"):
        optional(value, key, where, a_string)
    if "commit" in value:
        required(value, "source", where, a_string)
    return value


# --- Whether two gate records can be compared ---------------------------------------------------------


def _shape_set(record: dict) -> list:
    return [[shape["label"], shape["bytes_per_call"]] for shape in record.get("shapes") or []]


# (field, what it reads, why a difference refuses the comparison)
WORKLOAD = (
    ("mode", lambda r: r.get("mode", "gate"), "an A/A record is no gate record's base"),
    (
        "harness_version",
        lambda r: r.get("harness_version", UNVERSIONED),
        "records of two harness versions time differently",
    ),
    ("environment.device", lambda r: r["environment"].get("device"), "a relative check needs both on one runner"),
    ("calls_per_timing", lambda r: r.get("calls_per_timing"), "a timing of another length is another workload"),
    ("shapes", _shape_set, "a relative check compares the same shapes ([label, bytes per call])"),
)


def same_workload(base: dict, pr: dict, base_file: str = "the base's record", pr_file: str = "the record") -> None:
    """RecordError, naming the base's file and the field, unless ``base`` and ``pr`` (gate records,
    checked) timed one workload: the same mode, harness version, GPU, calls per timing and shapes
    (each shape's label and bytes per call, in order)."""
    for field, read, why in WORKLOAD:
        theirs, ours = read(base), read(pr)
        if theirs != ours:
            raise RecordError(base_file, field, f"{shown(theirs)}, but {pr_file} has {shown(ours)}: {why}")


# --- The regression record ----------------------------------------------------------------------------


def check_regression(record: Any, file: str = "the regression record") -> dict:
    """``record`` if it is a regression record (``paired_rounds.measure``, with BASE and HEAD) a
    verdict can be decided on; RecordError otherwise. Its ``rule`` (the limits it was measured with)
    is checked, never applied: the limits are the deciding harness's own."""
    where = Where(file)
    an_object(record, where)
    for key in ("base", "head", "device"):
        optional(record, key, where, a_string)
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


# --- asv's files --------------------------------------------------------------------------------------


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
    required(record, "env_name", where, a_string, nonempty=True)
    optional(record, "date", where, an_int, minimum=0)
    optional(record, "python", where, a_string)
    params = optional(record, "params", where, an_object) or {}
    for key, value in params.items():
        a_string(value, where.key("params").key(key))
    columns = required(record, "result_columns", where, strings)
    results = required(record, "results", where, an_object)
    for name, row in results.items():
        _asv_row(row, where.key("results").key(name), columns)
    durations = optional(record, "durations", where, an_object) or {}
    for key, value in durations.items():
        a_number(value, where.key("durations").key(key))
    return record


def _asv_row(value: Any, where: Where, columns: list[str]) -> None:
    row = a_list(value, where, nonempty=True)
    if len(row) > len(columns):
        where.fail(f"{len(row)} values for {len(columns)} result_columns")
    result = row[0]
    if not isinstance(result, list):
        _asv_value(result, where.at(0))
        return
    for i, item in enumerate(result):
        _asv_value(item, where.at(0).at(i))
    if len(row) > 1:
        names = a_list(row[1], where.at(1))
        for i, values in enumerate(names):
            strings(values, where.at(1).at(i))
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
    ``harness/history/machine.py`` write them, every other value a string (``gpu`` is ``"none"`` on a CPU
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
