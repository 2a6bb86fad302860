"""The regression check's measurement: BASE's and HEAD's kernels in paired rounds, then again where
the first pass saw something (``regression_rule.suspects``).

A round is one fresh process of each kernel, back to back, BASE first in odd rounds and HEAD first
in even ones (``kernel_samples.py``: every call's time, per weight). Each process runs
the kernel staged alone from its commit (``kernel_source``) with this checkout's ruler, and says
where it imported nf4kernel from; a process that ran another copy is refused. One discarded process
of each kernel comes first: it compiles both kernels into their caches and brings the GPU out
of idle, which a first round would otherwise pay for one side only.

The record (what ``regression --replay`` decides from)::

    {"environment": {...}, "base": sha, "head": sha, "rule": {...},
     "passes": [{"rounds": [...], "bytes": {...}, "peak_bytes": {"base": {...}, "head": {...}}}, ...]}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from harness.core import kernel_source, sandbox
from harness.core.paths import ROOT
from harness.regression import rule as regression_rule

SIDES = ("base", "head")
FIRST_ROUNDS = 3
SECOND_ROUNDS = 5
TIMEOUT_S = 600  # one process: the suite's twelve weights take under a minute on an H100
NO_SANDBOX = False  # --no-sandbox: a machine without bubblewrap (the workflows never pass it)


class MeasureError(RuntimeError):
    """A process of the measurement failed: its exit code and last line say why."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def run_side(kernel: kernel_source.Staged, keys: list[str], device: str) -> dict:
    """One process of one kernel: ``kernel_samples.py``'s JSON, on its stdout (a pipe to
    this process, which never imports either kernel). It runs in bubblewrap's sandbox
    (``sandbox.py``): the staged kernel and this checkout read-only, the compile cache of that
    kernel's commit read-write (``sandbox.kernel_cache``), nothing of the job's and nothing of the
    other kernel's; it starts in the staged folder (sys.path[0]: the staged nf4kernel, ahead of this
    checkout's), with this checkout on PYTHONPATH for the measuring stack. Without a sandbox here
    (``NO_SANDBOX``, set by --no-sandbox), a plain process."""
    staged = kernel.path
    path = kernel_source.python_path(staged, ROOT)
    command = [sys.executable, "-m", "harness.regression.kernel_samples", "--device", device, "--keys", *keys]
    cache = sandbox.kernel_cache(kernel.commit)
    env = {"PYTHONPATH": path, **sandbox.cache_env(cache)}
    try:
        if NO_SANDBOX:
            env = {**os.environ, **env}
            done = subprocess.run(command, cwd=staged, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        else:
            view = {"read": [staged, ROOT], "write": [cache], "cwd": staged, "env": env}
            done = sandbox.run(command, timeout=TIMEOUT_S, stderr=subprocess.PIPE, **view)
    except subprocess.TimeoutExpired:
        raise MeasureError(f"{staged}: timed out after {TIMEOUT_S} s") from None
    except sandbox.Unavailable as error:
        raise MeasureError(f"no sandbox here: {error} (--no-sandbox measures without)", 2) from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        why = (done.stderr or done.stdout).strip().splitlines() or [f"exit {done.returncode}"]
        raise MeasureError(f"{staged}: {why[-1]}", done.returncode or 1)
    found = probe_output(lines[-1], staged)
    where = os.path.realpath(found["nf4kernel"])
    if not where.startswith(os.path.realpath(staged) + os.sep):
        raise MeasureError(f"the process imported nf4kernel from {where}, not the kernel staged in {staged}", 2)
    return found


PROBE_FIELDS = {"nf4kernel": str, "device": str, "samples": dict, "bytes": dict, "peak_bytes": dict}


def probe_output(line: str, staged: Path) -> dict:
    """The probe's last line: a JSON object with what run_pass reads (where it imported nf4kernel
    from, the device, every call's seconds, bytes). MeasureError (exit 2) otherwise: a probe that
    printed something else measured nothing this check can use."""
    try:
        found = json.loads(line)
    except ValueError:
        raise MeasureError(f"{staged}: the probe's last line is not JSON: {line[:200]}", 2) from None
    for key, kind in PROBE_FIELDS.items():
        if not isinstance(found, dict) or not isinstance(found.get(key), kind):
            raise MeasureError(f"{staged}: the probe's answer has no {key} ({kind.__name__}): {line[:200]}", 2)
    return found


def run_pass(staged: dict[str, kernel_source.Staged], keys: list[str], rounds: int, device: str, log=print) -> dict:
    """``rounds`` paired rounds of ``keys``: one record pass."""
    found = {"rounds": [], "bytes": {}, "peak_bytes": {side: {} for side in SIDES}, "states": []}
    for r in range(rounds):
        order = SIDES if r % 2 == 0 else SIDES[::-1]
        timed = {}
        for side in order:
            started = time.perf_counter()
            timed[side] = run_side(staged[side], keys, device)
            took = time.perf_counter() - started
            log(f"regression: round {r + 1}/{rounds}, {side}: {len(keys)} weights in {took:.1f} s")
            found["peak_bytes"][side].update(timed[side]["peak_bytes"])
            found["bytes"].update(timed[side]["bytes"])
        found["rounds"].append({"order": list(order), **{side: timed[side]["samples"] for side in SIDES}})
        found["states"].append({side: timed[side].get("states", {}) for side in SIDES})
    return found


def measure(
    staged: dict[str, kernel_source.Staged],
    keys: list[str],
    device: str = "cuda",
    first_rounds: int = FIRST_ROUNDS,
    second_rounds: int = SECOND_ROUNDS,
    min_change: float = regression_rule.DEFAULT_MIN_CHANGE,
    min_group_change: float = regression_rule.DEFAULT_MIN_GROUP_CHANGE,
    log=print,
) -> dict:
    """Both passes: the first over ``keys``, the second over what the first calls slower or leaves
    open, judged with the limits given (the record keeps them, so a replay re-measures nothing)."""
    for side in SIDES:  # warm-up, discarded
        started = time.perf_counter()
        found = run_side(staged[side], keys, device)
        log(f"regression: warm-up, {side} ({found['device']}): {time.perf_counter() - started:.1f} s, discarded")
    record = {
        "device": found["device"],
        "rule": {"min_change": min_change, "min_group_change": min_group_change},
        "passes": [run_pass(staged, keys, first_rounds, device, log)],
    }
    first = regression_rule.judge(record["passes"][0], min_change, min_group_change)
    again = regression_rule.suspects(first)
    if again:
        log(f"regression: {len(again)} of {len(keys)} results to re-measure before deciding: {', '.join(again)}")
        record["passes"].append(run_pass(staged, again, second_rounds, device, log))
    return record
