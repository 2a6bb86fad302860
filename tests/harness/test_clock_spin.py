"""The clock's processes spin while they wait for the GPU (``harness/clock/spin.py``), on a driver
stood in for by a fake: every visible device is set before anything else, a refusal is named, and
the CPU (no driver, or no device) is left alone."""

from __future__ import annotations

import pytest

from harness.clock import spin


class FakeDriver:
    def __init__(self, devices: int = 2, init: int = 0, refuse: str | None = None):
        self.devices, self.init, self.refuse, self.calls = devices, init, refuse, []

    def __call__(self, name):  # stands in for ctypes.CDLL
        assert name == "libcuda.so.1"
        return self

    def _answer(self, name: str) -> int:
        self.calls.append(name)
        return 999 if name == self.refuse else 0

    def cuInit(self, flags):
        self.calls.append("cuInit")
        return self.init

    def cuDeviceGetCount(self, count):
        count._obj.value = self.devices
        return self._answer("cuDeviceGetCount")

    def cuDeviceGet(self, device, ordinal):
        device._obj.value = 10 + ordinal
        return self._answer("cuDeviceGet")

    def cuDevicePrimaryCtxSetFlags(self, device, flags):
        self.calls.append((device.value, flags))
        return 999 if self.refuse == "cuDevicePrimaryCtxSetFlags" else 0


def test_every_visible_device_spins():
    driver = FakeDriver(devices=2)
    assert spin.spin_while_waiting(driver) == 2
    assert driver.calls == [
        "cuInit",
        "cuDeviceGetCount",
        "cuDeviceGet",
        (10, spin.SCHED_SPIN),
        "cuDeviceGet",
        (11, spin.SCHED_SPIN),
    ]


@pytest.mark.parametrize("refuse", ["cuDeviceGetCount", "cuDeviceGet", "cuDevicePrimaryCtxSetFlags"])
def test_a_call_the_driver_refuses_is_named(refuse):
    with pytest.raises(RuntimeError, match=f"CUDA's {refuse}.* failed.*999"):
        spin.spin_while_waiting(FakeDriver(refuse=refuse))


def test_a_failed_init_is_named_and_no_device_is_the_cpu():
    with pytest.raises(RuntimeError, match="cuInit failed: error 3"):
        spin.spin_while_waiting(FakeDriver(init=3))
    assert spin.spin_while_waiting(FakeDriver(init=spin.NO_DEVICE)) == 0


def test_no_driver_is_the_cpu():
    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    assert spin.spin_while_waiting(missing) == 0
