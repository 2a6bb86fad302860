"""Bad input gets a clear exception that names the problem, and nothing passed in is modified."""

from __future__ import annotations

import copy
import math
import re

import pytest
import torch
from conftest import HAS_CUDA, assert_unmodified, bnb_dequantize, get_field, make_weight, set_field, snapshot

import nf4kernel
from nf4kernel import launch_cache


def _weight(device, nested=True):
    packed, state = make_weight((32, 64), torch.bfloat16, nested=nested, device=device)
    return packed, copy.deepcopy(state)


def _replace(state, **fields):
    for name, value in fields.items():
        setattr(state, name, value)
    return state


def _call(packed, state, **kwargs):
    return lambda: nf4kernel.dequantize(packed, state, **kwargs)


def _without(state, name):
    delattr(state, name)
    return state


class _NotATensor:
    """Carries a 4-bit weight's state (``quant_state``) without being a tensor, as a mistaken
    wrapper would: the call must say that W is not a tensor, whatever the attribute does."""

    def __init__(self, state=None):
        self._state = state

    @property
    def quant_state(self):
        if self._state is None:
            raise RuntimeError("a wrapper's own failure")
        return self._state


def _planned_state(device):
    packed, state = _weight(device)
    nf4kernel.dequantize(packed, state)  # planned: the fast path would find this state's plan
    return state


