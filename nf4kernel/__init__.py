"""nf4kernel: bit-exact bitsandbytes NF4/FP4 dequantization in one Triton launch."""

__all__ = ["dequantize", "dequantize_reference", "fast_dequantize", "patch", "unpatch"]
__version__ = "0.1.0"

_EXPORTS = {
    "dequantize": ".api",
    "fast_dequantize": ".api",
    "dequantize_reference": ".reference",
    "patch": ".patching",
    "unpatch": ".patching",
}


def __getattr__(name: str):
    # Loaded on first use: `import nf4kernel` (its version, say) needs neither torch nor Triton.
    if name in _EXPORTS:
        import importlib

        value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nf4kernel' has no attribute {name!r}")
