"""The weights every figure times (Challenge A's MLPs, the asv suite's weights), the implementations
(``implementation(name)``), and what the clock checks calls against (bytes moved, copy bandwidth,
peak memory). Nothing here imports torch at import, so that asv's discovery and the regression
check's trusted parent can read it (docs/harness-code.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# (hd, m, dtype, seed): the puzzle's three MLPs.
CHALLENGE_A = (
    (2048, 8192, "float16", 3407),
    (1024, 4096, "bfloat16", 3409),
    (4096, 14336, "bfloat16", 3408),
)
ROUNDS_PER_TIMING = 1000

# The asv suite's weights (out_features, in_features): Challenge A's up/gate and down weights, and Llama's.
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

IMPLEMENTATIONS = ("nf4kernel", "bitsandbytes", "unsloth")


@dataclass
class Mlp4bit:
    hd: int
    m: int
    dtype: torch.dtype
    layers: tuple  # (up, gate, down) Linear4bit modules

    @property
    def label(self) -> str:
        return f"{self.hd}x{self.m} {str(self.dtype).replace('torch.', '')}"


def linear4bit(fan_in: int, fan_out: int, dtype: torch.dtype, device: str = "cuda"):
    """One NF4 weight as the puzzle builds it, its state dequantizing to ``dtype``. Initialised on
    the device (a 28672x8192 fp32 init on the CPU takes seconds), then quantized by ``Params4bit.to``."""
    import bitsandbytes as bnb

    layer = bnb.nn.Linear4bit(
        fan_in, fan_out, bias=False, compute_dtype=dtype, compress_statistics=True, quant_type="nf4", device=device
    ).to(device)
    layer.weight.quant_state.dtype = dtype  # as the puzzle does: dequantize to the compute dtype
    return layer


def build_mlp(hd: int, m: int, dtype: torch.dtype, seed: int, device: str = "cuda") -> Mlp4bit:
    import torch

    torch.manual_seed(seed)
    return Mlp4bit(hd, m, dtype, tuple(linear4bit(i, o, dtype, device) for i, o in ((hd, m), (hd, m), (m, hd))))


def challenge_a(device: str = "cuda") -> list[Mlp4bit]:
    import torch

    return [build_mlp(hd, m, getattr(torch, dtype), seed, device) for hd, m, dtype, seed in CHALLENGE_A]


def key(shape: str, dtype: str) -> str:
    """A suite weight's name, as asv's parameters and the regression check's results spell it."""
    return f"{shape} {dtype}"


def suite_weight(shape: str, dtype: str, seed: int = 0, device: str = "cuda"):
    """The weight ``shape`` (``"RxC"``: out x in features, as SHAPES' keys spell the asv suite's),
    dequantizing to ``dtype``."""
    import torch

    out_features, in_features = (int(n) for n in shape.split("x"))
    torch.manual_seed(seed)
    return linear4bit(in_features, out_features, getattr(torch, dtype), device)


# --- Implementations: each takes a Linear4bit and returns its dequantized weight ------------------


def implementation(name: str) -> Callable:
    """``fn(layer) -> dequantized weight``. Unsloth's is the path Unsloth chose at import (its fused
    Triton kernel, or with ``UNSLOTH_BNB_TRITON=0`` its classic one); ImportError where it is missing
    (it needs a GPU)."""
    if name == "nf4kernel":
        import nf4kernel

        return nf4kernel.dequantize
    if name == "bitsandbytes":
        import bitsandbytes.functional as F

        return lambda layer: F.dequantize_4bit(layer.weight, layer.weight.quant_state)
    if name == "unsloth":
        import unsloth  # noqa: F401  (unsloth patches on import; its kernels module needs it loaded first)
        from unsloth.kernels.utils import fast_dequantize

        return lambda layer: fast_dequantize(layer.weight, layer.weight.quant_state)
    raise ValueError(f"unknown implementation {name!r}; known: {', '.join(IMPLEMENTATIONS)}")


# --- Timing ---------------------------------------------------------------------------------------


def event_time(fn: Callable, repeats: int, warmup: int = 5) -> float:
    """Seconds per call of ``fn``, back to back on the GPU, timed by CUDA events."""
    import torch

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


def bytes_moved(layer) -> int:
    """Bytes a one-pass dequantization reads and writes: packed codes, both absmax levels, output."""
    state = layer.weight.quant_state
    total = layer.weight.numel() * layer.weight.element_size() + state.shape.numel() * state.dtype.itemsize
    total += state.absmax.numel() * state.absmax.element_size() + state.code.numel() * 4
    if state.nested:
        total += state.state2.absmax.numel() * 4 + state.state2.code.numel() * 4 + 4
    return total


def peak_bytes(fn: Callable, *args) -> int:
    """GPU memory one call ``fn(*args)`` allocates at its peak, beyond what was allocated before it."""
    import torch

    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn(*args)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def device_copy(moved_bytes: int) -> Callable:
    """A device-to-device copy moving ``moved_bytes`` (half read, half written): the ceiling for a
    streaming kernel, timed by whichever timer times the kernel it is set beside."""
    import torch

    src = torch.empty(moved_bytes // 2, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def copy_bandwidth(moved_bytes: int = 1 << 29, repeats: int = 50) -> float:
    """Device copy bandwidth in bytes/s (read + written), back to back (``event_time``)."""
    return moved_bytes / event_time(device_copy(moved_bytes), repeats)


def device_name() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
