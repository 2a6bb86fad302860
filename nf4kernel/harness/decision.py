"""The gate's decision, from a record of measurements: pure, so it is tested on recorded timings.

A record (what ``gate.py`` writes as JSON) holds the environment, the correctness checks and, per
implementation, the seconds of each interleaved round for each shape.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

DEFAULT_THRESHOLD = 1.15  # nf4kernel must be at least this many times as fast as Unsloth (median)
MIN_ROUNDS = 5

EXIT_PASS = 0
EXIT_TOO_SLOW = 1
EXIT_INCORRECT = 3
EXIT_NO_GPU = 4
EXIT_NO_UNSLOTH = 5


@dataclass
class Verdict:
    passed: bool
    exit_code: int
    reasons: list = field(default_factory=list)
    ratio_median: float | None = None
    ratio_min: float | None = None
    ratio_max: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def round_ratios(record: dict, baseline: str = "unsloth", candidate: str = "nf4kernel") -> list[float]:
    """Per round: the baseline's total time over the candidate's (above 1: the candidate is faster)."""
    seconds = record["seconds"]
    return [sum(b) / sum(c) for b, c in zip(seconds[baseline], seconds[candidate], strict=True)]


def shape_ratios(record: dict, baseline: str = "unsloth", candidate: str = "nf4kernel") -> list[float]:
    """Per shape: the median over rounds of the baseline's time over the candidate's."""
    seconds = record["seconds"]
    shapes = range(len(seconds[candidate][0]))
    pairs = list(zip(seconds[baseline], seconds[candidate], strict=True))
    return [statistics.median(b[i] / c[i] for b, c in pairs) for i in shapes]


def per_call_us(rounds: list, shape: int, calls_per_timing: int) -> float:
    """Microseconds per call for one shape, median round: each timing is calls x (up, gate, down)."""
    return 1e6 * statistics.median(r[shape] for r in rounds) / (3 * calls_per_timing)


def decide(record: dict, threshold: float = DEFAULT_THRESHOLD) -> Verdict:
    """Pass only when everything was measured, every output was exact, and the median ratio over the
    interleaved rounds is at least ``threshold``. Nothing measured is never a pass."""
    environment = record.get("environment", {})
    if not environment.get("cuda"):
        why = environment.get("cuda_error", "no CUDA GPU here")
        return Verdict(False, EXIT_NO_GPU, [f"{why}: nothing was measured, so the gate cannot pass"])
    if not environment.get("unsloth"):
        problem = environment.get("unsloth_error", "not installed")
        return Verdict(False, EXIT_NO_UNSLOTH, [f"Unsloth is not importable ({problem}): no baseline, no pass"])
    checks = record.get("correctness", [])
    wrong = [c for c in checks if not c["ok"]]
    if not checks or wrong:
        reasons = [f"{c['shape']} {c['weight']}: {c['check']} differs" for c in wrong] or ["no correctness checks ran"]
        return Verdict(False, EXIT_INCORRECT, reasons)
    ratios = round_ratios(record)
    if len(ratios) < MIN_ROUNDS:
        return Verdict(False, EXIT_TOO_SLOW, [f"only {len(ratios)} timed rounds; the gate needs {MIN_ROUNDS}"])
    median = statistics.median(ratios)
    verdict = Verdict(True, EXIT_PASS, [], median, min(ratios), max(ratios))
    if median < threshold:
        verdict.passed, verdict.exit_code = False, EXIT_TOO_SLOW
        verdict.reasons.append(f"median speed-up {median:.3f}x over Unsloth is below the threshold {threshold:.2f}x")
    return verdict
