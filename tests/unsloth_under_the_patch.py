"""``nf4kernel.patch()`` under the real Unsloth, in a process of its own (``import unsloth`` patches the
whole process, and needs a GPU). Run by ``test_patching.py::test_unsloth_under_the_patch_on_the_gpu``:

    python tests/unsloth_under_the_patch.py RESULT.json

Checks, raising ``AssertionError`` on the first that fails (the JSON says what ran):

* every Unsloth module holding ``fast_dequantize`` is rebound while patched and gets its own object
  back after ``unpatch()``;
* Unsloth's call forms (``matmul_lora``'s, ``fast_lora``'s backward with ``W.t()`` and ``dtype=``, the
  global buffer) give ``torch.equal`` results to Unsloth's own and to bitsandbytes', through nf4kernel;
* Unsloth's ``LoRA_W`` forward and backward (which dequantize through ``fast_dequantize``) give
  ``torch.equal`` outputs and gradients with and without the patch, with nf4kernel launched.
"""

from __future__ import annotations

import json
import sys

import bitsandbytes.functional as F
import torch
import unsloth  # before nf4kernel.patch(), which patches only what is imported
from unsloth.kernels import fast_lora, utils

import nf4kernel
from nf4kernel import api

SHAPE = (1024, 4096)  # (out_features, in_features): one LoRA_W layer
TOKENS = 2048  # over every row count Unsloth hands to a fused GEMV or bitsandbytes' GEMM


def holders() -> dict[str, object]:
    """Every loaded Unsloth module's own ``fast_dequantize`` (by module name)."""
    found = {}
    for name, module in list(sys.modules.items()):
        if module is not None and (name == "unsloth" or name.startswith("unsloth.")):
            fn = module.__dict__.get("fast_dequantize")
            if callable(fn):
                found[name] = fn
    return found


def weight(dtype: torch.dtype, nested: bool, seed: int):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(SHAPE, generator=generator, device="cuda").to(dtype)
    return F.quantize_4bit(w, blocksize=64, compress_statistics=nested, quant_type="nf4")


def call_forms(packed, state, dtype) -> list:
    """Unsloth's calls, each cloned at once (the global buffer is reused by the next call)."""
    other = torch.float16 if dtype == torch.bfloat16 else torch.bfloat16
    return [
        utils.fast_dequantize(packed, state).clone(),
        utils.fast_dequantize(packed, state, use_global_buffer=True, dtype=dtype).clone(),  # matmul_lora
        fast_lora.fast_dequantize(packed.t(), state, dtype=dtype).clone(),  # LoRA_W's backward
        fast_lora.fast_dequantize(packed.t(), state, dtype=other).clone(),  # autocast: dtype steers only FP8
    ]


def lora_step(packed, state, dtype, seed: int) -> list[torch.Tensor]:
    """Unsloth's LoRA_W forward and backward, as its apply_lora_o runs it: output and the three grads."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    n, k = SHAPE

    def leaf(*shape, scale=1.0):
        return (torch.randn(shape, generator=generator, device="cuda") * scale).to(dtype).requires_grad_()

    X, A, B = leaf(1, TOKENS, k), leaf(16, k, scale=0.02), leaf(n, 16, scale=0.02)
    Y = fast_lora.LoRA_W.apply(X, packed, state, A, B, 2.0)
    Y.float().square().sum().backward()
    return [Y.detach(), X.grad, A.grad, B.grad]


def main(out_path: str) -> None:
    report = {"unsloth": unsloth.__version__, "device": torch.cuda.get_device_name(), "checks": []}
    launched = []
    real = api.dequantize

    def counting(W, quant_state=None, *, out=None):
        launched.append(tuple(quant_state.shape))
        return real(W, quant_state, out=out)

    api.dequantize = counting  # what nf4kernel's fast_dequantize calls, and what patch() puts in place
    before = holders()
    assert {"unsloth.kernels.utils", "unsloth.kernels.fast_lora"} <= before.keys(), sorted(before)
    for dtype in (torch.float16, torch.bfloat16):
        for nested in (False, True):
            packed, state = weight(dtype, nested, seed=len(report["checks"]))
            case = f"{str(dtype).removeprefix('torch.')} nested={nested}"
            expected = F.dequantize_4bit(packed, state)
            theirs = call_forms(packed, state, dtype)
            stock = [lora_step(packed, state, dtype, seed=1), lora_step(packed, state, dtype, seed=1)]
            same = all(torch.equal(a, b) for a, b in zip(*stock, strict=True))
            assert same, f"{case}: Unsloth's own LoRA_W step does not reproduce itself"
            assert not launched, f"{case}: nf4kernel launched while not patched"
            with nf4kernel.patch():
                now = holders()
                assert now.keys() == before.keys(), (sorted(now), sorted(before))
                for name, fn in now.items():
                    assert fn is not before[name] and fn.__wrapped__ is before[name], f"{name} not rebound"
                ours = call_forms(packed, state, dtype)
                forms_launched = len(launched)
                patched = lora_step(packed, state, dtype, seed=1)
                step_launched = len(launched) - forms_launched
            assert holders() == before, "unpatch() did not put Unsloth's own fast_dequantize back everywhere"
            assert forms_launched == len(ours), f"{case}: {forms_launched} launches for {len(ours)} calls"
            assert step_launched == 2, f"{case}: LoRA_W's step launched nf4kernel {step_launched} times, not 2"
            for i, (a, b) in enumerate(zip(theirs, ours, strict=True)):
                assert a.dtype == b.dtype == dtype and torch.equal(a, b), f"{case}: call form {i} differs"
                assert torch.equal(a.t() if i >= 2 else a, expected), f"{case}: call form {i} differs from bnb"
            for what, a, b in zip(("Y", "dX", "dA", "dB"), stock[0], patched, strict=True):
                assert torch.equal(a, b), f"{case}: LoRA_W's {what} differs under the patch"
            report["checks"].append(
                {"case": case, "call_forms": len(ours), "lora_w_launches": step_launched, "equal": True}
            )
            launched.clear()
    report["holders"] = sorted(before)
    with open(out_path, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
