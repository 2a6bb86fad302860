"""The asv machine: named after the GPU (``h100-80gb-hbm3``; without one ``cpu-<processor>``, which
the site leaves out), its series split by ``toolchain``, the software that shapes its figures; the
rest in ``machine.json``, nothing that changes between boots. Why: docs/performance-history.md.
"""

from __future__ import annotations

import json
import os
import platform
import re
from pathlib import Path

from asv.util import get_cpu_info

from harness.core import gpu_state


def slug(text: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``h100-80gb-hbm3``: lower case, vendor dropped, one dash between words."""
    text = re.sub(r"^(nvidia|amd)\s+", "", text.strip(), flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "unknown"


def driver_version() -> str:
    """The driver's version (NVML); ``unknown`` where it doesn't answer: every value of machine.json is
    a string."""
    return gpu_state.driver_versions()["driver"] or "unknown"


def describe() -> dict:
    """Everything the machine's description holds (``machine.json``): its name, hardware, versions."""
    try:
        import torch
    except ImportError:  # a fresh venv without torch: then there is no CUDA GPU to use either
        torch = None

    info = {
        "arch": platform.machine(),
        "os": platform.system(),
        "cpu": get_cpu_info() or platform.processor() or platform.machine(),
        "num_cpu": str(os.cpu_count()),
        "ram": "",  # not recorded: a VM's memory can grow while it runs, which would split the series
    }
    if torch is not None and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
        info.update(machine=slug(gpu), gpu=gpu, driver=driver_version(), cuda=torch.version.cuda or "unknown")
    else:
        info.update(machine=f"cpu-{slug(info['cpu'])}", gpu="none", driver="none", cuda="none")
    info.update({package: gpu_state.package_version(package) or "not installed" for package in gpu_state.PACKAGES})
    return info


def toolchain(info: dict) -> str:
    """The versions that shape the figures, in one value: ``torch 2.11.0, triton 3.6.0, CUDA 13.0, ...``."""
    parts = [f"torch {info['torch']}", f"triton {info['triton']}"]
    if info.get("gpu", "none") != "none":
        parts += [f"CUDA {info['cuda']}", f"driver {info['driver']}"]
    parts += [f"bitsandbytes {info['bitsandbytes']}"]
    if info.get("unsloth", "not installed") != "not installed":
        parts += [f"unsloth {info['unsloth']}"]
    return ", ".join(parts)


def register(path: str | None = None) -> dict:
    """Describe this machine, and store the parameters its series split on where ``asv run --machine
    NAME`` reads them (~/.asv-machine.json). Returns the whole description (``record`` writes it)."""
    from asv.machine import MachineCollection

    info = describe()
    MachineCollection.save(info["machine"], {"machine": info["machine"], "toolchain": toolchain(info)}, _path=path)
    return info


def record(results_dir, info: dict) -> None:
    """The whole description in ``<results_dir>/<machine>/machine.json``, which asv's site shows beside
    the machine's name (asv writes only the parameters there at each run)."""
    path = Path(results_dir) / info["machine"] / "machine.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**info, "toolchain": toolchain(info), "version": 1}, indent=4, sort_keys=True) + "\n")


def one_line(info: dict) -> str:
    if info["gpu"] == "none":
        return f"machine {info['machine']}: {info['cpu']}, no CUDA GPU"
    versions = ", ".join(f"{p} {info[p]}" for p in gpu_state.PACKAGES)
    return f"machine {info['machine']}: {info['gpu']}, driver {info['driver']}, CUDA {info['cuda']}, {versions}"
