"""Shared fixtures: devices, a fresh Triton cache, and 4-bit weights made by bitsandbytes (the oracle)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
HAS_CUDA = torch.cuda.is_available()
GPU_REASON = "needs a CUDA GPU (none here: the CPU runs of these tests use the Triton interpreter)"
requires_gpu = pytest.mark.skipif(not HAS_CUDA, reason=GPU_REASON)

# Unsloth writes what it compiles into ./unsloth_compiled_cache: the checkout, where a test or a
# command a test starts imports it there (the GPU job's tests do). One folder outside it instead, for
# this process and every child; the checkout stays as it was (test_commands_on_a_cpu checks that).
os.environ.setdefault("UNSLOTH_COMPILE_LOCATION", str(Path(tempfile.gettempdir()) / "nf4kernel-tests-unsloth-compiled"))

# Every device test runs on the CPU (the kernel in Triton's interpreter) and, where there is one, the GPU.
DEVICES = [
    pytest.param("cpu", marks=pytest.mark.interpreter, id="cpu-interpreter"),
    pytest.param("cuda", marks=[pytest.mark.gpu, requires_gpu], id="cuda"),
]


# harness/github/gpu_tests.py runs this suite against another tree's kernel, staged alone in this folder
# (first on the path): every test, and every child Python a test starts, must import that one.
UNDER_TEST = os.environ.get("NF4KERNEL_UNDER_TEST")


def pytest_sessionstart(session):
    if UNDER_TEST:
        import nf4kernel

        where = os.path.realpath(nf4kernel.__file__)
        if not where.startswith(os.path.realpath(UNDER_TEST) + os.sep):
            raise pytest.UsageError(f"nf4kernel was imported from {where}, not the kernel under test in {UNDER_TEST}")


def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("gpu") and not HAS_CUDA:
            item.add_marker(pytest.mark.skip(reason=GPU_REASON))


def child_env() -> dict[str, str]:
    """The environment for a child Python that imports this checkout's packages, installed or not:
    the kernel under test (where one is staged) and the checkout first on PYTHONPATH, then whatever
    was there (an offline bundle, say)."""
    first = [UNDER_TEST, str(ROOT)] if UNDER_TEST else [str(ROOT)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [*first, os.environ.get("PYTHONPATH")]))}


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


@pytest.fixture
def fresh_triton_cache(tmp_path, monkeypatch):
    """An empty Triton cache for this test: what it compiles can't come from an earlier run."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    return tmp_path / "triton-cache"


@pytest.fixture
def fast_thread_switching():
    """Threads switch every few microseconds instead of every 5 ms, so that racing threads interleave
    inside a launch on every run, not by luck."""
    import sys

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(interval)


@pytest.fixture
def counted(monkeypatch):
    """``nf4kernel.api.dequantize`` counting its calls (the shape of each weight), as
    ``nf4kernel.patch()`` calls it: a test that the patch was in the path, not only that the results
    agree (they would if it never ran)."""
    from nf4kernel import api

    calls, real = [], api.dequantize

    def dequantize(W, quant_state=None, out=None):
        calls.append(tuple(quant_state.shape))
        return real(W, quant_state, out=out)

    monkeypatch.setattr(api, "dequantize", dequantize)
    return calls


def make_weight(
    shape,
    dtype=torch.bfloat16,
    *,
    quant_type="nf4",
    nested=True,
    blocksize=64,
    storage=torch.uint8,
    device="cpu",
    seed=0,
):
    """A random weight quantized by bitsandbytes: (packed, QuantState)."""
    import bitsandbytes.functional as F

    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(shape, generator=generator).to(dtype).to(device)
    return F.quantize_4bit(
        weight, blocksize=blocksize, compress_statistics=nested, quant_type=quant_type, quant_storage=storage
    )


def bnb_dequantize(packed, state):
    """The oracle: bitsandbytes (``harness/core/oracle.py`` says which of its paths, and why)."""
    from harness.core.oracle import bnb_dequantize as oracle

    return oracle(packed, state)


def get_field(state, field: str):
    """``state.<field>``, where ``field`` may name the second level: ``"state2.absmax"``."""
    holder, name = (state.state2, field[7:]) if field.startswith("state2.") else (state, field)
    return getattr(holder, name)


def set_field(state, field: str, value) -> None:
    holder, name = (state.state2, field[7:]) if field.startswith("state2.") else (state, field)
    setattr(holder, name, value)


def tensors_in(obj) -> dict:
    """Every tensor a weight/state holds, by name: to check that a call modified none of them."""
    found = {}
    if isinstance(obj, torch.Tensor):
        found["tensor"] = obj
        obj = getattr(obj, "quant_state", None)
    if obj is None:
        return found
    for name in ("absmax", "code", "offset"):
        value = getattr(obj, name, None)
        if isinstance(value, torch.Tensor):
            found[name] = value
    state2 = getattr(obj, "state2", None)
    for name in ("absmax", "code"):
        value = getattr(state2, name, None)
        if isinstance(value, torch.Tensor):
            found[f"state2.{name}"] = value
    return found


def snapshot(*objs) -> list:
    return [(t, t.clone(), t.data_ptr()) for obj in objs for t in tensors_in(obj).values()]


def _bytes(tensor):
    # Float storage may hold NaN patterns: compare bits, of the values (a negative view's too).
    return tensor.resolve_neg().reshape(-1).clone(memory_format=torch.contiguous_format).view(torch.uint8)


def assert_unmodified(snap) -> None:
    for tensor, copy, pointer in snap:
        assert tensor.data_ptr() == pointer
        assert torch.equal(_bytes(tensor), _bytes(copy)), "an input tensor was modified"
