"""The asv suite's figures: the weights and implementations of ``harness/core/workload.py``, timed by
``_timers.py``.

The kernel measured is whichever nf4kernel is first on the path: this checkout's, or a commit's
staged alone by the backfill (``harness/core/kernel_source.py``: nothing else of that commit's tree is
importable, so ``harness`` here is always this checkout's and every commit is measured alike).

Every figure of one run comes from one process (``measure``, called by asv's ``setup_cache``), so
Unsloth, which takes about 30 s to import, is imported once per run; Unsloth's classic path, which
Unsloth chooses at import, is measured in one more process (``_classic.py``).

Nothing here touches CUDA at import: asv imports every benchmark module to discover it.
"""

from __future__ import annotations

import os
import statistics
import time

from harness.core import workload
from harness.core.workload import DTYPES, SHAPES, key

from . import _classic, _timers

__all__ = ["DTYPES", "SHAPES", "key", "measure", "ratio"]

# Baselines the full run measures beside nf4kernel; NF4KERNEL_BENCH_BASELINES narrows them
# ("none": the nf4kernel-only subset that the backfill and the regression check use).
BASELINES = ("unsloth", "unsloth_classic", "bitsandbytes")
BASELINES_ENV = "NF4KERNEL_BENCH_BASELINES"

CLASSIC_TIMEOUT_S = 600


def baselines_wanted() -> tuple[str, ...]:
    """The baselines this run measures: all of them unless NF4KERNEL_BENCH_BASELINES says otherwise."""
    value = os.environ.get(BASELINES_ENV, "all").strip()
    if value == "all":
        return BASELINES
    wanted = tuple(name for name in value.replace(",", " ").split() if name != "none")
    unknown = set(wanted) - set(BASELINES)
    if unknown:
        raise ValueError(f"{BASELINES_ENV}: unknown baseline(s) {sorted(unknown)}; known: {BASELINES}, none, all")
    return wanted


def ratio(times: dict, baseline: str) -> float:
    """nf4kernel's time over the baseline's, median over the interleaved rounds (below 1: faster)."""
    return statistics.median(ours / theirs for ours, theirs in zip(times["nf4kernel"], times[baseline], strict=True))


def measure_shape(shape: str, dtype: str, impls: dict) -> dict:
    """Every in-process figure for one weight: nf4kernel's kernel time, a same-size copy, its memory
    peak, and the synchronized per-call loop of nf4kernel and each baseline in ``impls``."""
    import torch

    layer = workload.suite_weight(shape, dtype)
    ours = impls["nf4kernel"]
    # A wrong kernel gets no figures: bitsandbytes is the oracle (whether or not it is a baseline).
    if not torch.equal(ours(layer), workload.implementation("bitsandbytes")(layer)):
        raise AssertionError(f"{key(shape, dtype)}: nf4kernel's output differs from bitsandbytes'")
    exact = {name: torch.equal(ours(layer), fn(layer)) for name, fn in impls.items() if name != "nf4kernel"}
    moved = workload.bytes_moved(layer)
    figures = {
        "kernel_s": _timers.kernel_seconds(lambda: ours(layer)),
        "copy_s": _timers.kernel_seconds(workload.device_copy(moved)),  # timed as the kernel is
        "bytes_moved": moved,
        "peak_bytes": workload.peak_bytes(ours, layer),
        "synchronized_s": _timers.synchronized_per_call(impls, layer),
        "exact": exact,  # bit-identical to each baseline's output (recorded, not required)
    }
    return figures


def measure(baselines=None, shapes=SHAPES, dtypes=DTYPES, log=print) -> dict:
    """The whole run's figures: ``{"baselines": [...], "errors": {...}, "shapes": {key: figures}}``.
    A baseline that can't be had (Unsloth not installed) is recorded in ``errors``, and the tracks
    that need it are skipped with that reason; nf4kernel's own figures are always measured."""
    import torch

    _timers.require_gpu("the GPU suite")
    baselines = baselines_wanted() if baselines is None else tuple(baselines)
    impls, errors = {"nf4kernel": workload.implementation("nf4kernel")}, {}
    import nf4kernel

    log(f"ruler: nf4kernel from {nf4kernel.__file__}")  # the kernel under test (a staged copy in a regression)
    for name in ("unsloth", "bitsandbytes"):
        if name in baselines:
            try:
                started = time.perf_counter()
                impls[name] = workload.implementation(name)
                log(f"ruler: {name} ready in {time.perf_counter() - started:.1f} s")
            except Exception as error:  # ImportError, or Unsloth refusing this machine
                errors[name] = f"{type(error).__name__}: {error}"
    result = {"baselines": sorted(impls), "errors": errors, "shapes": {}}
    for shape in shapes:
        for dtype in dtypes:
            started = time.perf_counter()
            result["shapes"][key(shape, dtype)] = measure_shape(shape, dtype, impls)
            torch.cuda.empty_cache()  # the weight is gone with measure_shape's frame: give its memory back
            log(f"ruler: {key(shape, dtype)} measured in {time.perf_counter() - started:.1f} s")
    if "unsloth_classic" in baselines:
        log("ruler: Unsloth's classic path in its own process (UNSLOTH_BNB_TRITON=0)")
        weights = [key(shape, dtype) for shape in shapes for dtype in dtypes]
        found = _classic.in_own_process(["--weights", *weights], CLASSIC_TIMEOUT_S)
        if "error" in found:
            errors["unsloth_classic"] = found["error"]
        else:
            result["baselines"].append("unsloth_classic")
            for k, times in found["shapes"].items():
                result["shapes"][k]["classic_synchronized_s"] = times
    return result
