"""The launch cache: repeated calls skip the checks, and a changed, moved or freed weight is never
served a stale plan nor kept alive by one. One kernel launch per call, whatever the format."""

from __future__ import annotations

import contextlib
import copy
import gc
import re
import subprocess
import sys
import threading
import weakref
from pathlib import Path

import pytest
import torch
from conftest import HAS_CUDA, bnb_dequantize, child_env, get_field, make_weight, set_field

import nf4kernel
from nf4kernel import _triton_compat, inputs, launch, launch_cache
from nf4kernel import kernel as K


def _counted(monkeypatch, module, name: str) -> list:
    """The arguments of every call of ``module.<name>`` from now on (until the test ends)."""
    calls = []
    original = getattr(module, name)

    def counting(*args):
        calls.append(args)
        return original(*args)

    monkeypatch.setattr(module, name, counting)
    return calls


@pytest.fixture
def checked_calls(monkeypatch):
    """How many calls took the checked (planning) path."""
    return _counted(monkeypatch, inputs, "read")  # the checked path's state reader


@pytest.fixture(params=["quick key", "whole key"])
def keys(request, monkeypatch):
    """Plans made with the quick key (dynamo's tensor check, where torch has it), or with whole keys
    only (a torch without it): every case below must be seen either way."""
    if request.param == "whole key":
        monkeypatch.setattr(_triton_compat, "DISABLED", {"tensor_guards"})
    elif _triton_compat.tensor_guards() is None:
        pytest.skip("this torch has no torch._C._dynamo.guards.TensorGuards: plans compare whole keys")
    return request.param


@pytest.fixture
def whole_keys(monkeypatch):
    """How many times the whole key was read: once where a plan is made, then by a planned call
    whose quick key is missing or fails."""
    return _counted(monkeypatch, launch_cache, "key_of")


def test_repeated_calls_reuse_the_plan(device, checked_calls):
    packed, state = make_weight((64, 128), device=device)
    expected = bnb_dequantize(packed, state)
    for _ in range(3):
        assert torch.equal(nf4kernel.dequantize(packed, state), expected)
    assert len(checked_calls) == 1


def _swap(state, other, fields):
    for field in fields:
        set_field(state, field, get_field(other, field))


@pytest.mark.parametrize("fields", [["absmax"], ["state2.absmax"], ["offset"], ["absmax", "state2.absmax", "offset"]])
def test_replaced_state_tensors_are_seen(device, checked_calls, fields, keys):
    packed, state = make_weight((64, 128), device=device, seed=1)
    state = copy.deepcopy(state)
    nf4kernel.dequantize(packed, state)
    _, other = make_weight((64, 128), device=device, seed=2)
    _swap(state, other, fields)
    assert torch.equal(nf4kernel.dequantize(packed, state), bnb_dequantize(packed, state))
    assert len(checked_calls) == 2


def test_replaced_packed_weight_is_seen(device, checked_calls, keys):
    import bitsandbytes as bnb

    layer = bnb.nn.Linear4bit(128, 64, bias=False, compress_statistics=True, quant_type="nf4").to(device)
    nf4kernel.dequantize(layer)
    other, _ = make_weight((64, 128), device=device, seed=3)
    layer.weight.data = other  # same Params4bit and QuantState objects, new storage
    expected = bnb_dequantize(layer.weight, layer.weight.quant_state)
    assert torch.equal(nf4kernel.dequantize(layer), expected)
    assert len(checked_calls) == 2


def test_in_place_update_of_the_weight_is_seen(device, checked_calls, keys):
    packed, state = make_weight((64, 128), device=device, seed=4)
    state = copy.deepcopy(state)
    nf4kernel.dequantize(packed, state)
    new_packed, new_state = make_weight((64, 128), device=device, seed=5)
    packed.copy_(new_packed)
    state.absmax.copy_(new_state.absmax)
    state.state2.absmax.copy_(new_state.state2.absmax)
    state.offset.copy_(new_state.offset)
    assert torch.equal(nf4kernel.dequantize(packed, state), bnb_dequantize(new_packed, new_state))
    assert len(checked_calls) == 1  # same tensors: the plan still holds and reads the new contents


