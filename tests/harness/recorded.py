"""Gate records made to order (per-round totals, noise, correctness), the committed H200 runs, and
records derived from them (timings scaled, GPU states added), for the decision and gate tests."""

from __future__ import annotations

import json
import random
from pathlib import Path

ENV = {"cuda": True, "device": "NVIDIA H100 80GB HBM3", "unsloth": "2026.10.9", "copy_bytes_per_s": 3.0e12}


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

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
COMMITTED_RUNS = range(1, 6)  # benchmarks/results/gate-h200-run{1..5}.json: one commit, five gate runs


def committed(run: int) -> dict:
    """A gate record measured on an H200 (before issue 10: no GPU states, no interval)."""
    return json.loads((RESULTS / f"gate-h200-run{run}.json").read_text())


def scaled(recorded: dict, factor: float, name: str = "nf4kernel") -> dict:
    """A copy with every one of ``name``'s timings multiplied by ``factor`` (1.25: 25% slower)."""
    copy = json.loads(json.dumps(recorded))
    copy["seconds"][name] = [[s * factor for s in shapes] for shapes in copy["seconds"][name]]
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
