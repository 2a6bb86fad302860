"""A QLoRA training step end to end (``benchmarks/_training.py``), tracked in the history beside the
kernel's figures: one measuring process per run (asv's ``setup_cache``), every column and setting.

Where there is no CUDA GPU, or no ``transformers``/``peft`` (docs/self-hosted-runner.md installs them),
every figure is skipped, saying why; any other error fails them. Every value is lower-is-better.
These figures are history, not a gate: the regression check judges the kernel's per-call samples.
"""

from __future__ import annotations

import json

from . import _training_settings as plan

SETTINGS = [f"{batch}x{sequence}" for batch, sequence in plan.SETTINGS]


def setup_cache():
    import torch

    if not torch.cuda.is_available():
        return {"skip": "needs a CUDA GPU (none here)"}
    try:
        import peft  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as error:
        return {"skip": f"needs transformers and peft: {error}"}
    from . import _training  # here, not at the top: it imports torch (benchmarks/_training_settings.py)

    # Without Unsloth: its import patches transformers and PEFT for the whole process, and its patched
    # model did not train deterministically on an H100, so stock would not be stock (_training.measure).
    # As plain JSON types: asv unpickles these figures in each of the 27 parameter processes, and one
    # value that was not plain (torch.__version__, a TorchVersion) made every one of them import torch,
    # about 4 s each on an H100 machine (git show 418dba5:benchmarks/results/rehearsal/h100-run18-main-job/).
    return json.loads(json.dumps(_training.measure(unsloth=False)))


setup_cache.timeout = 1200  # a Llama-3-8B-layer checkpoint written and loaded, every setting


class _Training:
    version = 1

    def setup(self, figures, *params):
        if "skip" in figures:
            raise NotImplementedError(figures["skip"])


class _PerColumn(_Training):
    """A figure per setting and dequantizer (the last parameter); a column not measured is skipped,
    saying why."""

    params = (SETTINGS, list(plan.COLUMNS))
    param_names = ["batch x sequence", "dequantizer"]

    def setup(self, figures, *params):
        super().setup(figures, *params)
        column = params[-1]
        if column not in figures["columns"]:
            raise NotImplementedError(f"{column}: {figures['errors'].get(column, 'not measured')}")


class TrainingStepTime(_PerColumn):
    """Milliseconds per QLoRA training step (forward, backward, AdamW on the adapters), Llama-3-8B
    layer dimensions, 2 layers, LoRA r=16 on every linear; median of 7 interleaved rounds of 10 steps."""

    unit = "milliseconds"

    def track_step_time(self, figures, setting, column):
        return figures["settings"][setting]["timed"][column]["step_ms"]


class TrainingPeakMemory(_PerColumn):
    """Peak GPU memory allocated over a round of training steps, in MiB."""

    unit = "MiB"

    def track_peak_memory(self, figures, setting, column):
        return figures["settings"][setting]["timed"][column]["peak_memory_mb"]


class TrainingStepOverBitsandbytes(_Training):
    """nf4kernel's training step time over stock bitsandbytes' in the same model (below 1: faster)."""

    params = (SETTINGS,)
    param_names = ["batch x sequence"]
    unit = "nf4kernel step / bitsandbytes step"

    def track_step_ratio(self, figures, setting):
        timed = figures["settings"][setting]["timed"]
        return timed["nf4kernel"]["step_ms"] / timed["bitsandbytes"]["step_ms"]


class DecodeTimePerToken(_PerColumn):
    """Milliseconds per generated token, one at a time with the KV cache, no grad (bitsandbytes'
    inference path: its fused kernel where it picks it)."""

    params = (["1", "8"], list(plan.COLUMNS))
    param_names = ["batch", "dequantizer"]
    unit = "milliseconds"

    def track_decode_time(self, figures, batch, column):
        return figures["decode"][batch][column]["ms_per_token"]
