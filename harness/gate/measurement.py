"""The gate's measurement in this process: what ran here (CUDA, the device, the versions, Unsloth),
the kernel under test put first on the path and checked to be the one imported, correctness, the
interleaved rounds with the GPU's state around each (more while the verdict's interval straddles
its limit), Unsloth's classic path in a process of its own, and the A/A rounds. The record it
returns is what ``cli.py`` decides on and reports; nothing here decides.
"""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import sys
from pathlib import Path

from harness.core import gpu_state, kernel_source, records
from harness.gate import decision, noise

ROUNDS_PER_BATCH = 2  # rounds added at a time while the interval straddles the threshold


def log(message: str) -> None:
    print(f"[gate] {message}", flush=True)


def environment(with_unsloth: bool = True) -> dict:
    """What ran here: CUDA or why not, the device, the versions (gpu_state.versions) and whether
    Unsloth imports (``with_unsloth``: its import takes 30 s; the A/A check doesn't need it)."""
    versions = gpu_state.versions()
    try:
        import torch
    except ImportError as error:
        # The README's venv has no torch: the one line names the session whose environment has it.
        where = "`nox -s gate` runs the gate in the environment nox builds with torch"
        return {
            "cuda": False,
            "torch": None,
            "cuda_error": f"torch is not importable ({error}; {where})",
            "versions": versions,
        }

    env = {"cuda": torch.cuda.is_available(), "torch": torch.__version__, "versions": versions}
    if not env["cuda"]:
        env["cuda_error"] = f"torch {torch.__version__} sees no CUDA GPU"
        return env
    import bitsandbytes
    import triton

    from harness.core import workload

    env.update(device=workload.device_name(), triton=triton.__version__, bitsandbytes=bitsandbytes.__version__)
    if not with_unsloth:
        return env
    try:
        workload.implementation("unsloth")
        env["unsloth"] = workload.unsloth_version()
    except Exception as error:  # ImportError, or unsloth refusing this machine
        env["unsloth"] = None
        env["unsloth_error"] = f"{type(error).__name__}: {error}"
    return env


def check_correctness(mlps, impls) -> list[dict]:
    """Every weight bit-identical to bitsandbytes and to Unsloth; ``X @ W.t()`` through it matching the
    module's own forward: bit-identical where cuBLAS picks the same algorithm for both operand
    layouts, else within the puzzle's check (``torch.testing.assert_close`` defaults)."""
    import torch

    checks = []
    for mlp in mlps:
        for name, layer in zip(("up", "gate", "down"), mlp.layers, strict=True):
            ours = impls["nf4kernel"](layer)
            for other in ("bitsandbytes", "unsloth"):
                ok = torch.equal(ours, impls[other](layer))
                checks.append({"shape": mlp.label, "weight": name, "check": other, "ok": ok, "exact": ok})
            x = torch.randn(2, 64, layer.in_features, dtype=mlp.dtype, device="cuda")
            got, expected = x @ ours.t(), layer(x)
            exact = torch.equal(got, expected)
            try:
                torch.testing.assert_close(got, expected)
                ok = True
            except AssertionError:
                ok = False
            checks.append({"shape": mlp.label, "weight": name, "check": "Linear4bit forward", "ok": ok, "exact": exact})
    return checks


def use_kernel(source: str | None, stack: contextlib.ExitStack) -> dict:
    """Puts the kernel under test first on this process's path (and on its children's): ``source``'s
    nf4kernel alone, staged for the length of ``stack``; with no source, the one this Python finds
    (this checkout's). What the record says about it."""
    if source is None:
        return {"source": "the nf4kernel this Python imports"}
    else:
        kernel = stack.enter_context(kernel_source.staged(source))
    sys.path.insert(0, str(kernel.path))
    os.environ["PYTHONPATH"] = kernel_source.python_path(kernel.path, kernel_source.ROOT)
    log(f"the kernel under test: {kernel.describe()} (from {source})")
    return {"source": source, "commit": kernel.commit, "staged": str(kernel.path)}


def check_kernel(record: dict) -> None:
    """The nf4kernel this process imported is the one under test (SourceError, exit 2, if not)."""
    staged = record.get("kernel", {}).get("staged")
    if staged:
        record["kernel"]["imported_from"] = kernel_source.imported_from(Path(staged))
    else:
        import nf4kernel

        record.setdefault("kernel", {})["imported_from"] = os.path.realpath(nf4kernel.__file__)


def run_classic(rounds: int) -> dict:
    """Unsloth's classic (bitsandbytes ctypes) path, which it picks at import: a process of its own
    (``harness/core/classic.py``) on the same kernel under test."""
    from harness.core import classic

    return classic.in_own_process(["--rounds", str(rounds)], timeout=900)


