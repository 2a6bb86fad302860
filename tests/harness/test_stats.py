"""The harness's statistics (harness/core/stats.py) on small known inputs: the generator's seeding,
the resampling, the bootstrap of a median and of a ratio of medians, the percentile interval, the
upper bound of a rate."""

from __future__ import annotations

import random
import statistics

import numpy as np
import pytest

from harness.core import stats

ROUNDS = [1.423, 1.406, 1.441, 1.425, 1.427]  # the committed H200 run 1's round ratios


# --- The generator -------------------------------------------------------------------------------


def test_a_seed_names_its_draws():
    assert (stats.generator(21).random(5) == stats.generator(21).random(5)).all()
    assert (stats.generator([21, 7]).random(5) == stats.generator([21, 7]).random(5)).all()
    assert not (stats.generator([21, 7]).random(5) == stats.generator([21, 8]).random(5)).any()


@pytest.mark.parametrize("seed", [0, 10, 21, 2**40 + 5, -3])
def test_the_python_stream_is_pythons_random(seed):
    python = random.Random(seed)
    assert stats.python_stream(seed).random_sample(50).tolist() == [python.random() for _ in range(50)]


def test_the_python_stream_picks_as_random_choices_does():
    values = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    picks = stats.resample(stats.python_stream(10), len(values), 20)
    python = random.Random(10)
    assert [[values[i] for i in row] for row in picks] == [python.choices(values, k=7) for _ in range(20)]


def test_a_seed_that_is_no_int_is_refused():
    with pytest.raises(ValueError, match="an int"):
        stats.python_stream(1.5)


# --- Resampling ----------------------------------------------------------------------------------


def test_resampled_indices_stay_below_their_bounds():
    picks = stats.resample(stats.generator(1), [3, 3, 5, 5, 5], 1000)
    assert picks.shape == (1000, 5) and picks.min() == 0
    assert picks[:, :2].max() == 2 and picks[:, 2:].max() == 4
    assert stats.resample(stats.generator(1), 4, 10).shape == (10, 4)


@pytest.mark.parametrize("n,resamples", [(0, 10), ([], 10), ([3, 0], 10), (3, 0)])
def test_a_resample_of_nothing_is_refused(n, resamples):
    with pytest.raises(ValueError, match="at least one value"):
        stats.resample(stats.generator(1), n, resamples)


# --- The bootstrap of a median -------------------------------------------------------------------


def interval(values, rng, resamples, level=stats.CI_LEVEL, between_draws=True):
    """The percentile bootstrap interval of a median, as the regression rule and the gate compose it."""
    return stats.percentile_interval(stats.medians(values, rng, resamples), level, between_draws)


def test_a_constant_sample_gives_a_zero_width_interval():
    for rng in (stats.generator(3), stats.python_stream(3)):
        assert interval([1.3] * 7, rng, 500) == (1.3, 1.3)
    assert interval([2.5], stats.generator(3), 500) == (2.5, 2.5)


@pytest.mark.parametrize("between_draws", [True, False])
def test_the_interval_holds_the_median_within_the_samples(between_draws):
    low, high = interval(ROUNDS, stats.generator(0), 2000, between_draws=between_draws)
    assert min(ROUNDS) <= low <= statistics.median(ROUNDS) <= high <= max(ROUNDS)


def test_a_seeded_bootstrap_is_reproducible():
    first = interval(ROUNDS, stats.generator(21), 1000)
    assert first == interval(ROUNDS, stats.generator(21), 1000)
    assert (
        stats.medians(ROUNDS, stats.python_stream(10), 50) == stats.medians(ROUNDS, stats.python_stream(10), 50)
    ).all()


def test_the_medians_are_those_of_the_resamples():
    values = [1.0, 2.0, 4.0, 8.0]
    picks = stats.resample(stats.generator(5), len(values), 30)
    medians = stats.medians(values, stats.generator(5), 30)
    assert medians.tolist() == [statistics.median(values[i] for i in row) for row in picks]
    assert stats.medians(values, stats.generator(5), 30, statistic=max).tolist() == [
        max(values[i] for i in row) for row in picks
    ]


