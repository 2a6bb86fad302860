"""The asv machine: named after the GPU, described by what shapes its figures, nothing that changes
between boots of one runner."""

from __future__ import annotations

import json

import pytest
import torch

from harness.history import asvrun


@pytest.mark.parametrize(
    "gpu,name",
    [
        ("NVIDIA H100 80GB HBM3", "h100-80gb-hbm3"),
        ("NVIDIA H200", "h200"),
        ("Tesla T4", "tesla-t4"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
        ("NVIDIA GeForce RTX 4090", "geforce-rtx-4090"),
        ("  ", "unknown"),
    ],
)
def test_the_name_comes_from_the_gpu(gpu, name):
    assert asvrun.slug(gpu) == name


def test_the_description_holds_the_versions_and_nothing_that_changes_per_boot():
    info = asvrun.describe()
    for field in ("machine", "gpu", "driver", "cuda", "torch", "triton", "bitsandbytes", "unsloth", "cpu", "arch"):
        assert info[field], field
    assert info["torch"] == torch.__version__.split("+")[0] or info["torch"].startswith(torch.__version__[:4])
    assert info["ram"] == ""  # a VM's memory grows while it runs: recorded, it would split the series
    assert " " not in info["os"]  # the system, not the kernel release, which differs between boots
    if not torch.cuda.is_available():
        assert info["machine"].startswith("cpu-") and info["gpu"] == "none"
        assert "no CUDA GPU" in asvrun.one_line(info)
    else:
        assert info["machine"] == asvrun.slug(torch.cuda.get_device_name(0))


def test_register_stores_it_where_asv_reads_it(tmp_path):
    from asv.machine import Machine

    path = tmp_path / "asv-machine.json"
    info = asvrun.register(path=str(path))
    stored = json.loads(path.read_text())[info["machine"]]
    # asv records these with every result: its graphs split series, and legends name, these alone
    assert set(stored) == {"machine", "toolchain"}
    assert f"torch {info['torch']}" in stored["toolchain"] and f"triton {info['triton']}" in stored["toolchain"]
    loaded = Machine.load(machine_name=info["machine"], _path=str(path))
    assert loaded.machine == info["machine"] and loaded.toolchain == stored["toolchain"]


def test_the_whole_description_goes_beside_the_results(tmp_path):
    info = asvrun.describe()
    asvrun.record(tmp_path, info)
    written = json.loads((tmp_path / info["machine"] / "machine.json").read_text())
    assert written == {**info, "toolchain": asvrun.toolchain(info), "version": 1}


def test_a_gpu_toolchain_names_cuda_the_driver_and_unsloth():
    gpu = {"gpu": "NVIDIA H200", "torch": "2.11.0", "triton": "3.6.0", "cuda": "13.0", "driver": "580.159.04"}
    gpu.update(bitsandbytes="0.50.2", unsloth="2026.10.9")
    assert asvrun.toolchain(gpu) == (
        "torch 2.11.0, triton 3.6.0, CUDA 13.0, driver 580.159.04, bitsandbytes 0.50.2, unsloth 2026.10.9"
    )
    cpu = {**gpu, "gpu": "none", "unsloth": "not installed"}
    assert asvrun.toolchain(cpu) == "torch 2.11.0, triton 3.6.0, bitsandbytes 0.50.2"


def test_without_torch_the_machine_has_no_gpu(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch":
            raise ImportError("No module named 'torch'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    info = asvrun.describe()
    assert info["gpu"] == "none" and info["machine"].startswith("cpu-")


def test_the_driver_is_read_by_gpu_state_and_unknown_where_absent(monkeypatch, tmp_path):
    import sys
    import types

    monkeypatch.setitem(sys.modules, "pynvml", None)  # no nvidia-ml-py
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    assert asvrun.driver_version() == "unknown"  # machine.json holds strings, never null

    nvml = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: b"580.159.04",
        nvmlSystemGetCudaDriverVersion=lambda: 13000,
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert asvrun.driver_version() == "580.159.04"
