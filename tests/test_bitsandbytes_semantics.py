"""bitsandbytes' semantics on every state a user can hold, on the first (checked) call and on a
planned one, and no input that takes the process down or returns memory nobody wrote.

Each class of input once gave a silent wrong result, a crash or a refusal of a state bitsandbytes
dequantizes; each test here failed before the change that fixed it."""

from __future__ import annotations

import copy
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
from conftest import ROOT, assert_unmodified, bnb_dequantize, child_env, make_weight, snapshot
from torch.utils._pytree import tree_map

import nf4kernel
from nf4kernel import launch_cache

PLANNED = pytest.mark.parametrize("planned", [False, True], ids=["first-call", "planned"])


def _weight(device, shape=(32, 64), **kwargs):
    packed, state = make_weight(shape, torch.bfloat16, device=device, **kwargs)
    return packed, copy.deepcopy(state)


def _planned_if(planned, packed, state):
    """A plan for this state first, made from bitsandbytes' own state, when ``planned``."""
    if planned:
        nf4kernel.dequantize(packed, state)
        assert id(state) in launch_cache._PLANS


def _exact(packed, state, **kwargs):
    snap = snapshot(packed, state)
    expected = bnb_dequantize(packed, state)
    got = nf4kernel.dequantize(packed, state, **kwargs)
    assert got.dtype == expected.dtype and torch.equal(got, expected)
    assert_unmodified(snap)
    return got


# --- The codebook comes from quant_type, as bitsandbytes decodes -----------------------------------


def test_the_codebooks_are_bitsandbytes_own():
    import bitsandbytes.functional as F

    from nf4kernel.quant_state import CODEBOOKS

    for quant_type, values in CODEBOOKS.items():
        assert torch.equal(torch.tensor(values, dtype=torch.float32), F.get_4bit_type(quant_type, device="cpu"))


@PLANNED
@pytest.mark.parametrize(
    "code",
    [
        lambda s: s.code,  # a state relabelled fp4 that still carries the NF4 code
        lambda s: None,
        lambda s: s.code.half(),
        lambda s: s.code[:15].clone(),
        lambda s: torch.cat([s.code, s.code[:1]]),
    ],
    ids=["nf4-code-kept", "none", "fp16", "15-entries", "17-entries"],
)
def test_a_state_relabelled_fp4_decodes_as_fp4_whatever_its_code(device, planned, code):
    packed, state = _weight(device)
    _planned_if(planned, packed, state)
    state.quant_type, state.code = "fp4", code(state)
    _exact(packed, state)


def test_a_plan_never_reads_the_states_code(device):
    packed, state = _weight(device)
    expected = _exact(packed, state)
    state.code = state.code * 0 + 7.0  # garbage, in place of the tensor the plan was made with
    assert torch.equal(nf4kernel.dequantize(packed, state), expected)


# --- A plan outlives no in-place change of a 0-d blocksize -----------------------------------------


@pytest.mark.parametrize("field", ["blocksize", "state2.blocksize"])
@pytest.mark.parametrize("kind", [np.array, torch.tensor], ids=["numpy", "torch"])
def test_a_zero_dimensional_blocksize_changed_in_place_is_seen(device, field, kind):
    packed, state = _weight(device, shape=(128, 256))
    holder = state.state2 if field.startswith("state2") else state
    name = field.split(".")[-1]
    setattr(holder, name, kind(getattr(holder, name)))
    _exact(packed, state)  # accepted, and planned
    fresh = copy.deepcopy(state)
    for s in (state, fresh):
        target = s.state2 if field.startswith("state2") else s
        getattr(target, name)[...] = 32
        with pytest.raises(ValueError, match="values but the weight needs"):
            nf4kernel.dequantize(packed, s)


# --- torch.jit.trace records the op -----------------------------------------------------------------


@PLANNED
@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated:DeprecationWarning")  # what users still call
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_jit_trace_records_the_real_op(device, planned):
    packed, state = _weight(device)
    _planned_if(planned, packed, state)
    traced = torch.jit.trace(lambda p: nf4kernel.dequantize(p, state), packed, check_trace=False)
    assert "nf4kernel::dequantize_4bit" in str(traced.graph)
    other, _ = _weight(device, seed=1)  # another weight of the same shape through the traced graph
    assert torch.equal(traced(other), bnb_dequantize(other, state))


# --- Values, not memory: torch's negative bit --------------------------------------------------------


def _negative_view_of(tensor):
    """A view with torch's negative bit whose values are ``tensor``'s: ``z.conj().imag`` of a complex
    ``z`` whose imaginary part holds ``-tensor`` (not contiguous where it has more than one value)."""
    z = torch.complex(torch.zeros_like(tensor), -tensor)
    view = z.conj().imag
    assert view.is_neg() and torch.equal(view, tensor)
    return view


