"""Tracked quantities, each lower-is-better as asv assumes of every result:

* nf4kernel's time over Unsloth's on the puzzle loop (synchronize after each call): below 1 is faster;
* nf4kernel's back-to-back time over a device copy of the same bytes: 1.0 would be copy speed;
* the GPU memory a call allocates at its peak (asv's peakmem_ sees host memory only).
"""

from __future__ import annotations

from ._shared import DTYPES, SHAPES, implementation, require_gpu, weight

CHALLENGE_SHAPES = ["8192x2048", "4096x1024", "14336x4096"]


def _per_call(fn, layer, calls, sync_each):
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        fn(layer)
        if sync_each:
            torch.cuda.synchronize()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


class TrackRatioToUnsloth:
    params = (CHALLENGE_SHAPES, list(DTYPES))
    param_names = ["shape", "dtype"]
    unit = "nf4kernel time / Unsloth time"
    rounds = 1

    def setup(self, shape, dtype):
        require_gpu()
        self.layer = weight(shape, dtype)
        self.ours, self.theirs = implementation("nf4kernel"), implementation("unsloth")

    def track_ratio_to_unsloth(self, shape, dtype):
        import statistics

        ratios = []
        for _ in range(5):  # interleaved
            ours = _per_call(self.ours, self.layer, 200, sync_each=True)
            theirs = _per_call(self.theirs, self.layer, 200, sync_each=True)
            ratios.append(ours / theirs)
        return statistics.median(ratios)


class _Nf4kernelOnGpu:
    params = (list(SHAPES), list(DTYPES))
    param_names = ["shape", "dtype"]
    rounds = 1

    def setup(self, shape, dtype):
        require_gpu()
        self.layer = weight(shape, dtype)
        self.ours = implementation("nf4kernel")


class TrackCopyBandwidth(_Nf4kernelOnGpu):
    unit = "nf4kernel time / copy time"

    def setup(self, shape, dtype):
        super().setup(shape, dtype)
        import torch

        from nf4kernel.harness import workload

        half = workload.bytes_moved(self.layer) // 2  # a copy reads and writes: same bytes moved
        self.src = torch.empty(half, dtype=torch.uint8, device="cuda").random_()
        self.dst = torch.empty_like(self.src)

    def track_time_over_copy(self, shape, dtype):
        ours = _per_call(self.ours, self.layer, 100, sync_each=False)
        copy = _per_call(lambda _: self.dst.copy_(self.src), None, 100, sync_each=False)
        return ours / copy


class TrackPeakGpuMemory(_Nf4kernelOnGpu):
    unit = "bytes"

    def track_peak_gpu_memory(self, shape, dtype):
        import torch

        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        self.ours(self.layer)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
