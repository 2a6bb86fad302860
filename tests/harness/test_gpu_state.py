"""The GPU's state for the gate's record, read on the CPU: NVML's reason mask decoded, a stand-in
pynvml read, and every reader degrading to a reason where there is no GPU."""

from __future__ import annotations

import sys
import types

import pytest

from harness.core import gpu_state


@pytest.mark.parametrize(
    "mask,names",
    [
        (0x0, []),
        (0x1, ["gpu_idle"]),
        (0x4, ["sw_power_cap"]),
        (0x5, ["gpu_idle", "sw_power_cap"]),
        (0x48, ["hw_slowdown", "hw_thermal_slowdown"]),
        (0x1A0, ["sw_thermal_slowdown", "hw_power_brake_slowdown", "display_clock_setting"]),
        (0x12, ["applications_clocks_setting", "sync_boost"]),
        (1 << 63, ["unknown"]),
        (0x204, ["sw_power_cap", "bit_0x200"]),  # a bit no table knows yet is kept, by its value
    ],
)
def test_the_reason_mask_decodes_into_names(mask, names):
    assert gpu_state.decode_reasons(mask) == names


@pytest.mark.parametrize("bad", [-1, "0x4", 4.0, None, True])
def test_a_mask_that_is_no_mask_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="reason mask"):
        gpu_state.decode_reasons(bad)


@pytest.mark.parametrize(
    "reasons,slowdowns",
    [
        (["gpu_idle"], []),
        (["applications_clocks_setting", "display_clock_setting"], []),
        ([], []),
        (None, []),  # NVML could not read the mask: no evidence, no mark
        (["gpu_idle", "sw_power_cap"], ["sw_power_cap"]),
        (["hw_slowdown", "sw_thermal_slowdown"], ["hw_slowdown", "sw_thermal_slowdown"]),
        (["hw_thermal_slowdown", "hw_power_brake_slowdown"], ["hw_thermal_slowdown", "hw_power_brake_slowdown"]),
        (["sync_boost"], ["sync_boost"]),
        (["bit_0x200"], ["bit_0x200"]),
    ],
)
def test_only_reasons_that_slow_a_kernel_mark_a_round(reasons, slowdowns):
    assert gpu_state.is_throttled({"throttle_reasons": reasons}) == slowdowns


def test_an_unavailable_state_is_not_throttled():
    assert gpu_state.is_throttled({"unavailable": "no nvidia-smi"}) == []


