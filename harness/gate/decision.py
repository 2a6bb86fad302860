"""The gate's decision, from a record of measurements: pure, so it is tested on recorded timings.

A record (what ``gate.py`` writes as JSON) holds the environment, the correctness checks, per
implementation the seconds of each interleaved round for each shape and, in newer records, the
GPU's state around each round (``round_states``). Older records (no states) decide the same way.

The rule: pass when the median over rounds of (Unsloth's round time / nf4kernel's) is at least the
threshold. Beside the median, a 95% bootstrap interval says how sure that is; the gate adds rounds
while the interval straddles the threshold (gate.py), and the verdict says so when it still does at
the bound. With a base commit's record, the PR also fails when its speed-up dropped by more than
``max_drop`` with confidence (``compare``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from harness.core import exits, records, stats

DEFAULT_THRESHOLD = 1.15  # nf4kernel must be at least this many times as fast as Unsloth (median)
MIN_ROUNDS = 5
DEFAULT_MAX_ROUNDS = 15  # where the gate stops adding rounds to an inconclusive interval
DEFAULT_MAX_DROP = 0.10  # the most the speed-up may fall from the base commit's, with confidence

# The bootstrap (``harness/core/stats.py``): a percentile interval of the median over rounds. A
# fixed seed, so the same record always gives the same interval (a replay reproduces the verdict);
# 10000 resamples put the 2.5% and 97.5% points within a fraction of a percent of where more would.
# The gate keeps its own stream (``stats.python_stream``, Python's ``random.Random(10)``, as it drew
# before the harness had one bootstrap) and takes each end as a draw (``between_draws=False``): every
# gate record committed or kept by a workflow replays to the interval it was decided with. Rounds are
# resampled whole: the two implementations in one round share its clocks and heat, and the ratio keeps
# that pairing.
CI_LEVEL = stats.CI_LEVEL
RESAMPLES = 10_000
SEED = 10

EXIT_PASS = 0
EXIT_TOO_SLOW = 1
EXIT_BAD_INPUT = 2  # also: a base record with no timings, where the relative check was asked for
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
    baseline: dict | None = None  # compare()'s result, when a base record was given

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        """``PASS``, ``PASS: note`` or ``FAIL: reason; reason; note``."""
        said = [*self.reasons, *self.notes]
        return ("PASS" if self.passed else "FAIL") + (": " + "; ".join(said) if said else "")


# --- The bootstrap --------------------------------------------------------------------------------


def bootstrap_interval(
    samples: Sequence[float],
    statistic: Callable = statistics.median,
    level: float = CI_LEVEL,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    size: int | None = None,
) -> tuple[float, float]:
    """The percentile bootstrap interval of ``statistic`` over ``samples``: resample with
    replacement (``size`` values each time, by default as many as there are), take the statistic
    each time, cut ``(1 - level) / 2`` off each end."""
    stats.checked(samples)
    stats.checked_level(level)
    statistic = None if statistic is statistics.median else statistic  # the median: numpy's, the same values
    draws = stats.medians(samples, stats.python_stream(seed), resamples, size, statistic)
    return stats.percentile_interval(draws, level, between_draws=False)


def ratio_interval(
    candidate: Sequence[float],
    baseline: Sequence[float],
    level: float = CI_LEVEL,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> tuple[float, float]:
    """The bootstrap interval of median(candidate) / median(baseline), the two resampled
    independently (two runs of the gate, whose rounds have nothing to pair them)."""
    stats.checked(candidate, "candidate")
    stats.checked(baseline, "baseline")
    stats.checked_level(level)
    draws = stats.ratios_of_medians(candidate, baseline, stats.python_stream(seed), resamples)
    return stats.percentile_interval(draws, level, between_draws=False)


def straddles(interval: tuple[float, float], threshold: float) -> bool:
    """Whether the interval leaves the verdict open: the median passes at ``>= threshold``, so an
    interval all at or above it is a sure pass and one all below it a sure fail."""
    low, high = interval
    return low < threshold <= high


# --- Reading a record -----------------------------------------------------------------------------


def check_timings(record: dict, names: Sequence[str] = ("nf4kernel", "unsloth"), what: str = "the record") -> None:
    """Raises ValueError naming the problem unless ``record["seconds"][name]`` is, for each name, a
    list of rounds of positive per-shape seconds, all of one shape count, the same number of rounds."""
    seconds = record.get("seconds") if isinstance(record, dict) else None
    if not isinstance(seconds, dict):
        raise ValueError(f"{what} has no timings ('seconds')")
    rounds_per_name, shapes_per_round = set(), set()
    for name in names:
        rounds = seconds.get(name)
        if not isinstance(rounds, list) or not rounds:
            raise ValueError(f"{what} has no rounds timed for {name!r}")
        rounds_per_name.add(len(rounds))
        for i, shapes in enumerate(rounds):
            ok = isinstance(shapes, list) and shapes
            ok = ok and all(isinstance(s, int | float) and math.isfinite(s) and s > 0 for s in shapes)
            if not ok:
                raise ValueError(f"{what}: round {i + 1} of {name!r} is not a list of positive seconds: {shapes!r}")
            shapes_per_round.add(len(shapes))
    if len(rounds_per_name) > 1 or len(shapes_per_round) > 1:
        raise ValueError(f"{what}: {', '.join(names)} differ in their number of rounds or shapes")


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


def compare(record: dict, base: dict, max_drop: float = DEFAULT_MAX_DROP) -> dict:
    """The PR's speed-up over Unsloth against the base commit's, measured on the same runner:
    ``ratio`` = median(PR's round ratios) / median(base's), its bootstrap interval, and ``failed``
    when even the interval's top is below ``1 - max_drop`` (a drop larger than allowed, with
    confidence). A base that timed nothing (its own gate stopped early) gives ``{"skipped": why}``;
    a base of another workload, GPU or harness version is refused (``records.same_workload``)."""
    if not 0 <= max_drop < 1:
        raise ValueError(f"--max-drop is a fraction in [0, 1), not {max_drop!r}")
    records.check_gate(base, "the base's record")
    if "seconds" not in base:
        return {"skipped": f"the base's record timed nothing ({why_untimed(base)})"}
    records.same_workload(base, record)
    ours, theirs = round_ratios(record), round_ratios(base)
    ratio = statistics.median(ours) / statistics.median(theirs)
    low, high = ratio_interval(ours, theirs)
    return {
        "ratio": ratio,
        "ci_low": low,
        "ci_high": high,
        "max_drop": max_drop,
        "failed": high < 1 - max_drop,
        "base_median": statistics.median(theirs),
        "base_rounds": len(theirs),
        "base_run_medians": base.get("run_medians", [statistics.median(theirs)]),
    }


def why_untimed(record: dict) -> str:
    """What a record that timed nothing says about why: its verdict's reasons where it has them."""
    verdict = record.get("verdict")
    reasons = verdict.get("reasons") if isinstance(verdict, dict) else None
    try:  # the verdict is what the base's own run said, unchecked: shown only where it is plain text
        if isinstance(reasons, list) and reasons and all(isinstance(r, str) and r.encode() for r in reasons):
            return "; ".join(reasons)
    except UnicodeEncodeError:
        pass
    return "it has no timings"