def test_one_value_draws_nothing():
    rng = stats.generator(5)
    assert stats.medians([3.0], rng, 4).tolist() == [3.0] * 4
    assert rng.random() == stats.generator(5).random()


def test_the_interval_narrows_with_more_values_and_widens_with_the_level():
    rng = random.Random(4)
    few = [rng.lognormvariate(0.25, 0.05) for _ in range(5)]
    many = few + [rng.lognormvariate(0.25, 0.05) for _ in range(40)]
    width = lambda interval: interval[1] - interval[0]  # noqa: E731
    assert width(interval(many, stats.generator(1), 2000)) < width(interval(few, stats.generator(1), 2000))
    assert width(interval(many, stats.generator(1), 2000, 0.99)) >= width(interval(many, stats.generator(1), 2000, 0.8))


@pytest.mark.parametrize(
    "values,problem",
    [
        ([], "at least one value"),
        ([1.2, float("nan")], "finite numbers"),
        ([1.2, float("inf")], "finite numbers"),
        ([1.2, "1.3"], "finite numbers"),
        ([1.2, None], "finite numbers"),
    ],
)
def test_a_bootstrap_of_nothing_or_of_junk_is_refused_by_name(values, problem):
    with pytest.raises(ValueError, match=problem):
        stats.medians(values, stats.generator(1), 100)


@pytest.mark.parametrize("level", [1.0, 0, float("nan"), True])
def test_a_level_that_is_no_confidence_level_is_refused(level):
    with pytest.raises(ValueError, match="between 0 and 1"):
        stats.percentile_interval([1.2, 1.3], level)


# --- The percentile interval ---------------------------------------------------------------------


def test_the_percentile_interval_of_known_draws():
    draws = list(range(101))  # 0..100: the 2.5% and 97.5% points are 2.5 and 97.5
    assert stats.percentile_interval(draws) == pytest.approx((2.5, 97.5))
    assert stats.percentile_interval(draws, 0.5) == pytest.approx((25.0, 75.0))
    # Each end a draw: the floor(0.025 * 101) = 2nd from each end (0 the outermost).
    assert stats.percentile_interval(draws, between_draws=False) == (2.0, 98.0)
    assert stats.percentile_interval(list(reversed(draws)), between_draws=False) == (2.0, 98.0)
    assert stats.percentile_interval([4.0], between_draws=False) == (4.0, 4.0)
    assert stats.percentile_interval([4.0]) == (4.0, 4.0)


@pytest.mark.parametrize("draws,level,problem", [([], 0.95, "non-empty"), ([1.0], 1.5, "between 0 and 1")])
def test_a_percentile_interval_of_nothing_or_at_no_level_is_refused(draws, level, problem):
    with pytest.raises(ValueError, match=problem):
        stats.percentile_interval(draws, level)


def test_the_percentile_interval_takes_numpy_draws():
    assert stats.percentile_interval(np.arange(101.0), 0.9) == pytest.approx((5.0, 95.0))


# --- The upper bound of a rate ------------------------------------------------------------------------


def test_the_upper_bound_of_a_rate():
    assert stats.rate_upper_95(0, 1000) == pytest.approx(0.0030, abs=0.0001)  # the "rule of three"
    assert stats.rate_upper_95(5, 1000) == pytest.approx(0.0105, abs=0.0002)
    assert stats.rate_upper_95(0, 1) == pytest.approx(0.95)  # 1 - 0.05 ** (1 / 1)
    assert stats.rate_upper_95(3, 3) == 1.0
    assert stats.rate_upper_95(2, 10) > 2 / 10


@pytest.mark.parametrize("seen,trials", [(0, 0), (-1, 10), (11, 10), (1, True)])
def test_a_rate_of_no_trials_is_refused(seen, trials):
    with pytest.raises(ValueError, match="a rate"):
        stats.rate_upper_95(seen, trials)
