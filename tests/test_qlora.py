"""A QLoRA run, loaded the way a user loads one, trains bit-identically with ``nf4kernel.patch()``.

The model is built from a ``transformers`` config with random weights and saved, then loaded back
through ``from_pretrained`` with a 4-bit ``BitsAndBytesConfig`` (nothing downloaded); PEFT LoRA on
every linear; 20 AdamW steps with and without the patch: the losses and the adapters after are
``torch.equal``. The same code (``benchmarks/_training.py``) is what the training benchmark times.
"""

from __future__ import annotations

import pytest
import torch
from conftest import HAS_CUDA

import nf4kernel
from nf4kernel import api

pytest.importorskip("transformers", reason="transformers is not installed (requirements/test.txt has it)")
pytest.importorskip("peft", reason="PEFT is not installed (requirements/test.txt has it)")

from benchmarks import _training, _training_settings  # after the skips: it needs both

STEPS = 20


def patched_and_stock(checkpoint, device, batch, sequence):
    stock_model = _training.load_qlora(checkpoint, device)
    stock = _training.train(stock_model, STEPS, batch, sequence), _training.adapters(stock_model)
    del stock_model
    patched_model = _training.load_qlora(checkpoint, device)
    with nf4kernel.patch():
        patched = _training.train(patched_model, STEPS, batch, sequence), _training.adapters(patched_model)
    return stock, patched


def assert_identical(stock, patched):
    (stock_losses, stock_adapters), (losses, after) = stock, patched
    assert torch.equal(losses, stock_losses), (losses, stock_losses)
    assert stock_adapters.keys() == after.keys() and len(after) > 0
    for name in after:
        assert torch.equal(after[name], stock_adapters[name]), name
    assert torch.isfinite(losses).all()


@pytest.mark.interpreter
@pytest.mark.skipif(
    HAS_CUDA,
    reason="on a GPU machine the CUDA run below covers this: there bitsandbytes' CPU 4-bit code is its "
    "torch.compile'd fallback, whose C++ compiles hung under the GPU job's 16 workers",
)
def test_tiny_llama_trains_bit_identically_on_the_cpu(tmp_path, counted):
    # Dimensions are multiples of bitsandbytes' blocksize (64): its C++ CPU kernel, the stock side
    # here, reads the wrong absmax where a row is not one (a bug of bitsandbytes 0.50.2 on the CPU).
    _training.save_checkpoint(tmp_path, layers=2, dims=_training_settings.TINY, vocab=256)
    stock, patched = patched_and_stock(tmp_path, "cpu", 2, 32)
    assert_identical(stock, patched)
    # 2 layers x 7 linears, dequantized in each step's forward and backward, except the backward of
    # the first layer's q, k and v, whose input (the frozen embedding, normed) needs no gradient
    assert len(counted) == STEPS * (2 * 7 * 2 - 3)


@pytest.mark.gpu
def test_llama3_8b_layers_train_bit_identically_on_the_gpu(tmp_path, counted):
    _training.save_checkpoint(tmp_path, layers=1)
    stock, patched = patched_and_stock(tmp_path, "cuda", 1, 2048)
    assert_identical(stock, patched)
    assert len(counted) == STEPS * (7 * 2 - 3)  # 2048 tokens: bitsandbytes dequantizes in the forward too


@pytest.mark.interpreter
@pytest.mark.skipif(HAS_CUDA, reason="the CPU run of bitsandbytes' 4-bit code: see the test above")
def test_the_benchmarks_identity_check_calls_a_wrong_column_wrong(tmp_path):
    """The training benchmark times only columns whose losses equal stock bitsandbytes'; its check
    must see a dequantizer that is off by 1% (a few bf16 ulps)."""
    from nf4kernel import patching

    _training.save_checkpoint(tmp_path, layers=1, dims=_training_settings.TINY, vocab=256)
    model = _training.load_qlora(tmp_path, "cpu")
    columns = {
        "bitsandbytes": _training.contextlib.nullcontext,
        "nf4kernel": nf4kernel.patch,
        "off": lambda: patching.patch(dequantizer=lambda W, state: api.dequantize(W, state) * 1.01),
    }
    found = _training.same_losses(model, columns, steps=3, batch=1, sequence=16)
    assert found["nf4kernel"]["losses_equal"] and found["nf4kernel"]["adapters_equal"]
    assert not found["off"]["losses_equal"] and not found["off"]["adapters_equal"]