@PLANNED
@pytest.mark.parametrize("field", ["absmax", "offset", "state2.absmax"])
def test_a_state_tensor_with_the_negative_bit_is_read_for_its_values(device, planned, field):
    packed, state = _weight(device, nested=field != "absmax")
    _planned_if(planned, packed, state)
    holder = state.state2 if field.startswith("state2") else state
    name = field.split(".")[-1]
    setattr(holder, name, _negative_view_of(getattr(holder, name)))
    _exact(packed, state)


def test_a_negative_view_at_the_planned_address_is_not_read_raw(device):
    packed, state = _weight(device, nested=False)
    negated = (-state.absmax).contiguous()  # memory that holds -absmax...
    state.absmax = torch._neg_view(negated)  # ...read as absmax: planned on the plain tensor first
    plain = copy.deepcopy(state)
    plain.absmax = negated  # same address, dtype, length: only the bit differs
    nf4kernel.dequantize(packed, plain)
    _exact(packed, state)


@PLANNED
def test_out_with_the_negative_bit_gets_the_values(device, planned):
    packed, state = _weight(device)
    _planned_if(planned, packed, state)
    buffer = torch.zeros(state.shape, dtype=torch.bfloat16, device=device)
    out = torch._neg_view(buffer)
    assert nf4kernel.dequantize(packed, state, out=out) is out
    assert torch.equal(out, bnb_dequantize(packed, state)) and torch.equal(buffer, -out)


# --- Nested arithmetic as bitsandbytes does it: state2.dtype, offsets --------------------------------


@PLANNED
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_second_level_dtype_rounds_the_absmax_as_bitsandbytes(device, planned, dtype):
    packed, state = _weight(device, shape=(64, 2048))
    _planned_if(planned, packed, state)
    state.state2.dtype = dtype
    got = _exact(packed, state)
    state.state2.dtype = torch.float32
    assert not torch.equal(got, bnb_dequantize(packed, state))  # the rounding is really there


@PLANNED
@pytest.mark.parametrize(
    "offset",
    [
        lambda o: float(o),
        lambda o: int(o * 0) + 1,
        lambda o: o.double().reshape(()),
        lambda o: o.double().reshape(1),
        lambda o: o.bfloat16().reshape(()),
        lambda o: o.reshape(1),
    ],
    ids=["python-float", "python-int", "float64-0d", "float64-1d", "bfloat16-0d", "float32-1d"],
)
def test_every_offset_bitsandbytes_adds(device, planned, offset):
    packed, state = _weight(device)
    _planned_if(planned, packed, state)
    state.offset = offset(state.offset)
    _exact(packed, state)


def test_states_made_under_a_float64_default_dtype(device):
    import bitsandbytes as bnb
    from bitsandbytes.functional import QuantState

    packed, state = _weight(device)
    as_dict = state.as_dict(packed=True)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        restored = QuantState.from_dict(as_dict, device=torch.device(device))
        param = bnb.nn.Params4bit.from_prequantized(packed, as_dict, device=device)
    finally:
        torch.set_default_dtype(previous)
    assert restored.offset.dtype == torch.float64  # what these make there
    _exact(packed, restored)
    _exact(param, param.quant_state)


# --- Unsloth's call forms ---------------------------------------------------------------------------


def test_unsloth_returns_a_weight_without_a_quant_state_as_it_is(device):
    plain = torch.randn(8, 8, dtype=torch.bfloat16, device=device)  # a 16-bit base layer
    assert nf4kernel.fast_dequantize(plain, None) is plain
    assert nf4kernel.fast_dequantize(plain) is plain


@PLANNED
def test_unsloths_lora_call_with_the_global_buffer(device, planned):
    packed, state = _weight(device)
    _planned_if(planned, packed, state)
    got = nf4kernel.fast_dequantize(packed.t(), state, use_global_buffer=True)  # as matmul_lora calls it
    assert torch.equal(got, bnb_dequantize(packed.t(), state))


def test_unsloths_dtype_keyword_leaves_a_4bit_weight_in_its_own_dtype(device):
    """Unsloth 2026.10.9's LoRA backward passes its activations' dtype; only its FP8 weights follow it."""
    packed, state = _weight(device)
    other = torch.float16 if state.dtype != torch.float16 else torch.bfloat16
    got = nf4kernel.fast_dequantize(packed.t(), state, dtype=other)
    assert got.dtype == state.dtype and torch.equal(got, bnb_dequantize(packed.t(), state))
    with pytest.raises(TypeError, match=r"dtype must be a torch\.dtype or None, got str"):
        nf4kernel.fast_dequantize(packed, state, dtype="bfloat16")


# --- Refused by name, on every call -----------------------------------------------------------------


@PLANNED
def test_out_that_is_not_a_tensor(device, planned):
    packed, state = _weight(device)
    _planned_if(planned, packed, state)
    with pytest.raises(TypeError, match="out must be a tensor, got list"):
        nf4kernel.dequantize(packed, state, out=[0.0])


