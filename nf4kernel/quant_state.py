"""Reads a bitsandbytes 4-bit weight and its QuantState into what the kernel needs, checking it all.

Every problem is reported as a ``ValueError`` or ``TypeError`` that names it, before anything is
written; nothing passed in is modified. This is the slow path: ``inputs.check`` runs it (with the
``out=`` checks) once per weight, and the launch cache again whenever anything it read has changed.

Decisions a user can see:

* **The codebook comes from ``quant_type``**, as bitsandbytes decodes a 4-bit weight: its NF4 or FP4
  table (``CODEBOOKS``), never ``quant_state.code``, which bitsandbytes 0.50 does not read either. A
  state whose ``code`` disagrees with its ``quant_type``, or has none, decodes as bitsandbytes does.
* **A nested state is decoded with bitsandbytes' arithmetic**: ``code2[i] * absmax2[group]`` in fp32,
  cast to ``state2.dtype``, ``+ offset`` as torch adds it, then fp32. The kernel does this itself for
  bitsandbytes' own states (``state2.dtype`` float32, a float32 one-element ``offset``); any other
  (an fp16 ``state2.dtype``, a Python float or float64 ``offset``, as ``QuantState.from_dict`` makes
  under ``torch.set_default_dtype(torch.float64)``) has its absmax computed by torch first, exactly
  as bitsandbytes does, and gets no plan.
* **Tensors are read for their values.** A view with torch's negative bit (``z.conj().imag``) is read
  through a resolved copy, as torch's ops would read it. A tensor that is not in memory of its own
  (a ``__torch_dispatch__`` wrapper subclass, ``torch.vmap``'s batched tensors) is computed by torch's
  ops (``reference.py``), exactly, more slowly. A nested tensor, or one of any layout but strided
  (sparse COO, CSR, CSC, BSR, BSC, MKL-DNN), is refused by name, as ``W``, a state tensor or ``out``.
* **A packed ``W`` whose first dimension is 1** is the transposed packing, whatever its number of
  dimensions, as ``bitsandbytes.functional.dequantize_4bit`` decides (``A.shape[0] == 1``): the
  result comes back transposed (``.t()``), so ``quant_state.shape`` must then have at most 2
  dimensions (a 1-D result is its own transpose). bitsandbytes' own ``[(n + 1) // 2, 1]`` packing of
  a weight with one or two elements is ``[1, 1]`` and so comes back transposed too, as there.
  A 0-dimensional ``W`` has no first dimension: not transposed.
* **``quant_state.shape``** may be any sequence of non-negative integers (``torch.Size``, tuple,
  list, numpy integers); it is read as ints each call.
* **``out=``** follows torch's ``out=`` ops: it must have the result's shape, dtype and device, be
  a contiguous plain (strided) tensor, and share no byte with ``W`` or any state tensor (torch
  refuses such overlap too); while autograd records (grad mode on) it must not require grad, an
  inference tensor is only accepted inside ``torch.inference_mode()``, and a write bumps its version
  counter, so a tensor that autograd saved for backward and that was then overwritten makes backward
  fail instead of giving wrong gradients.
"""

from __future__ import annotations

import functools
import math
import numbers
import operator
from typing import NamedTuple

import torch

_is_compiling = torch.compiler.is_compiling
OUTPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
QUANT_TYPES = ("nf4", "fp4")
BLOCKSIZES = (32, 64, 128, 256, 512, 1024, 2048, 4096)  # what bitsandbytes accepts for 4-bit
# The packed codes are read as bytes, whatever dtype bitsandbytes' quant_storage views them as (uint8,
# or a float dtype for FSDP); any plain integer or float dtype is accepted. Others are refused by name
# (a complex or bool tensor is no packing, and Triton has no pointer type for a complex one).
PACKED_DTYPES = (
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
)


# The 4-bit codebooks, fp32, as bitsandbytes' get_4bit_type makes them (FP4's is its table over 12).
CODEBOOKS = {
    "nf4": (
        -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
        -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
        0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
        0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
    ),
    "fp4": (
        0.0, 0.0052083334885537624, 0.6666666865348816, 1.0,
        0.3333333432674408, 0.5, 0.1666666716337204, 0.25,
        0.0, -0.0052083334885537624, -0.6666666865348816, -1.0,
        -0.3333333432674408, -0.5, -0.1666666716337204, -0.25,
    ),
}  # fmt: skip


