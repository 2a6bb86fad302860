"""``nf4kernel.patch()``: nf4kernel under bitsandbytes' ``Linear4bit``, PEFT's LoRA and Unsloth, in one call.

    import nf4kernel
    nf4kernel.patch()            # from here on, training dequantizes with nf4kernel
    nf4kernel.unpatch()          # back to exactly what was there
    with nf4kernel.patch():      # or for a block: on entry patched, on exit as before
        ...

What it replaces, while on (each bit-identical to what it replaces, for every weight nf4kernel
takes; anything else goes to the original code, and ``logging`` says which, once per reason):

* **bitsandbytes** (``matmul_4bit`` and ``MatMul4Bit``, which ``Linear4bit``'s forward goes
  through): the dequantization in the forward, with or without grad, wherever bitsandbytes itself
  dequantizes and calls ``F.linear`` (its own dispatch decides, as before), and the one in the
  backward. Where it picks its fused kernel (few tokens: the batch-1 GEMV of decoding, small
  batches) that kernel stays: it is one launch that never writes the weight out, where nf4kernel
  would add one. PEFT's LoRA layers on ``Linear4bit`` call the base layer, so they go through this.
* **PEFT** (imported before the call): ``dequantize_bnb_weight``, which its merges, DoRA and the
  other variants use, in every PEFT module that imported it.
* **Unsloth** (imported before the call): ``fast_dequantize`` in every Unsloth module that holds it.
  Unsloth is never imported here.

Patching twice is patching once; ``unpatch()`` puts back the original objects (the same objects,
not copies) and leaves no attribute behind. ``patch``/``unpatch`` hold a lock, so threads may call
them at once. A ``with nf4kernel.patch():`` block leaves things as it found them: patched if they
were.
"""

from __future__ import annotations

import logging
import sys
import threading

import torch

from . import api

log = logging.getLogger("nf4kernel")

_LOCK = threading.Lock()
_SAVED: list[tuple[object, str, object]] = []  # (owner, attribute, original), in patching order
_SAID: set[str] = set()
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_dequantize = api.dequantize  # what the patched code calls; patch(dequantizer=...) swaps it


class _Patch:
    """What ``patch()`` returns: usable as a context manager that restores the state it found."""

    def __init__(self, was_patched: bool):
        self._was_patched = was_patched

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self._was_patched:
            unpatch()
        return False


def is_patched() -> bool:
    return bool(_SAVED)


def patch(*, dequantizer=None) -> _Patch:
    """Put nf4kernel under bitsandbytes, PEFT and Unsloth (module docstring). Idempotent.

    ``dequantizer`` (for measuring others in the same model; the training benchmark uses it) is a
    ``(W, quant_state) -> tensor`` call put in nf4kernel's place under bitsandbytes and PEFT, e.g.
    Unsloth's ``fast_dequantize``; Unsloth's own modules get nf4kernel either way."""
    global _dequantize
    with _LOCK:
        was = bool(_SAVED)
        if not was:
            _dequantize = dequantizer or api.dequantize
            _load_peft_bnb()
            what = _patch_bitsandbytes() + _patch_modules("peft", "dequantize_bnb_weight", _peft_dequantize_factory)
            what += _patch_modules("unsloth", "fast_dequantize", _unsloth_fast_dequantize_factory)
            log.info("nf4kernel.patch: %s", ", ".join(what) if what else "nothing to patch (no bitsandbytes)")
        return _Patch(was)


def unpatch() -> None:
    """Put back every original ``patch()`` replaced. Doing it when not patched does nothing."""
    global _dequantize
    with _LOCK:
        for owner, name, original in reversed(_SAVED):
            setattr(owner, name, original)
        _SAVED.clear()
        _dequantize = api.dequantize


def _set(owner, name: str, value) -> None:
    # A class's own __dict__ entry (a staticmethod object) is saved as it is, so it goes back unchanged.
    original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    _SAVED.append((owner, name, original))
    setattr(owner, name, value)


def _say_once(reason: str) -> None:
    if reason not in _SAID:
        _SAID.add(reason)
        log.warning("nf4kernel.patch: %s; the original code runs for it", reason)


