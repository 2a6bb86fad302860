"""Reads a bitsandbytes 4-bit weight and its QuantState into what the kernel needs, checking it all.

Every problem is reported as a ``ValueError`` or ``TypeError`` that names it; nothing passed in is
modified. This is the slow path: the launch cache (``launch_cache.py``) runs it once per weight.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

OUTPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
QUANT_TYPES = ("nf4", "fp4")
BLOCKSIZES = (32, 64, 128, 256, 512, 1024, 2048, 4096)  # what bitsandbytes accepts for 4-bit


class Tensors4bit(NamedTuple):
    """The tensors the kernel reads, in its argument order."""

    packed: torch.Tensor  # packed codes, any storage dtype
    absmax: torch.Tensor  # fp32, or uint8 when nested
    code: torch.Tensor  # fp32 [16]
    code2: torch.Tensor | None  # fp32 [256], nested only
    absmax2: torch.Tensor | None  # fp32, nested only
    offset: torch.Tensor | None  # fp32, one element, nested only


class Layout(NamedTuple):
    """Everything about a weight but its tensors: what the kernel is specialized on. Holds no tensor,
    so the launch cache can keep it without keeping the weight alive."""

    shape: torch.Size
    dtype: torch.dtype
    blocksize: int
    blocksize2: int  # 0 when not nested
    n_elements: int
    n_blocks: int
    transposed: bool  # packed given as [1, n/2]: the result comes back transposed, as bitsandbytes does

    @property
    def nested(self) -> bool:
        return self.blocksize2 != 0


def tensors_of(packed: torch.Tensor, state) -> Tensors4bit:
    """The kernel's tensors, unchecked: only for a state that ``read`` has already accepted."""
    if state.nested:
        state2 = state.state2
        return Tensors4bit(packed, state.absmax, state.code, state2.code, state2.absmax, state.offset)
    return Tensors4bit(packed, state.absmax, state.code, None, None, None)


def unwrap(W, quant_state=None):
    """(packed tensor, QuantState) from a ``Linear4bit``, a ``Params4bit`` or a tensor plus its state."""
    if isinstance(W, torch.nn.Module):
        weight = getattr(W, "weight", None)
        if not isinstance(weight, torch.Tensor):
            raise TypeError(f"nf4kernel: the module {type(W).__name__} has no 4-bit weight tensor")
        W = weight
    if not isinstance(W, torch.Tensor):
        raise TypeError(f"nf4kernel: W must be a packed 4-bit tensor, Params4bit or Linear4bit, got {type(W).__name__}")
    if quant_state is None:
        quant_state = getattr(W, "quant_state", None)
        if quant_state is None:
            raise ValueError(
                "nf4kernel: no quant state: pass quant_state=, or a Params4bit / Linear4bit that has been "
                "quantized (moved to a device)"
            )
    return W, quant_state


def _tensor(state, name, value, dtype, numel, device) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"nf4kernel: quant_state.{name} must be a tensor, got {type(value).__name__}")
    if value.dtype != dtype:
        raise ValueError(f"nf4kernel: quant_state.{name} must be {dtype}, got {value.dtype}")
    if value.numel() != numel:
        raise ValueError(
            f"nf4kernel: quant_state.{name} has {value.numel()} values but the weight needs {numel} "
            f"(shape {tuple(state.shape)}, blocksize {state.blocksize})"
        )
    if value.device != device:
        raise ValueError(f"nf4kernel: quant_state.{name} is on {value.device} but W is on {device}")
    if not value.is_contiguous():
        raise ValueError(f"nf4kernel: quant_state.{name} must be contiguous")
    return value


def _blocksize(name, value, allowed) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
        raise ValueError(f"nf4kernel: {name} must be one of {allowed}, got {value!r}")
    return value


def read(packed: torch.Tensor, state) -> tuple[Tensors4bit, Layout]:
    """Check ``packed`` against ``state`` and return what the kernel needs."""
    if isinstance(state, (list, tuple)):
        raise TypeError(
            "nf4kernel: the legacy list form of quant_state is not supported; pass a bitsandbytes QuantState"
        )
    for field in ("absmax", "shape", "dtype", "blocksize", "code", "quant_type", "nested"):
        if not hasattr(state, field):
            raise TypeError(f"nf4kernel: quant_state has no '{field}': expected a bitsandbytes QuantState")
    if state.quant_type not in QUANT_TYPES:
        raise ValueError(f"nf4kernel: quant_type must be 'nf4' or 'fp4', got {state.quant_type!r}")
    if state.dtype not in OUTPUT_DTYPES:
        raise ValueError(f"nf4kernel: output dtype must be float16, bfloat16 or float32, got {state.dtype}")
    blocksize = _blocksize("quant_state.blocksize", state.blocksize, BLOCKSIZES)
    try:
        shape = torch.Size(state.shape)
    except TypeError:
        raise TypeError(f"nf4kernel: quant_state.shape must be a sequence of ints, got {state.shape!r}") from None
    n_elements = math.prod(shape)
    n_blocks = -(-n_elements // blocksize)
    device = packed.device
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"nf4kernel: W is on {device}; CUDA devices and the CPU are supported")

    if not packed.is_contiguous():
        raise ValueError("nf4kernel: the packed weight must be contiguous")
    n_bytes = packed.numel() * packed.element_size()
    if n_bytes != (n_elements + 1) // 2:
        raise ValueError(
            f"nf4kernel: W holds {n_bytes} packed bytes but quant_state.shape {tuple(shape)} needs "
            f"{(n_elements + 1) // 2}"
        )

    code = _tensor(state, "code", state.code, torch.float32, 16, device)
    code2 = absmax2 = offset = None
    blocksize2 = 0
    if state.nested:
        state2 = state.state2
        blocksize2 = _blocksize("quant_state.state2.blocksize", state2.blocksize, BLOCKSIZES)
        absmax = _tensor(state, "absmax", state.absmax, torch.uint8, n_blocks, device)
        code2 = _tensor(state, "state2.code", state2.code, torch.float32, 256, device)
        absmax2 = _tensor(state, "state2.absmax", state2.absmax, torch.float32, -(-n_blocks // blocksize2), device)
        offset = _tensor(state, "offset", state.offset, torch.float32, 1, device)
    else:
        absmax = _tensor(state, "absmax", state.absmax, torch.float32, n_blocks, device)

    transposed = packed.dim() == 2 and packed.shape[0] == 1
    if transposed and len(shape) > 2:
        raise ValueError(f"nf4kernel: a [1, n/2] (transposed) packed weight needs a 2-D shape, got {tuple(shape)}")

    tensors = Tensors4bit(packed, absmax, code, code2, absmax2, offset)
    layout = Layout(shape, state.dtype, blocksize, blocksize2, n_elements, n_blocks, transposed)
    return tensors, layout


def check_out(out: torch.Tensor, layout: Layout, device: torch.device) -> None:
    """``out=`` must be exactly the buffer the result would have been."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"nf4kernel: out must be a tensor, got {type(out).__name__}")
    if out.shape != layout.shape:
        raise ValueError(f"nf4kernel: out has shape {tuple(out.shape)}, expected {tuple(layout.shape)}")
    if out.dtype != layout.dtype:
        raise ValueError(f"nf4kernel: out has dtype {out.dtype}, expected {layout.dtype}")
    if out.device != device:
        raise ValueError(f"nf4kernel: out is on {out.device} but W is on {device}")
    if not out.is_contiguous():
        raise ValueError("nf4kernel: out must be contiguous")
