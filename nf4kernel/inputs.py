"""One call's inputs, checked once: the weight and its state (``quant_state.read``) and the ``out=``
buffer, into an immutable ``Checked`` that the launch reads and nothing re-reads.

``out=`` follows torch's ``out=`` ops (``quant_state``'s docstring, "out="). The checks split in two:
``check_out`` is what Dynamo can trace (the custom op's callers run it while tracing);
``check_out_memory`` is what only the real tensor can say (the op runs it before it writes).
"""

from __future__ import annotations

import bisect
from typing import NamedTuple

import torch

from .quant_state import TENSOR_NAMES, Layout, Tensors4bit, _plain, read, unwrap


class Checked(NamedTuple):
    """A call that passed every check: nothing in it is read from the caller's objects again."""

    packed: torch.Tensor
    state: object  # the QuantState, for the plan's weak reference and key
    tensors: Tensors4bit
    layout: Layout
    in_memory: bool  # every tensor has memory the kernel can read (else torch's ops compute it)


def check(W, quant_state, out) -> Checked:
    """Every check of a call, in the order a user sees their errors: the weight and its state, then
    ``out=``; raises before anything is written."""
    packed, state = unwrap(W, quant_state)
    tensors, layout = read(packed, state)
    if out is not None:
        check_out(out, layout, packed.device)
    memory = all(in_memory(t) for t in tensors if t is not None)
    if out is not None and memory:
        check_out_memory(out, tensors)
    return Checked(packed, state, tensors, layout, memory)


def in_memory(tensor: torch.Tensor) -> bool:
    """Whether the tensor has memory of its own the kernel can read: False for a ``__torch_dispatch__``
    wrapper subclass and for ``torch.vmap``'s batched tensors (torch's ops compute those), whose
    storage torch refuses to give (a wrapper's ``data_ptr()`` is 0, not an error)."""
    try:
        tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return False
    return True


def check_out(out: torch.Tensor, layout: Layout, device: torch.device) -> None:
    """``out=`` must be exactly the buffer the result would have been, writable as torch's ``out=``
    ops allow. Traceable by Dynamo; ``check_out_memory`` checks what only the real tensor can say."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"nf4kernel: out must be a tensor, got {type(out).__name__}")
    # First: torch raises its own RuntimeError on reading a sparse compressed tensor's contiguity or
    # a nested tensor's shape.
    _plain("out", out)
    if out.shape != layout.shape:
        raise ValueError(f"nf4kernel: out has shape {tuple(out.shape)}, expected {tuple(layout.shape)}")
    if out.dtype != layout.dtype:
        raise ValueError(f"nf4kernel: out has dtype {out.dtype}, expected {layout.dtype}")
    if out.device != device:
        raise ValueError(f"nf4kernel: out is on {out.device} but W is on {device}")
    if not out.is_contiguous():
        raise ValueError("nf4kernel: out must be contiguous")
    if out.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            "nf4kernel: out requires grad; writing into it can't be differentiated (torch's out= ops refuse "
            "this too): pass an out that does not require grad, or call under torch.no_grad()"
        )


def extents(tensors: Tensors4bit) -> tuple[tuple[int, int], ...]:
    """The byte ranges ``[start, end)`` the kernel reads, merged and sorted by start (for
    ``overlaps``). The tensors are contiguous (``read`` checked), so each is one range; data
    pointers are unique across devices (CUDA's unified addressing puts every device and the host in
    one address space)."""
    spans = sorted(_span(t) for t in tensors if t is not None and t.numel())
    merged: list[list[int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return tuple((start, end) for start, end in merged)


def _span(tensor: torch.Tensor) -> tuple[int, int]:
    """The bytes ``[start, end)`` of a contiguous tensor."""
    start = tensor.data_ptr()
    return start, start + tensor.numel() * tensor.element_size()


def overlaps(start: int, end: int, starts: tuple[int, ...], ends: tuple[int, ...]) -> bool:
    """Whether ``[start, end)`` shares a byte with one of the sorted, disjoint ranges ``starts[i],
    ends[i]``: only the last range that starts before ``end`` can (one bisection, no loop)."""
    i = bisect.bisect_left(starts, end) - 1
    return i >= 0 and ends[i] > start


def check_out_memory(out: torch.Tensor, tensors: Tensors4bit) -> None:
    """What only the real ``out`` can say (Dynamo traces neither): it must share no byte with what
    the kernel reads (the result would depend on the order in which the kernel's programs run, and
    an input would be overwritten), and an inference tensor may only be written in inference mode."""
    if out.is_inference() and not torch.is_inference_mode_enabled():
        raise ValueError(
            "nf4kernel: out is an inference tensor, which can only be written inside torch.inference_mode() "
            "(as for torch's own in-place and out= ops)"
        )
    start, end = _span(out)
    for name, tensor in zip(TENSOR_NAMES, tensors, strict=True):
        if tensor is not None and tensor.numel() and out.numel():
            other_start, other_end = _span(tensor)
            if other_start < end and start < other_end:
                raise ValueError(
                    f"nf4kernel: out overlaps {name} in memory; the result would be wrong and {name} overwritten "
                    "(torch's out= ops refuse this too): pass a separate buffer"
                )
