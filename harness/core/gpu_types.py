"""The GPU types the GPU checks run on, and each type's gate threshold, as the workflows ask for them
(read and checked by ``policy.py``, the one reader of ``.github/gpu-types.toml``). Standard library
only, as ``policy.py``.

    python -m harness gpu-types pull-requests     # ["h100", "h200"]: gpu.yml's matrix
    python -m harness gpu-types history           # the types history.yml measures
    python -m harness gpu-types threshold h100    # 1.18

Exit 0; 2 with one line where the file is missing or wrong, or the type is not in it.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.core import command_output
from harness.core.policy import FILE, GpuType
from harness.core.policy import gpu_types as load


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
