"""What the asv benchmarks share. Nothing here touches CUDA at import: asv imports every benchmark
module to discover it, and CUDA is initialised in ``setup`` only."""

from __future__ import annotations

import os

# Weight shapes (out_features, in_features): Challenge A's up/gate and down weights, and Llama's.
SHAPES = {
    "8192x2048": (8192, 2048),  # Challenge A 1 (hd 2048, m 8192): up / gate
    "4096x1024": (4096, 1024),  # Challenge A 2 (hd 1024, m 4096)
    "14336x4096": (14336, 4096),  # Challenge A 3 (hd 4096, m 14336), Llama-3 8B MLP
    "4096x4096": (4096, 4096),  # Llama attention projections
    "11008x4096": (11008, 4096),  # Llama-2 7B MLP
    "28672x8192": (28672, 8192),  # Llama-2/3 70B MLP
}
DTYPES = ("float16", "bfloat16")


def require_gpu():
    """asv skips a benchmark whose setup raises NotImplementedError."""
    import torch

    if not torch.cuda.is_available():
        raise NotImplementedError("needs a CUDA GPU")


def weight(shape: str, dtype: str, seed: int = 0):
    """A Linear4bit(compress_statistics=True, quant_type='nf4') on the GPU, state dtype = ``dtype``."""
    import torch

    from nf4kernel.harness import workload

    out_features, in_features = SHAPES[shape]
    return workload.build_mlp(in_features, out_features, getattr(torch, dtype), seed).layers[0]


def implementation(name: str):
    from nf4kernel.harness import workload

    if name == "nf4kernel":
        return workload.nf4kernel_impl()
    if name == "bitsandbytes":
        return workload.bitsandbytes_impl()
    try:  # "unsloth", or "unsloth_classic" in a process whose environment picked that path
        return workload.unsloth_impl()
    except Exception as error:
        raise NotImplementedError(f"unsloth unavailable: {error}") from error


def classic_environment():
    # Unsloth picks its classic (bitsandbytes ctypes) path at import: asv runs each benchmark in a
    # fresh process, so setting this in setup, before the import, is enough.
    os.environ["UNSLOTH_BNB_TRITON"] = "0"
