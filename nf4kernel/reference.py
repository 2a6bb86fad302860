"""A readable pure-torch NF4/FP4 dequantization, for reading beside the kernel, for the tests, and for
the inputs the kernel can't read from memory (a ``__torch_dispatch__`` wrapper subclass,
``torch.vmap``'s batched tensors: torch's ops see their values).

It spells out the arithmetic that ``kernel.py`` does and that bitsandbytes does, with the same fp32
roundings in the same order; torch's casts round to nearest even. It is not the fast path.
"""

from __future__ import annotations

import torch

from .quant_state import Layout, Tensors4bit, read


def dequantize_reference(packed: torch.Tensor, quant_state) -> torch.Tensor:
    """``quant_state.shape``-shaped ``quant_state.dtype`` tensor: what bitsandbytes' dequantize_4bit returns
    (before its transpose of a ``[1, n/2]`` packed weight)."""
    return compute(*read(packed, quant_state))


def compute(t: Tensors4bit, layout: Layout) -> torch.Tensor:
    """The dequantized weight from what ``quant_state.read`` accepted, by torch's ops alone."""
    absmax = t.absmax
    if layout.nested:
        # Second level: uint8 index into code2, times the absmax2 of its group; rounded, then + offset.
        group = torch.arange(layout.n_blocks, device=absmax.device) // layout.blocksize2
        absmax = t.code2[absmax.long()] * t.absmax2[group]
        absmax = absmax + t.offset
    # First level: two 4-bit codes per byte, the high nibble first.
    # uint8 packing is read as it is: torch.vmap had no batching rule for view(dtype) before torch 2.13.
    codes = t.packed.reshape(-1)
    codes = codes if codes.dtype == torch.uint8 else codes.view(torch.uint8)
    nibbles = torch.stack((codes >> 4, codes & 15), dim=-1).reshape(-1)[: layout.n_elements]
    block = torch.arange(layout.n_elements, device=codes.device) // layout.blocksize
    values = t.code[nibbles.long()] * absmax[block]
    return values.to(layout.dtype).reshape(layout.shape)


def compute_into(t: Tensors4bit, layout: Layout, out: torch.Tensor | None) -> torch.Tensor:
    """``compute``, written into ``out`` where given (its version bumped by the caller), transposed
    back where the packing was: the eager path's result for inputs the kernel can't read."""
    result = compute(t, layout)
    if out is not None:
        with torch.no_grad():
            out.copy_(result)
        result = out
    return result.t() if layout.transposed else result
