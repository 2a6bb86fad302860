"""The gate's decision, pure (tested on recorded timings): pass when the median over rounds of
(Unsloth's round time / nf4kernel's) is at least the threshold; a 95% bootstrap interval says how
sure that is. How and why it decides so: docs/speed-gate.md."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.core import exits, gate_record, policy, stats

# The policy (.github/gpu-types.toml's [policy.gate], harness/core/policy.py): the trusted checkout's.
POLICY = policy.gate()
DEFAULT_THRESHOLD = POLICY.threshold  # nf4kernel at least this many times as fast as Unsloth (median)
MIN_ROUNDS = POLICY.rounds
DEFAULT_MAX_ROUNDS = POLICY.max_rounds  # where the gate stops adding rounds to an inconclusive interval

# The bootstrap (``harness/core/stats.py``): the gate's own stream and each end a draw, so every
# gate record replays to the interval it was decided with (docs/speed-gate.md).
CI_LEVEL = stats.CI_LEVEL
RESAMPLES = POLICY.resamples
SEED = POLICY.seed

EXIT_PASS = 0
EXIT_TOO_SLOW = 1
EXIT_INCORRECT = 3
EXIT_NO_GPU = exits.NO_GPU
EXIT_NO_UNSLOTH = 5


@dataclass
class Verdict:
    passed: bool
    exit_code: int
    reasons: list = field(default_factory=list)
    ratio_median: float | None = None
    ratio_min: float | None = None
    ratio_max: float | None = None
    ci_low: float | None = None  # the CI_LEVEL bootstrap interval of the median ratio
    ci_high: float | None = None
    rounds: int | None = None
    notes: list = field(default_factory=list)  # said with the verdict; not reasons to fail
    throttled_rounds: list = field(default_factory=list)  # 1-based round numbers

    def line(self) -> str:
        """``PASS``, ``PASS: note`` or ``FAIL: reason; reason; note``."""
        said = [*self.reasons, *self.notes]
        return ("PASS" if self.passed else "FAIL") + (": " + "; ".join(said) if said else "")


def bootstrap_interval(
    samples: Sequence[float], level: float = CI_LEVEL, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float]:
    """The percentile bootstrap interval of the median of ``samples``, rounds resampled whole (the
    two implementations in one round share its clocks and heat): Python's ``random.Random(seed)``,
    each end a draw."""
    stats.checked(samples)
    stats.checked_level(level)
    draws = stats.medians(samples, stats.python_stream(seed), resamples)
    return stats.percentile_interval(draws, level, between_draws=False)


def straddles(interval: tuple[float, float], threshold: float) -> bool:
    """Whether the interval leaves the verdict open: the median passes at ``>= threshold``, so an
    interval all at or above it is a sure pass and one all below it a sure fail."""
    low, high = interval
    return low < threshold <= high


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


def throttled_rounds(record: dict) -> list[tuple[int, list[str]]]:
    """(1-based round, reasons) for each round taken while the GPU throttled; [] for a record
    without states (recorded before the gate kept them)."""
    states = record.get("round_states") or []
    return [(i + 1, state["throttled"]) for i, state in enumerate(states) if state.get("throttled")]


def check_threshold(threshold: float) -> float:
    """ValueError unless ``threshold`` is a finite speed-up above 0: a NaN one would pass every
    record (no median is below NaN)."""
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 < threshold < math.inf:
        raise ValueError(f"the threshold is a finite speed-up above 0, not {threshold!r}")
    return threshold


def more_rounds_would_help(record: dict, threshold: float) -> bool:
    return straddles(bootstrap_interval(round_ratios(record)), threshold)


def decide(record: dict, threshold: float = DEFAULT_THRESHOLD) -> Verdict:
    """Pass only when everything was measured, every output was exact and the median ratio over the
    interleaved rounds is at least ``threshold``. Nothing measured is never a pass.
    A record that breaks its schema (``gate_record.check_gate``), or a threshold that is no finite
    positive speed-up, is a ValueError: no verdict."""
    check_threshold(threshold)
    gate_record.check_gate(record, "the record")
    environment = record["environment"]
    if not environment.get("cuda"):
        why = environment.get("cuda_error", "no CUDA GPU here")
        return Verdict(False, EXIT_NO_GPU, [f"{why}: nothing was measured, so the gate cannot pass"])
    if not environment.get("unsloth"):
        problem = environment.get("unsloth_error", "not installed")
        return Verdict(False, EXIT_NO_UNSLOTH, [f"Unsloth is not importable ({problem}): no baseline, no pass"])
    checks = record["correctness"]
    wrong = [c for c in checks if not c["ok"]]
    if not checks or wrong:
        reasons = [f"{c['shape']} {c['weight']}: {c.get('reason') or c['check'] + ' differs'}" for c in wrong]
        reasons = reasons or ["no correctness checks ran"]
        return Verdict(False, EXIT_INCORRECT, reasons)
    ratios = round_ratios(record)
    if len(ratios) < MIN_ROUNDS:
        return Verdict(False, EXIT_TOO_SLOW, [f"only {len(ratios)} timed rounds; the gate needs {MIN_ROUNDS}"])
    median = statistics.median(ratios)
    low, high = bootstrap_interval(ratios)
    verdict = Verdict(True, EXIT_PASS, [], median, min(ratios), max(ratios), low, high, len(ratios))
    if median < threshold:
        verdict.reasons.append(f"median speed-up {median:.3f}x over Unsloth is below the threshold {threshold:.2f}x")
    if straddles((low, high), threshold):
        bound = record.get("max_rounds")
        at = f"at the bound of {bound} rounds" if bound and len(ratios) >= bound else f"at {len(ratios)} rounds"
        verdict.notes.append(
            f"the {CI_LEVEL:.0%} interval {low:.3f}x to {high:.3f}x straddles the threshold: inconclusive {at}; "
            "decided on the median"
        )
    throttled = throttled_rounds(record)
    if throttled:
        verdict.throttled_rounds = [n for n, _ in throttled]
        reasons = sorted({r for _, rs in throttled for r in rs})
        verdict.notes.append(
            f"round{'s' if len(throttled) > 1 else ''} {', '.join(str(n) for n, _ in throttled)} of {len(ratios)} "
            f"taken while the GPU throttled ({', '.join(reasons)}); counted, as both implementations ran in each"
        )
    if verdict.reasons:
        verdict.passed, verdict.exit_code = False, EXIT_TOO_SLOW
    return verdict
