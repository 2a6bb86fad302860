"""What the studies and the probes share and no verdict uses: Challenge A's interleaved rounds with
their progress lines, host time per call, Unsloth's version, and a command's exit without a GPU.
The timing itself is the harness's (``harness.core.workload``), so a study times as the harness does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from benchmarks import _timers
from harness.core import exits, workload


def interleaved_rounds(
    impls: dict,
    workloads: Sequence,
    rounds: int,
    calls: int = workload.ROUNDS_PER_TIMING,
    warmup: int = 2,
    progress=None,
) -> dict:
    """times[name][round][workload] in seconds: ``warmup`` calls of each (compiling and planning
    outside the timed rounds, as the puzzle does), then ``rounds`` x one_round. A workload is
    anything with ``layers`` (an ``Mlp4bit``)."""
    for fn in impls.values():
        for each in workloads:
            _timers.loop_seconds(fn, each.layers, warmup)
    times = {name: [] for name in impls}
    for r in range(rounds):
        for name, seconds in one_round(impls, workloads, r, calls).items():
            times[name].append(seconds)
        if progress is not None:
            progress(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {sum(times[n][r]):.3f} s" for n in impls))
    return times


def one_round(impls: dict, workloads: Sequence, index: int, calls: int = workload.ROUNDS_PER_TIMING) -> dict:
    """{name: [seconds per workload]} for round ``index``: every implementation over every workload,
    the order reversed every other round so drift (clocks, heat) hits them alike."""
    order = list(impls) if index % 2 == 0 else list(reversed(impls))
    times = {name: [0.0] * len(workloads) for name in impls}
    for name in order:
        for i, each in enumerate(workloads):
            times[name][i] = _timers.loop_seconds(impls[name], each.layers, calls)
    return times


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
