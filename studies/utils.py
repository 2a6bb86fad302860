"""What the studies and the probes share and no verdict uses: host time per call, Unsloth's version,
and a command's exit without a GPU. Their synchronized loops and interleaved rounds are the asv
suite's (``benchmarks/_timers.py``), so a study times as the suite does.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from benchmarks import _timers
from harness.core import exits


def host_time(fn: Callable, calls: int = 500, warmup: int = 20) -> float:
    """Seconds of host time per call, back to back: the GPU queue absorbs the launches, so the wall
    time of the calls (not synchronized) is what the host spends issuing them."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls


def unsloth_version() -> str:
    from importlib.metadata import version

    return version("unsloth")


def exit_without_gpu(what: str) -> None:
    """A command's form of ``_timers.require_gpu``: one line and exit 4."""
    try:
        _timers.require_gpu(what)
    except _timers.NoGpu as error:
        print(f"{error} (exit {exits.NO_GPU})")
        raise SystemExit(exits.NO_GPU) from None
