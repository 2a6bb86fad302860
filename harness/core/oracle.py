"""The oracle every exactness check compares with: bitsandbytes' own dequantization, its CUDA kernel
on the GPU and its pure-torch kernel, run eagerly, on the CPU. Why neither of its CPU entry points
serves as it is: docs/harness-code.md.
"""

from __future__ import annotations


def bnb_dequantize(packed, state):
    import bitsandbytes.functional as F
    import torch

    if packed.device.type != "cpu":
        return F.dequantize_4bit(packed, state)
    from bitsandbytes.backends.default import ops

    dequantize_blockwise = getattr(ops._dequantize_blockwise_compute, "__wrapped__", ops._dequantize_blockwise_compute)
    dequantize_4bit = getattr(ops._dequantize_4bit_compute, "__wrapped__", ops._dequantize_4bit_compute)
    absmax = state.absmax
    if state.nested:  # as dequantize_4bit does it, with dequantize_blockwise's arithmetic
        inner = state.state2
        absmax = dequantize_blockwise(absmax, inner.absmax, inner.code, inner.blocksize, inner.dtype)
        absmax += state.offset
    codes = packed.reshape(-1).view(torch.uint8)
    code = F.get_4bit_type(state.quant_type, device=packed.device)  # by quant_type, as bitsandbytes does
    out = dequantize_4bit(codes, absmax.float(), code, state.blocksize, state.shape, state.dtype)
    return out.t() if packed.shape[0] == 1 else out
