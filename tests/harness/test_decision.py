"""The gate's decision on recorded timings: it fails what it must and passes what it should."""

from __future__ import annotations

import pytest
from recorded import record

from nf4kernel.harness import decision


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
