"""The CPU smoke run: the kernel in Triton's interpreter at small sizes, so the whole pipeline
(asv, results, the site) runs on a machine without a GPU. Its times are no verdict on the kernel."""

from __future__ import annotations


class CpuInterpreter:
    """nf4kernel.dequantize on CPU tensors (Triton's interpreter), NF4 blocksize 64, nested absmax."""

    params = (["1024x512"], ["bfloat16", "float16"])
    param_names = ["shape", "dtype"]
    version = 1
    rounds = 1
    repeat = (1, 5, 5.0)

    def setup(self, shape, dtype):
        import logging

        # bitsandbytes warns at import that an optional CPU matmul kernel ("kernels-community") is
        # missing: noise here, where only its quantizer is used, repeated once per process.
        logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
        import bitsandbytes.functional as F
        import torch

        import nf4kernel

        rows, cols = map(int, shape.split("x"))
        generator = torch.Generator().manual_seed(0)
        w = torch.randn(rows, cols, generator=generator).to(getattr(torch, dtype))
        self.packed, self.state = F.quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type="nf4")
        self.dequantize = nf4kernel.dequantize
        self.dequantize(self.packed, self.state)

    def time_interpreter_dequantize(self, shape, dtype):
        self.dequantize(self.packed, self.state)
