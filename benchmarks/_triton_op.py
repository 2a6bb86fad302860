"""nf4kernel's kernel registered with ``torch.library.triton_op``, as Unsloth registers its own: the
column set against the package's opaque ``custom_op`` under ``torch.compile``.

Not shipped. Under Inductor a ``triton_op``'s kernel is compiled by Inductor with Inductor's options
(``torch/_inductor/codegen/wrapper.py``, ``define_user_defined_triton_kernel``: the kernel's
constants, ``num_warps``, no ``enable_fp_fusion``), so ``a*b + c`` may become an FMA there, and the
nested absmax (``code2[i] * absmax2[j] + offset``, rounded between) would lose bitsandbytes' bits.
``identity`` checks exactly that, per call, on the GPU; the training benchmark times the column.
"""

from __future__ import annotations

import torch
from torch.library import triton_op, wrap_triton

from nf4kernel import api, launch_cache
from nf4kernel import kernel as K
from nf4kernel.quant_state import Tensors4bit, read, unwrap


@triton_op("nf4kernel_bench::dequantize_4bit", mutates_args=())
def _op(
    packed: torch.Tensor,
    absmax: torch.Tensor,
    code: torch.Tensor,
    code2: torch.Tensor | None,
    absmax2: torch.Tensor | None,
    offset: torch.Tensor | None,
    blocksize: int,
    blocksize2: int,
    shape: list[int],
    dtype: torch.dtype,
) -> torch.Tensor:
    out = torch.empty(shape, dtype=dtype, device=packed.device)
    layout = api._layout_of(blocksize, blocksize2, shape, dtype)
    tensors = Tensors4bit(packed, absmax, code, code2, absmax2, offset)
    # Triton's own launch, no programmatic dependent launch: Inductor would not launch it as one.
    grid, args, constexprs, options = launch_cache.kernel_arguments(tensors, layout, out, interpreted=False)
    wrap_triton(K.dequantize_4bit_kernel)[grid](*args, **constexprs, num_warps=options["num_warps"])
    return out


def dequantize(W, quant_state=None):
    """``(W, quant_state) -> tensor`` through the ``triton_op`` (for ``nf4kernel.patch(dequantizer=...)``)."""
    packed, state = unwrap(W, quant_state)
    tensors, layout = read(packed, state)
    out = torch.ops.nf4kernel_bench.dequantize_4bit(*tensors, *api._op_layout(layout))
    return out.t() if layout.transposed else out


def identity(shapes=((4096, 4096),), dtypes=(torch.bfloat16, torch.float16)) -> dict:
    """Per call on the GPU, flat and nested NF4: the ``triton_op`` eager and compiled by Inductor, and the
    package's ``nf4kernel.dequantize`` compiled, each against bitsandbytes by ``torch.equal``."""
    import bitsandbytes.functional as F

    import nf4kernel

    found = {}
    for rows, cols in shapes:
        for dtype in dtypes:
            for nested in (False, True):
                torch.manual_seed(0)
                weight = torch.randn(rows, cols, dtype=dtype, device="cuda")
                packed, state = F.quantize_4bit(weight, quant_type="nf4", compress_statistics=nested)
                expected = F.dequantize_4bit(packed, state)
                torch._dynamo.reset()
                calls = {
                    "triton_op eager": dequantize,
                    "triton_op compiled": torch.compile(dequantize),
                    "custom_op compiled": torch.compile(nf4kernel.dequantize),
                }
                key = f"{rows}x{cols} {str(dtype).removeprefix('torch.')} {'nested' if nested else 'flat'}"
                found[key] = {}
                for name, call in calls.items():
                    try:
                        found[key][name] = torch.equal(call(packed, state), expected)
                    except Exception as error:  # recorded: a column that can't run is a finding
                        found[key][name] = f"{type(error).__name__}: {str(error)[:300]}"
    torch._dynamo.reset()
    return found
