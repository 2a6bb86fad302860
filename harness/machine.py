"""The asv machine: named after the GPU, described by the software that shapes its figures.

asv keeps one result series per machine and per value of each field of the machine's description,
so the name and the fields decide what may share a graph:

* the name comes from the GPU (``NVIDIA H100 80GB HBM3`` -> ``h100-80gb-hbm3``): every runner with
  that GPU adds to one series, and a fleet of different GPUs never mixes in one graph;
* the fields record the GPU, its driver, CUDA, torch, Triton, bitsandbytes and Unsloth: a toolchain
  upgrade starts a new line on the same graph instead of looking like a commit's regression;
* nothing that changes from one boot to the next of the same runner is recorded (the kernel
  release, the RAM of a VM whose memory grows as it is used), so it never splits a series.

Without a GPU the machine is ``cpu-<processor>``: the CPU smoke run, kept apart from the GPU history.
"""

from __future__ import annotations

import platform
import re
import subprocess
from importlib import metadata

PACKAGES = ("torch", "triton", "bitsandbytes", "unsloth")


def slug(text: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``h100-80gb-hbm3``: lower case, vendor dropped, one dash between words."""
    text = re.sub(r"^(nvidia|amd)\s+", "", text.strip(), flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "unknown"


def version(package: str) -> str:
    """The installed version, read without importing the package (Unsloth's import takes 30 s)."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    try:
        from asv.util import get_cpu_info

        return get_cpu_info() or platform.processor() or platform.machine()
    except ImportError:
        return platform.processor() or platform.machine()


def driver_version() -> str:
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        try:
            found = pynvml.nvmlSystemGetDriverVersion()
            return found.decode() if isinstance(found, bytes) else found
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no nvidia-ml-py, or NVML refused: ask nvidia-smi
        try:
            done = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
            return done.stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            return "unknown"


def describe() -> dict:
    """The machine's asv description: its name (``machine``) and the fields recorded with every result."""
    import os

    import torch

    info = {
        "arch": platform.machine(),
        "os": platform.system(),
        "cpu": cpu_model(),
        "num_cpu": str(os.cpu_count()),
        "ram": "",  # not recorded: a VM's memory can grow while it runs, which would split the series
    }
    if torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
        info.update(machine=slug(gpu), gpu=gpu, driver=driver_version(), cuda=torch.version.cuda or "unknown")
    else:
        info.update(machine=f"cpu-{slug(info['cpu'])}", gpu="none", driver="none", cuda="none")
    info.update({package: version(package) for package in PACKAGES})
    return info


def register(info: dict | None = None, path: str | None = None) -> dict:
    """Describe this machine and store it where ``asv run --machine NAME`` reads it (~/.asv-machine.json)."""
    from asv.machine import MachineCollection

    info = describe() if info is None else info
    MachineCollection.save(info["machine"], info, _path=path)
    return info


def one_line(info: dict) -> str:
    if info["gpu"] == "none":
        return f"machine {info['machine']}: {info['cpu']}, no CUDA GPU"
    versions = ", ".join(f"{p} {info[p]}" for p in PACKAGES)
    return f"machine {info['machine']}: {info['gpu']}, driver {info['driver']}, CUDA {info['cuda']}, {versions}"
