"""The launch cache: repeated calls skip the checks, and a changed, moved or freed weight is never
served a stale plan nor kept alive by one. One kernel launch per call, whatever the format."""

from __future__ import annotations

import copy
import gc
import weakref

import pytest
import torch
from conftest import HAS_CUDA, bnb_dequantize, make_weight

import nf4kernel
from nf4kernel import kernel as K
from nf4kernel import launch_cache


@pytest.fixture
def checked_calls(monkeypatch):
    """How many calls took the checked (planning) path."""
    calls = []
    read = launch_cache.read

    def counting_read(*args):
        calls.append(args)
        return read(*args)

    monkeypatch.setattr(launch_cache, "read", counting_read)
    return calls


def test_repeated_calls_reuse_the_plan(device, checked_calls):
    packed, state = make_weight((64, 128), device=device)
    expected = bnb_dequantize(packed, state)
    for _ in range(3):
        assert torch.equal(nf4kernel.dequantize(packed, state), expected)
    assert len(checked_calls) == 1


def _swap(state, other, fields):
    for field in fields:
        holder, name = (state.state2, field[7:]) if field.startswith("state2.") else (state, field)
        source = other.state2 if field.startswith("state2.") else other
        setattr(holder, name, getattr(source, name))


@pytest.mark.parametrize("fields", [["absmax"], ["state2.absmax"], ["offset"], ["absmax", "state2.absmax", "offset"]])
def test_replaced_state_tensors_are_seen(device, checked_calls, fields):
    packed, state = make_weight((64, 128), device=device, seed=1)
    state = copy.deepcopy(state)
    nf4kernel.dequantize(packed, state)
    _, other = make_weight((64, 128), device=device, seed=2)
    _swap(state, other, fields)
    assert torch.equal(nf4kernel.dequantize(packed, state), bnb_dequantize(packed, state))
    assert len(checked_calls) == 2


def test_replaced_packed_weight_is_seen(device, checked_calls):
    import bitsandbytes as bnb

    layer = bnb.nn.Linear4bit(128, 64, bias=False, compress_statistics=True, quant_type="nf4").to(device)
    nf4kernel.dequantize(layer)
    other, _ = make_weight((64, 128), device=device, seed=3)
    layer.weight.data = other  # same Params4bit and QuantState objects, new storage
    expected = bnb_dequantize(layer.weight, layer.weight.quant_state)
    assert torch.equal(nf4kernel.dequantize(layer), expected)
    assert len(checked_calls) == 2


def test_in_place_update_of_the_weight_is_seen(device, checked_calls):
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


def test_changed_output_dtype_is_seen(device):
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


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU for the compiled launch paths")
@pytest.mark.parametrize("path", ["c-launcher", "compiled-run", "triton-jit"])
def test_every_planned_launch_path_is_exact(monkeypatch, path):
    # The direct C call (Triton 3.6), CompiledKernel.run (other Triton versions) and Triton's own
    # launch (direct launch refused, or launch hooks set) must all give the same bits.
    monkeypatch.setattr(launch_cache, "_C_LAUNCH_LAYOUT", path == "c-launcher")
    monkeypatch.setattr(launch_cache, "_direct_launch", path != "triton-jit")
    for nested in (False, True):
        packed, state = make_weight((1024, 4096 + 32), nested=nested, device="cuda")
        expected = bnb_dequantize(packed, state)
        for _ in range(3):
            out = torch.full_like(expected, float("nan"))
            assert nf4kernel.dequantize(packed, state, out=out) is out
            assert torch.equal(out, expected)
        plan = launch_cache._PLANS[id(state)]
        assert (plan.fast is None) == (path == "triton-jit")


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
