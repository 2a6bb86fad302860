"""nf4kernel: bit-exact bitsandbytes NF4/FP4 dequantization in one Triton launch.

The public API: ``dequantize``, ``fast_dequantize`` (Unsloth's signature), ``dequantize_reference``
(torch's ops, no kernel), ``patch`` and ``unpatch`` (route bitsandbytes, PEFT and Unsloth through
the kernel). They load on first use, so ``import nf4kernel`` takes milliseconds and needs neither
torch nor Triton (the harness imports it, to say which copy it is, where they may be missing);
``dir()`` and ``help()`` list them all the same.
"""

from typing import TYPE_CHECKING

__all__ = ["dequantize", "dequantize_reference", "fast_dequantize", "patch", "unpatch"]
__version__ = "0.1.0"

if TYPE_CHECKING:  # for editors and type checkers, which don't run __getattr__
    from .api import dequantize, fast_dequantize
    from .patching import patch, unpatch
    from .reference import dequantize_reference

_EXPORTS = {
    "dequantize": ".api",
    "fast_dequantize": ".api",
    "dequantize_reference": ".reference",
    "patch": ".patching",
    "unpatch": ".patching",
}


def __getattr__(name: str):
    """Loads a public function on its first use (PEP 562), so that ``import nf4kernel`` does not."""
    if name in _EXPORTS:
        import importlib

        value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nf4kernel' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names and the public functions', loaded or not (PEP 562): listing loads nothing."""
    return sorted({*globals(), *__all__})
