"""The one reader of ``.github/gpu-types.toml``, the reviewed policy of the verdicts: the GPU types
and their gate thresholds (``gpu_types()``), and every threshold, round count, resample count and
seed of the gate, the regression check, the clock and the change points (``[policy.*]``). The
trusted checkout's file decides, whatever a PR edits in its own. Standard library only (the hosted
jobs read it before anything is installed); a file or field that can't be read is a ValueError
naming the file and the field. The types, as the workflows ask for them:

    python -m harness gpu-types pull-requests     # ["h100", "h200"]: gpu.yml's matrix
    python -m harness gpu-types history           # the types history.yml measures
    python -m harness gpu-types threshold h100    # 1.18

Exit 0; 2 with one line where the file is missing or wrong, or the type is not in it.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from harness.core import command_output
from harness.core.paths import ROOT

FILE = ROOT / ".github" / "gpu-types.toml"
NAME = re.compile(r"[a-z][a-z0-9]*\Z")  # a matrix value and part of a runner label, artifact and group name
KINDS = {  # what a field's annotation admits, and how a refusal says it
    "float": (lambda v: isinstance(v, float) and math.isfinite(v) and v > 0, "a finite number above 0"),
    "int": (lambda v: type(v) is int and v >= 0, "a whole number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "str": (lambda v: isinstance(v, str) and bool(v.strip()), "a nonempty string"),
}


@dataclass(frozen=True)
class GpuType:
    name: str
    device: str  # a substring of torch.cuda.get_device_name() on this type
    compute_capability: str  # "9.0"
    gate_threshold: float  # the least median speed-up over Unsloth the gate passes on this type
    measured: bool  # whether gate_threshold comes from runs on this type
    pull_requests: bool
    history: bool

    @property
    def runner(self) -> str:
        """The label a job asks for: on actions-runner-controller the runner scale set's name, which
        must be the only label (ARC matches no other), so the workflows spell it ``gpu-<type>``."""
        return f"gpu-{self.name}"

    def runs(self, device_name: str) -> bool:
        """Whether a GPU named ``device_name`` (as torch names it) is of this type."""
        return self.device.lower() in device_name.lower()


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


def _checked(kind, found: dict, where: str, **given):
    """``kind`` made of the table ``found``; ValueError naming ``where`` and the field where one is
    missing, unknown or not of its annotated kind (an int is taken where a float is asked for)."""
    wanted = {f.name: f.type for f in fields(kind) if f.name not in given}
    missing, unknown = sorted(set(wanted) - set(found)), sorted(set(found) - set(wanted))
    if missing or unknown:
        said = [f"{what} {names}" for what, names in (("missing", missing), ("unknown", unknown)) if names]
        raise ValueError(f"{where}: " + "; ".join(said))
    values = dict(given)
    for field, typed in wanted.items():
        value = found[field]
        if typed == "float" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        admits, what = KINDS[typed]
        if not admits(value):
            raise ValueError(f"{where}: {field} = {value!r} is not {what}")
        values[field] = value
    return kind(**values)


def gpu_types(path: Path = FILE) -> dict[str, GpuType]:
    """Every GPU type in the file (every table but ``[policy]``), by name."""
    types = {}
    for name, entry in read(path).items():
        if name == "policy":
            continue
        if not NAME.match(name) or not isinstance(entry, dict):
            raise ValueError(f"{path}: [{name}]: a type is a table named in lower-case letters and digits")
        types[name] = _checked(GpuType, entry, f"{path}: [{name}]", name=name)
    if not types:
        raise ValueError(f"{path}: no GPU types")
    return types


def gpu_type(name: str, path: Path = FILE) -> GpuType:
    """The type ``name``; ValueError naming the known ones where the file has no such type."""
    types = gpu_types(path)
    if name not in types:
        raise ValueError(f"{path}: no GPU type {name!r}; the types: {', '.join(types)}")
    return types[name]


def _section(kind, name: str, path: Path):
    tables = read(path).get("policy")
    found = tables.get(name) if isinstance(tables, dict) else None
    if not isinstance(found, dict):
        raise ValueError(f"{path}: [policy.{name}]: missing")
    return _checked(kind, found, f"{path}: [policy.{name}]")


def gate(path: Path = FILE) -> Gate:
    return _section(Gate, "gate", path)


def regression(path: Path = FILE) -> Regression:
    return _section(Regression, "regression", path)


def clock(path: Path = FILE) -> Clock:
    return _section(Clock, "clock", path)


def changepoints(path: Path = FILE) -> Changepoints:
    return _section(Changepoints, "changepoints", path)


def main(argv=None) -> int:
    parser = command_output.Parser(
        prog="python -m harness gpu-types",
        description="The GPU types the checks run on, and each type's gate threshold, as the workflows ask for them.",
    )
    parser.add_argument("what", choices=("pull-requests", "history", "threshold"))
    parser.add_argument("type", nargs="?", help="threshold: the GPU type")
    parser.add_argument("--file", type=Path, default=FILE)
    args = parser.parse_args(argv)
    if (args.what == "threshold") != (args.type is not None):
        parser.error("a TYPE goes with threshold, and only with it")
    try:
        if args.what == "threshold":
            print(gpu_type(args.type, args.file).gate_threshold)
            return 0
        types = gpu_types(args.file)
    except ValueError as error:
        parser.error(str(error))  # one line, exit 2, whatever the path holds
    chosen = [t.name for t in types.values() if (t.pull_requests if args.what == "pull-requests" else t.history)]
    if not chosen:
        parser.error(f"{args.file}: no type has {args.what.replace('-', '_')} = true")
    print(json.dumps(chosen))
    return 0
