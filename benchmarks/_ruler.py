"""The ruler: how the asv suite measures, in one place.

It reads nothing of ``nf4kernel`` but its public call, ``nf4kernel.dequantize``, and never imports
``harness``: the backfill and the regression check measure *other* commits' nf4kernel
(put first on the path from a worktree) with *this* checkout's ruler, so old commits that lack
today's harness are measured exactly as HEAD is.

Every figure of one run comes from one process (``measure``, called by asv's ``setup_cache``), so
Unsloth, which takes about 30 s to import, is imported once per run; Unsloth's classic path, which
Unsloth chooses at import, is measured in one more process (``benchmarks/_classic.py``).

Nothing here touches CUDA at import: asv imports every benchmark module to discover it.
"""

from __future__ import annotations

import os
import statistics
import time

# Weight shapes (out_features, in_features): Challenge A's up/gate and down weights, and Llama's.
SHAPES = {
    "8192x2048": (8192, 2048),  # Challenge A 1 (hd 2048, m 8192): up / gate
    "4096x1024": (4096, 1024),  # Challenge A 2 (hd 1024, m 4096)
    "14336x4096": (14336, 4096),  # Challenge A 3 (hd 4096, m 14336), Llama-3 8B MLP
    "4096x4096": (4096, 4096),  # Llama attention projections
    "11008x4096": (11008, 4096),  # Llama-2 7B MLP
    "28672x8192": (28672, 8192),  # Llama-2/3 70B MLP
}
# bfloat16 first: asv's graphs open on the first value of a parameter when all of them would be too
# many lines (6 shapes x 2 dtypes > 8), and most 4-bit models compute in bf16.
DTYPES = ("bfloat16", "float16")

# Baselines the full run measures beside nf4kernel; NF4KERNEL_BENCH_BASELINES narrows them
# ("none": the nf4kernel-only subset that the backfill and the regression check use).
BASELINES = ("unsloth", "unsloth_classic", "bitsandbytes")
BASELINES_ENV = "NF4KERNEL_BENCH_BASELINES"

SYNC_ROUNDS = 5  # interleaved rounds of the synchronized per-call loop
SYNC_CALLS = 100  # calls per implementation per round, each followed by torch.cuda.synchronize()


def key(shape: str, dtype: str) -> str:
    return f"{shape} {dtype}"


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


def require_gpu() -> None:
    """asv skips a benchmark whose setup raises NotImplementedError."""
    import torch

    if not torch.cuda.is_available():
        raise NotImplementedError("needs a CUDA GPU")


def build_weight(shape: str, dtype: str, seed: int = 0):
    """A ``Linear4bit(compress_statistics=True, quant_type='nf4')`` on the GPU whose state dequantizes
    to ``dtype``, as Challenge A builds its weights (initialised on the device, quantized by ``.to``)."""
    import bitsandbytes as bnb
    import torch

    out_features, in_features = SHAPES[shape]
    torch.manual_seed(seed)
    torch_dtype = getattr(torch, dtype)
    layer = bnb.nn.Linear4bit(
        in_features,
        out_features,
        bias=False,
        compute_dtype=torch_dtype,
        compress_statistics=True,
        quant_type="nf4",
        device="cuda",
    ).to("cuda")
    layer.weight.quant_state.dtype = torch_dtype
    return layer


def implementation(name: str):
    """A callable ``fn(layer) -> dequantized weight`` for nf4kernel or a baseline."""
    if name == "nf4kernel":
        import nf4kernel

        return nf4kernel.dequantize
    if name == "bitsandbytes":
        import bitsandbytes.functional as F

        return lambda layer: F.dequantize_4bit(layer.weight, layer.weight.quant_state)
    if name in ("unsloth", "unsloth_classic"):  # which path is Unsloth's choice at import (UNSLOTH_BNB_TRITON)
        import unsloth  # noqa: F401  (unsloth patches on import; its kernels module needs it loaded first)
        from unsloth.kernels.utils import fast_dequantize

        return lambda layer: fast_dequantize(layer.weight, layer.weight.quant_state)
    raise ValueError(f"unknown implementation {name!r}")


def bytes_moved(layer) -> int:
    """Bytes a one-pass dequantization reads and writes: packed codes, both absmax levels, output."""
    state = layer.weight.quant_state
    total = layer.weight.numel() * layer.weight.element_size() + state.shape.numel() * state.dtype.itemsize
    total += state.absmax.numel() * state.absmax.element_size() + state.code.numel() * 4
    if state.nested:
        total += state.state2.absmax.numel() * 4 + state.state2.code.numel() * 4 + 4
    return total


