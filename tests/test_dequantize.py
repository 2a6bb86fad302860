"""nf4kernel.dequantize is bit-identical (torch.equal) to bitsandbytes.functional.dequantize_4bit."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from conftest import assert_unmodified, bnb_dequantize, make_weight, requires_gpu, snapshot

import nf4kernel

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
BLOCKSIZES = [32, 64, 128, 256, 512, 1024, 2048, 4096]
SHAPES = [
    (64, 96),  # a multiple of every small blocksize
    (33, 77),  # odd element count: the last byte holds one code
    (7, 300),  # not a multiple of the blocksize: a short last block
]


def check(packed, state, **kwargs):
    snap = snapshot(packed, state)
    expected = bnb_dequantize(packed, state)
    got = nf4kernel.dequantize(packed, state, **kwargs)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert torch.equal(got, expected)
    assert_unmodified(snap)
    return got


@pytest.mark.parametrize("blocksize", BLOCKSIZES)
@pytest.mark.parametrize("nested", [False, True], ids=["absmax-fp32", "absmax-nested"])
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_bitsandbytes(device, shape, dtype, quant_type, nested, blocksize):
    packed, state = make_weight(shape, dtype, quant_type=quant_type, nested=nested, blocksize=blocksize, device=device)
    check(packed, state)


@pytest.mark.parametrize("storage", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("nested", [False, True], ids=["absmax-fp32", "absmax-nested"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_float_quant_storage(device, dtype, nested, storage):
    # FSDP-style packing: the codes live in a float tensor; the kernel reads its bytes.
    packed, state = make_weight((64, 96), dtype, nested=nested, storage=storage, device=device)
    assert packed.dtype == storage
    check(packed, state)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_one_dimensional_and_three_dimensional_shapes(device, dtype):
    for shape in [(4099,), (3, 5, 64)]:
        packed, state = make_weight(shape, dtype, device=device)
        check(packed, state)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_params4bit_and_linear4bit(device, dtype):
    import bitsandbytes as bnb

    layer = bnb.nn.Linear4bit(96, 40, bias=False, compute_dtype=dtype, compress_statistics=True, quant_type="nf4")
    layer = layer.to(device)
    layer.weight.quant_state.dtype = dtype  # as Unsloth and the puzzle set it
    expected = bnb_dequantize(layer.weight, layer.weight.quant_state)
    assert torch.equal(nf4kernel.dequantize(layer.weight), expected)
    assert torch.equal(nf4kernel.dequantize(layer), expected)
    assert torch.equal(nf4kernel.dequantize(layer.weight, layer.weight.quant_state), expected)
    # Unsloth's positional signature: fast_dequantize(W, quant_state, out)
    out = torch.empty_like(expected)
    assert nf4kernel.fast_dequantize(layer.weight, layer.weight.quant_state, out) is out
    assert torch.equal(out, expected)


def _linear4bit(device, seed):
    import bitsandbytes as bnb

    torch.manual_seed(seed)
    layer = bnb.nn.Linear4bit(
        64, 48, bias=False, compute_dtype=torch.bfloat16, compress_statistics=True, quant_type="nf4"
    )
    layer = layer.to(device)
    layer.weight.quant_state.dtype = torch.bfloat16
    return layer


def test_a_modules_weight_is_what_getattr_gives(device):
    # The planned call reads a module's weight from its parameter table, past Module.__getattr__, only
    # where plain lookup could find nothing else: a class attribute or a __getattr__ of its own answers
    # first, as it does for getattr. Each call twice: the checked path, then the planned one.
    import bitsandbytes as bnb

    from nf4kernel.quant_state import module_weight

    other = _linear4bit(device, 1)

    class WeightProperty(bnb.nn.Linear4bit):
        @property
        def weight(self):  # a class attribute: lookup never reaches the parameter table
            return other.weight

    class OwnGetattr(bnb.nn.Linear4bit):
        def __getattr__(self, name):  # asked before the parameter table, as Module's own would be
            return other.weight if name == "weight" else super().__getattr__(name)

    for cls in (WeightProperty, OwnGetattr):
        layer = _linear4bit(device, 2)  # its own weight stays in its parameter table
        layer.__class__ = cls
        assert "weight" in layer._parameters
        assert module_weight(layer) is getattr(layer, "weight", None) is other.weight
        expected = bnb_dequantize(other.weight, other.weight.quant_state)
        for _ in range(2):
            assert torch.equal(nf4kernel.dequantize(layer), expected)

    plain = _linear4bit(device, 3)
    assert module_weight(plain) is plain.weight
    del plain.weight  # no parameter left: the module has no 4-bit weight
    assert module_weight(plain) is None
    with pytest.raises(TypeError, match="has no 4-bit weight tensor"):
        nf4kernel.dequantize(plain)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_transposed_packed_weight_returns_transposed(device, dtype):
    packed, state = make_weight((48, 80), dtype, device=device)
    expected = bnb_dequantize(packed.t(), state)
    assert expected.shape == (80, 48)
    got = check(packed.t(), state)
    assert got.shape == (80, 48)
    out = torch.empty((48, 80), dtype=dtype, device=device)
    got = nf4kernel.dequantize(packed.t(), state, out=out)
    assert got.data_ptr() == out.data_ptr() and torch.equal(got, expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_out_buffer_is_written_and_returned(device, dtype):
    packed, state = make_weight((40, 64), dtype, device=device)
    out = torch.full((40, 64), float("nan"), dtype=dtype, device=device)
    got = nf4kernel.dequantize(packed, state, out=out)
    assert got is out
    assert torch.equal(out, bnb_dequantize(packed, state))


def test_zero_element_weight_returns_empty(device):
    import bitsandbytes.functional as F

    for nested in (False, True):
        state = F.QuantState(
            absmax=torch.empty(0, dtype=torch.uint8 if nested else torch.float32, device=device),
            shape=torch.Size([0, 64]),
            dtype=torch.bfloat16,
            blocksize=64,
            code=F.get_4bit_type("nf4", device=device),
            quant_type="nf4",
            offset=torch.zeros((), device=device) if nested else None,
            state2=F.QuantState(
                absmax=torch.empty(0, device=device), code=F.create_dynamic_map().to(device), blocksize=256
            )
            if nested
            else None,
        )
        got = nf4kernel.dequantize(torch.empty((0, 1), dtype=torch.uint8, device=device), state)
        assert got.shape == (0, 64) and got.dtype == torch.bfloat16 and got.device.type == device


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape,dtype",
    [
        ((2048, 8192), torch.float16),
        ((1024, 4096), torch.bfloat16),
        ((4096, 14336), torch.bfloat16),
        ((14336, 4096), torch.bfloat16),
        ((8192, 2048), torch.float16),
    ],
    ids=str,
)
@pytest.mark.parametrize("nested", [True, False], ids=["absmax-nested", "absmax-fp32"])
def test_realistic_shapes_on_gpu(shape, dtype, nested):
    packed, state = make_weight(shape, dtype, nested=nested, device="cuda")
    check(packed, state)
    check(packed, state)  # the planned (cached) launch as well as the first


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("blocksize", BLOCKSIZES)
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
def test_realistic_blocksizes_on_gpu(quant_type, blocksize):
    for dtype in (torch.float16, torch.bfloat16):
        packed, state = make_weight((1024, 4096 + 96), dtype, quant_type=quant_type, blocksize=blocksize, device="cuda")
        check(packed, state)
        check(packed, state)


def test_reference_matches_bitsandbytes():
    # The readable pure-torch reference says the same thing as the oracle, on the same matrix.
    for dtype in DTYPES:
        for quant_type in ("nf4", "fp4"):
            for nested in (False, True):
                for blocksize in (32, 64, 4096):
                    for shape in SHAPES:
                        packed, state = make_weight(
                            shape, dtype, quant_type=quant_type, nested=nested, blocksize=blocksize
                        )
                        expected = bnb_dequantize(packed, state)
                        assert torch.equal(nf4kernel.dequantize_reference(packed, state), expected)


@pytest.mark.parametrize(
    "shape_of",
    [list, tuple, lambda s: tuple(np.int64(d) for d in s), lambda s: np.array(s, dtype=np.int32)],
    ids=["list", "tuple", "numpy-ints", "numpy-array"],
)
def test_a_shape_of_any_integer_sequence(device, shape_of):
    packed, state = make_weight((33, 77), torch.float16, device=device)
    state = copy.deepcopy(state)
    expected = bnb_dequantize(packed, state)
    state.shape = shape_of(state.shape)
    for _ in range(2):  # the checked call, then the planned one
        got = nf4kernel.dequantize(packed, state)
        assert got.shape == (33, 77) and torch.equal(got, expected)


# A packed W whose first dimension is 1 is the transposed packing whatever its number of dimensions,
# as bitsandbytes decides (quant_state.py's docstring): (weight shape, how W is reshaped).
FIRST_DIMENSION_ONE = [
    ((1, 2), lambda p: p),  # bitsandbytes' own [1, 1] packing of two elements
    ((1, 2), lambda p: p.reshape(1)),  # 1-D
    ((48, 80), lambda p: p.reshape(1, -1, 1)),  # 3-D
    ((2,), lambda p: p.reshape(1)),  # a 1-D result is its own transpose
]


@pytest.mark.parametrize(
    "shape,repack", FIRST_DIMENSION_ONE, ids=["2-D [1, 1]", "1-D [1]", "3-D [1, k, 1]", "1-D result"]
)
def test_a_packed_w_whose_first_dimension_is_one_is_transposed_as_bitsandbytes_does(device, shape, repack):
    packed, state = make_weight(shape, torch.float16, device=device)
    packed = repack(packed)
    expected = bnb_dequantize(packed, state)
    for _ in range(2):
        got = check(packed, state)
        assert got.shape == expected.shape


def _slice_of(packed, state, start: int, stop: int):
    """Elements [start, stop) of a flat nested/plain weight as a weight of their own (start is a
    multiple of blocksize * blocksize2, so every level's blocks line up)."""
    import bitsandbytes.functional as F

    blocksize = state.blocksize
    first, last = start // blocksize, -(-stop // blocksize)
    sub = copy.copy(state)
    sub.shape = torch.Size([stop - start])
    sub.absmax = state.absmax[first:last]
    if state.nested:
        size2 = state.state2.blocksize
        sub.state2 = F.QuantState(
            absmax=state.state2.absmax[first // size2 : -(-last // size2)],
            code=state.state2.code,
            blocksize=size2,
            dtype=state.state2.dtype,
        )
    return packed[start // 2 : -(-stop // 2)], sub


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("nested", [True, False], ids=["absmax-nested", "absmax-fp32"])
@pytest.mark.parametrize("n_elements", [2**31 - 1, 2**31 + 1], ids=["odd-below-2**31", "odd-above-2**31"])
def test_odd_counts_around_2_31_on_gpu(n_elements, nested):
    # (n + 1) // 2 in int32 wrapped for 2**31 - 1: every code read as zero. About 5 GiB of GPU memory.
    import bitsandbytes.functional as F

    generator = torch.Generator(device="cuda").manual_seed(0)
    n_blocks = -(-n_elements // 64)
    packed = torch.randint(0, 256, ((n_elements + 1) // 2, 1), dtype=torch.uint8, device="cuda", generator=generator)
    if nested:
        absmax = torch.randint(0, 256, (n_blocks,), dtype=torch.uint8, device="cuda", generator=generator)
        absmax2 = torch.rand(-(-n_blocks // 256), device="cuda", generator=generator)
        state2 = F.QuantState(absmax=absmax2, code=F.create_dynamic_map().cuda(), blocksize=256, dtype=torch.float32)
        offset = torch.tensor(0.01, device="cuda")
    else:
        absmax, state2, offset = torch.rand(n_blocks, device="cuda", generator=generator), None, None
    state = F.QuantState(
        absmax=absmax,
        shape=torch.Size([n_elements]),
        dtype=torch.float16,
        blocksize=64,
        code=F.get_4bit_type("nf4", device="cuda"),
        quant_type="nf4",
        offset=offset,
        state2=state2,
    )
    for _ in range(2):  # the checked launch, then the planned one
        got = nf4kernel.dequantize(packed, state)
        align = 64 * 256
        for start, stop in [(0, 1 << 20), ((n_elements - (1 << 20)) // align * align, n_elements)]:
            assert torch.equal(got[start:stop], bnb_dequantize(*_slice_of(packed, state, start, stop)))
        del got
