"""The gate's decision on recorded timings: it fails what it must and passes what it should, states
its confidence, names throttled rounds, and catches a drop from the base commit's speed-up."""

from __future__ import annotations

import random
import statistics

import pytest
from recorded import COMMITTED_RUNS, committed, record, scaled, with_states

from harness.gate import decision


def test_a_planted_2x_slowdown_fails():
    verdict = decision.decide(record(ours_s=0.8, theirs_s=0.4))
    assert not verdict.passed and verdict.exit_code == decision.EXIT_TOO_SLOW
    assert verdict.ratio_median == pytest.approx(0.5)
    assert "below the threshold" in verdict.reasons[0]


@pytest.mark.parametrize("seed", range(20))
def test_noisy_timings_with_a_true_ratio_of_1_3_pass(seed):
    # 5% noise per shape and round (what interleaved rounds on a busy runner show), true ratio 1.3.
    verdict = decision.decide(record(ours_s=0.30, theirs_s=0.39, noise=0.05, seed=seed))
    assert verdict.passed and verdict.exit_code == decision.EXIT_PASS
    assert 1.15 <= verdict.ratio_median <= 1.45
    assert verdict.ratio_min <= verdict.ratio_median <= verdict.ratio_max


def test_the_threshold_is_configurable():
    assert decision.decide(record(0.30, 0.39), threshold=1.2).passed
    assert not decision.decide(record(0.30, 0.39), threshold=1.5).passed


def test_a_correctness_failure_fails_even_when_fast():
    verdict = decision.decide(record(ours_s=0.1, theirs_s=0.4, ok=False))
    assert not verdict.passed and verdict.exit_code == decision.EXIT_INCORRECT
    assert "differs" in verdict.reasons[0]


def test_no_correctness_checks_is_no_pass():
    r = record(0.1, 0.4)
    r["correctness"] = []
    assert decision.decide(r).exit_code == decision.EXIT_INCORRECT


def test_a_missing_gpu_never_passes():
    verdict = decision.decide({"environment": {"cuda": False}})
    assert not verdict.passed and verdict.exit_code == decision.EXIT_NO_GPU
    # even with timings that would pass, recorded somewhere else
    r = record(0.1, 0.4)
    r["environment"]["cuda"] = False
    assert decision.decide(r).exit_code == decision.EXIT_NO_GPU


def test_a_missing_unsloth_never_passes():
    r = record(0.1, 0.4)
    r["environment"]["unsloth"] = None
    r["environment"]["unsloth_error"] = "ModuleNotFoundError: No module named 'unsloth'"
    verdict = decision.decide(r)
    assert not verdict.passed and verdict.exit_code == decision.EXIT_NO_UNSLOTH
    assert "No module named 'unsloth'" in verdict.reasons[0]


def test_too_few_rounds_is_no_pass():
    verdict = decision.decide(record(0.1, 0.4, rounds=3))
    assert not verdict.passed and "needs 5" in verdict.reasons[0]


def test_exit_codes_are_distinct_and_only_pass_is_zero():
    codes = [
        decision.EXIT_PASS,
        decision.EXIT_TOO_SLOW,
        decision.EXIT_INCORRECT,
        decision.EXIT_NO_GPU,
        decision.EXIT_NO_UNSLOTH,
    ]
    assert len(set(codes)) == len(codes) and codes.count(0) == 1 and decision.EXIT_PASS == 0


# --- The bootstrap interval ---------------------------------------------------------------------


def test_the_interval_is_deterministic_and_holds_the_median():
    ratios = [1.423, 1.406, 1.441, 1.425, 1.427]  # run 1's round ratios
    low, high = decision.bootstrap_interval(ratios)
    assert (low, high) == decision.bootstrap_interval(ratios)  # a fixed seed: a replay decides alike
    assert min(ratios) <= low <= statistics.median(ratios) <= high <= max(ratios)
    assert decision.bootstrap_interval([1.3] * 7) == (1.3, 1.3)


def test_the_interval_narrows_with_more_rounds_and_widens_with_the_level():
    rng = random.Random(4)
    few = [rng.lognormvariate(0.25, 0.05) for _ in range(5)]
    many = few + [rng.lognormvariate(0.25, 0.05) for _ in range(40)]
    width = lambda interval: interval[1] - interval[0]  # noqa: E731
    assert width(decision.bootstrap_interval(many)) < width(decision.bootstrap_interval(few))
    assert width(decision.bootstrap_interval(many, level=0.99)) >= width(decision.bootstrap_interval(many, level=0.8))


def test_the_interval_covers_the_true_median_about_as_often_as_it_says():
    # 300 runs of 15 rounds with 5% noise around a true ratio of 1.3: a 95% interval that missed far
    # more than 5% of the time (or cut the wrong tails) would not be an interval of the median.
    rng = random.Random(0)
    covered = 0
    for seed in range(300):
        rounds = [1.3 * rng.lognormvariate(0, 0.05) for _ in range(15)]
        low, high = decision.bootstrap_interval(rounds, resamples=1000, seed=seed)
        covered += low <= 1.3 <= high
    assert 0.88 <= covered / 300 <= 0.995


@pytest.mark.parametrize(
    "samples,kwargs,problem",
    [
        ([], {}, "at least one value"),
        ([1.2, float("nan")], {}, "finite numbers"),
        ([1.2, "1.3"], {}, "finite numbers"),
        ([1.2, 1.3], {"level": 1.0}, "between 0 and 1"),
    ],
)
def test_a_bootstrap_of_nothing_or_of_junk_is_refused_by_name(samples, kwargs, problem):
    with pytest.raises(ValueError, match=problem):
        decision.bootstrap_interval(samples, **kwargs)