def timed_rounds(record: dict, impls: dict, mlps: list, count: int, device) -> None:
    """Adds ``count`` interleaved rounds to ``record["seconds"]``, and the GPU's state before and
    after each to ``record["round_states"]``, carrying on the alternation of the rounds before."""
    from harness.core import workload

    seconds = record.setdefault("seconds", {name: [] for name in impls})
    states = record.setdefault("round_states", [])
    for _ in range(count):
        index = len(states)
        before = gpu_state.snapshot(device)
        times = workload.one_round(impls, mlps, index)
        after = gpu_state.snapshot(device)
        # Either end counts: a cap seen only before the round was probably on for part of it.
        throttled = sorted(set(gpu_state.is_throttled(before)) | set(gpu_state.is_throttled(after)))
        states.append({"state_before": before, "state_after": after, "throttled": throttled})
        for name, shape_seconds in times.items():
            seconds[name].append(shape_seconds)
        totals = ", ".join(f"{name} {sum(times[name]):.3f} s" for name in impls)
        log(f"round {index + 1}: {totals}" + (f" (GPU throttled: {', '.join(throttled)})" if throttled else ""))


def time_until_decided(record: dict, add_rounds, threshold: float):
    """``record["rounds_first"]`` rounds, then ROUNDS_PER_BATCH more at a time while the speed-up's
    interval straddles the threshold, up to ``record["max_rounds"]``; ``add_rounds(count)``
    times them into the record. Leaves the number timed in ``record["rounds"]``."""
    add_rounds(record["rounds_first"])
    while (done := len(record["seconds"]["nf4kernel"])) < record["max_rounds"] and decision.more_rounds_would_help(
        record, threshold
    ):
        more = min(ROUNDS_PER_BATCH, record["max_rounds"] - done)
        bound = record["max_rounds"]
        log(f"the 95% interval straddles the threshold after {done} rounds: {more} more (at most {bound})")
        add_rounds(more)
    record["rounds"] = len(record["seconds"]["nf4kernel"])


def prepare(record: dict) -> list:
    """The Challenge A weights, and what the record says about them and the run."""
    from harness.core import workload

    record["calls_per_timing"] = workload.ROUNDS_PER_TIMING
    log("building the Challenge A weights")
    mlps = workload.challenge_a()
    record["shapes"] = [
        {"label": mlp.label, "bytes_per_call": statistics.mean(workload.bytes_moved(layer) for layer in mlp.layers)}
        for mlp in mlps
    ]
    return mlps


def measure(
    rounds: int,
    with_classic: bool,
    max_rounds: int | None = None,
    threshold: float = decision.DEFAULT_THRESHOLD,
    kernel: dict | None = None,
) -> dict:
    """Correctness, then ``rounds`` timed rounds, then more (ROUNDS_PER_BATCH at a time, up to
    ``max_rounds``) while the speed-up's interval straddles the threshold."""
    max_rounds = max(rounds, max_rounds or rounds)
    record = {"command": " ".join(["python -m harness gate", *sys.argv[1:]]), "environment": environment()}
    record["kernel"] = dict(kernel or {})
    record.update(rounds=rounds, rounds_first=rounds, max_rounds=max_rounds, harness_version=records.IN_PROCESS_VERSION)
    env = record["environment"]
    if not env["cuda"] or not env.get("unsloth"):
        return record
    import torch

    from harness.core import workload

    log(f"{env['device']}: torch {env['torch']}, triton {env['triton']}, unsloth {env['unsloth']}")
    impls = {name: workload.implementation(name) for name in ("nf4kernel", "unsloth", "bitsandbytes")}
    check_kernel(record)
    log(f"nf4kernel imported from {record['kernel']['imported_from']}")
    record["environment"]["copy_bytes_per_s"] = workload.copy_bandwidth()
    mlps = prepare(record)
    log("checking correctness")
    record["correctness"] = check_correctness(mlps, impls)
    bad = [c for c in record["correctness"] if not c["ok"]]
    log(f"{len(record['correctness']) - len(bad)}/{len(record['correctness'])} checks exact")
    if bad:
        return record
    device = gpu_state.current_device()
    log(f"timing {rounds} interleaved rounds of {workload.ROUNDS_PER_TIMING} x (up, gate, down) per shape")
    workload.warm_up(impls, mlps)
    add_rounds = functools.partial(timed_rounds, record, impls, mlps, device=device)
    time_until_decided(record, add_rounds, threshold)
    del add_rounds, mlps  # the weights' GPU memory goes before the classic path's process starts
    torch.cuda.empty_cache()
    if with_classic:
        log("timing Unsloth's classic path in its own process (UNSLOTH_BNB_TRITON=0)")
        record["classic"] = run_classic(rounds)
    return record


def measure_aa(rounds: int, kernel: dict | None = None) -> dict:
    """nf4kernel against itself: the same function in slots A and B, interleaved like the gate's."""
    record = {
        "mode": noise.MODE,
        "command": " ".join(["python -m harness gate", *sys.argv[1:]]),
        "environment": environment(with_unsloth=False),
        "rounds": rounds,
        "kernel": dict(kernel or {}),
        "harness_version": records.IN_PROCESS_VERSION,
    }
    if not record["environment"]["cuda"]:
        return record
    from harness.core import workload

    dequantize = workload.implementation("nf4kernel")
    check_kernel(record)
    impls = {noise.A: dequantize, noise.B: dequantize}
    mlps = prepare(record)
    log(f"timing {rounds} A/A rounds (nf4kernel against itself)")
    workload.warm_up(impls, mlps)
    timed_rounds(record, impls, mlps, rounds, gpu_state.current_device())
    return record
