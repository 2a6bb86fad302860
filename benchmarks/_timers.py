"""How the asv suite times a call, beside the weights and implementations it shares with the clock
(``harness/core/workload.py``): the synchronized loop, cold-L2 kernel time, and a skip where there is
no GPU. Named without asv's ``time_``/``track_`` prefixes: asv scans every module here for those.
The studies time their loops with ``loop_seconds`` and ``interleaved_rounds`` too. Nothing here touches CUDA at import.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

# The synchronized loop on one suite weight: interleaved rounds of calls, each call synchronized.
SUITE_ROUNDS = 5
SUITE_CALLS = 100  # calls per implementation per round
SUITE_WARMUP = 3  # calls per implementation before the rounds


def loop_seconds(fn: Callable, layers: Sequence, calls: int) -> float:
    """Seconds for ``calls`` x (each of ``layers``), synchronizing after every call (the puzzle's loop)."""
    import torch

    sync = torch.cuda.synchronize
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        for layer in layers:
            fn(layer)
            sync()
    return time.perf_counter() - start


def interleaved_rounds(
    impls: dict, workloads: Sequence[Sequence], rounds: int, calls: int, warmup: int = 2, progress=None
) -> dict:
    """``times[name][round][workload]``: the seconds of ``loop_seconds(fn, layers, calls)`` for each
    workload's layers, after ``warmup`` calls of each (compiling and planning outside the timed
    rounds, as the puzzle does); the order reversed every other round, so drift (clocks, heat) hits
    every implementation alike. ``progress`` gets a line per round."""
    for fn in impls.values():
        for layers in workloads:
            loop_seconds(fn, layers, warmup)
    times = {name: [] for name in impls}
    for r in range(rounds):
        for name in list(impls) if r % 2 == 0 else list(reversed(impls)):
            times[name].append([loop_seconds(impls[name], layers, calls) for layers in workloads])
        if progress is not None:
            progress(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {sum(times[n][r]):.3f} s" for n in impls))
    return times


def synchronized_per_call(impls: dict, layer, rounds: int = SUITE_ROUNDS) -> dict:
    """Per-call seconds with ``torch.cuda.synchronize()`` after every call (Challenge A's loop) on one
    weight: host cost, launch latency and kernel together. ``{name: [seconds per call, one per round]}``."""
    times = interleaved_rounds(impls, [(layer,)], rounds, SUITE_CALLS, SUITE_WARMUP)
    return {name: [seconds / SUITE_CALLS for (seconds,) in per_round] for name, per_round in times.items()}


def kernel_seconds(fn: Callable) -> float:
    """A call's GPU time in seconds, cold L2 (``triton.testing.do_bench``'s median): do_bench zeroes a
    256 MB buffer before every call, so the weight streams from HBM, as it does when a model's layers
    take turns, and the host runs ahead of the GPU, so the events time the kernel, not the launch."""
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") / 1e3


class NoGpu(NotImplementedError):
    """No CUDA GPU here. A NotImplementedError: what asv reads as "skip this benchmark"."""


def require_gpu(what: str) -> None:
    """NoGpu naming ``what`` where torch sees no CUDA GPU."""
    import torch

    if not torch.cuda.is_available():
        raise NoGpu(f"{what}: no CUDA GPU here: it times the kernel on a GPU; nothing to measure")