@pytest.mark.parametrize(
    "interval,threshold,straddles",
    [((1.1, 1.2), 1.15, True), ((1.15, 1.2), 1.15, False), ((1.16, 1.2), 1.15, False), ((1.1, 1.15), 1.15, True)],
)
def test_what_straddles_the_threshold(interval, threshold, straddles):
    # The median passes at >= threshold: an interval starting at the threshold is a sure pass, one
    # ending there is not a sure fail.
    assert decision.straddles(interval, threshold) is straddles


# --- The verdict on the committed H200 runs and records derived from them ---------------------------


@pytest.mark.parametrize("run", COMMITTED_RUNS)
def test_every_committed_run_replays_with_an_interval_that_clears_the_threshold(run):
    verdict = decision.decide(committed(run))
    assert verdict.passed and verdict.rounds == 5 and verdict.notes == [] and verdict.throttled_rounds == []
    assert 1.15 < verdict.ci_low <= verdict.ratio_median <= verdict.ci_high
    assert verdict.line() == "PASS"


def test_a_straddling_interval_is_said_and_the_median_still_decides():
    near = record(ours_s=0.30, theirs_s=0.345, noise=0.05, seed=2)  # true 1.15x, 5% noise
    verdict = decision.decide(near)
    assert verdict.ci_low < 1.15 <= verdict.ci_high
    assert verdict.passed == (verdict.ratio_median >= 1.15)
    assert "straddles the threshold: inconclusive at 5 rounds; decided on the median" in verdict.notes[0]
    near["max_rounds"] = 5
    assert "inconclusive at the bound of 5 rounds" in decision.decide(near).notes[0]
    assert decision.more_rounds_would_help(near, 1.15)
    assert not decision.more_rounds_would_help(committed(1), 1.15)


def test_throttled_rounds_count_and_are_named():
    throttled = with_states(committed(2), {2: ["sw_power_cap"], 4: ["hw_slowdown", "sw_power_cap"]})
    verdict = decision.decide(throttled)
    assert verdict.passed and verdict.exit_code == decision.EXIT_PASS
    assert verdict.ratio_median == decision.decide(committed(2)).ratio_median  # they count
    assert verdict.throttled_rounds == [2, 4]
    assert verdict.notes == [
        "rounds 2, 4 of 5 taken while the GPU throttled (hw_slowdown, sw_power_cap); counted, as both "
        "implementations ran in each"
    ]
    assert verdict.line().startswith("PASS: rounds 2, 4 of 5")
    assert decision.decide(with_states(committed(2))).notes == []  # states without throttling: nothing said


# --- No relative check ------------------------------------------------------------------------------


def test_a_slowdown_that_still_clears_the_threshold_passes_the_gate_and_is_the_regression_checks():
    """Run 1 is 1.425x over Unsloth; 25% slower it is 1.14x, and with Unsloth 10% slower too, 1.25x:
    above the threshold, so the gate passes it. The regression check, the one relative check, is what
    judges a change against the base (the gate's own read a no-op 12.7% faster than its base)."""
    base = committed(1)
    pr = scaled(scaled(base, 1.25), 1.1, name="unsloth")
    assert decision.decide(pr).passed
    with pytest.raises(TypeError):
        decision.decide(pr, base=base)


# --- Records that are not records ------------------------------------------------------------------


@pytest.mark.parametrize(
    "spoil,problem",
    [
        (lambda r: r.pop("seconds"), "seconds: missing"),
        (lambda r: r["seconds"].pop("unsloth"), "seconds.unsloth: missing: no rounds timed for it"),
        (lambda r: r["seconds"]["nf4kernel"].pop(), "seconds.unsloth: 5 rounds, but nf4kernel has 4"),
        (lambda r: r["seconds"]["nf4kernel"][0].pop(), r"seconds.nf4kernel\[0\]: 2 timings, but the record's shapes"),
        (lambda r: r["seconds"]["nf4kernel"][2].__setitem__(1, -0.1), r"seconds.nf4kernel\[2\]\[1\]: -0.1 is not"),
        (lambda r: r["seconds"]["unsloth"].__setitem__(0, "fast"), r'seconds.unsloth\[0\]: "fast" is not a list'),
        (lambda r: r["seconds"]["nf4kernel"][3].__setitem__(0, True), r"seconds.nf4kernel\[3\]\[0\]: true is not a"),
        (lambda r: r["correctness"][4].pop("ok"), r"correctness\[4\].ok: missing"),
        (lambda r: r.pop("shapes"), "shapes: missing"),
        (lambda r: r.pop("calls_per_timing"), "calls_per_timing: missing"),
        (lambda r: r["environment"].pop("copy_bytes_per_s"), "environment.copy_bytes_per_s: missing"),
    ],
    ids=[
        "no-seconds",
        "no-unsloth",
        "fewer-rounds",
        "fewer-shapes",
        "negative",
        "a-string",
        "a-bool",
        "a-check-without-ok",
        "no-shapes",
        "no-calls-per-timing",
        "no-copy-bandwidth",
    ],
)
def test_a_malformed_record_is_refused_by_name(spoil, problem):
    spoiled = committed(1)
    spoil(spoiled)
    with pytest.raises(ValueError, match=problem):
        decision.decide(spoiled)


@pytest.mark.parametrize("threshold", [float("nan"), float("inf"), 0.0, -1.15, True])
def test_a_threshold_that_is_no_finite_speed_up_is_refused(threshold):
    """A NaN threshold passed a record three times slower than Unsloth: no median is below NaN."""
    with pytest.raises(ValueError, match="the threshold is a"):
        decision.decide(scaled(committed(1), 3.0), threshold=threshold)