def pool(records_: Sequence[dict]) -> dict:
    """One base record from several runs of the base on this runner (the workflow measures it before
    and after the PR's kernel): their rounds together, so that drift between runs, which no run's
    own interval sees, widens the base's spread instead of deciding the verdict. ``run_medians``
    keeps each run's median speed-up, for the table. A record that timed nothing makes the pool time
    nothing (the relative check then fails closed); runs of different workloads are refused."""
    for r in records_:
        records.check_gate(r, "a base record")
    if len(records_) == 1:
        return records_[0]
    timed = [r for r in records_ if "seconds" in r]
    if len(timed) < len(records_):
        return next(r for r in records_ if "seconds" not in r)
    for r in timed[1:]:
        records.same_workload(r, timed[0], "a base record", "the first base record")
    pooled = {**timed[0], "seconds": {}}
    for name in timed[0]["seconds"]:
        if all(name in r["seconds"] for r in timed):  # bitsandbytes, shown beside, may be absent from one
            pooled["seconds"][name] = [rnd for r in timed for rnd in r["seconds"][name]]
    # A state per round, or none: a run without them leaves the pool without them.
    if all(r.get("round_states") for r in timed):
        pooled["round_states"] = [state for r in timed for state in r["round_states"]]
    else:
        pooled.pop("round_states", None)
    pooled["run_medians"] = [statistics.median(round_ratios(r)) for r in timed]
    pooled["rounds"] = sum(len(round_ratios(r)) for r in timed)
    return pooled


def check_threshold(threshold: float) -> float:
    """ValueError unless ``threshold`` is a finite speed-up above 0: a NaN one would pass every
    record (no median is below NaN)."""
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not math.isfinite(threshold):
        raise ValueError(f"the threshold is a finite speed-up, not {threshold!r}")
    if threshold <= 0:
        raise ValueError(f"the threshold is a speed-up above 0, not {threshold!r}")
    return threshold


def more_rounds_would_help(record: dict, threshold: float, base=None, max_drop=DEFAULT_MAX_DROP) -> bool:
    """Whether an interval the verdict rests on still straddles its limit: the speed-up's around
    the threshold, or (with a base) the ratio to the base's around ``1 - max_drop``."""
    ratios = round_ratios(record)
    if straddles(bootstrap_interval(ratios), threshold):
        return True
    if base is not None:
        relative = compare(record, base, max_drop)
        return "skipped" not in relative and straddles((relative["ci_low"], relative["ci_high"]), 1 - max_drop)
    return False


def decide(
    record: dict, threshold: float = DEFAULT_THRESHOLD, base: dict | None = None, max_drop: float = DEFAULT_MAX_DROP
) -> Verdict:
    """Pass only when everything was measured, every output was exact, the median ratio over the
    interleaved rounds is at least ``threshold`` and (given the base commit's record) the speed-up
    did not drop by more than ``max_drop`` with confidence. Nothing measured is never a pass.
    A record that breaks its schema (``records.check_gate``), or a threshold that is no finite
    positive speed-up, is a ValueError: no verdict."""
    check_threshold(threshold)
    records.check_gate(record, "the record")
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
        reasons = [f"{c['shape']} {c['weight']}: {c['check']} differs" for c in wrong] or ["no correctness checks ran"]
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
    exit_code = EXIT_TOO_SLOW
    if base is not None:
        verdict.baseline = compare(record, base, max_drop)
        if "skipped" in verdict.baseline:
            # Fail closed: a relative check was asked for and can't be made, so nothing says the PR
            # is no slower than its base.
            verdict.reasons.append(
                f"no comparison with the base: {verdict.baseline['skipped']}; the gate can't pass without it"
            )
            exit_code = EXIT_BAD_INPUT
        elif verdict.baseline["failed"]:
            b = verdict.baseline
            verdict.reasons.append(
                f"the speed-up over Unsloth dropped {1 - b['ratio']:.1%} from the base's ({CI_LEVEL:.0%} interval "
                f"{1 - b['ci_high']:.1%} to {1 - b['ci_low']:.1%}), more than the allowed {max_drop:.0%}"
            )
    if verdict.reasons:
        verdict.passed, verdict.exit_code = False, exit_code
    return verdict