def test_changed_output_dtype_is_seen(device, keys):
    packed, state = make_weight((64, 128), torch.float16, device=device)
    state = copy.deepcopy(state)
    assert nf4kernel.dequantize(packed, state).dtype == torch.float16
    state.dtype = torch.bfloat16  # Unsloth and the puzzle set the state's dtype after quantizing
    got = nf4kernel.dequantize(packed, state)
    assert got.dtype == torch.bfloat16 and torch.equal(got, bnb_dequantize(packed, state))


def test_freed_weight_leaves_no_plan_and_is_not_pinned(device):
    packed, state = make_weight((64, 128), device=device)
    nf4kernel.dequantize(packed, state)
    state_id = id(state)
    assert state_id in launch_cache._PLANS
    refs = [weakref.ref(packed), weakref.ref(state), weakref.ref(state.absmax), weakref.ref(state.state2.absmax)]
    del packed, state
    gc.collect()
    assert [ref() for ref in refs] == [None] * len(refs)
    assert state_id not in launch_cache._PLANS


def test_states_that_reuse_an_id_get_their_own_plans(device):
    # CPython hands a freed object's id to the next one: a plan must never outlive its state.
    for seed, (shape, dtype) in enumerate([((64, 128), torch.float16), ((32, 96), torch.bfloat16)] * 4):
        packed, state = make_weight(shape, dtype, device=device, seed=seed)
        assert torch.equal(nf4kernel.dequantize(packed, state), bnb_dequantize(packed, state))
        del packed, state
        gc.collect()


def test_misaligned_out_after_a_plan(device):
    packed, state = make_weight((64, 128), torch.bfloat16, device=device)
    expected = bnb_dequantize(packed, state)
    nf4kernel.dequantize(packed, state)
    buffer = torch.empty(64 * 128 + 1, dtype=torch.bfloat16, device=device)
    out = buffer[1:].view(64, 128)  # 2 bytes past a 16-byte boundary
    assert nf4kernel.dequantize(packed, state, out=out) is out
    assert torch.equal(out, expected)


@pytest.fixture
def launches(monkeypatch):
    """Counts kernel launches: interpreter grid runs on the CPU, CUDA kernels on the GPU."""
    count = []
    run = K.interpreted_kernel.run

    def counting_run(*args, **kwargs):
        count.append(1)
        return run(*args, **kwargs)

    monkeypatch.setattr(K.interpreted_kernel, "run", counting_run)
    return count


@pytest.mark.parametrize("nested", [False, True], ids=["absmax-fp32", "absmax-nested"])
def test_one_launch_per_call_in_the_interpreter(launches, nested):
    packed, state = make_weight((64, 128), nested=nested)
    for calls in (1, 2, 3):
        nf4kernel.dequantize(packed, state)
        assert len(launches) == calls


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU to count CUDA kernel launches")
@pytest.mark.parametrize("nested", [False, True], ids=["absmax-fp32", "absmax-nested"])
def test_one_cuda_kernel_per_call(nested, fresh_triton_cache):
    from torch.profiler import ProfilerActivity, profile

    packed, state = make_weight((1024, 4096), nested=nested, device="cuda")
    out = torch.empty(state.shape, dtype=state.dtype, device="cuda")
    nf4kernel.dequantize(packed, state, out=out)  # compiles and plans
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            nf4kernel.dequantize(packed, state, out=out)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len(kernels) == 3, [e.name for e in kernels]
    assert all("dequantize_4bit_kernel" in e.name for e in kernels)


