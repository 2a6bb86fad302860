"""Gate records made to order (per-round totals, noise, correctness), the committed H200 runs, and
records derived from them (timings scaled, GPU states added), for the decision and gate tests."""

from __future__ import annotations

import json
import random
from pathlib import Path

from studies import changepoint_power

ENV = {"cuda": True, "device": "NVIDIA H100 80GB HBM3", "unsloth": "2026.10.9", "copy_bytes_per_s": 3.0e12}
# Challenge A's three MLPs as the gate labels them, with each weight's bytes moved per call.
SHAPES = [("2048x8192 float16", 4.2e7), ("1024x4096 bfloat16", 1.05e7), ("4096x14336 bfloat16", 1.47e8)]


def record(ours_s: float, theirs_s: float, rounds: int = 5, noise: float = 0.0, seed: int = 0, ok: bool = True):
    """A gate record whose per-round totals are ``ours_s`` and ``theirs_s`` (3 shapes), each shape's
    time multiplied by lognormal noise of relative spread ``noise``."""
    rng = random.Random(seed)

    def shapes(total):
        return [total * share * rng.lognormvariate(0, noise) for share in (0.3, 0.2, 0.5)]

    return {
        "environment": dict(ENV),
        "rounds": rounds,
        "calls_per_timing": 1000,
        "shapes": [{"label": label, "bytes_per_call": size} for label, size in SHAPES],
        "seconds": {
            "nf4kernel": [shapes(ours_s) for _ in range(rounds)],
            "unsloth": [shapes(theirs_s) for _ in range(rounds)],
        },
        "correctness": [
            {"shape": "2048x8192 float16", "weight": w, "check": c, "ok": ok}
            for w in ("up", "gate", "down")
            for c in ("bitsandbytes", "unsloth")
        ],
    }


# --- The committed H200 runs, and records derived from them ---------------------------------------

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
COMMITTED_RUNS = range(1, 6)  # tests/fixtures/gate/h200-five-runs/gate-h200-run{1..5}.json: one commit, five gate runs


def committed(run: int) -> dict:
    """A gate record measured on an H200 (from before the GPU states and the interval)."""
    return json.loads((FIXTURES / "gate" / "h200-five-runs" / f"gate-h200-run{run}.json").read_text())


def scaled(recorded: dict, factor: float, name: str = "nf4kernel", shapes=None) -> dict:
    """A copy with ``name``'s timings multiplied by ``factor`` (1.25: 25% slower), on every shape or
    on the shapes (indices) given."""
    copy = json.loads(json.dumps(recorded))
    copy["seconds"][name] = [
        [s * factor if shapes is None or i in shapes else s for i, s in enumerate(rnd)] for rnd in copy["seconds"][name]
    ]
    return copy


# What gpu_state.snapshot returned on a loaded H200 (values in the range nvidia-smi shows there):
# after a round at full clocks, and one where the power cap held the SM clock down.
STATE_FULL = {
    "sm_clock_mhz": 1980,
    "mem_clock_mhz": 3201,
    "max_sm_clock_mhz": 1980,
    "temperature_c": 41,
    "power_w": 412.5,
    "power_limit_w": 700.0,
    "throttle_mask": 0,
    "throttle_reasons": [],
    "source": "nvml",
}
STATE_IDLE = {**STATE_FULL, "sm_clock_mhz": 345, "power_w": 88.2, "throttle_mask": 1, "throttle_reasons": ["gpu_idle"]}
STATE_CAPPED = {**STATE_FULL, "sm_clock_mhz": 1755, "power_w": 699.1, "throttle_mask": 4}
STATE_CAPPED["throttle_reasons"] = ["sw_power_cap"]


def with_states(recorded: dict, throttled: dict | None = None) -> dict:
    """A copy with a state before (idle) and after (loaded) each round, as gate.py records them;
    ``throttled`` maps 1-based rounds to the reasons the snapshot after them showed."""
    copy = json.loads(json.dumps(recorded))
    throttled = throttled or {}
    copy["round_states"] = []
    for n in range(1, len(next(iter(copy["seconds"].values()))) + 1):
        after = {**STATE_CAPPED, "throttle_reasons": throttled[n]} if n in throttled else STATE_FULL
        copy["round_states"].append(
            {"state_before": STATE_IDLE, "state_after": after, "throttled": throttled.get(n, [])}
        )
    return copy


