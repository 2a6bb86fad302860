"""Unsloth's classic dequantize path (bitsandbytes' ctypes kernels), timed beside nf4kernel in a
process of its own: Unsloth chooses the path at import, by ``UNSLOTH_BNB_TRITON=0``. The asv suite
(``_ruler.py``) starts this process once per run (``in_own_process``) and reads the one JSON line
it prints, ``{"shapes": {weight: {name: [seconds per call, one per round]}}}``.

    UNSLOTH_BNB_TRITON=0 python -P -m benchmarks._classic --weights "4096x1024 bfloat16" --rounds 5

Exit 0: measured; 2: not started with ``UNSLOTH_BNB_TRITON=0``, or a weight that is not the suite's;
4: no CUDA GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.core import command_output, exits, kernel_source
from harness.core.paths import ROOT

from . import _timers


def in_own_process(arguments: list[str], timeout: float) -> dict:
    """This module's JSON line, run with ``arguments`` on the nf4kernel this process imports (its
    folder first on the child's path, then this checkout: its harness and this suite), or
    ``{"error": why}``."""
    import nf4kernel

    kernel_root = Path(nf4kernel.__file__).resolve().parent.parent
    env = {**os.environ, "UNSLOTH_BNB_TRITON": "0", "PYTHONPATH": kernel_source.python_path(kernel_root, ROOT)}
    # -P: the current directory's nf4kernel is not the one under test.
    command = [sys.executable, "-P", "-m", "benchmarks._classic", *arguments]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        why = (done.stderr or done.stdout).strip().splitlines() or [f"exit {done.returncode}"]
        return {"error": why[-1]}
    try:
        return json.loads(lines[-1])
    except ValueError:
        return {"error": f"its last line is not JSON: {lines[-1][:200]}"}


def suite_weights(weights: list[str], rounds: int) -> dict:
    from harness.core import workload

    impls = {"nf4kernel": workload.implementation("nf4kernel"), "unsloth_classic": workload.implementation("unsloth")}
    shapes = {}
    for name in weights:
        shapes[name] = _timers.synchronized_per_call(impls, workload.suite_weight(*name.split()), rounds)
    return {"shapes": shapes}


def main(argv=None) -> int:
    from harness.core import workload

    parser = command_output.Parser(prog="python -P -m benchmarks._classic", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (5)")
    parser.add_argument("--weights", nargs="+", required=True, help='the suite\'s weights, each "OUTxIN dtype"')
    args = parser.parse_args(argv)
    if os.environ.get("UNSLOTH_BNB_TRITON") != "0":
        print("classic: run with UNSLOTH_BNB_TRITON=0 (Unsloth reads it at import)", file=sys.stderr)
        return 2
    if args.rounds < 1:
        parser.error(f"--rounds must be 1 or more, not {args.rounds}")
    for name in args.weights:
        shape, _, dtype = name.partition(" ")
        if shape not in workload.SHAPES or dtype not in workload.DTYPES:
            parser.error(
                f"not one of the suite's weights: {name!r} (shapes {', '.join(workload.SHAPES)}; dtypes "
                f"{', '.join(workload.DTYPES)})"
            )
    try:
        _timers.require_gpu("classic")
    except _timers.NoGpu as error:
        print(error, file=sys.stderr)
        return exits.NO_GPU
    print(json.dumps(suite_weights(args.weights, args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
