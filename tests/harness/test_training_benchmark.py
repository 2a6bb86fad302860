"""The asv training figures (``benchmarks/training.py``): skipped with the reason where they can't be
measured, and read from the one measuring process's figures where they were."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import _training_settings, training

ROOT = Path(__file__).resolve().parents[2]


def figures():
    """The shape ``_training.measure`` returns, Unsloth refused (as on a machine where it won't import)."""
    timed = {
        "bitsandbytes": {"step_ms": 6.0, "peak_memory_mb": 900.0},
        "nf4kernel": {"step_ms": 4.0, "peak_memory_mb": 901.0},
    }
    return {
        "columns": ["bitsandbytes", "nf4kernel"],
        "errors": {"unsloth": "ImportError: needs a GPU"},
        "settings": {"1x512": {"timed": timed}},
        "decode": {"1": {"bitsandbytes": {"ms_per_token": 9.0}, "nf4kernel": {"ms_per_token": 9.1}}},
    }


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU setup_cache measures (minutes)")
def test_without_a_gpu_every_training_figure_is_skipped_saying_why():
    cached = training.setup_cache()
    assert cached == {"skip": "needs a CUDA GPU (none here)"}
    with pytest.raises(NotImplementedError, match="needs a CUDA GPU"):
        training.TrainingStepTime().setup(cached, "1x512", "nf4kernel")


def tracked(cls, figures, *params):
    """What asv records for one parameter combination: ``setup`` (a NotImplementedError skips), then
    the class's ``track_`` method."""
    benchmark = cls()
    benchmark.setup(figures, *params)
    (track,) = [getattr(benchmark, name) for name in dir(benchmark) if name.startswith("track_")]
    return track(figures, *params)


def test_the_figures_are_read_from_the_measuring_process():
    found = figures()
    assert tracked(training.TrainingStepTime, found, "1x512", "nf4kernel") == 4.0
    assert tracked(training.TrainingPeakMemory, found, "1x512", "bitsandbytes") == 900.0
    assert tracked(training.TrainingStepOverBitsandbytes, found, "1x512") == pytest.approx(4.0 / 6.0)
    assert tracked(training.DecodeTimePerToken, found, "1", "nf4kernel") == 9.1
    with pytest.raises(NotImplementedError, match="unsloth: ImportError: needs a GPU"):
        tracked(training.TrainingStepTime, found, "1x512", "unsloth")


def test_the_settings_are_the_issues():
    assert training.SETTINGS == ["1x512", "1x2048", "4x2048"]
    assert _training_settings.COLUMNS == ("bitsandbytes", "unsloth", "nf4kernel")
    assert _training_settings.LLAMA3_8B_LAYER == {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
    }


def torch_modules_after(code: str) -> str:
    """The torch modules a fresh Python has imported after running ``code``."""
    code += "; import sys; print([m for m in sys.modules if m.startswith('torch')])"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout


def test_asv_imports_the_benchmark_modules_without_torch():
    """asv runs every parameter combination in a fresh process that imports the benchmark's module and
    unpickles setup_cache's figures: neither may import torch (about 4 s each on an H100 machine, 27
    times over: git show 418dba5:benchmarks/results/rehearsal/h100-run18-main-job/import-cost.txt)."""
    assert torch_modules_after("import benchmarks.gpu, benchmarks.training").strip() == "[]"


def test_the_cached_figures_unpickle_without_torch(monkeypatch):
    """What setup_cache hands asv is plain: a value such as ``torch.__version__`` (a TorchVersion) in the
    measured figures would make each parameter's process import torch to unpickle them."""
    pytest.importorskip("peft")
    pytest.importorskip("transformers")
    from benchmarks import _training

    measured = {"versions": {"torch": torch.__version__}, "settings": {"1x512": {"timed": {"step_ms": 4.0}}}}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(_training, "measure", lambda unsloth: measured)
    cached = training.setup_cache()
    assert cached == measured
    assert torch_modules_after(f"import pickle; pickle.loads({pickle.dumps(cached)!r})").strip() == "[]"