# --- The committed H200 history as paired rounds (the regression check's rule) --------------------

HISTORY = Path(__file__).resolve().parents[2] / "benchmarks" / "history" / "h200"
# One kernel, twelve runs of it on one H200 in ten minutes (the change-point rule's noise draws from
# the same runs): b543b026's full-suite run, then the backfill's eleven commits.
SAME_KERNEL = changepoint_power.SAME_KERNEL_H200
KERNEL_TIME = "gpu.KernelTime.track_kernel_time"


REGRESSION_RUNS = FIXTURES / "asv" / "h200-regression-results" / "h200"  # b543b026, and its 2x plant 21cb5f2f


def history_run(commit: str, folder: Path = HISTORY) -> dict:
    """One run's kernel times from the committed history: ``{"14336x4096 bfloat16": seconds, ...}``."""
    import itertools

    data = json.loads(next(folder.glob(f"{commit}-*.json")).read_text())
    values, params = data["results"][KERNEL_TIME][:2]
    names = [[p.strip("'") for p in ps] for ps in params]
    return {f"{shape} {dtype}": v for (shape, dtype), v in zip(itertools.product(*names), values, strict=True)}


def packed_bytes(key: str) -> int:
    out_features, in_features = (int(n) for n in key.split()[0].split("x"))
    return out_features * in_features // 2


def paired_record(runs, slower=None) -> dict:
    """The runs, in order, as paired rounds (two runs a round, their roles alternating as the check
    alternates them): each run's median per result, one sample each. ``slower`` maps a result to the
    factor HEAD's samples get (a planted change of known size)."""
    slower = slower or {}
    rounds = []
    for i in range(0, len(runs) - 1, 2):
        first, second = history_run(runs[i]), history_run(runs[i + 1])
        base, head = (first, second) if (i // 2) % 2 == 0 else (second, first)
        rounds.append(
            {
                "order": ["base", "head"] if (i // 2) % 2 == 0 else ["head", "base"],
                "base": {k: [v] for k, v in base.items()},
                "head": {k: [v * slower.get(k, 1.0)] for k, v in head.items()},
            }
        )
    return {"rounds": rounds, "bytes": {k: packed_bytes(k) for k in rounds[0]["base"]}}


def planted_2x() -> dict:
    """Per result, HEAD's kernel time over BASE's as an H200 measured them with the 2x plant (every
    planned launch made twice: 1.68x to 1.94x per result), from one run of each."""
    base, head = history_run("b543b026", REGRESSION_RUNS), history_run("21cb5f2f", REGRESSION_RUNS)
    return {key: head[key] / base[key] for key in base}


def regression_record(slower=None, base: str = "b" * 40, head: str = "h" * 40, runs=SAME_KERNEL) -> dict:
    """A whole record as ``harness.regression --measure-only`` writes it: a first pass of three rounds
    (the first six of ``runs``, same-kernel runs) and, for what it leaves to re-measure, a second (the
    last six)."""
    from harness.regression import rule as regression_rule
    from studies import power

    first = paired_record(runs[:6], slower)
    passes = [first]
    again = regression_rule.suspects(regression_rule.judge(first))
    if again:
        passes.append(power.only(paired_record(runs[6:], slower), again))
    return {"base": base, "head": head, "device": "NVIDIA H200 (recorded runs)", "passes": passes}


H100_LADDER = FIXTURES / "power-h100"  # studies.power on an H100: a859f84, then 637a7c4


def h100_ladder(plant: str) -> dict:
    """A whole record as the regression check wrote it on an H100 for a planted slowdown (every call's
    time, per result, per process): ``large-5pct``, ``large-10pct``, ``large-20pct`` or ``all-5pct``."""
    from studies import power

    (path,) = H100_LADDER.glob(f"ladder-{plant}-*.json.gz")
    return power.read_record(path)


# studies.power noop on H100s: six of 637a7c4 on one machine, one of 7b9ff45 (power.read_record)
H100_NOOPS = sorted(H100_LADDER.glob("noop-*.json.gz"))
