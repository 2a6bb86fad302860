"""Gate records made to order: per-round totals, noise, correctness, for the decision tests."""

from __future__ import annotations

import random

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