# (case id, builder(device) -> (callable, objects to check unmodified), exception, message pattern)
BAD_INPUTS = [
    (
        "W is not a tensor but carries a planned state",
        lambda d: (None, lambda: nf4kernel.dequantize(_NotATensor(_planned_state(d)))),
        TypeError,
        "W must be a packed 4-bit tensor",
    ),
    (
        "W is not a tensor and its quant_state raises",
        lambda d: (None, lambda: nf4kernel.dequantize(_NotATensor())),
        TypeError,
        "W must be a packed 4-bit tensor",
    ),
    ("no quant state", lambda d: ((p := _weight(d)[0]), lambda: nf4kernel.dequantize(p)), ValueError, "no quant state"),
    (
        "W is not a tensor",
        lambda d: (None, lambda: nf4kernel.dequantize([1, 2, 3], _weight(d)[1])),
        TypeError,
        "W must be a packed 4-bit tensor",
    ),
    (
        "legacy list state",
        lambda d: ((p := _weight(d)[0]), _call(p, [torch.zeros(1), (32, 64), torch.float16, 64])),
        TypeError,
        "legacy list form",
    ),
    (
        "not a QuantState",
        lambda d: ((p := _weight(d)[0]), _call(p, object())),
        TypeError,
        "quant_state has no 'absmax'",
    ),
    (
        "quant type int8",
        lambda d: ((w := _weight(d)), _call(w[0], _replace(w[1], quant_type="int8"))),
        ValueError,
        "quant_type must be 'nf4' or 'fp4'",
    ),
    (
        "output dtype float64",
        lambda d: ((w := _weight(d)), _call(w[0], _replace(w[1], dtype=torch.float64))),
        ValueError,
        "output dtype must be float16, bfloat16 or float32",
    ),
    (
        "output dtype int8",
        lambda d: ((w := _weight(d)), _call(w[0], _replace(w[1], dtype=torch.int8))),
        ValueError,
        "output dtype",
    ),
    (
        "blocksize not one bitsandbytes accepts",
        lambda d: ((w := _weight(d)), _call(w[0], _replace(w[1], blocksize=48))),
        ValueError,
        "blocksize must be one of",
    ),
    (
        "shape does not match W",
        lambda d: ((w := _weight(d)), _call(w[0], _replace(w[1], shape=torch.Size([64, 64])))),
        ValueError,
        "packed bytes but quant_state.shape",
    ),
    (
        "shape is not a size",
        lambda d: ((w := _weight(d)), _call(w[0], _replace(w[1], shape=None))),
        TypeError,
        "shape must be a sequence of ints",
    ),
    (
        "absmax count does not match",
        lambda d: ((w := _weight(d, nested=False)), _call(w[0], _replace(w[1], absmax=w[1].absmax[:-1].clone()))),
        ValueError,
        r"quant_state.absmax has 31 values but the weight needs 32",
    ),
    (
        "blocksize does not match absmax count",
        lambda d: ((w := _weight(d, nested=False)), _call(w[0], _replace(w[1], blocksize=128))),
        ValueError,
        "absmax has 32 values but the weight needs 16",
    ),
    (
        "plain absmax of the wrong dtype",
        lambda d: ((w := _weight(d, nested=False)), _call(w[0], _replace(w[1], absmax=w[1].absmax.half()))),
        ValueError,
        "quant_state.absmax must be torch.float32",
    ),
    (
        "nested absmax2 count does not match",
        lambda d: (
            (w := _weight(d)),
            _call(w[0], _replace(w[1], state2=_replace(w[1].state2, absmax=torch.ones(3, device=d)))),
        ),
        ValueError,
        "state2.absmax has 3 values",
    ),
    (
        "nested offset is a string",
        lambda d: ((w := _weight(d)), _call(w[0], _replace(w[1], offset="0.5"))),
        TypeError,
        "quant_state.offset must be a number or a one-element tensor, got str",
    ),
    (
        "nested offset of several values",
        lambda d: ((w := _weight(d)), _call(w[0], _replace(w[1], offset=torch.zeros(2, device=d)))),
        ValueError,
        "quant_state.offset must be one real number, got a torch.float32 tensor of 2 values",
    ),
    (
        "nested offset that is a bool",
        lambda d: ((w := _weight(d)), _call(w[0], _replace(w[1], offset=True))),
        TypeError,
        "quant_state.offset must be a number",
    ),
    (
        "non-contiguous packed data",
        lambda d: (
            (p := torch.zeros((1024, 2), dtype=torch.uint8, device=d)),
            _call(p[:, 0:1], _weight(d)[1]),
        ),
        ValueError,
        "packed weight must be contiguous",
    ),
    (
        "transposed packing with a 3-D shape",
        lambda d: (
            (w := make_weight((4, 8, 64), device=d)),
            _call(w[0].reshape(1, -1), w[1]),
        ),
        ValueError,
        "transposed",
    ),
    (
        "nested state without state2",
        lambda d: ((w := _weight(d)), _call(w[0], _replace(w[1], state2=None))),
        TypeError,
        r"quant_state is nested \(double-quantized\) but has no state2",
    ),
    (
        "nested state with no state2 attribute",
        lambda d: ((w := _weight(d)), _call(w[0], _without(w[1], "state2"))),
        TypeError,
        "has no state2",
    ),
    (
        "state2 that is not a QuantState",
        lambda d: ((w := _weight(d)), _call(w[0], _replace(w[1], state2=object()))),
        TypeError,
        "quant_state.state2 has no 'absmax'",
    ),
    (
        "nested state with no offset attribute",
        lambda d: ((w := _weight(d)), _call(w[0], _without(w[1], "offset"))),
        TypeError,
        "quant_state.offset must be a number or a one-element tensor, got NoneType",
    ),
    (
        "complex W",
        lambda d: ((w := _weight(d)), _call(w[0].reshape(-1).view(torch.complex64), w[1])),
        TypeError,
        "packed weight's dtype is torch.complex64; it must be one of uint8",
    ),
    (
        "bool W",
        lambda d: ((w := _weight(d)), _call(w[0].view(torch.bool), w[1])),
        TypeError,
        "packed weight's dtype is torch.bool",
    ),
    (
        "shape with a negative size",
        lambda d: ((w := _weight(d)), _call(w[0], _replace(w[1], shape=[-32, -64]))),
        ValueError,
        r"quant_state.shape has a negative size: \(-32, -64\)",
    ),
    (
        "shape of floats",
        lambda d: ((w := _weight(d)), _call(w[0], _replace(w[1], shape=(32.0, 64.0)))),
        TypeError,
        "shape must be a sequence of ints",
    ),
    (
        "shape of bools",
        lambda d: ((w := _weight(d)), _call(w[0], _replace(w[1], shape=[True, 2048]))),
        TypeError,
        "shape must be a sequence of ints",
    ),
    (
        "3-D packing with a first dimension of 1 and a 3-D shape",
        lambda d: ((w := make_weight((4, 8, 64), device=d)), _call(w[0].reshape(1, -1, 1), w[1])),
        ValueError,
        r"packed W of shape \(1, 1024, 1\) \(first dimension 1\) is the transposed packing",
    ),
    (
        "out of the wrong shape",
        lambda d: ((w := _weight(d)), _call(*w, out=torch.empty((64, 32), dtype=torch.bfloat16, device=d))),
        ValueError,
        r"out has shape \(64, 32\), expected \(32, 64\)",
    ),
    (
        "out of the wrong dtype",
        lambda d: ((w := _weight(d)), _call(*w, out=torch.empty((32, 64), dtype=torch.float16, device=d))),
        ValueError,
        "out has dtype torch.float16, expected torch.bfloat16",
    ),
    (
        "out not contiguous",
        lambda d: ((w := _weight(d)), _call(*w, out=torch.empty((64, 32), dtype=torch.bfloat16, device=d).t())),
        ValueError,
        "out must be contiguous",
    ),
    (
        "out not a tensor",
        lambda d: ((w := _weight(d)), _call(*w, out=[0.0])),
        TypeError,
        "out must be a tensor",
    ),
    (
        "W on an unsupported device",
        lambda d: ((w := _weight(d)), _call(w[0].to("meta"), w[1])),
        ValueError,
        "W is on meta; CUDA devices and the CPU are supported",
    ),
    (
        "module without a weight",
        lambda d: (None, lambda: nf4kernel.dequantize(torch.nn.ReLU())),
        TypeError,
        "has no 4-bit weight",
    ),
]