@functools.cache
def codebook(quant_type: str, device: torch.device) -> torch.Tensor:
    """``quant_type``'s codebook on ``device``: made once per device and kept (64 bytes), so a plan's
    launch can read it by its pointer."""
    return torch.tensor(CODEBOOKS[quant_type], dtype=torch.float32, device=device)


class Tensors4bit(NamedTuple):
    """The tensors the kernel reads, in its argument order."""

    packed: torch.Tensor  # packed codes, any storage dtype
    absmax: torch.Tensor  # fp32, or uint8 when nested
    code: torch.Tensor  # fp32 [16]: the quant type's codebook (``codebook``), not the state's
    code2: torch.Tensor | None  # fp32 [256], nested only
    absmax2: torch.Tensor | None  # fp32, nested only
    offset: torch.Tensor | None  # fp32, one element, nested only


# How the user knows each tensor, for messages.
TENSOR_NAMES = (
    "W",
    "quant_state.absmax",
    "nf4kernel's codebook",
    "quant_state.state2.code",
    "quant_state.state2.absmax",
    "quant_state.offset",
)


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
    # The kernel reads the caller's own tensors, so a plan may launch it again on their pointers. False
    # where ``read`` made any of them (an absmax computed by torch, a resolved negative view).
    plannable: bool = True

    @property
    def nested(self) -> bool:
        return self.blocksize2 != 0


def tensors_of(packed: torch.Tensor, state) -> Tensors4bit:
    """The kernel's tensors, unchecked: only for a state that ``read`` has already accepted and found
    plannable (its own tensors are what the kernel reads)."""
    code = codebook(state.quant_type, packed.device)
    if state.nested:
        state2 = state.state2
        return Tensors4bit(packed, state.absmax, code, state2.code, state2.absmax, state.offset)
    return Tensors4bit(packed, state.absmax, code, None, None, None)


def unwrap(W, quant_state=None):
    """(packed tensor, QuantState) from a ``Linear4bit``, a ``Params4bit`` or a tensor plus its state."""
    if isinstance(W, torch.nn.Module):
        weight = module_weight(W)
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


_Module = torch.nn.Module


def module_weight(module):
    """``getattr(module, "weight", None)``, with a shortcut. ``Module.__getattr__`` is Python code, a
    third of a planned call's unwrapping; where plain attribute lookup can't find ``weight`` (not
    in the instance's dict, not on the class) and the class keeps torch's lookup hooks, that
    lookup would end in the parameter table, so read the table."""
    attributes = module.__dict__
    parameters = attributes.get("_parameters")
    if parameters is not None and "weight" not in attributes:
        weight = parameters.get("weight")
        cls = type(module)
        if (
            weight is not None
            and cls.__getattr__ is _Module.__getattr__
            and cls.__getattribute__ is _Module.__getattribute__
            and not hasattr(cls, "weight")
        ):
            return weight
    return getattr(module, "weight", None)


def _plain(name: str, value: torch.Tensor) -> None:
    """A nested tensor, or one of any layout but ``torch.strided`` (sparse COO, CSR, CSC, BSR, BSC,
    MKL-DNN), is refused by name: none has flat memory the kernel could read or write, and
    bitsandbytes' own ops refuse them too."""
    if value.is_nested:
        raise TypeError(f"nf4kernel: {name} is a nested tensor; pass a plain (strided) tensor")
    # Traced, the layout is not read: Dynamo refuses ``.layout`` inside an autograd backward (where
    # bitsandbytes' MatMul4Bit dequantizes), and it never traces a sparse tensor as a plain one.
    if not _is_compiling() and value.layout != torch.strided:
        raise TypeError(f"nf4kernel: {name} is a {value.layout} tensor; pass a plain (strided) tensor")


def _tensor(state, name, value, dtype, numel, device) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"nf4kernel: quant_state.{name} must be a tensor, got {type(value).__name__}")
    _plain(f"quant_state.{name}", value)
    if value.dtype != dtype:
        raise ValueError(f"nf4kernel: quant_state.{name} must be {dtype}, got {value.dtype}")
    if value.numel() != numel:
        raise ValueError(
            f"nf4kernel: quant_state.{name} has {value.numel()} values but the weight needs {numel} "
            f"(shape {tuple(state.shape)}, blocksize {state.blocksize})"
        )
    if value.device != device:
        raise ValueError(f"nf4kernel: quant_state.{name} is on {value.device} but W is on {device}")
    # A negative view is read through a resolved copy (``read``), contiguous whatever the view is, as
    # torch's dispatcher resolves it for bitsandbytes' own ops.
    if not value.is_contiguous() and (_is_compiling() or not value.is_neg()):
        raise ValueError(f"nf4kernel: quant_state.{name} must be contiguous")
    return value


