"""Who holds a CUDA context on the GPU, as NVML lists them, and the wait until a candidate's are gone:
the driver drops a process from that list only once its context, and everything queued in it, is
gone. Compared as NVML reports it, in whatever PID namespace NVML answers in.
"""

from __future__ import annotations

import time

from harness.core import gpu_state

READERS = (
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetMPSComputeRunningProcesses",
)


class Unavailable(RuntimeError):
    """NVML can't list the GPU's processes here: nothing would confirm a candidate's are gone."""


def holders(device: int | str, pynvml=None) -> frozenset[int]:
    """The PIDs NVML lists with a context on ``device`` (an NVML index, UUID or PCI bus id)."""
    pynvml = pynvml or gpu_state._pynvml()
    if pynvml is None:
        raise Unavailable("nvidia-ml-py (pynvml) is not installed")
    try:
        pynvml.nvmlInit()
    except Exception as error:
        raise Unavailable(f"NVML: {type(error).__name__}: {error}") from None
    try:
        handle = gpu_state._handle(pynvml, device)
        found, read = set(), 0
        for name in READERS:
            reader = getattr(pynvml, name, None)
            if reader is None:
                continue
            try:
                found |= {int(p.pid) for p in reader(handle)}
                read += 1
            except pynvml.NVMLError_NotSupported:
                continue
    except Exception as error:
        raise Unavailable(f"NVML: {type(error).__name__}: {error}") from None
    finally:
        pynvml.nvmlShutdown()
    if not read:
        raise Unavailable("NVML lists no running processes on this GPU (no reader is supported)")
    return frozenset(found)


def wait_until_only(allowed: frozenset[int], read, timeout_s: float, poll_s: float = 0.005) -> frozenset[int]:
    """Until ``read()`` lists no PID outside ``allowed``: the PIDs still there after ``timeout_s``
    (empty when the GPU held only the allowed ones in time)."""
    deadline = time.monotonic() + timeout_s
    while True:
        extra = read() - allowed
        if not extra or time.monotonic() > deadline:
            return extra
        time.sleep(poll_s)
