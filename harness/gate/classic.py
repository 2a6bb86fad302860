"""Unsloth's classic dequantize path (bitsandbytes' ctypes kernels), which Unsloth chooses when it
is imported with ``UNSLOTH_BNB_TRITON=0``; hence a process of its own. Times it interleaved with
nf4kernel on the Challenge A workload and prints one JSON line. The gate runs it.

    UNSLOTH_BNB_TRITON=0 python -m harness.gate.classic --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if os.environ.get("UNSLOTH_BNB_TRITON") != "0":
        print("classic: run with UNSLOTH_BNB_TRITON=0 (Unsloth reads it at import)", file=sys.stderr)
        return 2
    import torch

    from harness.core import workload

    impls = {"nf4kernel": workload.nf4kernel_impl(), "unsloth_classic": workload.unsloth_impl()}
    mlps = workload.challenge_a()
    exact = all(
        torch.equal(impls["nf4kernel"](layer), impls["unsloth_classic"](layer)) for mlp in mlps for layer in mlp.layers
    )
    seconds = workload.interleaved_rounds(impls, mlps, args.rounds)
    record = {"seconds": seconds, "calls_per_timing": workload.ROUNDS_PER_TIMING, "exact": exact}
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
