"""``nf4kernel.dequantize``: the public entry, a drop-in for Unsloth's ``fast_dequantize``.

Eager calls go through the launch cache. Under ``torch.compile`` the kernel is a custom op
(``torch.ops.nf4kernel.dequantize_4bit``): Dynamo traces the state reading and checks, then records
one opaque op that launches the same compiled kernel as eager (fp fusion off), so no graph break and
no FMA; after its first launch per kernel it launches it directly (``launch.launch_for_op``).
It stays an opaque ``custom_op``, not a ``triton_op``: Inductor compiles a ``triton_op``'s kernel
with its own options, fp fusion on, and the nested scale then loses bitsandbytes' rounding
(``benchmarks/_triton_op.py``; measured in ``benchmarks/results/training/h200``).
``torch.jit.trace`` records the same op (the eager path's launch would leave an empty tensor in the
trace).
What tracing can't see of an ``out=`` buffer (its memory: overlap with the inputs, an inference
tensor) is checked by the op when it runs, before it writes.

Guarantees a caller can rely on:

* Calls from several threads at once are safe, on the CPU and on GPUs, and each returns its own
  exact result; GPU launches go to the calling thread's current stream (``launch_cache``, "Threads").
* ``out=`` follows torch's ``out=`` ops (``quant_state``'s docstring): refused when it overlaps ``W``
  or a state tensor, or requires grad while autograd records; its version counter is bumped.
* Bad input raises a ``ValueError`` or ``TypeError`` naming the problem before anything is written,
  on the first call and on every later one (the launch cache re-checks whatever it did not see).
"""

from __future__ import annotations

import math

import torch

from . import launch_cache
from .inputs import check_out, check_out_memory
from .launch import launch_for_op
from .quant_state import Layout, Tensors4bit, read, unwrap

_is_compiling = torch.compiler.is_compiling
_is_tracing = torch.jit.is_tracing  # the public call: torch._C's own saved nothing measurable on an H200


def dequantize(W, quant_state=None, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """Dequantize a bitsandbytes 4-bit weight, bit-identical to ``bitsandbytes.functional.dequantize_4bit``.

    ``W`` is a packed tensor with its ``quant_state``, a ``Params4bit`` (state read from it) or a
    ``Linear4bit``. Returns a ``quant_state.shape`` tensor of ``quant_state.dtype`` (fp16, bf16 or
    fp32), transposed when ``W``'s first dimension is 1 (the transposed ``[1, n/2]`` packing, as
    bitsandbytes decides). ``out=`` writes into a contiguous buffer of that shape, dtype and device
    that shares no memory with ``W`` or its state (torch's ``out=`` rules; see the module docstring).
    """
    if _is_compiling() or _is_tracing():
        packed, state = unwrap(W, quant_state)
        return _traced(packed, state, out)
    return launch_cache.dequantize(W, quant_state, out)


def fast_dequantize(
    W,
    quant_state=None,
    out: torch.Tensor | None = None,
    use_global_buffer: bool = False,
    dtype: torch.dtype | None = None,
):
    """Unsloth's ``fast_dequantize(W, quant_state, out, use_global_buffer, dtype)``, as Unsloth's callers use it.

    Without a quant state it returns ``W`` itself, as Unsloth does for a layer that is not 4-bit (its
    LoRA code calls it on every base weight). ``use_global_buffer`` is accepted and changes nothing:
    Unsloth reuses one buffer across calls to save allocations; each call here returns its own tensor
    (what a reused buffer may be used for, a fresh one may too). ``dtype`` (Unsloth 2026.10.9's LoRA
    code passes its activations' dtype) steers only Unsloth's FP8 weights: a 4-bit weight comes out
    in its quant state's dtype, in Unsloth and here."""
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype or None, got {type(dtype).__name__}")
    if quant_state is None:
        return W
    return dequantize(W, quant_state, out=out)


def _traced(packed: torch.Tensor, state, out):
    tensors, layout = read(packed, state)
    if out is None:
        out = torch.ops.nf4kernel.dequantize_4bit(*tensors, *_op_layout(layout))
    else:
        check_out(out, layout, packed.device)
        torch.ops.nf4kernel.dequantize_4bit_out(*tensors, *_op_layout(layout), out)
    return out.t() if layout.transposed else out


def _op_layout(layout: Layout):
    return layout.blocksize, layout.blocksize2, list(layout.shape), layout.dtype


def _layout_of(blocksize: int, blocksize2: int, shape: list[int], dtype: torch.dtype) -> Layout:
    """The ``Layout`` an op's arguments (``_op_layout``) stand for, as the kernel's launch needs it."""
    n_elements = math.prod(shape)
    return Layout(torch.Size(shape), dtype, blocksize, blocksize2, n_elements, -(-n_elements // blocksize), False)


def _launch_into(out, packed, absmax, code, code2, absmax2, offset, blocksize, blocksize2, shape, dtype) -> None:
    """The ops' body: the checks ran while tracing; this is the launch, as eager's checked path does it."""
    layout = _layout_of(blocksize, blocksize2, shape, dtype)
    if layout.n_elements:
        launch_for_op(Tensors4bit(packed, absmax, code, code2, absmax2, offset), layout, out)


def _launch_into_given(out, packed, absmax, code, code2, absmax2, offset, *layout) -> None:
    # A caller's buffer: what tracing could not check (its memory) is checked here, before the write.
    check_out_memory(out, Tensors4bit(packed, absmax, code, code2, absmax2, offset))
    _launch_into(out, packed, absmax, code, code2, absmax2, offset, *layout)


@torch.library.custom_op("nf4kernel::dequantize_4bit", mutates_args=())
def _dequantize_op(
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
    _launch_into(out, packed, absmax, code, code2, absmax2, offset, blocksize, blocksize2, shape, dtype)
    return out


@_dequantize_op.register_fake
def _(packed, absmax, code, code2, absmax2, offset, blocksize, blocksize2, shape, dtype):
    return packed.new_empty(shape, dtype=dtype)


@torch.library.custom_op("nf4kernel::dequantize_4bit_out", mutates_args=("out",))
def _dequantize_out_op(
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
    out: torch.Tensor,
) -> None:
    _launch_into_given(out, packed, absmax, code, code2, absmax2, offset, blocksize, blocksize2, shape, dtype)


@_dequantize_out_op.register_fake
def _(packed, absmax, code, code2, absmax2, offset, blocksize, blocksize2, shape, dtype, out):
    return None