@pytest.mark.interpreter
@pytest.mark.skipif(HAS_CUDA, reason="the CPU run of bitsandbytes' 4-bit code: see the first test")
def test_under_a_compile_mode_each_column_is_compiled_afresh_and_a_failing_one_is_recorded(tmp_path, monkeypatch):
    """The compiled identity check (``same_losses(mode=...)``): every column, stock's control included,
    gets its own ``torch.compile`` of the model in that mode; one that fails (as CUDA graphs' capture
    did on an H100) is recorded with its error and the others are still compared. Eager, it raises.
    (torch.compile is stood in for here: this checks the bookkeeping, not Inductor.)"""

    def broken():
        raise RuntimeError("operation failed due to a previous error during capture")

    modes = []
    monkeypatch.setattr(torch, "compile", lambda model, mode: (modes.append(mode), model)[1])
    _training.save_checkpoint(tmp_path, layers=1, dims=_training_settings.TINY, vocab=256)
    model = _training.load_qlora(tmp_path, "cpu")
    columns = {"bitsandbytes": _training.contextlib.nullcontext, "nf4kernel": nf4kernel.patch, "broken": broken}
    found = _training.same_losses(model, columns, steps=2, batch=1, sequence=16, mode="reduce-overhead")
    assert modes == ["reduce-overhead"] * 3  # bitsandbytes, nf4kernel, bitsandbytes again: broken never got there
    assert found["broken"]["error"].startswith("RuntimeError: operation failed due to a previous error during capture")
    assert "broken" in found["broken"]["error"].split("(at ")[1]  # where it was raised
    assert found["nf4kernel"]["losses_equal"] and found["bitsandbytes again"]["adapters_equal"]
    without_stock = {"bitsandbytes": broken, "nf4kernel": nf4kernel.patch}
    found = _training.same_losses(model, without_stock, steps=1, batch=1, sequence=16, mode="default")
    assert "error" in found["bitsandbytes"] and found["nf4kernel"]["losses_equal"] is None
    with pytest.raises(RuntimeError, match="during capture"):
        _training.same_losses(model, columns, steps=1, batch=1, sequence=16)


@pytest.mark.interpreter
@pytest.mark.skipif(HAS_CUDA, reason="the CPU run of bitsandbytes' 4-bit code: see the first test")
def test_under_torch_compile_the_patched_model_trains_bit_identically_without_graph_breaks(tmp_path, monkeypatch):
    """Dynamo traces bitsandbytes' MatMul4Bit with nf4kernel inside, backward included, and records
    nf4kernel's op (aot_eager: the graph as captured, without Inductor's own rewrites of the rest of
    the model, which would change its bits in both columns). Unpatching recompiles back to stock."""
    from torch._dynamo.utils import counters

    launches = []
    launch = api._launch_into
    monkeypatch.setattr(api, "_launch_into", lambda *args: (launches.append(1), launch(*args))[1])
    _training.save_checkpoint(tmp_path, layers=1, dims=_training_settings.TINY, vocab=256)
    model = _training.load_qlora(tmp_path, "cpu")
    start = _training.adapters(model)
    eager = _training.train(model, 3, 1, 16)
    _training.restore(model, start)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="aot_eager")
    with nf4kernel.patch():
        traced = _training.train(compiled, 3, 1, 16)
    assert torch.equal(traced, eager)
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert len(launches) == 3 * (7 + 4)  # 7 forwards; 4 backwards (not the first layer's q, k, v)
    _training.train(compiled, 1, 1, 16)
    assert len(launches) == 3 * 11  # unpatched: Dynamo's guards saw the change, bitsandbytes' code again
    torch._dynamo.reset()


@pytest.mark.interpreter
@pytest.mark.skipif(HAS_CUDA, reason="the CPU run of bitsandbytes' 4-bit code: see the first test")
def test_decode_times_every_column_in_interleaved_rounds(tmp_path, monkeypatch):
    _training.save_checkpoint(tmp_path, layers=1, dims=_training_settings.TINY, vocab=256)
    model = _training.load_qlora(tmp_path, "cpu")
    entered = []

    def column(name):
        @_training.contextlib.contextmanager
        def context():
            entered.append(name)
            yield

        return context

    found = _training.decode(model, {"a": column("a"), "b": column("b")}, batch=1, rounds=3, prompt=8, tokens=2)
    assert set(found) == {"a", "b"}
    assert all(len(t["rounds"]) == 3 and t["ms_per_token"] == sorted(t["rounds"])[1] for t in found.values())
    assert entered == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm passes, then each column first in turn
