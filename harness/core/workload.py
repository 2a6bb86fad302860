"""The Challenge A workload and the timing primitives every report and the gate share.

For each (hd, m, dtype), three ``Linear4bit(compress_statistics=True, quant_type="nf4")`` weights:
up (hd -> m), gate (hd -> m) and down (m -> hd); each is dequantized, then ``torch.cuda.synchronize()``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from harness.core import exits

# (hd, m, dtype, seed): the puzzle's three MLPs.
CHALLENGE_A = (
    (2048, 8192, torch.float16, 3407),
    (1024, 4096, torch.bfloat16, 3409),
    (4096, 14336, torch.bfloat16, 3408),
)
ROUNDS_PER_TIMING = 1000


@dataclass
class Mlp4bit:
    hd: int
    m: int
    dtype: torch.dtype
    layers: tuple  # (up, gate, down) Linear4bit modules

    @property
    def label(self) -> str:
        return f"{self.hd}x{self.m} {str(self.dtype).replace('torch.', '')}"


def build_mlp(hd: int, m: int, dtype: torch.dtype, seed: int, device: str = "cuda") -> Mlp4bit:
    import bitsandbytes as bnb

    torch.manual_seed(seed)
    layers = []
    for fan_in, fan_out in ((hd, m), (hd, m), (m, hd)):
        # Initialised on the device (a 28672x8192 fp32 init on the CPU takes seconds), then
        # quantized by Params4bit.to, as the puzzle's .to("cuda") does.
        layer = bnb.nn.Linear4bit(
            fan_in, fan_out, bias=None, compute_dtype=dtype, compress_statistics=True, quant_type="nf4", device=device
        ).to(device)
        layer.weight.quant_state.dtype = dtype  # as the puzzle does: dequantize to the compute dtype
        layers.append(layer)
    return Mlp4bit(hd, m, dtype, tuple(layers))


def challenge_a(device: str = "cuda") -> list[Mlp4bit]:
    return [build_mlp(hd, m, dtype, seed, device) for hd, m, dtype, seed in CHALLENGE_A]


# --- Implementations: each takes a Linear4bit and returns its dequantized weight ------------------


def nf4kernel_impl() -> Callable:
    import nf4kernel

    return nf4kernel.dequantize


def bitsandbytes_impl() -> Callable:
    import bitsandbytes.functional as F

    return lambda layer: F.dequantize_4bit(layer.weight, layer.weight.quant_state)


def unsloth_impl() -> Callable:
    """Unsloth's fast_dequantize. Raises ImportError where unsloth is missing (it needs a GPU)."""
    import unsloth  # noqa: F401  (unsloth patches on import; the kernel module needs it loaded first)
    from unsloth.kernels.utils import fast_dequantize

    return lambda layer: fast_dequantize(layer.weight, layer.weight.quant_state)


def unsloth_version() -> str:
    from importlib.metadata import version

    return version("unsloth")


# --- Timing ---------------------------------------------------------------------------------------


def time_mlp(fn: Callable, mlp: Mlp4bit, rounds: int = ROUNDS_PER_TIMING) -> float:
    """Seconds for ``rounds`` x (up, gate, down), synchronizing after every call (the puzzle's loop)."""
    sync = torch.cuda.synchronize
    up, gate, down = mlp.layers
    sync()
    start = time.perf_counter()
    for _ in range(rounds):
        fn(up)
        sync()
        fn(gate)
        sync()
        fn(down)
        sync()
    return time.perf_counter() - start


def bytes_moved(layer) -> int:
    """Bytes a one-pass dequantization reads and writes: packed codes, both absmax levels, output."""
    state = layer.weight.quant_state
    n = state.shape.numel()
    total = layer.weight.numel() * layer.weight.element_size() + n * state.dtype.itemsize
    total += state.absmax.numel() * state.absmax.element_size() + state.code.numel() * 4
    if state.nested:
        total += state.state2.absmax.numel() * 4 + state.state2.code.numel() * 4 + 4
    return total


def copy_bandwidth(n_bytes: int = 1 << 28, repeats: int = 50) -> float:
    """Device-to-device copy bandwidth in bytes/s (read + written), the ceiling for a streaming kernel."""
    src = torch.empty(n_bytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    return 2 * n_bytes / event_time(lambda: dst.copy_(src), repeats)


def event_time(fn: Callable, repeats: int, warmup: int = 5) -> float:
    """Seconds per call of ``fn``, back to back on the GPU, timed by CUDA events."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats


def host_time(fn: Callable, calls: int = 500, warmup: int = 20) -> float:
    """Seconds of host time per call, back to back: the GPU queue absorbs the launches, so the wall
    time of the calls (not synchronized) is what the host spends issuing them."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls


def require_gpu(what: str) -> None:
    """One line and exit 4 where there is no CUDA GPU: ``what`` times the kernel on one."""
    if not torch.cuda.is_available():
        print(f"{what}: no CUDA GPU here: it times the kernel on a GPU; nothing to measure (exit 4)")
        raise SystemExit(exits.NO_GPU)


def device_name() -> str:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def interleaved_rounds(impls: dict, mlps: list, rounds: int, calls: int = ROUNDS_PER_TIMING, progress=None) -> dict:
    """times[name][round][mlp] in seconds: warm_up, then ``rounds`` x one_round."""
    times = {name: [] for name in impls}
    warm_up(impls, mlps)
    for r in range(rounds):
        for name, seconds in one_round(impls, mlps, r, calls).items():
            times[name].append(seconds)
        if progress is not None:
            progress(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {sum(times[n][r]):.3f} s" for n in impls))
    return times


def warm_up(impls: dict, mlps: list) -> None:
    """Compile and plan outside the timed rounds, as the puzzle does."""
    for fn in impls.values():
        for mlp in mlps:
            time_mlp(fn, mlp, 2)


def one_round(impls: dict, mlps: list, index: int, calls: int = ROUNDS_PER_TIMING) -> dict:
    """{name: [seconds per mlp]} for round ``index``: every implementation over the whole workload,
    the order reversed every other round so drift (clocks, heat) hits both alike. A caller that adds
    rounds later passes the next index, so the alternation carries on."""
    order = list(impls) if index % 2 == 0 else list(reversed(impls))
    times = {name: [0.0] * len(mlps) for name in impls}
    for name in order:
        for i, mlp in enumerate(mlps):
            times[name][i] = time_mlp(impls[name], mlp, calls)
    return times
