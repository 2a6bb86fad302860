"""Time per dequantize call, synchronized after each call, so the time is the GPU's (and the host's
launch cost), not the launch's alone: nf4kernel, Unsloth, Unsloth's classic path, bitsandbytes."""

from __future__ import annotations

from ._shared import DTYPES, SHAPES, classic_environment, implementation, require_gpu, weight


class TimeDequantize:
    params = (list(SHAPES), list(DTYPES), ["nf4kernel", "unsloth", "bitsandbytes"])
    param_names = ["shape", "dtype", "implementation"]
    rounds = 1
    repeat = (5, 20, 10.0)
    warmup_time = 0.2

    def setup(self, shape, dtype, name):
        require_gpu()
        import torch

        self.sync = torch.cuda.synchronize
        self.fn = implementation(name)
        self.layer = weight(shape, dtype)
        self.fn(self.layer)
        self.sync()

    def time_dequantize(self, shape, dtype, name):
        self.fn(self.layer)
        self.sync()


class TimeDequantizeUnslothClassic:
    """Unsloth with UNSLOTH_BNB_TRITON=0 (bitsandbytes' ctypes kernels behind its fast_dequantize)."""

    params = (list(SHAPES), list(DTYPES))
    param_names = ["shape", "dtype"]
    rounds = 1
    repeat = (5, 20, 10.0)
    warmup_time = 0.2

    def setup(self, shape, dtype):
        require_gpu()
        classic_environment()
        import torch

        self.sync = torch.cuda.synchronize
        self.fn = implementation("unsloth_classic")
        self.layer = weight(shape, dtype)
        self.fn(self.layer)
        self.sync()

    def time_dequantize(self, shape, dtype):
        self.fn(self.layer)
        self.sync()


class TimeCpuInterpreter:
    """CPU smoke run: the kernel in Triton's interpreter at small sizes. Shows that the pipeline works
    on a machine without a GPU; its times are no speed verdict on the kernel."""

    params = (["256x512", "1024x512"], list(DTYPES))
    param_names = ["shape", "dtype"]
    rounds = 1
    repeat = (1, 5, 5.0)

    def setup(self, shape, dtype):
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
