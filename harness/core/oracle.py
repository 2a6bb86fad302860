"""The oracle every exactness check compares with: bitsandbytes' own dequantization.

On the GPU, its ``dequantize_4bit`` (its CUDA kernel). On the CPU, its pure-torch kernel
(``backends/default``, which bitsandbytes itself uses on devices without a native kernel), run
eagerly, with ``dequantize_4bit``'s double-quantization step in front: bitsandbytes' own code and
roundings, nothing of nf4kernel's. Neither of its CPU entry points serves as is:

* its C++ CPU kernel (0.50.2) restarts the blocks at every row, so where a row's length is not a
  multiple of the blocksize it reads the wrong absmax (its quantize_4bit and its CUDA kernel block
  the flat tensor);
* its pure-torch kernel is wrapped in ``torch.compile``: Inductor compiles C++ for it at the first
  call of every shape, and on the GPU image those compiles hung for minutes under 16 xdist
  workers. ``__wrapped__`` is the function it compiles, which runs eagerly here.
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