def integer(value):
    """``value`` as an int if it is an integer (numpy's too), else None. bool is not a size."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def int_key(value):
    """A blocksize for a plan's key: an int as it is (one type check); anything else (a numpy or a 0-d
    torch integer, which can change in place after a plan) read as an int each call. None: not an
    integer."""
    return value if type(value) is int else integer(value)


def shape_key(shape):
    """``quant_state.shape`` for a plan's key. bitsandbytes' torch.Size is immutable: kept as it is
    (one type check). Anything else is copied as ints each call: a list changed in place after the
    plan was made must not still match it. A size that is no int becomes None, which no plan holds,
    so the checked path says what it is."""
    if type(shape) is torch.Size:
        return shape
    return tuple(map(integer, shape))


def _blocksize(name, value, allowed) -> int:
    size = integer(value)
    if size not in allowed:
        raise ValueError(f"nf4kernel: {name} must be one of {allowed}, got {value!r}")
    return size


def read_shape(shape) -> torch.Size:
    """``quant_state.shape`` as a torch.Size of ints, or a TypeError / ValueError naming what is wrong."""
    try:
        dims = [integer(d) for d in shape]
    except TypeError:  # not iterable
        dims = [None]
    if None in dims:
        raise TypeError(f"nf4kernel: quant_state.shape must be a sequence of ints, got {shape!r}")
    if any(d < 0 for d in dims):
        raise ValueError(f"nf4kernel: quant_state.shape has a negative size: {tuple(dims)}")
    return torch.Size(dims)


def _offset(state, device):
    """The nested state's offset: a real number, or a one-element real tensor on W's device (a 0-d
    one may be on the CPU, as torch allows for a scalar). bitsandbytes adds it with torch's ``+=``."""
    offset = getattr(state, "offset", None)
    if isinstance(offset, torch.Tensor):
        _plain("quant_state.offset", offset)
        if offset.dtype.is_complex or offset.dtype == torch.bool or offset.numel() != 1:
            raise ValueError(
                f"nf4kernel: quant_state.offset must be one real number, got a {offset.dtype} tensor of "
                f"{offset.numel()} values"
            )
        if offset.device != device and not (offset.dim() == 0 and offset.device.type == "cpu"):
            raise ValueError(f"nf4kernel: quant_state.offset is on {offset.device} but W is on {device}")
        return offset
    if isinstance(offset, numbers.Real) and not isinstance(offset, bool):
        return offset
    raise TypeError(
        f"nf4kernel: quant_state.offset must be a number or a one-element tensor, got {type(offset).__name__}"
    )


def _kernel_offset(offset, device) -> bool:
    """Whether the kernel adds this offset itself: bitsandbytes' own, a float32 one-element tensor on
    W's device (one with the negative bit is read through a resolved copy, as any input)."""
    return isinstance(offset, torch.Tensor) and offset.dtype == torch.float32 and offset.device == device


def nested_absmax(state, n_blocks: int, device) -> torch.Tensor:
    """The fp32 absmax of a nested state, computed by torch's ops as bitsandbytes computes it:
    ``dequantize_blockwise`` (``code2[i] * absmax2[group]`` in fp32, cast to ``state2.dtype``), then
    ``+= offset`` (torch's promotion rules decide the arithmetic), then ``.float()``."""
    state2 = state.state2
    group = torch.arange(n_blocks, device=device) // state2.blocksize
    absmax = (state2.code[state.absmax.long()] * state2.absmax[group]).to(getattr(state2, "dtype", torch.float32))
    absmax += state.offset
    return absmax.float()


def _state2(state):
    """The second-level state of a nested (double-quantized) state, checked for its fields."""
    state2 = getattr(state, "state2", None)
    if state2 is None:
        raise TypeError("nf4kernel: quant_state is nested (double-quantized) but has no state2")
    for field in ("absmax", "code", "blocksize"):
        if not hasattr(state2, field):
            raise TypeError(f"nf4kernel: quant_state.state2 has no '{field}': expected a bitsandbytes QuantState")
    return state2


