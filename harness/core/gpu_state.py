"""The GPU's state around a timed round (clocks, throttle reasons, temperature, power) and the
versions that shape a figure, for the records; read through NVML (nvidia-ml-py), never raising where
it is missing (docs/harness-code.md).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from importlib import metadata

# NVML's clocks-event ("throttle") reason bits, unchanged since R340, under nvidia-smi's names
# (clocks_event_reasons.*); newer NVML spells the constants nvmlClocksEventReason*, older
# nvmlClocksThrottleReason*, with the same values, so the table needs neither.
REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    1 << 63: "unknown",  # R340's "some other factor"
}

# The reasons that are not a slowdown of a running kernel, so they never mark a round:
# - gpu_idle: nothing was running; the "before" snapshot is taken between rounds, when it is normal.
# - applications_clocks_setting, display_clock_setting: clocks held where an administrator set them,
#   a standing configuration that is the same in every round of a run (and in the base's run).
NOT_SLOWDOWNS = frozenset({"gpu_idle", "applications_clocks_setting", "display_clock_setting"})
# Everything else is: the power cap (clocks lowered to stay under the power limit), hardware and
# software thermal slowdowns, the power brake, sync boost (held down to the slowest GPU of a group),
# R340's "unknown", and any bit this table does not know (named "bit_0x...") until someone looks.
SLOWDOWNS = frozenset(REASONS.values()) - NOT_SLOWDOWNS

STATE_KEYS = ("sm_clock_mhz", "mem_clock_mhz", "max_sm_clock_mhz", "temperature_c", "power_w", "power_limit_w")


def decode_reasons(mask: int) -> list[str]:
    """NVML's reason bitmask as names; bits no table knows come out as ``bit_0x...`` so that a new
    driver's reason is recorded, not dropped. 0 (NVML's "none": clocks as high as they go) is []."""
    if isinstance(mask, bool) or not isinstance(mask, int) or mask < 0:
        raise ValueError(f"a clocks-event reason mask is a non-negative int, not {mask!r}")
    names = [name for bit, name in REASONS.items() if mask & bit]
    rest = mask & ~sum(REASONS)
    names += [f"bit_{1 << i:#x}" for i in range(rest.bit_length()) if rest >> i & 1]
    return names


def is_throttled(state: dict) -> list[str]:
    """The reasons in a snapshot that slow a running kernel down (everything but NOT_SLOWDOWNS);
    [] for a snapshot without them or an unavailable one: no evidence is not a mark."""
    return [r for r in state.get("throttle_reasons") or [] if r not in NOT_SLOWDOWNS]


# --- Which GPU: torch's index is not NVML's ------------------------------------------------------


def nvml_device(cuda_index: int = 0, properties=None, visible: str | None = None) -> int | str:
    """The GPU torch calls ``cuda:<cuda_index>``, as NVML and nvidia-smi name it.

    CUDA numbers GPUs fastest first and after CUDA_VISIBLE_DEVICES; NVML and nvidia-smi number all
    of the host's GPUs in PCI order. So: the PCI bus id where torch gives one (``properties``:
    torch.cuda.get_device_properties), else the CUDA_VISIBLE_DEVICES entry (an index or a UUID),
    else the index itself (right on a one-GPU runner)."""
    bus = getattr(properties, "pci_bus_id", None)
    if bus is not None:
        domain, device = getattr(properties, "pci_domain_id", 0), getattr(properties, "pci_device_id", 0)
        return f"{domain:08X}:{bus:02X}:{device:02X}.0"
    entries = [e.strip() for e in (visible or "").split(",") if e.strip()]
    if cuda_index < len(entries):
        entry = entries[cuda_index]
        return int(entry) if entry.isdigit() else entry
    return cuda_index


def current_device() -> int | str:
    """nvml_device for torch's current CUDA device (call only where torch sees one)."""
    import torch

    index = torch.cuda.current_device()
    properties = torch.cuda.get_device_properties(index)
    return nvml_device(index, properties, os.environ.get("CUDA_VISIBLE_DEVICES"))


# --- Reading the state ----------------------------------------------------------------------------


