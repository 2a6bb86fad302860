"""nf4kernel.dequantize(layer) then torch.cuda.synchronize(), timed by asv itself: the puzzle's notion
of a call (host cost, launch latency and kernel), with asv's sampling and statistics, which the
regression check's significance test uses. One process per shape; nf4kernel only, so no process
imports Unsloth."""

from __future__ import annotations

from . import _ruler


class SynchronizedCall:
    """Seconds per nf4kernel.dequantize(layer) followed by torch.cuda.synchronize(), back to back on
    one Linear4bit(compress_statistics=True, quant_type="nf4") weight (warm L2 for the small ones)."""

    params = (list(_ruler.SHAPES), list(_ruler.DTYPES))
    param_names = ["shape", "dtype"]
    version = 1  # explicit, so edits to this file keep the history (see gpu.py)
    rounds = 1  # one process per shape: its setup (torch, CUDA, the weight) costs more than the timing
    repeat = (5, 20, 1.0)
    warmup_time = 0.1

    def setup(self, shape, dtype):
        _ruler.require_gpu()
        import torch

        self.sync = torch.cuda.synchronize
        self.dequantize = _ruler.implementation("nf4kernel")
        self.layer = _ruler.build_weight(shape, dtype)
        self.dequantize(self.layer)
        self.sync()

    def time_dequantize_synchronized(self, shape, dtype):
        self.dequantize(self.layer)
        self.sync()
