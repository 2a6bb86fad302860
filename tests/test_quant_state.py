"""Bad input gets a clear exception that names the problem, and nothing passed in is modified."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import HAS_CUDA, assert_unmodified, make_weight, snapshot

import nf4kernel


def _weight(device, nested=True):
    packed, state = make_weight((32, 64), torch.bfloat16, nested=nested, device=device)
    return packed, copy.deepcopy(state)


def _replace(state, **fields):
    for name, value in fields.items():
        setattr(state, name, value)
    return state


def _call(packed, state, **kwargs):
    return lambda: nf4kernel.dequantize(packed, state, **kwargs)


# (case id, builder(device) -> (callable, objects to check unmodified), exception, message pattern)
BAD_INPUTS = [
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
        "codebook of the wrong size",
        lambda d: ((w := _weight(d)), _call(w[0], _replace(w[1], code=w[1].code[:8].clone()))),
        ValueError,
        "quant_state.code has 8 values",
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
        "nested offset is not a tensor",
        lambda d: ((w := _weight(d)), _call(w[0], _replace(w[1], offset=0.5))),
        TypeError,
        "quant_state.offset must be a tensor",
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
@pytest.mark.parametrize("field", ["absmax", "code", "offset"])
def test_state_on_another_device_than_w(field):
    packed, state = make_weight((32, 64), device="cuda")
    setattr(state, field, getattr(state, field).cpu())
    with pytest.raises(ValueError, match=f"quant_state.{field} is on cpu but W is on cuda"):
        nf4kernel.dequantize(packed, state)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU to put out on another device than W")
def test_out_on_another_device_than_w():
    packed, state = make_weight((32, 64), device="cuda")
    with pytest.raises(ValueError, match="out is on cpu but W is on cuda"):
        nf4kernel.dequantize(packed, state, out=torch.empty((32, 64), dtype=torch.bfloat16))
