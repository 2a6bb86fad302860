"""``nf4kernel.patch()``: bit-identical under bitsandbytes' Linear4bit, PEFT and Unsloth; no trace after."""

from __future__ import annotations

import importlib.util
import json
import logging
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest
import torch
from conftest import child_env, make_weight

import nf4kernel
from nf4kernel import patching

DTYPES = [torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def _unpatched(monkeypatch):
    """Every test starts and ends unpatched, with the once-only log messages not yet said."""
    monkeypatch.setattr(patching, "_SAID", set())
    nf4kernel.unpatch()
    yield
    nf4kernel.unpatch()


def bnb_objects():
    from bitsandbytes.autograd import _functions

    cls = _functions.MatMul4Bit
    return cls.__dict__["forward"], cls.__dict__["backward"]


def linear4bit(
    out_features, in_features, dtype, *, device="cpu", quant_type="nf4", nested=True, bias=True, seed=0, compute=None
):
    import bitsandbytes as bnb

    generator = torch.Generator().manual_seed(seed)
    compute = compute or dtype
    layer = bnb.nn.Linear4bit(
        in_features, out_features, bias=bias, compute_dtype=compute, compress_statistics=nested, quant_type=quant_type
    )
    weight = torch.randn(out_features, in_features, generator=generator).to(dtype)
    layer.weight = bnb.nn.Params4bit(weight, requires_grad=False, quant_type=quant_type, compress_statistics=nested)
    if bias:
        layer.bias = torch.nn.Parameter(torch.randn(out_features, generator=generator).to(dtype))
    return layer.to(device)


def forward_backward(layer, x):
    x = x.detach().requires_grad_()
    y = layer(x)
    y.float().square().sum().backward()
    grads = [x.grad] + ([layer.bias.grad.clone()] if layer.bias is not None else [])
    if layer.bias is not None:
        layer.bias.grad = None
    return [y.detach(), *grads]


# -------------------------------------------------------------------------------- patch, unpatch


def test_unpatch_puts_back_the_same_objects_and_patching_twice_is_once():
    import bitsandbytes

    matmul = bitsandbytes.matmul_4bit
    before = bnb_objects()
    nf4kernel.patch()
    patched = bnb_objects()
    assert patched[0] is not before[0] and patched[1] is not before[1]
    nf4kernel.patch()
    assert bnb_objects() == patched  # the second call changed nothing
    assert bitsandbytes.matmul_4bit.__wrapped__ is matmul
    nf4kernel.unpatch()
    assert bnb_objects()[0] is before[0] and bnb_objects()[1] is before[1]
    assert bitsandbytes.matmul_4bit is matmul and bitsandbytes.autograd._functions.matmul_4bit is matmul
    nf4kernel.unpatch()  # not patched: nothing to do
    assert bnb_objects()[0] is before[0]


def test_as_a_context_manager_it_leaves_things_as_it_found_them():
    before = bnb_objects()
    with nf4kernel.patch():
        assert patching.is_patched()
    assert not patching.is_patched() and bnb_objects()[0] is before[0]
    nf4kernel.patch()
    with nf4kernel.patch():
        pass
    assert patching.is_patched()  # it was patched on entry: still patched
    nf4kernel.unpatch()


def test_patch_and_unpatch_from_many_threads_end_consistent(fast_thread_switching):
    before = bnb_objects()
    barrier = threading.Barrier(8)

    def churn():
        barrier.wait()
        for _ in range(50):
            nf4kernel.patch()
            nf4kernel.unpatch()

    threads = [threading.Thread(target=churn) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not patching.is_patched()
    assert bnb_objects()[0] is before[0] and bnb_objects()[1] is before[1]


# ------------------------------------------------------------------------------- bitsandbytes


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("quant_type", "nested", "bias"), [("nf4", True, True), ("fp4", False, False)])
def test_linear4bit_trains_bit_identically(counted, dtype, quant_type, nested, bias):
    layer = linear4bit(96, 256, dtype, quant_type=quant_type, nested=nested, bias=bias)
    x = torch.randn(3, 5, 256, generator=torch.Generator().manual_seed(1)).to(dtype)
    stock = forward_backward(layer, x)
    with nf4kernel.patch():
        patched = forward_backward(layer, x)
    assert len(counted) == 2  # the forward's dequantization and the backward's
    assert all(torch.equal(a, b) for a, b in zip(stock, patched, strict=True))


@pytest.mark.interpreter
def test_a_weight_of_another_dtype_than_the_input_runs_the_original_and_says_so_once(counted, caplog):
    # bitsandbytes' GEMM dequantizes an fp16 weight straight into bf16 (one rounding); nf4kernel
    # gives the weight's fp16 (a cast after would round twice): the original code keeps it exact.
    layer = linear4bit(64, 128, torch.float16, bias=False, compute=torch.bfloat16)
    x = torch.randn(4, 128).to(torch.bfloat16)
    with caplog.at_level(logging.WARNING, logger="nf4kernel"):
        stock = layer(x.requires_grad_()).detach()
        with nf4kernel.patch():
            first = layer(x).detach()
            second = layer(x).detach()
    assert torch.equal(stock, first) and torch.equal(stock, second)
    said = [r.getMessage() for r in caplog.records if "bfloat16 inputs" in r.getMessage()]
    assert len(said) == 1, said
    assert "torch.float16 weight" in said[0]
    assert len(counted) == 0  # the forward ran bitsandbytes' own code


@pytest.mark.interpreter
def test_without_grad_where_bitsandbytes_dequantizes_nf4kernel_does(counted):
    # On the CPU bitsandbytes' gemm_4bit always dequantizes and calls F.linear (its default kernel).
    layer = linear4bit(64, 128, torch.bfloat16)
    x = torch.randn(3, 128).to(torch.bfloat16)
    with torch.no_grad():
        stock = layer(x)
        with nf4kernel.patch():
            patched = layer(x)
    assert torch.equal(stock, patched) and counted == [(64, 128)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tokens", [1, 16, 2048])
def test_on_the_gpu_the_gemm_keeps_bitsandbytes_choice_and_its_bits(counted, dtype, tokens):
    """Where bitsandbytes runs its fused GEMM (few tokens) it still does; where it dequantizes
    (thousands of tokens), nf4kernel does; either way the outputs and gradients are its bits."""
    layer = linear4bit(14336, 4096, dtype, device="cuda")
    x = torch.randn(tokens, 4096, device="cuda", generator=torch.Generator("cuda").manual_seed(1)).to(dtype)
    stock = forward_backward(layer, x)
    with nf4kernel.patch():
        patched = forward_backward(layer, x)
    assert all(torch.equal(a, b) for a, b in zip(stock, patched, strict=True))
    assert len(counted) == (2 if tokens == 2048 else 1)  # the backward always dequantizes
    counted.clear()
    with torch.no_grad():
        stock = layer(x)
        with nf4kernel.patch():
            patched = layer(x)
    assert torch.equal(stock, patched)
    assert len(counted) == (1 if tokens == 2048 else 0)  # few tokens: its fused kernel, left alone


# ---------------------------------------------------------------------------------------- PEFT


@pytest.mark.interpreter
def test_peft_merges_through_nf4kernel_and_gets_the_same_weight(counted):
    peft = pytest.importorskip("peft", reason="PEFT is not installed (requirements/test.txt has it)")
    from peft.utils import integrations

    original = integrations.dequantize_bnb_weight
    layer = linear4bit(64, 128, torch.bfloat16, bias=False)
    with nf4kernel.patch():
        assert integrations.dequantize_bnb_weight is not original
        assert integrations.dequantize_bnb_weight.__wrapped__ is original
        patched = integrations.dequantize_bnb_weight(layer.weight)
    assert integrations.dequantize_bnb_weight is original
    assert torch.equal(patched, original(layer.weight)) and counted == [(64, 128)]
    assert peft.tuners.lora.bnb.dequantize_bnb_weight is original  # the module that imported it by name, too


# ------------------------------------------------------------------------------------- Unsloth


class _Int4State:
    """One of Unsloth's own quant-state formats (2026.10.9 has Int4QuantState, MXFP4, NVFP4): no quant_type."""


@pytest.fixture
def fake_unsloth(monkeypatch):
    """Unsloth needs a GPU to import: its shape (``unsloth.kernels.utils.fast_dequantize``, imported by
    name in ``unsloth.kernels.fast_lora``, with 2026.10.9's signature) stands in, with bitsandbytes'
    dequantize behind it. The GPU has the real one: ``test_unsloth_under_the_patch_on_the_gpu``."""
    import bitsandbytes.functional as F

    def fast_dequantize(W, quant_state=None, out=None, use_global_buffer=False, dtype=None):
        if isinstance(quant_state, (list, _Int4State)):
            return "unsloth's own", dtype
        return W if quant_state is None else F.dequantize_4bit(W, quant_state)

    modules = {
        name: types.ModuleType(name) for name in ("unsloth", "unsloth.kernels.utils", "unsloth.kernels.fast_lora")
    }
    for name in ("unsloth.kernels.utils", "unsloth.kernels.fast_lora"):
        modules[name].fast_dequantize = fast_dequantize
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return fast_dequantize, modules


@pytest.mark.interpreter
def test_unsloth_fast_dequantize_is_rebound_everywhere_and_put_back(counted, fake_unsloth, caplog):
    original, modules = fake_unsloth
    packed, state = make_weight((64, 128), torch.bfloat16)
    with nf4kernel.patch(), caplog.at_level(logging.WARNING, logger="nf4kernel"):
        utils, lora = modules["unsloth.kernels.utils"], modules["unsloth.kernels.fast_lora"]
        assert utils.fast_dequantize is lora.fast_dequantize is not original
        assert torch.equal(lora.fast_dequantize(packed, state), original(packed, state))
        # fast_lora's backward: the transposed packing, and the activations' dtype, which a 4-bit weight ignores
        got = lora.fast_dequantize(packed.t(), state, dtype=torch.float16)
        assert got.dtype == torch.bfloat16 and torch.equal(got, original(packed.t(), state))
        assert lora.fast_dequantize(packed) is packed  # no state: a 16-bit layer, Unsloth's own answer
        # Unsloth's own formats go to its code, with every argument: its old list state and its Int4 state
        assert utils.fast_dequantize(packed, [state.absmax]) == ("unsloth's own", None)
        assert utils.fast_dequantize(packed, _Int4State(), dtype=torch.float16) == ("unsloth's own", torch.float16)
    assert all(m.fast_dequantize is original for n, m in modules.items() if n != "unsloth")
    assert "fast_dequantize" not in modules["unsloth"].__dict__
    assert counted == [(64, 128), (64, 128)]
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "nf4kernel.patch: a list quant state (Unsloth's old format); the original code runs for it",
        "nf4kernel.patch: a _Int4State quant state (not bitsandbytes' 4-bit); the original code runs for it",
    ]


@pytest.mark.gpu
def test_unsloth_under_the_patch_on_the_gpu(tmp_path):
    """The real Unsloth, in a process of its own (its import patches the process): rebound everywhere
    and put back, its call forms and its LoRA_W step torch.equal to its own (unsloth_under_the_patch.py)."""
    if importlib.util.find_spec("unsloth") is None:
        pytest.skip("Unsloth is not installed (the GPU runner has it: the speed gate's baseline)")
    script, result = Path(__file__).with_name("unsloth_under_the_patch.py"), tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, str(script), str(result)], capture_output=True, text=True, env=child_env(), timeout=400
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(result.read_text())
    assert [c["case"] for c in report["checks"]] == [
        "float16 nested=False",
        "float16 nested=True",
        "bfloat16 nested=False",
        "bfloat16 nested=True",
    ]
    assert {"unsloth.kernels.utils", "unsloth.kernels.fast_lora"} <= set(report["holders"])