def _unsupported(state, dtype: torch.dtype | None = None) -> str | None:
    """Why nf4kernel won't take this state in place of bitsandbytes (None: it will)."""
    if isinstance(state, (list, tuple)):
        return "a list quant state (Unsloth's old format)"
    if not hasattr(state, "quant_type"):
        return f"a {type(state).__name__} quant state (not bitsandbytes' 4-bit)"
    if state.quant_type not in ("nf4", "fp4"):
        return f"quant_type {state.quant_type!r}"
    if state.dtype not in _DTYPES:
        return f"a weight quantized from {state.dtype}"
    if dtype is not None and state.dtype != dtype:
        # bitsandbytes' GEMM dequantizes straight into the input's dtype: one rounding, where
        # dequantizing to the weight's dtype and casting would round twice.
        return f"a {state.dtype} weight multiplied with {dtype} inputs"
    return None


# ----------------------------------------------------------------------------------- bitsandbytes


def _patch_bitsandbytes() -> list[str]:
    try:
        import bitsandbytes
        from bitsandbytes.autograd import _functions
    except ImportError:
        return []
    cls = _functions.MatMul4Bit
    forward, backward = cls.__dict__["forward"].__func__, cls.__dict__["backward"].__func__
    dequantizes, fused_rows = _bnb_gemm_choice()
    _set(cls, "forward", staticmethod(_matmul_forward_factory(forward, dequantizes)))
    _set(cls, "backward", staticmethod(_matmul_backward_factory(backward)))
    matmul = _matmul_4bit_factory(_functions.matmul_4bit, dequantizes, fused_rows)
    for owner in (bitsandbytes, _functions):  # Linear4bit calls bitsandbytes.matmul_4bit
        if owner.__dict__.get("matmul_4bit") is _functions.matmul_4bit:
            _set(owner, "matmul_4bit", matmul)
    return ["bitsandbytes matmul_4bit and MatMul4Bit (Linear4bit's forward, with or without grad, and backward)"]


def _bnb_gemm_choice():
    """bitsandbytes' own choice for its CUDA ``gemm_4bit``: True where it dequantizes and calls
    ``F.linear`` (nf4kernel then dequantizes), False where it runs its fused kernel (left alone). On
    other devices its default kernel always dequantizes. Read from bitsandbytes so its tuning stays
    its own; if this version doesn't have it, the forward is left alone and only the backward is
    patched. Also returns the number of rows up to which bitsandbytes always runs its fused kernel on
    a GPU (0 if unknown): decoding's one-token calls, which ``matmul_4bit`` hands straight back."""
    try:
        from bitsandbytes.backends.cuda import ops as cuda_ops

        max_m, use_custom = cuda_ops._gemm_4bit_custom_max_m, cuda_ops._gemm_4bit_use_custom_fn
    except (ImportError, AttributeError):
        max_m = use_custom = None
    fused_rows = getattr(cuda_ops, "_GEMM_4BIT_CUSTOM_FLOOR_M", 0) if use_custom else 0

    def dequantizes(A: torch.Tensor, state) -> bool:
        if not A.is_cuda:
            return A.device.type == "cpu"
        if use_custom is None:
            _say_once("this bitsandbytes has no gemm_4bit dispatch nf4kernel knows (forward)")
            return False
        K = A.shape[-1]
        M = A.numel() // K
        if M > max_m or K % state.blocksize:
            return True
        return not use_custom(A.device.index, A.dtype, M, state.shape[0], K)

    return dequantizes, fused_rows


def _matmul_4bit_factory(original, dequantizes, fused_rows: int):
    """``bitsandbytes.matmul_4bit``: its no-grad path (inference, and linears whose input needs no
    grad in training, such as the first layer's q, k and v) calls ``gemm_4bit`` straight, not
    ``MatMul4Bit``; where that dequantizes, nf4kernel does. The rest is bitsandbytes' own."""

    def matmul_4bit(A, B, quant_state, out=None, bias=None):
        # Decoding first, at the least cost: a host-bound call (a 4096x14336 weight at one token took
        # 39 us on an H200, 8 us more through the full checks below) that bitsandbytes' fused kernel takes.
        if A.is_cuda and A.numel() <= fused_rows * A.shape[-1]:
            return original(A, B, quant_state, out, bias)
        needs_grad = torch.is_grad_enabled() and (A.requires_grad or (bias is not None and bias.requires_grad))
        if needs_grad or not _takes(A, B, out, quant_state, dequantizes):
            return original(A, B, quant_state, out, bias)
        return torch.nn.functional.linear(A, _dequantize(B.view(-1, 1), quant_state), bias)

    matmul_4bit.__wrapped__ = original
    return matmul_4bit


