"""nf4kernel: bit-exact bitsandbytes NF4/FP4 dequantization in one Triton launch."""

from .dequantize import dequantize, fast_dequantize
from .reference import dequantize_reference

__all__ = ["dequantize", "dequantize_reference", "fast_dequantize"]
__version__ = "0.1.0"