def test_pdl_from_sm_90_on_unless_turned_off(monkeypatch):
    assert [K.pdl_for(arch) for arch in (75, 80, 86, 89, 90, 100, 120)] == [False] * 4 + [True] * 3
    monkeypatch.setenv(K.PDL_ENV, "0")
    assert not K.pdl_for(90)
    monkeypatch.setenv(K.PDL_ENV, "1")
    assert K.pdl_for(90)
    from nf4kernel.quant_state import read

    tensors, layout = read(*make_weight((64, 128)))
    out = torch.empty(layout.shape, dtype=layout.dtype)
    for pdl in (False, True):
        _, _, constexprs, options = launch.arguments(tensors, layout, out, False, pdl)
        assert constexprs["PDL"] == (K.PDL_MODE if pdl else 0)
        assert options.get("launch_pdl", False) is pdl


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU for programmatic dependent launch")
@pytest.mark.parametrize("pdl", ["0", "1"], ids=["pdl-off", "pdl-default"])
def test_back_to_back_launches_read_what_the_kernel_before_wrote(monkeypatch, pdl):
    # Under PDL a launch may be scheduled before the kernel before it is done: each program waits for
    # it before touching memory. Here torch kernels rewrite the weight and our output between our
    # launches, with no synchronize, and every result must be the weight's as it was at that point.
    monkeypatch.setenv(K.PDL_ENV, pdl)
    launch.pdl_on.cache_clear()
    try:
        weights = [make_weight((4096, 4096), torch.bfloat16, device="cuda", seed=s) for s in range(3)]
        packed = weights[0][0].clone()
        state = copy.deepcopy(weights[0][1])
        expected = [bnb_dequantize(p, st) for p, st in weights]
        out = torch.empty_like(expected[0])
        nf4kernel.dequantize(packed, state, out=out)
        plan = launch_cache._PLANS[id(state)]
        major, minor = torch.cuda.get_device_capability()
        uses_pdl = pdl == "1" and 10 * major + minor >= K.PDL_MIN_ARCH
        results = []
        torch.cuda.synchronize()
        for i in range(30):
            p, st = weights[i % 3]
            packed.copy_(p)  # a torch kernel writes what ours reads next
            state.absmax.copy_(st.absmax)
            state.state2.absmax.copy_(st.state2.absmax)
            state.offset.copy_(st.offset)
            out.fill_(float("nan"))  # and what ours writes next
            results.append(nf4kernel.dequantize(packed, state, out=out).clone())
            results.append(nf4kernel.dequantize(packed, state))
        torch.cuda.synchronize()
        assert launch_cache._PLANS[id(state)] is plan  # every call after the first was planned
        assert launch.pdl_on(torch.cuda.current_device()) is uses_pdl
        for i in range(30):
            assert torch.equal(results[2 * i], expected[i % 3]) and torch.equal(results[2 * i + 1], expected[i % 3])
    finally:
        launch.pdl_on.cache_clear()


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU for the compiled launch paths")
@pytest.mark.parametrize("path", ["c-launcher", "compiled-run", "triton-jit"])
def test_every_planned_launch_path_is_exact(monkeypatch, path):
    # The direct C call (Triton 3.6), CompiledKernel.run (other Triton versions) and Triton's own
    # launch (direct launch refused, or launch hooks set) must all give the same bits.
    monkeypatch.setattr(_triton_compat, "_C_LAUNCH_LAYOUT", path == "c-launcher")
    monkeypatch.setattr(_triton_compat, "DISABLED", set() if path != "triton-jit" else {"direct_launch"})
    for nested in (False, True):
        packed, state = make_weight((1024, 4096 + 32), nested=nested, device="cuda")
        expected = bnb_dequantize(packed, state)
        for _ in range(3):
            out = torch.full_like(expected, float("nan"))
            assert nf4kernel.dequantize(packed, state, out=out) is out
            assert torch.equal(out, expected)
        plan = launch_cache._PLANS[id(state)]
        assert (plan.fast is None) == (path == "triton-jit")