def _takes(A, B, out, state, dequantizes) -> bool:
    """Whether nf4kernel dequantizes for this product, where bitsandbytes would dequantize and call
    ``F.linear``; anything else (its fused kernel, its errors, shapes it treats apart) stays its own."""
    if out is not None or state is None or A.numel() == 0 or B.numel() == 1:  # [1, 1]: read as transposed
        return False
    if len(state.shape) != 2:
        return False
    K = A.shape[-1]
    if K == state.shape[0] and K != state.shape[1]:  # a [K, N] weight: bitsandbytes' deprecated path
        return False
    if state.nested and state.state2.blocksize != 256:  # bitsandbytes refuses it: its error
        return False
    if not dequantizes(A, state):
        return False
    if not A.is_cuda and getattr(state, "packing_format_for_cpu", False):  # (a missing attribute costs 2 us)
        return False
    reason = _unsupported(state, A.dtype)
    if reason:
        _say_once(reason)
        return False
    return True


def _matmul_forward_factory(original, dequantizes):
    def forward(ctx, A, B, out=None, bias=None, quant_state=None):
        if not _takes(A, B, out, quant_state, dequantizes):
            return original(ctx, A, B, out, bias, quant_state)
        B = B.view(-1, 1)
        output = torch.nn.functional.linear(A, _dequantize(B, quant_state), bias)
        # What bitsandbytes' forward leaves for its backward, as it leaves it.
        ctx.is_empty = False
        ctx.state = quant_state
        ctx.dtype_A, ctx.dtype_B, ctx.dtype_bias = A.dtype, B.dtype, None if bias is None else bias.dtype
        ctx.tensors = (None, B) if any(ctx.needs_input_grad[:2]) else (None, None)
        return output

    return forward


def _matmul_backward_factory(original):
    def backward(ctx, grad_output):
        if ctx.is_empty or not ctx.needs_input_grad[0]:
            return original(ctx, grad_output)
        reason = _unsupported(ctx.state)
        if reason:
            _say_once(reason)
            return original(ctx, grad_output)
        grad_bias = grad_output.sum(0, dtype=ctx.dtype_bias) if ctx.needs_input_grad[3] else None
        _, B = ctx.tensors
        grad_A = torch.matmul(grad_output, _dequantize(B, ctx.state).to(grad_output.dtype))
        return grad_A, None, None, grad_bias, None

    return backward


# ------------------------------------------------------------------------- PEFT and Unsloth


def _load_peft_bnb() -> None:
    """PEFT imports its bitsandbytes LoRA layers on first use; where PEFT is imported, load them now so
    that their own ``dequantize_bnb_weight`` is rebound before a model is wrapped, not missed."""
    if "peft" in sys.modules:
        try:
            import peft.tuners.lora.bnb  # noqa: F401
        except ImportError:  # PEFT without bitsandbytes support: nothing of it to patch
            pass


def _patch_modules(package: str, name: str, factory) -> list[str]:
    """Rebind ``name`` in every loaded module of ``package`` that holds a function by that name (modules
    that imported it by name hold the same object: each distinct function gets one replacement)."""
    prefix = package + "."
    modules = [
        m for key, m in list(sys.modules.items()) if m is not None and (key == package or key.startswith(prefix))
    ]
    replacements = {}  # id(original) -> its replacement
    patched = 0
    for module in modules:
        fn = module.__dict__.get(name)
        if callable(fn):
            if id(fn) not in replacements:
                replacements[id(fn)] = factory(fn)
            _set(module, name, replacements[id(fn)])
            patched += 1
    return [f"{package}.{name} in {patched} modules"] if patched else []


def _peft_dequantize_factory(original):
    def dequantize_bnb_weight(weight, state=None):
        if type(weight).__name__ != "Params4bit":  # 8-bit weights: PEFT's own code
            return original(weight, state)
        reason = _unsupported(weight.quant_state)
        if reason:
            _say_once(reason)
            return original(weight, state)
        return _dequantize(weight.data, weight.quant_state)

    dequantize_bnb_weight.__wrapped__ = original
    return dequantize_bnb_weight


def _unsloth_fast_dequantize_factory(original):
    def fast_dequantize(W, quant_state=None, out=None, use_global_buffer=False, **kwargs):
        # kwargs: what this Unsloth version adds (2026.10.9: dtype, which steers only its FP8 weights;
        # a 4-bit weight comes out in its own dtype there as here). Everything not a bitsandbytes
        # 4-bit weight (no state: a 16-bit or FP8 layer; Unsloth's own formats) is Unsloth's to decode.
        if quant_state is not None:
            reason = _unsupported(quant_state)
            if reason is None:
                return api.fast_dequantize(W, quant_state, out)
            _say_once(reason)
        return original(W, quant_state, out, use_global_buffer, **kwargs)

    fast_dequantize.__wrapped__ = original
    return fast_dequantize