# Every sparse layout torch has, made from a 2-D strided tensor (the blocked ones of 1x1 blocks, which
# any shape divides). None has flat memory the kernel could read or write.
SPARSE_LAYOUTS = {
    "sparse_coo": lambda t: t.to_sparse(),
    "sparse_csr": lambda t: t.to_sparse_csr(),
    "sparse_csc": lambda t: t.to_sparse_csc(),
    "sparse_bsr": lambda t: t.to_sparse_bsr((1, 1)),
    "sparse_bsc": lambda t: t.to_sparse_bsc((1, 1)),
}


def _sparse_field(d, field, make_sparse):
    """A weight (flat absmax for ``absmax``, nested otherwise) with one state tensor made sparse."""
    packed, state = _weight(d, nested=field != "absmax")
    set_field(state, field, make_sparse(get_field(state, field).reshape(1, -1)))
    return packed, state


for _layout, _sparse in SPARSE_LAYOUTS.items():
    BAD_INPUTS += [
        (
            f"out is {_layout}",
            lambda d, s=_sparse: (
                (w := _weight(d)),
                _call(*w, out=s(torch.ones((32, 64), dtype=torch.bfloat16, device=d))),
            ),
            TypeError,
            rf"out is a torch\.{_layout} tensor",
        ),
        (
            f"W is {_layout}",
            lambda d, s=_sparse: ((w := _weight(d)), _call(s(w[0].reshape(32, -1)), w[1])),
            TypeError,
            rf"W is a torch\.{_layout} tensor",
        ),
        *(
            (
                f"quant_state.{field} is {_layout}",
                # Snapshots read memory, which a sparse tensor has none of: W is checked unmodified.
                lambda d, s=_sparse, f=field: ((w := _sparse_field(d, f, s))[0], _call(*w)),
                TypeError,
                rf"quant_state\.{re.escape(field)} is a torch\.{_layout} tensor",
            )
            for field in ("absmax", "state2.absmax", "state2.code", "offset")
        ),
    ]