@pytest.mark.parametrize("inductor", [True, False], ids=["inductor-allocator", "no-inductor-allocator"])
def test_a_cuda_plan_allocates_with_inductors_allocator_where_torch_has_it(monkeypatch, inductor):
    # Only the plan's choice (nothing is allocated, so no GPU needed): Inductor's allocator on the
    # current device where this torch has it, torch.empty_strided for the plan's device otherwise;
    # a CPU plan always takes torch.empty_strided.
    from nf4kernel.quant_state import Layout

    def fake(*args):  # stands in for torch._C._dynamo.guards._empty_strided_cuda
        raise AssertionError("nothing is allocated here")

    monkeypatch.setattr(_triton_compat, "_empty_strided_cuda", fake if inductor else None)
    layout = Layout(torch.Size((48, 64)), torch.bfloat16, 64, 256, 48 * 64, 48, False)
    cuda = launch_cache.make_plan(None, (), layout, torch.device("cuda", 0), None, (), ())
    assert cuda.allocate.func is torch.empty_strided and cuda.allocate.keywords["device"] == torch.device("cuda", 0)
    if inductor:
        assert cuda.allocate_here.func is fake
        assert cuda.allocate_here.args == ((48, 64), (64, 1), torch.bfloat16)
    else:
        assert cuda.allocate_here is cuda.allocate
    cpu = launch_cache.make_plan(None, (), layout, torch.device("cpu"), None, (), ())
    assert cpu.allocate_here is cpu.allocate


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU for the direct launch's own allocation")
@pytest.mark.parametrize("mode", ["grad", "no_grad", "inference_mode"])
def test_a_planned_output_is_the_tensor_torch_empty_would_give(mode):
    # The direct launch allocates with Inductor's _empty_strided_cuda (no argument parser, no
    # dispatcher): the tensor must be what torch.empty_strided gives in the same mode.
    packed, state = make_weight((1024, 4096 + 32), device="cuda")
    expected = bnb_dequantize(packed, state)
    nf4kernel.dequantize(packed, state)
    plan = launch_cache._PLANS[id(state)]
    allocations = []
    allocate_here = plan.allocate_here
    launch_cache._PLANS[id(state)] = plan._replace(allocate_here=lambda: allocations.append(1) or allocate_here())
    context = {"grad": contextlib.nullcontext, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}[mode]
    with context():
        got = nf4kernel.dequantize(packed, state)
        reference = torch.empty_strided(expected.shape, expected.stride(), dtype=expected.dtype, device="cuda")
    assert allocations == [1]
    assert torch.equal(got, expected)
    for read in ("shape", "dtype", "device", "requires_grad", "is_leaf", "grad_fn"):
        assert getattr(got, read) == getattr(reference, read), read
    assert got.stride() == reference.stride() and got.is_contiguous()
    assert got.is_inference() == reference.is_inference() == (mode == "inference_mode")
    assert got.untyped_storage().nbytes() == reference.untyped_storage().nbytes()


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU to move a weight between devices")
def test_weight_moved_between_devices(checked_calls):
    packed, state = make_weight((64, 128), device="cuda")
    state = copy.deepcopy(state)
    expected = bnb_dequantize(packed, state).cpu()
    nf4kernel.dequantize(packed, state)
    state.to("cpu")  # QuantState.to moves its tensors in place: same object, new pointers
    got = nf4kernel.dequantize(packed.cpu(), state)
    assert got.device.type == "cpu" and torch.equal(got, expected)
    state.to("cuda")
    got = nf4kernel.dequantize(packed, state)
    assert got.device.type == "cuda" and torch.equal(got.cpu(), expected)
    assert len(checked_calls) == 3


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU for Triton's launch hooks")
def test_triton_launch_hooks_still_see_planned_launches():
    import triton

    seen = []
    hook = triton.knobs.runtime.launch_enter_hook
    packed, state = make_weight((64, 128), device="cuda")
    nf4kernel.dequantize(packed, state)
    hook.add(seen.append)
    try:
        nf4kernel.dequantize(packed, state)
        nf4kernel.dequantize(packed, state)
    finally:
        hook.remove(seen.append)
    assert len(seen) == 2


