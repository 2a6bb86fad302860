"""Each process of the clock waits for its GPU by spinning: ``CU_CTX_SCHED_SPIN`` on every visible
device's primary context, set before anything creates it. Left to the driver, the wake-up added
most to the calls that wait most (Unsloth's) and varied from run to run (docs/harness-code.md,
"The trusted clock").
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