# torch's, once a process, on making the first CSR, CSC, BSR or BSC tensor
@pytest.mark.filterwarnings("ignore:Sparse [A-Z]+ tensor support is in beta:UserWarning")
@pytest.mark.parametrize("builder,error,pattern", [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_a_clear_error(device, builder, error, pattern):
    inputs, call = builder(device)
    snap = snapshot(*(inputs if isinstance(inputs, tuple) else (inputs,))) if inputs is not None else []
    with pytest.raises(error, match=pattern):
        call()
    assert_unmodified(snap)


# Cases that need two devices: W and its state, or W and out, apart.
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU to put W and its state on different devices")
@pytest.mark.parametrize("field", ["absmax", "offset"])
def test_state_on_another_device_than_w(field):
    packed, state = make_weight((32, 64), device="cuda")
    setattr(state, field, getattr(state, field).reshape(-1).cpu())
    with pytest.raises(ValueError, match=f"quant_state.{field} is on cpu but W is on cuda"):
        nf4kernel.dequantize(packed, state)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU to put the offset on the CPU")
def test_a_zero_dimensional_offset_on_the_cpu_is_a_scalar_as_for_torch():
    packed, state = make_weight((32, 64), device="cuda")
    state.offset = state.offset.reshape(()).cpu()  # bitsandbytes' `absmax += offset` takes it too
    assert torch.equal(nf4kernel.dequantize(packed, state), bnb_dequantize(packed, state))


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU to put out on another device than W")
def test_out_on_another_device_than_w():
    packed, state = make_weight((32, 64), device="cuda")
    with pytest.raises(ValueError, match="out is on cpu but W is on cuda"):
        nf4kernel.dequantize(packed, state, out=torch.empty((32, 64), dtype=torch.bfloat16))


# --- out= follows torch's out= ops -----------------------------------------------------------------

OUT_SHAPE = (32, 64)


def _aliased(device, field):
    """A weight whose ``field`` tensor lies in one buffer with a bf16 out: out starts at the 16-byte
    boundary that holds the tensor's last byte, so the two share a few bytes (or all of the tensor)."""
    packed, state = _weight(device)
    tensor = packed if field == "W" else get_field(state, field)
    n_bytes = tensor.numel() * tensor.element_size()
    out_bytes = math.prod(OUT_SHAPE) * 2
    start = (n_bytes - 1) // 16 * 16
    buffer = torch.zeros(start + out_bytes, dtype=torch.uint8, device=device)
    buffer[:n_bytes] = tensor.reshape(-1).view(torch.uint8)
    moved = buffer[:n_bytes].view(tensor.dtype).view(tensor.shape)
    if field == "W":
        packed = moved
    else:
        set_field(state, field, moved)
    out = buffer[start:].view(torch.bfloat16).view(OUT_SHAPE)
    return packed, state, out


def _plan(packed, state):
    """A planned call first, so that the next one takes the launch cache's planned path."""
    nf4kernel.dequantize(packed, state)
    assert id(state) in launch_cache._PLANS


def _weight_for(device, planned):
    """A weight, planned already when ``planned``: the out= rules hold on both paths."""
    packed, state = _weight(device)
    if planned:
        _plan(packed, state)
    return packed, state


PLANNED = pytest.mark.parametrize("planned", [False, True], ids=["fresh", "planned"])


@PLANNED
@pytest.mark.parametrize("field", ["W", "absmax", "offset", "state2.absmax", "state2.code"])
def test_out_overlapping_an_input_is_refused(device, field, planned):
    packed, state, out = _aliased(device, field)
    if planned:
        _plan(packed, state)
    snap = snapshot(packed, state)
    name = "W" if field == "W" else f"quant_state.{field}"
    with pytest.raises(ValueError, match=f"out overlaps {re.escape(name)} in memory"):
        nf4kernel.dequantize(packed, state, out=out)
    assert_unmodified(snap)


@PLANNED
def test_out_next_to_an_input_is_accepted(device, planned):
    # Adjacent is not overlapping: out starts at the first byte after W.
    packed, state = _weight(device)
    expected = bnb_dequantize(packed, state)
    buffer = torch.zeros(packed.numel() + expected.numel() * 2, dtype=torch.uint8, device=device)
    buffer[: packed.numel()] = packed.reshape(-1)
    packed = buffer[: packed.numel()].view(packed.shape)
    out = buffer[packed.numel() :].view(torch.bfloat16).view(OUT_SHAPE)
    if planned:
        _plan(packed, state)
    assert nf4kernel.dequantize(packed, state, out=out) is out
    assert torch.equal(out, expected)


@PLANNED
def test_out_that_requires_grad_is_refused_while_autograd_records(device, planned):
    packed, state = _weight_for(device, planned)
    out = torch.zeros(OUT_SHAPE, dtype=torch.bfloat16, device=device, requires_grad=True)
    with pytest.raises(ValueError, match="out requires grad"):
        nf4kernel.dequantize(packed, state, out=out)
    assert not out.detach().any()  # nothing written
    with torch.no_grad():  # as torch's out= ops: allowed where autograd does not record
        assert nf4kernel.dequantize(packed, state, out=out) is out
    assert torch.equal(out.detach(), bnb_dequantize(packed, state))


@PLANNED
def test_writing_out_bumps_its_version(device, planned):
    packed, state = _weight_for(device, planned)
    out = torch.empty(OUT_SHAPE, dtype=torch.bfloat16, device=device)
    before = out._version
    nf4kernel.dequantize(packed, state, out=out)
    assert out._version > before


@PLANNED
def test_a_saved_tensor_overwritten_through_out_makes_backward_fail(device, planned):
    packed, state = _weight_for(device, planned)
    x = torch.randn(OUT_SHAPE, dtype=torch.bfloat16, device=device, requires_grad=True)
    w = torch.ones(OUT_SHAPE, dtype=torch.bfloat16, device=device)
    loss = (x * w).sum()  # autograd saves w for x's gradient
    nf4kernel.dequantize(packed, state, out=w)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()  # instead of a gradient computed from the overwritten w


@PLANNED
def test_an_inference_tensor_out_only_inside_inference_mode(device, planned):
    packed, state = _weight_for(device, planned)
    with torch.inference_mode():
        out = torch.zeros(OUT_SHAPE, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="out is an inference tensor"):
        nf4kernel.dequantize(packed, state, out=out)
    assert not out.any()
    with torch.inference_mode():
        assert nf4kernel.dequantize(packed, state, out=out) is out
    assert torch.equal(out, bnb_dequantize(packed, state))


# What else a tensor can be than plain (strided) memory: (make one from a strided tensor, read its values back).
OTHER_THAN_STRIDED = {
    **{layout: (make, lambda t: t.to_dense()) for layout, make in SPARSE_LAYOUTS.items()},
    "_mkldnn": (lambda t: t.to_mkldnn(), lambda t: t.to_dense()),
    "nested": (lambda t: torch.nested.nested_tensor(list(t)), lambda t: t.to_padded_tensor(0.0)),
    "jagged": (lambda t: torch.nested.nested_tensor(list(t), layout=torch.jagged), lambda t: t.to_padded_tensor(0.0)),
}


# torch's, once a process, on making the first CSR, CSC, BSR or BSC tensor
@pytest.mark.filterwarnings("ignore:Sparse [A-Z]+ tensor support is in beta:UserWarning")
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage:UserWarning")
@PLANNED
@pytest.mark.parametrize("kind", list(OTHER_THAN_STRIDED))
def test_out_of_any_layout_but_strided_is_refused_by_name(device, planned, kind):
    if kind == "_mkldnn" and (device != "cpu" or not torch.backends.mkldnn.is_available()):
        pytest.skip("MKL-DNN tensors are CPU tensors of a torch built with MKL-DNN")
    make, values_of = OTHER_THAN_STRIDED[kind]
    packed, state = _weight_for(device, planned)
    ones = torch.ones(OUT_SHAPE, dtype=torch.bfloat16, device=device)
    out = make(ones)
    named = "a nested tensor" if kind in ("nested", "jagged") else f"a torch.{kind} tensor"
    with pytest.raises(TypeError, match=f"out is {re.escape(named)}; pass a plain"):
        nf4kernel.dequantize(packed, state, out=out)
    assert torch.equal(values_of(out), ones)  # nothing written
