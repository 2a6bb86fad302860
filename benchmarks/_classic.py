"""Unsloth's classic dequantize path (bitsandbytes' ctypes kernels), which Unsloth chooses when it is
imported with ``UNSLOTH_BNB_TRITON=0``: hence a process of its own, started once per asv run by the
ruler. It times nf4kernel and the classic path interleaved, in that process, and prints one JSON line.

    UNSLOTH_BNB_TRITON=0 python -m benchmarks._classic --shapes 4096x1024 --dtypes bfloat16
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from . import _ruler

TIMEOUT_S = 600


def measure_in_own_process(shapes, dtypes, log=print) -> dict:
    """``{"shapes": {key: {"nf4kernel": [...], "unsloth_classic": [...]}}}``, or ``{"error": why}``."""
    here = Path(__file__).resolve().parent
    # The child finds this ruler's package and the same nf4kernel as this process (a worktree's, in
    # the backfill), whatever asv did to PYTHONPATH.
    path = [str(here.parent), *(p for p in sys.path if p)]
    env = {**os.environ, "UNSLOTH_BNB_TRITON": "0", "PYTHONPATH": os.pathsep.join(path)}
    command = [sys.executable, "-m", f"{here.name}._classic", "--shapes", *shapes, "--dtypes", *dtypes]
    log("ruler: Unsloth's classic path in its own process (UNSLOTH_BNB_TRITON=0)")
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {TIMEOUT_S} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        why = (done.stderr or done.stdout).strip().splitlines() or [f"exit {done.returncode}"]
        return {"error": why[-1]}
    return json.loads(lines[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=list(_ruler.SHAPES))
    parser.add_argument("--dtypes", nargs="+", default=list(_ruler.DTYPES))
    args = parser.parse_args(argv)
    if os.environ.get("UNSLOTH_BNB_TRITON") != "0":
        print("classic: run with UNSLOTH_BNB_TRITON=0 (Unsloth reads it at import)", file=sys.stderr)
        return 2
    _ruler.require_gpu()
    impls = {"nf4kernel": _ruler.implementation("nf4kernel"), "unsloth_classic": _ruler.implementation("unsloth")}
    shapes = {}
    for shape in args.shapes:
        for dtype in args.dtypes:
            shapes[_ruler.key(shape, dtype)] = _ruler.synchronized_rounds(impls, _ruler.build_weight(shape, dtype))
    print(json.dumps({"shapes": shapes}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