NESTED_CALLS = {
    "W": "nf4kernel.dequantize(torch.nested.nested_tensor([packed.reshape(-1)[:10], packed.reshape(-1)[:20]]), state)",
    "state2.absmax": (
        "state.state2.absmax = torch.nested.nested_tensor([state.state2.absmax[:1], state.state2.absmax[:1]]); "
        "nf4kernel.dequantize(packed, state)"
    ),
}


@PLANNED
@pytest.mark.parametrize("field", sorted(NESTED_CALLS))
def test_a_nested_tensor_is_refused_and_never_aborts_the_process(planned, field):
    """In a process of its own: the abort this once was takes the whole process down."""
    script = f"""
import copy, sys, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, {str(ROOT / "tests")!r})
import torch
from conftest import make_weight
import nf4kernel
packed, state = make_weight((32, 64))
state = copy.deepcopy(state)
if {planned}:
    nf4kernel.dequantize(packed, state)
try:
    {NESTED_CALLS[field]}
except TypeError as error:
    print("TypeError:", error)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=child_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"TypeError: nf4kernel: {'W' if field == 'W' else 'quant_state.' + field} is a nested tensor" in done.stdout


# torch's, once a process, on making the first CSR, CSC, BSR or BSC tensor
@pytest.mark.filterwarnings("ignore:Sparse [A-Z]+ tensor support is in beta:UserWarning")
@PLANNED
@pytest.mark.parametrize("layout", ["sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc"])
def test_a_sparse_w_is_refused_by_name(device, planned, layout):
    packed, state = _weight(device)
    _planned_if(planned, packed, state)
    rows = packed.reshape(32, -1)
    blocks = (1, 1) if layout in ("sparse_bsr", "sparse_bsc") else None  # the blocked layouts need a block size
    sparse = rows.to_sparse(layout=getattr(torch, layout), blocksize=blocks)
    with pytest.raises(TypeError, match=rf"W is a torch\.{layout} tensor"):
        nf4kernel.dequantize(sparse, state)


# --- What torch's ops compute: wrapper subclasses, vmap ------------------------------------------------


class Wrapped(torch.Tensor):
    """A ``__torch_dispatch__`` wrapper subclass with no memory of its own, as tensor-parallel and
    tracing libraries make them: every op runs on the tensor it wraps."""

    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(
            cls, inner.shape, strides=inner.stride(), dtype=inner.dtype, device=inner.device
        )

    def __init__(self, inner):
        self.inner = inner

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def unwrap(x):
            return x.inner if isinstance(x, Wrapped) else x

        return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))


@PLANNED
@pytest.mark.parametrize("field", ["W", "absmax"])
def test_a_wrapper_subclass_is_computed_by_torchs_ops(device, planned, field):
    packed, state = _weight(device)
    _planned_if(planned, packed, state)
    expected = bnb_dequantize(packed, state)
    if field == "W":
        packed = Wrapped(packed)
    else:
        state.absmax = Wrapped(state.absmax)
    got = nf4kernel.dequantize(packed, state)
    assert torch.equal(got, expected)
    out = torch.empty_like(expected)
    assert nf4kernel.dequantize(packed, state, out=out) is out and torch.equal(out, expected)


@PLANNED
def test_vmap_over_packed_weights(device, planned):
    packed, state = _weight(device)
    other, _ = _weight(device, seed=1)
    _planned_if(planned, packed, state)
    got = torch.vmap(lambda p: nf4kernel.dequantize(p, state))(torch.stack([packed, other]))
    assert torch.equal(got, torch.stack([bnb_dequantize(packed, state), bnb_dequantize(other, state)]))


# --- Threads: a user's own interpreted Triton kernel --------------------------------------------------


@pytest.mark.interpreter
def test_a_users_interpreted_kernel_beside_ours_holding_the_lock(fast_thread_switching):
    """Triton's CPU interpreter keeps module-global state: two interpreted launches at once run each
    other's programs. nf4kernel's own launches hold ``nf4kernel.kernel.TRITON_LOCK``; a user's
    interpreted kernel that holds it too runs beside them, every result exact (README, threads)."""
    import triton
    import triton.language as tl

    from nf4kernel import kernel as K

    @triton.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)

    mine = K.interpreted(add_one)
    packed, state = _weight("cpu")
    expected = bnb_dequantize(packed, state)
    failures = []

    def users_thread():
        for _ in range(20):
            x = torch.zeros(4096)
            with K.TRITON_LOCK:
                mine[(16,)](x, x.numel(), BLOCK=256)
            if not torch.equal(x, torch.ones(4096)):
                failures.append("user's kernel")

    thread = threading.Thread(target=users_thread)
    thread.start()
    for _ in range(20):
        if not torch.equal(nf4kernel.dequantize(packed, state), expected):
            failures.append("nf4kernel")
    thread.join()
    assert failures == []