def test_every_known_reason_is_either_a_slowdown_or_not():
    known = set(gpu_state.REASONS.values())
    assert gpu_state.SLOWDOWNS | gpu_state.NOT_SLOWDOWNS == known
    assert gpu_state.SLOWDOWNS >= {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown"}


# --- NVML through a stand-in nvidia-ml-py ---------------------------------------------------------


class NVMLError(Exception):
    pass


def fake_pynvml(mask=0x4, old_names=False, power=699_120, init_error=None):
    """The calls gpu_state makes, answering what an H200 under its power cap answers (power in mW)."""
    calls = []

    def refused(*_):
        raise NVMLError("Not Supported")

    def clock(handle, kind):
        return {"sm": 1755, "mem": 3201}[kind]

    def init():
        calls.append("init")
        if init_error:
            raise init_error

    nvml = types.SimpleNamespace(
        calls=calls,
        NVML_CLOCK_SM="sm",
        NVML_CLOCK_MEM="mem",
        NVML_TEMPERATURE_GPU="gpu",
        nvmlInit=init,
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByIndex=lambda i: ("index", i),
        nvmlDeviceGetHandleByUUID=lambda u: ("uuid", u),
        nvmlDeviceGetHandleByPciBusId=lambda b: ("bus", b),
        nvmlDeviceGetClockInfo=clock,
        nvmlDeviceGetMaxClockInfo=lambda h, kind: 1980,
        nvmlDeviceGetTemperature=lambda h, sensor: 61,
        nvmlDeviceGetPowerUsage=refused if power is None else (lambda h: power),
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 700_000,
        nvmlSystemGetDriverVersion=lambda: b"580.159.04",
        nvmlSystemGetCudaDriverVersion=lambda: 13000,
    )
    if old_names:
        nvml.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: mask
    else:
        nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda h: mask
    return nvml


@pytest.mark.parametrize("old_names", [False, True], ids=["EventReasons", "ThrottleReasons"])
def test_an_nvml_snapshot(old_names):
    nvml = fake_pynvml(old_names=old_names)
    state = gpu_state.nvml_snapshot(nvml, 0)
    assert state == {
        "sm_clock_mhz": 1755,
        "mem_clock_mhz": 3201,
        "max_sm_clock_mhz": 1980,
        "temperature_c": 61,
        "power_w": pytest.approx(699.12),
        "power_limit_w": 700.0,
        "throttle_mask": 4,
        "throttle_reasons": ["sw_power_cap"],
        "source": "nvml",
    }
    assert nvml.calls == ["init", "shutdown"]  # NVML is let go of after every snapshot
    assert gpu_state.is_throttled(state) == ["sw_power_cap"]


def test_a_field_nvml_refuses_is_none_and_the_rest_is_read():
    state = gpu_state.nvml_snapshot(fake_pynvml(power=None), 0)
    assert state["power_w"] is None and state["sm_clock_mhz"] == 1755


@pytest.mark.parametrize("device,kind", [(0, "index"), ("GPU-5f1e", "uuid"), ("00000000:17:00.0", "bus")])
def test_the_device_is_found_by_index_uuid_or_bus_id(device, kind):
    seen = []
    nvml = fake_pynvml()
    nvml.nvmlDeviceGetMaxClockInfo = lambda handle, clock: seen.append(handle) or 1980
    gpu_state.nvml_snapshot(nvml, device)
    assert seen == [(kind, device)]


def test_snapshot_reads_nvml_else_says_why_not(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    assert gpu_state.snapshot(0)["source"] == "nvml"

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_error=NVMLError("Driver Not Loaded")))
    assert gpu_state.snapshot(0) == {"unavailable": "NVML: NVMLError: Driver Not Loaded"}

    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    assert gpu_state.snapshot(0) == {"unavailable": "nvidia-ml-py (pynvml) is not installed"}


def test_torch_index_to_nvml_device():
    bus = types.SimpleNamespace(pci_domain_id=0, pci_bus_id=0x17, pci_device_id=0)
    assert gpu_state.nvml_device(0, bus, "3") == "00000000:17:00.0"  # the bus id settles it
    assert gpu_state.nvml_device(1, None, "2, 3") == 3
    assert gpu_state.nvml_device(0, None, "GPU-5f1e,GPU-77aa") == "GPU-5f1e"
    assert gpu_state.nvml_device(1, None, None) == 1
    assert gpu_state.nvml_device(0, types.SimpleNamespace(), "") == 0


# --- Versions -----------------------------------------------------------------------------------------


def test_versions_never_import_unsloth(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", str(tmp_path))
    real = gpu_state.metadata.version
    monkeypatch.setattr(
        gpu_state.metadata, "version", lambda p: "2026.10.9" if p == "unsloth" else real(p), raising=True
    )
    monkeypatch.delitem(sys.modules, "unsloth", raising=False)
    found = gpu_state.versions()
    assert found["unsloth"] == "2026.10.9" and "unsloth" not in sys.modules
    assert found["driver"] is None and found["cuda_driver"] is None  # no NVML here
    assert found["torch"] and found["triton"]
    assert set(found) == {"driver", "cuda", "cuda_driver", "torch", "triton", "bitsandbytes", "unsloth"}


def test_a_package_that_is_absent_is_none():
    assert gpu_state.package_version("no-such-package-nf4kernel") is None


def test_versions_from_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_error=NVMLError("Driver Not Loaded")))
    assert gpu_state.driver_versions() == {"driver": None, "cuda_driver": None}
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    found = gpu_state.versions()
    assert found["driver"] == "580.159.04" and found["cuda_driver"] == "13.0"
    nvml = fake_pynvml()
    nvml.nvmlSystemGetCudaDriverVersion = lambda: 12080
    assert gpu_state.nvml_versions(nvml)["cuda_driver"] == "12.8"
