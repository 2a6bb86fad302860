"""nf4kernel on the GPU, measured in one process per run (asv's ``setup_cache``), then tracked.

One process measures every shape and implementation (``benchmarks/_ruler.py``), so Unsloth, about
30 s to import, is imported once per run and not once per parameter; asv then records each figure
as a ``track_`` result. Every value is lower-is-better.

Commits benchmarked by the backfill (``nox -s backfill``) carry only nf4kernel's own figures
(kernel time, time over copy, memory peak): the ratios to Unsloth and bitsandbytes start at the
commits benchmarked with the full suite.
"""

from __future__ import annotations

import statistics

from . import _ruler

SHAPE_PARAMS = (list(_ruler.SHAPES), list(_ruler.DTYPES))
SHAPE_NAMES = ["shape", "dtype"]


def setup_cache():
    return _ruler.measure()


setup_cache.timeout = 1200  # Unsloth's import twice (fused and classic), then every shape


class _Figures:
    params = SHAPE_PARAMS
    param_names = SHAPE_NAMES
    # An explicit version keeps the history when this file's code is edited: asv drops the results
    # of a benchmark whose version changed. Bump it only when the figure changes meaning.
    version = 1
    needs = "nf4kernel"

    def setup(self, figures, shape, dtype):
        if self.needs not in figures["baselines"]:
            why = figures["errors"].get(self.needs, "not measured in this run (the nf4kernel-only subset)")
            raise NotImplementedError(f"{self.needs}: {why}")
        self.figures = figures["shapes"][_ruler.key(shape, dtype)]


class KernelTime(_Figures):
    """nf4kernel.dequantize(layer): GPU time of one call with a cold L2 (triton.testing.do_bench
    zeroes 256 MB before each call; CUDA events; median). The weight is a
    Linear4bit(compress_statistics=True, quant_type="nf4") of (out, in) features."""

    unit = "seconds"

    def track_kernel_time(self, figures, shape, dtype):
        return self.figures["kernel_s"]


class TimeOverCopy(_Figures):
    """nf4kernel's kernel time over a device-to-device copy that moves the same bytes (what the
    dequantization reads and writes), both timed alike: 1.0 would be copy speed."""

    unit = "nf4kernel time / copy time"

    def track_time_over_copy(self, figures, shape, dtype):
        return self.figures["kernel_s"] / self.figures["copy_s"]


class PeakGpuMemory(_Figures):
    """GPU memory one nf4kernel.dequantize(layer) call allocates at its peak, beyond what was
    allocated before it (the output is all it should need)."""

    unit = "bytes"

    def track_peak_gpu_memory(self, figures, shape, dtype):
        return self.figures["peak_bytes"]


class SynchronizedTime(_Figures):
    """Seconds per nf4kernel.dequantize(layer) followed by torch.cuda.synchronize(): host cost, launch
    latency and kernel together (Challenge A's notion of a call), back to back on one weight; the
    median over 5 rounds of 100 calls, interleaved with the baselines' (the loop the ratios use),
    in the one measuring process. Tracked, not gated: it moves with the host's load."""

    unit = "seconds"

    def track_synchronized_time(self, figures, shape, dtype):
        return statistics.median(self.figures["synchronized_s"]["nf4kernel"])


class _Ratio(_Figures):
    times = "synchronized_s"

    def track_ratio(self, figures, shape, dtype):
        return _ruler.ratio(self.figures[self.times], self.needs)


class RatioToUnsloth(_Ratio):
    """nf4kernel's time per call over Unsloth's fast_dequantize (its fused Triton path), with
    torch.cuda.synchronize() after every call as Challenge A does; 5 interleaved rounds of 100 calls,
    median of the round ratios. Below 1: nf4kernel is faster (0.5 = twice as fast). Commits that
    the backfill measured (nf4kernel's own figures only) have no point on the ratio graphs."""

    needs = "unsloth"
    unit = "nf4kernel time / Unsloth time"


class RatioToUnslothClassic(_Ratio):
    """As RatioToUnsloth, against Unsloth's classic path (UNSLOTH_BNB_TRITON=0: bitsandbytes' ctypes
    kernels), both timed interleaved in a process of their own."""

    needs = "unsloth_classic"
    unit = "nf4kernel time / Unsloth classic time"
    times = "classic_synchronized_s"


class RatioToBitsandbytes(_Ratio):
    """As RatioToUnsloth, against bitsandbytes.functional.dequantize_4bit (its CUDA kernel)."""

    needs = "bitsandbytes"
    unit = "nf4kernel time / bitsandbytes time"
