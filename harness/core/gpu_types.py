"""The GPU types the GPU checks run on, and each type's gate threshold, as the workflows ask for them
(read and checked by ``policy.py``, the one reader of ``.github/gpu-types.toml``), and the file a
rehearsal writes for its own GPUs. Standard library only, as ``policy.py``.

    python -m harness gpu-types pull-requests     # ["h100", "h200"]: gpu.yml's matrix
    python -m harness gpu-types history           # the types history.yml measures
    python -m harness gpu-types threshold h100    # 1.18

Exit 0; 2 with one line where the file is missing or wrong, or the type is not in it.
"""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

from harness.core import command_output
from harness.core.policy import FILE, GpuType
from harness.core.policy import gpu_types as load


def dump(types: dict[str, GpuType], policy_tables: dict | None = None) -> str:
    """The file's text for ``types`` and the ``[policy.*]`` tables given (comments are not kept):
    what a rehearsal commits in its world."""
    lines = []
    for gpu in types.values():
        lines.append(f"[{gpu.name}]")
        for field in (f.name for f in fields(GpuType) if f.name != "name"):
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