def kernel_seconds(fn) -> float:
    """GPU time of one call, cold L2: ``triton.testing.do_bench`` zeroes a 256 MB buffer before every
    call and times each call with CUDA events; the median. The weight streams from HBM, as it does
    when a model's layers take turns. (The zeroing also leaves the host ahead of the GPU, so the
    events time the kernel, not the launch.)"""
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") / 1e3


def kernel_samples(fn) -> list[float]:
    """Every call's GPU time, in seconds, timed exactly as ``kernel_seconds`` times them (of which it
    is the median): what the regression check judges each result's noise from."""
    import triton.testing

    return [ms / 1e3 for ms in triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="all")]


def synchronized_rounds(impls: dict, layer, rounds: int = SYNC_ROUNDS, calls: int = SYNC_CALLS) -> dict:
    """Per-call seconds with ``torch.cuda.synchronize()`` after every call (Challenge A's loop): host
    cost, launch latency and kernel together. ``{name: [seconds per call, one per round]}``; each
    round times every implementation, the order reversed every other round so drift (clocks, heat)
    hits them alike."""
    import torch

    sync = torch.cuda.synchronize
    for fn in impls.values():  # warm up: compile, plan, allocator
        for _ in range(3):
            fn(layer)
    sync()
    times = {name: [] for name in impls}
    for r in range(rounds):
        for name in list(impls) if r % 2 == 0 else list(reversed(impls)):
            fn = impls[name]
            start = time.perf_counter()
            for _ in range(calls):
                fn(layer)
                sync()
            times[name].append((time.perf_counter() - start) / calls)
    return times


def ratio(times: dict, baseline: str) -> float:
    """nf4kernel's time over the baseline's, median over the interleaved rounds (below 1: faster)."""
    return statistics.median(ours / theirs for ours, theirs in zip(times["nf4kernel"], times[baseline], strict=True))


def peak_bytes(fn, layer) -> int:
    """GPU memory one call allocates at its peak, beyond what was allocated before it."""
    import torch

    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn(layer)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def copy_seconds(n_bytes: int) -> float:
    """A device-to-device copy moving ``n_bytes`` (half read, half written), timed as the kernel is."""
    import torch

    src = torch.empty(n_bytes // 2, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    return kernel_seconds(lambda: dst.copy_(src))


def measure_shape(shape: str, dtype: str, impls: dict) -> dict:
    """Every in-process figure for one weight: nf4kernel's kernel time, a same-size copy, its memory
    peak, and the synchronized per-call loop of nf4kernel and each baseline in ``impls``."""
    import torch

    layer = build_weight(shape, dtype)
    ours = impls["nf4kernel"]
    # A wrong kernel gets no figures: bitsandbytes is the oracle (whether or not it is a baseline).
    if not torch.equal(ours(layer), implementation("bitsandbytes")(layer)):
        raise AssertionError(f"{key(shape, dtype)}: nf4kernel's output differs from bitsandbytes'")
    exact = {name: torch.equal(ours(layer), fn(layer)) for name, fn in impls.items() if name != "nf4kernel"}
    figures = {
        "kernel_s": kernel_seconds(lambda: ours(layer)),
        "copy_s": copy_seconds(bytes_moved(layer)),
        "bytes_moved": bytes_moved(layer),
        "peak_bytes": peak_bytes(ours, layer),
        "synchronized_s": synchronized_rounds(impls, layer),
        "exact": exact,  # bit-identical to each baseline's output (recorded, not required)
    }
    return figures


def measure(baselines=None, shapes=SHAPES, dtypes=DTYPES, log=print) -> dict:
    """The whole run's figures: ``{"baselines": [...], "errors": {...}, "shapes": {key: figures}}``.
    A baseline that can't be had (Unsloth not installed) is recorded in ``errors``, and the tracks
    that need it are skipped with that reason; nf4kernel's own figures are always measured."""
    import torch

    require_gpu()
    baselines = baselines_wanted() if baselines is None else tuple(baselines)
    impls, errors = {"nf4kernel": implementation("nf4kernel")}, {}
    import nf4kernel

    log(f"ruler: nf4kernel from {nf4kernel.__file__}")  # the kernel under test (a staged copy in a regression)
    for name in ("unsloth", "bitsandbytes"):
        if name in baselines:
            try:
                started = time.perf_counter()
                impls[name] = implementation(name)
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
        from . import _classic

        classic = _classic.measure_in_own_process(shapes, dtypes, log=log)
        if "error" in classic:
            errors["unsloth_classic"] = classic["error"]
        else:
            result["baselines"].append("unsloth_classic")
            for k, times in classic["shapes"].items():
                result["shapes"][k]["classic_synchronized_s"] = times
    return result