# Run in a child Python: every private handle off before nf4kernel's API is imported (some are read
# then), three calls of one weight (checked, then planned), each result saved for the parent to judge.
WITHOUT_HANDLES = """
import sys, torch
sys.path.insert(0, sys.argv[1])
from conftest import make_weight
from nf4kernel import _triton_compat
_triton_compat.disable(*_triton_compat.HANDLES)
import nf4kernel
from nf4kernel import launch_cache
packed, state = make_weight((32, 64), nested={nested})
results = [nf4kernel.dequantize(packed, state) for _ in range(3)]
plan = launch_cache._PLANS[id(state)]
assert plan.check is None and plan.fast is None, plan
torch.save(results, sys.argv[2])
"""


@pytest.mark.parametrize("nested", [False, True], ids=["absmax-fp32", "absmax-nested"])
def test_every_private_handle_can_be_turned_off_and_calls_stay_exact(tmp_path, nested):
    # _triton_compat's handles are speed-ups only: each one's refusal path gives the same bits.
    with pytest.raises(ValueError, match="no such handle"):
        _triton_compat.disable("no_such_handle")
    assert set(_triton_compat.available()) == set(_triton_compat.HANDLES)
    saved = tmp_path / "results.pt"
    script = WITHOUT_HANDLES.format(nested=nested)
    command = [sys.executable, "-c", script, str(Path(__file__).parent), str(saved)]
    done = subprocess.run(command, capture_output=True, text=True, env=child_env(), timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = bnb_dequantize(*make_weight((32, 64), nested=nested))
    assert all(torch.equal(got, expected) for got in torch.load(saved))


# --- A plan is valid only for exactly what the checks accepted --------------------------------------


def _strided(tensor, stride=2):
    """A view at the same address, same length and dtype, every other element: not contiguous."""
    buffer = torch.zeros(tensor.numel() * stride, dtype=tensor.dtype, device=tensor.device)
    buffer[: tensor.numel()] = tensor.reshape(-1)
    return buffer[: tensor.numel()], buffer.as_strided(
        tensor.shape if tensor.dim() == 1 else (tensor.numel(),), (stride,)
    )


def _first_size(value):
    def change(shape):
        shape[0] = value  # in place: the list the plan was made from
        return shape

    return change


# (case, nested, field, what it becomes, exception, message): views at the same data pointer with
# another dtype, length or layout, and a list shape changed in place. A fresh state that looks the
# same gets the same exception (checked below too).
FOOLING = [
    ("sliced absmax", False, "absmax", lambda t: t[:-1], ValueError, "absmax has 511 values"),
    ("absmax as int32", False, "absmax", lambda t: t.view(torch.int32), ValueError, "absmax must be torch.float32"),
    ("nested absmax as int8", True, "absmax", lambda t: t.view(torch.int8), ValueError, "absmax must be torch.uint8"),
    ("absmax as bytes", False, "absmax", lambda t: t.view(torch.uint8), ValueError, "absmax must be torch.float32"),
    ("transposed absmax", False, "absmax", lambda t: t.view(16, 32).t(), ValueError, "absmax must be contiguous"),
    ("sliced state2.absmax", True, "state2.absmax", lambda t: t[:-1], ValueError, "state2.absmax has 1 values"),
    ("sliced state2.code", True, "state2.code", lambda t: t[:255], ValueError, "state2.code has 255 values"),
    (
        "state2.code as int32",
        True,
        "state2.code",
        lambda t: t.view(torch.int32),
        ValueError,
        "code must be torch.float32",
    ),
    ("list shape changed in place", False, "shape", _first_size(64), ValueError, "packed bytes but quant_state.shape"),
    ("list shape made of a float", False, "shape", _first_size(32.0), TypeError, "shape must be a sequence of ints"),
]


@pytest.mark.parametrize("nested,field,fool,error,pattern", [c[1:] for c in FOOLING], ids=[c[0] for c in FOOLING])
def test_a_planned_state_is_not_fooled_by_views(device, nested, field, fool, error, pattern, keys):
    packed, state = make_weight((128, 256), device=device, nested=nested)  # 512 blocks, 2 absmax2 values
    state = copy.deepcopy(state)
    state.shape = list(state.shape)  # as a caller may build it
    fresh = copy.deepcopy(state)
    nf4kernel.dequantize(packed, state)
    assert id(state) in launch_cache._PLANS
    for s in (state, fresh):  # the planned state fails as a fresh one does
        set_field(s, field, fool(get_field(s, field)))
        with pytest.raises(error, match=pattern):
            nf4kernel.dequantize(packed, s)


# Sparse forms of a state's tensors (the blocked layouts of 1x1 blocks).
SPARSE = {
    "sparse_coo": lambda t: t.to_sparse(),
    "sparse_csr": lambda t: t.to_sparse_csr(),
    "sparse_csc": lambda t: t.to_sparse_csc(),
    "sparse_bsr": lambda t: t.to_sparse_bsr((1, 1)),
    "sparse_bsc": lambda t: t.to_sparse_bsc((1, 1)),
}


# torch's, once a process, on making the first CSR, CSC, BSR or BSC tensor
@pytest.mark.filterwarnings("ignore:Sparse [A-Z]+ tensor support is in beta:UserWarning")
@pytest.mark.parametrize("layout", list(SPARSE))
@pytest.mark.parametrize("field", ["absmax", "state2.absmax"])
def test_a_planned_state_tensor_made_sparse_is_refused_by_name(device, field, layout):
    packed, state = make_weight((32, 64), device=device, nested=field != "absmax")
    state = copy.deepcopy(state)
    nf4kernel.dequantize(packed, state)
    assert id(state) in launch_cache._PLANS
    set_field(state, field, SPARSE[layout](get_field(state, field).reshape(1, -1)))
    with pytest.raises(TypeError, match=rf"quant_state\.{re.escape(field)} is a torch\.{layout} tensor"):
        nf4kernel.dequantize(packed, state)


@pytest.mark.parametrize("field", ["absmax", "state2.absmax", "state2.code"])
def test_a_strided_state_tensor_at_the_planned_address_is_refused(device, field, keys):
    packed, state = make_weight((128, 256), device=device, nested=True)  # 512 blocks: 2 absmax2 values
    state = copy.deepcopy(state)
    contiguous, strided = _strided(get_field(state, field))
    set_field(state, field, contiguous)
    expected = bnb_dequantize(packed, state)
    assert torch.equal(nf4kernel.dequantize(packed, state), expected)  # plans it
    set_field(state, field, strided)  # same address, dtype and length
    with pytest.raises(ValueError, match=f"quant_state.{field} must be contiguous"):
        nf4kernel.dequantize(packed, state)


def test_a_strided_packed_weight_at_the_planned_address_is_refused(device, keys):
    packed, state = make_weight((32, 64), device=device)
    contiguous, strided = _strided(packed)
    nf4kernel.dequantize(contiguous.view(packed.shape), state)
    with pytest.raises(ValueError, match="packed weight must be contiguous"):
        nf4kernel.dequantize(strided.view(packed.shape[0], 1), state)


def test_a_list_shape_changed_in_place_to_another_valid_shape(device, checked_calls, keys):
    packed, state = make_weight((32, 64), device=device)
    state = copy.deepcopy(state)
    state.shape = [32, 64]
    assert nf4kernel.dequantize(packed, state).shape == (32, 64)
    state.shape[0], state.shape[1] = 64, 32  # same bytes, another shape
    got = nf4kernel.dequantize(packed, state)
    assert got.shape == (64, 32) and torch.equal(got, bnb_dequantize(packed, state))
    assert len(checked_calls) == 2
    nf4kernel.dequantize(packed, state)
    assert len(checked_calls) == 2  # the unchanged list matches its new plan


def test_the_key_holds_the_pointers_of_the_callers_tensors(device):
    for nested in (False, True):
        packed, state = make_weight((32, 64), device=device, nested=nested)
        tensors = launch_cache.tensors_of(packed, state)
        absmax = tensors.absmax
        expected = [t.data_ptr() for t in tensors[:3]] + [(absmax if t is None else t).data_ptr() for t in tensors[3:]]
        assert list(launch_cache.kernel_pointers(tensors)) == expected
        mine = launch_cache.state_pointers(tensors)  # all but the codebook, which is nf4kernel's
        assert len(mine) == (5 if nested else 2) and set(mine) <= set(launch_cache.key_of(packed, state))
        assert tensors.code.data_ptr() not in mine


def test_a_plan_checks_tensors_in_one_cpp_call_where_torch_has_it(device, checked_calls, whole_keys):
    if _triton_compat.tensor_guards() is None:
        pytest.skip("this torch has no torch._C._dynamo.guards.TensorGuards")
    for nested in (False, True):
        packed, state = make_weight((32, 64), device=device, nested=nested)
        expected = bnb_dequantize(packed, state)
        nf4kernel.dequantize(packed, state)
        plan = launch_cache._PLANS[id(state)]
        assert plan.check is not None
        assert plan.quick == launch_cache.quick_key(packed, state, plan.check, plan.pointers)
        # Its pointers are the key's: the two keys speak of the same tensors.
        assert set(plan.pointers) <= set(plan.key)
        for _ in range(3):
            assert torch.equal(nf4kernel.dequantize(packed, state), expected)
    assert len(whole_keys) == len(checked_calls) == 2  # making the two plans; then quick keys only


def test_a_call_under_another_mode_keeps_the_plan_and_is_quick_again(device, checked_calls, whole_keys):
    # Inference mode (like autocast) changes the dispatch keys the tensor check compares: the first
    # such call reads the whole key, which still matches, and re-makes the check for this mode.
    if _triton_compat.tensor_guards() is None:
        pytest.skip("this torch has no torch._C._dynamo.guards.TensorGuards")
    packed, state = make_weight((32, 64), device=device)
    expected = bnb_dequantize(packed, state)
    nf4kernel.dequantize(packed, state)
    with torch.inference_mode():
        for _ in range(3):
            assert torch.equal(nf4kernel.dequantize(packed, state), expected)
    assert len(checked_calls) == 1  # one plan throughout
    assert len(whole_keys) == 2  # making it, and the first call under inference mode; then quick
    assert torch.equal(nf4kernel.dequantize(packed, state), expected)  # and back out of it
    assert len(checked_calls) == 1 and len(whole_keys) == 3


def test_a_tensor_check_torch_refuses_leaves_whole_keys(device, monkeypatch, checked_calls):
    def refuse(*tensors, **kwargs):
        raise RuntimeError("a torch whose TensorGuards takes other arguments")

    monkeypatch.setattr(_triton_compat, "_TensorGuards", refuse)
    packed, state = make_weight((32, 64), device=device)
    expected = bnb_dequantize(packed, state)
    for _ in range(3):
        assert torch.equal(nf4kernel.dequantize(packed, state), expected)
    plan = launch_cache._PLANS[id(state)]
    assert plan.check is None and plan.quick is None
    assert len(checked_calls) == 1


def test_the_quick_key_differs_where_the_key_does(device):
    # Every FOOLING case, and a replaced tensor, straight against the quick key: each one changes it.
    for _, nested, field, fool, _, _ in FOOLING:
        packed, state = make_weight((128, 256), device=device, nested=nested)
        state = copy.deepcopy(state)
        state.shape = list(state.shape)
        check = launch_cache.tensor_guard(packed, state)
        if check is None:
            pytest.skip("this torch has no usable torch._C._dynamo.guards.TensorGuards")
        pointers = launch_cache.state_pointers(launch_cache.tensors_of(packed, state))
        before = launch_cache.quick_key(packed, state, check, pointers)
        set_field(state, field, fool(get_field(state, field)))
        assert launch_cache.quick_key(packed, state, check, pointers) != before, field
    packed, state = make_weight((128, 256), device=device)
    state = copy.deepcopy(state)
    check = launch_cache.tensor_guard(packed, state)
    pointers = launch_cache.state_pointers(launch_cache.tensors_of(packed, state))
    before = launch_cache.quick_key(packed, state, check, pointers)
    state.absmax = state.absmax.clone()  # same dtype, length and layout; another address
    assert launch_cache.quick_key(packed, state, check, pointers) is None


class SlotState:
    """A state object that can't be weakly referenced (no __weakref__ slot)."""

    __slots__ = ("absmax", "blocksize", "code", "dtype", "nested", "offset", "quant_type", "shape", "state2")

    def __init__(self, state):
        for name in self.__slots__:
            setattr(self, name, getattr(state, name))


def test_a_state_that_cannot_be_weakly_referenced_works_unplanned(device, checked_calls):
    packed, state = make_weight((32, 64), device=device)
    expected = bnb_dequantize(packed, state)
    slot_state = SlotState(state)
    out = torch.full_like(expected, float("nan"))
    assert nf4kernel.dequantize(packed, slot_state, out=out) is out
    assert torch.equal(out, expected)
    assert torch.equal(nf4kernel.dequantize(packed, slot_state), expected)
    assert id(slot_state) not in launch_cache._PLANS
    assert len(checked_calls) == 2  # every call checked: a plan can't be tied to its life


# --- Threads ----------------------------------------------------------------------------------------

THREAD_WEIGHTS = [
    ((64, 96), torch.float16, True),
    ((33, 77), torch.bfloat16, False),
    ((7, 300), torch.float32, True),
    ((128, 64), torch.bfloat16, True),
]


def _in_threads(work, n):
    """Runs ``work(i)`` for i < n in n threads started together; returns what each raised or None."""
    barrier = threading.Barrier(n)
    errors = [None] * n

    def run(i):
        barrier.wait()
        try:
            work(i)
        except BaseException as error:  # reported by the test
            errors[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_concurrent_calls_from_threads_are_exact(device, fast_thread_switching):
    weights = [make_weight(s, d, nested=n, device=device, seed=i) for i, (s, d, n) in enumerate(THREAD_WEIGHTS)]
    expected = [bnb_dequantize(p, s) for p, s in weights]
    results = [[] for _ in weights]

    def work(i):
        packed, state = weights[i]
        stream = torch.cuda.Stream(device) if device == "cuda" else None
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            for _ in range(4):  # the checked launch, then planned ones
                out = torch.full_like(expected[i], float("nan"))
                results[i].append((nf4kernel.dequantize(packed, state), nf4kernel.dequantize(packed, state, out=out)))
        if stream is not None:
            stream.synchronize()

    assert _in_threads(work, len(weights)) == [None] * len(weights)
    for got, want in zip(results, expected, strict=True):
        assert all(torch.equal(a, want) and torch.equal(b, want) for a, b in got)


def test_the_compiled_ops_kernel_is_shared_only_where_triton_would_compile_the_same_one():
    """``launch_for_op`` reuses a compiled kernel for every call with the same ``op_key``: weights of
    one layout at other addresses share it; another storage dtype, a buffer off 16-byte alignment or
    another layout must not (Triton specializes on each)."""
    from nf4kernel.launch import kernel_pointers, op_key
    from nf4kernel.quant_state import read

    def key(packed, state, out=None):
        tensors, layout = read(packed, state)
        out = torch.empty(layout.shape, dtype=layout.dtype) if out is None else out
        return op_key(tensors, layout, out, kernel_pointers(tensors))

    first, second = (make_weight((64, 128), seed=seed) for seed in (1, 2))
    assert key(*first) == key(*second)
    _, layout = read(*first)
    buffer = torch.empty(layout.n_elements + 4, dtype=layout.dtype)
    aligned = buffer[: layout.n_elements].view(layout.shape)
    assert aligned.data_ptr() % 16 == 0
    assert key(*first, out=aligned) == key(*first)
    assert key(*first, out=buffer[4:].view(layout.shape)) != key(*first)  # 8 bytes past the boundary
    assert key(*make_weight((64, 128), storage=torch.bfloat16)) != key(*first)
    assert key(*make_weight((64, 128), nested=False)) != key(*first)
    assert key(*make_weight((128, 64))) != key(*first)
