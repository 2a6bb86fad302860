"""The GPU types the GPU checks run on, and each type's verdict thresholds: ``.github/gpu-types.toml``,
the one file the workflows and the gate read. Standard library only: the workflows' hosted jobs read
it with the runner image's Python, before anything is installed.

    python -m harness gpu-types pull-requests     # ["h100", "h200"]: gpu.yml's matrix
    python -m harness gpu-types history           # the types history.yml measures
    python -m harness gpu-types threshold h100    # 1.18

Exit 0; 2 with one line where the file is missing or wrong, or the type is not in it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

from harness.core import command_output, policy

FILE = policy.FILE
NAME = re.compile(r"[a-z][a-z0-9]*\Z")  # a matrix value and part of a runner label, artifact and group name
FIELDS = {
    "device": str,
    "compute_capability": str,
    "gate_threshold": float,
    "measured": bool,
    "pull_requests": bool,
    "history": bool,
}


@dataclass(frozen=True)
class GpuType:
    name: str
    device: str  # a substring of torch.cuda.get_device_name() on this type
    compute_capability: str  # "9.0"
    gate_threshold: float
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


def load(path: Path = FILE) -> dict[str, GpuType]:
    """Every type in the file, by name. ValueError, naming the file and the entry, where it can't be
    read or an entry is missing a field, has one of the wrong kind, or an unknown one."""
    data = {name: entry for name, entry in policy.read(path).items() if name != "policy"}  # policy.py's
    if not data:
        raise ValueError(f"{path}: no GPU types")
    types = {}
    for name, entry in data.items():
        where = f"{path}: [{name}]"
        if not NAME.match(name) or not isinstance(entry, dict):
            raise ValueError(f"{where}: a type is a table named in lower-case letters and digits")
        missing, unknown = sorted(set(FIELDS) - set(entry)), sorted(set(entry) - set(FIELDS))
        if missing or unknown:
            raise ValueError(
                f"{where}: "
                + "; ".join(f"{what} {names}" for what, names in (("missing", missing), ("unknown", unknown)) if names)
            )
        for field, kind in FIELDS.items():
            value = entry[field]
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = entry[field] = float(value)
            if not isinstance(value, kind) or (kind is str and not value.strip()):
                raise ValueError(f"{where}: {field} must be a {kind.__name__}, not {value!r}")
        if not math.isfinite(entry["gate_threshold"]) or entry["gate_threshold"] <= 0:
            raise ValueError(f"{where}: gate_threshold is a finite speed-up above 0, not {entry['gate_threshold']!r}")
        types[name] = GpuType(name=name, **entry)
    return types


def dump(types: dict[str, GpuType], policy_tables: dict | None = None) -> str:
    """The file's text for ``types`` and the ``[policy.*]`` tables given (comments are not kept):
    what a rehearsal commits in its world."""
    lines = []
    for gpu in types.values():
        lines.append(f"[{gpu.name}]")
        for field in FIELDS:
            value = getattr(gpu, field)
            lines.append(f"{field} = {str(value).lower() if isinstance(value, bool) else json.dumps(value)}")
        lines.append("")
    for name, table in (policy_tables or {}).items():
        lines += [f"[policy.{name}]", *(f"{key} = {json.dumps(value)}" for key, value in table.items()), ""]
    return "\n".join(lines)


def only_on(types: dict[str, GpuType], names: tuple[str, ...]) -> dict[str, GpuType]:
    """``types`` with ``pull_requests`` and ``history`` true for ``names`` alone (a rehearsal's machine
    has its own GPUs only); ValueError for a name that is no type."""
    unknown = sorted(set(names) - set(types))
    if unknown or not names:
        raise ValueError(f"no GPU type {unknown or '(none given)'}; the types: {', '.join(types)}")
    return {name: replace(gpu, pull_requests=name in names, history=name in names) for name, gpu in types.items()}


def of_device(device_name: str, types: dict[str, GpuType]) -> list[str]:
    """The types a GPU named ``device_name`` is of (its name as torch or nvidia-smi give it)."""
    return [gpu.name for gpu in types.values() if gpu.runs(device_name)]


def named(name: str, path: Path = FILE) -> GpuType:
    """The type ``name``; ValueError naming the known ones where the file has no such type."""
    types = load(path)
    if name not in types:
        raise ValueError(f"{path}: no GPU type {name!r}; the types: {', '.join(types)}")
    return types[name]


def main(argv=None) -> int:
    parser = command_output.Parser(prog="python -m harness gpu-types", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("pull-requests", "history", "threshold"))
    parser.add_argument("type", nargs="?", help="threshold: the GPU type")
    parser.add_argument("--file", type=Path, default=FILE)
    args = parser.parse_args(argv)
    if (args.what == "threshold") != (args.type is not None):
        parser.error("a TYPE goes with threshold, and only with it")
    try:
        if args.what == "threshold":
            print(named(args.type, args.file).gate_threshold)
            return 0
        types = load(args.file)
    except ValueError as error:
        parser.error(str(error))  # one line, exit 2, whatever the path holds
    chosen = [t.name for t in types.values() if (t.pull_requests if args.what == "pull-requests" else t.history)]
    if not chosen:
        parser.error(f"{args.file}: no type has {args.what.replace('-', '_')} = true")
    print(json.dumps(chosen))
    return 0