def read(packed: torch.Tensor, state) -> tuple[Tensors4bit, Layout]:
    """Check ``packed`` against ``state`` and return what the kernel needs."""
    if isinstance(state, (list, tuple)):
        raise TypeError(
            "nf4kernel: the legacy list form of quant_state is not supported; pass a bitsandbytes QuantState"
        )
    for field in ("absmax", "shape", "dtype", "blocksize", "quant_type", "nested"):
        if not hasattr(state, field):
            raise TypeError(f"nf4kernel: quant_state has no '{field}': expected a bitsandbytes QuantState")
    if state.quant_type not in QUANT_TYPES:
        raise ValueError(f"nf4kernel: quant_type must be 'nf4' or 'fp4', got {state.quant_type!r}")
    if state.dtype not in OUTPUT_DTYPES:
        raise ValueError(f"nf4kernel: output dtype must be float16, bfloat16 or float32, got {state.dtype}")
    blocksize = _blocksize("quant_state.blocksize", state.blocksize, BLOCKSIZES)
    shape = read_shape(state.shape)
    n_elements = math.prod(shape)
    n_blocks = -(-n_elements // blocksize)
    device = packed.device
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"nf4kernel: W is on {device}; CUDA devices and the CPU are supported")

    _plain("W", packed)
    if packed.dtype not in PACKED_DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in PACKED_DTYPES)
        raise TypeError(f"nf4kernel: the packed weight's dtype is {packed.dtype}; it must be one of {names}")
    if not packed.is_contiguous():
        raise ValueError("nf4kernel: the packed weight must be contiguous")
    n_bytes = packed.numel() * packed.element_size()
    if n_bytes != (n_elements + 1) // 2:
        raise ValueError(
            f"nf4kernel: W holds {n_bytes} packed bytes but quant_state.shape {tuple(shape)} needs "
            f"{(n_elements + 1) // 2}"
        )

    code = codebook(state.quant_type, device)  # by quant_type, as bitsandbytes decodes
    code2 = absmax2 = offset = None
    blocksize2 = 0
    plannable = True
    if state.nested:
        state2 = _state2(state)
        blocksize2 = _blocksize("quant_state.state2.blocksize", state2.blocksize, BLOCKSIZES)
        absmax = _tensor(state, "absmax", state.absmax, torch.uint8, n_blocks, device)
        code2 = _tensor(state, "state2.code", state2.code, torch.float32, 256, device)
        absmax2 = _tensor(state, "state2.absmax", state2.absmax, torch.float32, -(-n_blocks // blocksize2), device)
        offset = _offset(state, device)
        if getattr(state2, "dtype", torch.float32) != torch.float32 or not _kernel_offset(offset, device):
            # Arithmetic the kernel does not do (module docstring): torch computes the absmax as
            # bitsandbytes does, and the kernel reads it as a plain one.
            absmax, code2, absmax2, offset, blocksize2 = nested_absmax(state, n_blocks, device), None, None, None, 0
            plannable = False
    else:
        absmax = _tensor(state, "absmax", state.absmax, torch.float32, n_blocks, device)

    # bitsandbytes' rule (see the module docstring): a first dimension of 1 means transposed.
    transposed = packed.dim() >= 1 and packed.shape[0] == 1
    if transposed and len(shape) > 2:
        raise ValueError(
            f"nf4kernel: a packed W of shape {tuple(packed.shape)} (first dimension 1) is the transposed "
            f"packing, whose result is transposed back; that needs at most a 2-D quant_state.shape, "
            f"got {tuple(shape)}"
        )

    tensors = Tensors4bit(packed, absmax, code, code2, absmax2, offset)
    # A negative view: the kernel reads memory, so it reads the values through resolved copies. (Under
    # torch.compile, torch's dispatcher resolves them before the custom op's kernel runs.)
    if plannable and not _is_compiling() and any(t is not None and t.is_neg() for t in tensors):
        tensors = Tensors4bit(*(t if t is None or not t.is_neg() else t.resolve_neg().contiguous() for t in tensors))
        plannable = False
    layout = Layout(shape, state.dtype, blocksize, blocksize2, n_elements, n_blocks, transposed, plannable)
    return tensors, layout