def snapshot(device: int | str = 0) -> dict:
    """The GPU's clocks, throttle reasons, temperature and power now; ``device`` is an NVML index, a
    UUID (``GPU-...``) or a PCI bus id (nvml_device). ``{"unavailable": why}`` where NVML can't say."""
    pynvml = _pynvml()
    if pynvml is None:
        return {"unavailable": "nvidia-ml-py (pynvml) is not installed"}
    try:
        return nvml_snapshot(pynvml, device)
    except Exception as error:  # NVMLError_LibraryNotFound (no driver), NotSupported, ...
        return {"unavailable": f"NVML: {type(error).__name__}: {error}"}


def _pynvml():
    try:
        import pynvml  # nvidia-ml-py: optional, never a dependency
    except ImportError:
        return None
    return pynvml


def _handle(pynvml, device: int | str):
    if isinstance(device, int):
        return pynvml.nvmlDeviceGetHandleByIndex(device)
    if device.startswith(("GPU-", "MIG-")):
        return pynvml.nvmlDeviceGetHandleByUUID(device)
    return pynvml.nvmlDeviceGetHandleByPciBusId(device)


def nvml_snapshot(pynvml, device: int | str = 0) -> dict:
    """One snapshot through NVML. A field NVML refuses (a MIG slice has no power reading) is None;
    the mask comes from the call the installed nvidia-ml-py has (EventReasons, else ThrottleReasons)."""
    pynvml.nvmlInit()
    try:
        handle = _handle(pynvml, device)
        clock_sm, clock_mem = pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM
        readers = {
            "sm_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(handle, clock_sm),
            "mem_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(handle, clock_mem),
            "max_sm_clock_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, clock_sm),
            "temperature_c": lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
            "power_w": lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000,  # mW
            "power_limit_w": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000,
        }
        state = {key: _or_none(read) for key, read in readers.items()}
        get_mask = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if get_mask is None:  # an older nvidia-ml-py: the same call under its old name
            get_mask = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        mask = _or_none(lambda: get_mask(handle))
    finally:
        pynvml.nvmlShutdown()
    state["throttle_mask"] = mask
    state["throttle_reasons"] = None if mask is None else decode_reasons(int(mask))
    state["source"] = "nvml"
    return state


def _or_none(read):
    try:
        return read()
    except Exception:  # pynvml.NVMLError_NotSupported and kin: this GPU doesn't report the field
        return None


# --- Versions -------------------------------------------------------------------------------------

PACKAGES = ("torch", "triton", "bitsandbytes", "unsloth")


def package_version(package: str) -> str | None:
    """The installed version, read from the package's metadata: never imported (``import unsloth``
    takes 30 s and patches other libraries)."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict:
    """The driver; CUDA as torch was built for it (``cuda``) and as the driver supports it
    (``cuda_driver``, NVML only); torch, Triton, bitsandbytes and Unsloth. None where absent."""
    found = {"driver": None, "cuda": None, "cuda_driver": None}
    found.update({package: package_version(package) for package in PACKAGES})
    with contextlib.suppress(ImportError):
        import torch

        found["cuda"] = torch.version.cuda
    found.update(driver_versions())
    return found


def driver_versions() -> dict:
    """The driver's version (``driver``) and the CUDA version it supports (``cuda_driver``), through
    NVML; None where absent. The one reader of the driver's version: the gate's record (versions)
    and the asv machine (harness/history/asvrun.py) use it."""
    pynvml = _pynvml()
    try:
        return nvml_versions(pynvml) if pynvml is not None else {"driver": None, "cuda_driver": None}
    except Exception:  # no driver behind the bindings
        return {"driver": None, "cuda_driver": None}


def nvml_versions(pynvml) -> dict:
    pynvml.nvmlInit()
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = _or_none(lambda: pynvml.nvmlSystemGetCudaDriverVersion())  # 13000 -> "13.0"; absent in old bindings
    finally:
        pynvml.nvmlShutdown()
    driver = driver.decode() if isinstance(driver, bytes) else driver
    return {"driver": driver, "cuda_driver": None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}"}


def gpu_here() -> bool:
    """An NVIDIA GPU a process started from here could use, asked of the driver (``nvidia-smi``), not
    torch: a process that only starts others (the rehearsal, the gate's trusted parent) skips torch's
    import and CUDA's start, a few seconds. nvidia-smi ignores CUDA_VISIBLE_DEVICES; CUDA doesn't: an
    empty value (how the CPU tests hide the GPU of a GPU machine) means none, as it does for torch."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return False
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and "GPU" in done.stdout
