"""Each process of the clock waits for its GPU by spinning: ``CU_CTX_SCHED_SPIN`` on every visible
device's primary context, set before torch, or the implementation's import, creates the context.

Left to the driver, a synchronized call on an H200 waited through the scheduler. In one process on
one core (``tools/probes/clock_gap.py``, ``benchmarks/results/trusted-clock-waits-h200``), the
puzzle's calls took nf4kernel 35.0 / 27.8 / 61.4 us and Unsloth 63.3 / 62.9 / 93.4 us; spinning,
30.5 / 20.9 / 54.6 and 44.9 / 36.6 / 73.7. The wake-up cost most where a call waits most
(Unsloth's), and it varied from run to run, so the clock's figure moved with it. Spinning costs a
core, which each of the clock's processes has of its own (``processes.cores``).
"""

from __future__ import annotations

import ctypes

SCHED_SPIN = 1  # CU_CTX_SCHED_SPIN
NO_DEVICE = 100  # CUDA_ERROR_NO_DEVICE


def spin_while_waiting(load=ctypes.CDLL) -> int:
    """Every visible device's primary context spins while it waits; the number of devices set, 0
    where there is no CUDA driver or device (the CPU). RuntimeError naming the call the driver
    refused."""
    try:
        cuda = load("libcuda.so.1")
    except OSError:
        return 0
    status = cuda.cuInit(0)
    if status == NO_DEVICE:
        return 0

    def check(what: str, status: int) -> None:
        if status != 0:
            raise RuntimeError(f"CUDA's {what} failed: error {status}")

    check("cuInit", status)
    count = ctypes.c_int()
    check("cuDeviceGetCount", cuda.cuDeviceGetCount(ctypes.byref(count)))
    for ordinal in range(count.value):
        device = ctypes.c_int()
        check(f"cuDeviceGet({ordinal})", cuda.cuDeviceGet(ctypes.byref(device), ordinal))
        check(f"cuDevicePrimaryCtxSetFlags({ordinal})", cuda.cuDevicePrimaryCtxSetFlags(device, SCHED_SPIN))
    return count.value
