"""The harness's statistics: the confidence level, the random generators, the bootstrap of a median,
the percentile interval, the upper bound of a rate. Pure functions on numbers. numpy is imported
inside the functions that use it (the change-point study runs without it); ``python_stream(seed)``
draws as ``random.Random(seed)`` did, so every committed gate record replays to its interval digit
for digit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy at run time: inside each function that uses it (the module's docstring)
    import numpy as np

    Random = np.random.Generator | np.random.RandomState

CI_LEVEL = 0.95  # every interval the harness states: the gate's, the regression check's, the A/A check's


def generator(seed: int | Sequence[int]) -> np.random.Generator:
    """The harness's random generator: numpy's default, seeded with ``seed`` (an int, or a sequence
    of ints for streams that must not depend on one another). The same seed, the same draws."""
    import numpy as np

    return np.random.default_rng(seed)


def python_stream(seed: int) -> np.random.RandomState:
    """The stream of Python's ``random.Random(seed)`` (MT19937 seeded from the 32-bit words of
    ``abs(seed)``), for ``resample`` to draw as ``random.choices`` does: the gate's, so that a record
    decided before this module replays to the same interval. numpy keeps this stream frozen."""
    import numpy as np

    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"a seed is an int, not {seed!r}")
    seed = abs(seed)
    words = [(seed >> (32 * i)) & 0xFFFFFFFF for i in range(max(1, math.ceil(seed.bit_length() / 32)))]
    return np.random.RandomState(words)


def checked(values: Sequence[float], what: str = "samples") -> np.ndarray:
    """``values`` as an array of floats; ValueError unless they are at least one finite number."""
    import numpy as np

    values = list(values)
    if not values:
        raise ValueError(f"a bootstrap needs at least one value in {what}")
    if not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
        raise ValueError(f"{what} must be finite numbers: {values!r}")
    return np.asarray(values, dtype=np.float64)


def resample(rng: Random, n: int | Sequence[int], resamples: int) -> np.ndarray:
    """``resamples`` rows of indices drawn with replacement: ``n`` an int, ``n`` indices below it
    a row; ``n`` a sequence, one index below each of its entries (``[n] * k + [m] * l``: ``k``
    indices of one sample, then ``l`` of another, from one stream in turn). A ``Generator`` draws
    with ``integers``; a ``python_stream`` as ``random.choices``, ``floor(random() * n)`` a pick."""
    import numpy as np

    bounds = np.full(n, n) if isinstance(n, int | np.integer) else np.asarray(n)
    if resamples < 1 or len(bounds) < 1 or (bounds < 1).any():
        raise ValueError(f"a resample needs at least one value and one resample, not {n!r} x {resamples!r}")
    shape = (resamples, len(bounds))
    if isinstance(rng, np.random.RandomState):
        return np.floor(rng.random_sample(shape) * bounds).astype(np.intp)
    high = int(bounds[0]) if (bounds == bounds[0]).all() else bounds  # one bound: numpy's scalar draw
    return rng.integers(0, high, size=shape)


def medians(values: Sequence[float], rng: Random, resamples: int, statistic: Callable | None = None) -> np.ndarray:
    """``resamples`` medians of ``values`` resampled with replacement, as many values a resample as
    there are (``statistic`` in place of the median, called on each resample as a list). One value:
    its medians are that value, and nothing is drawn."""
    import numpy as np

    values = checked(values)
    if len(values) == 1 and statistic is None:
        return np.full(resamples, values[0])
    drawn = values[resample(rng, len(values), resamples)]
    if statistic is None:
        return np.median(drawn, axis=1)
    return np.array([statistic(row.tolist()) for row in drawn], dtype=np.float64)


def checked_level(level: float) -> float:
    """``level``; ValueError unless it is a confidence level, strictly between 0 and 1."""
    if isinstance(level, bool) or not isinstance(level, int | float) or not 0 < level < 1:
        raise ValueError(f"a confidence level is between 0 and 1, not {level!r}")
    return level


def percentile_interval(
    draws: Sequence[float], level: float = CI_LEVEL, between_draws: bool = True
) -> tuple[float, float]:
    """The percentile interval of bootstrap draws: ``(1 - level) / 2`` cut off each end.

    ``between_draws`` (numpy's default percentile): each end interpolated between the two draws
    around it. Without: each end a draw, the ``floor(tail * len(draws))``-th from its end (0 the
    outermost), the same rank from both ends. The two differ by less than the gap between
    neighbouring draws; each caller keeps the one its recorded figures were made with."""
    import numpy as np

    checked_level(level)
    draws = np.asarray(draws, dtype=np.float64)
    if draws.ndim != 1 or len(draws) == 0:
        raise ValueError("a percentile interval needs a non-empty sequence of draws")
    tail = (1 - level) / 2
    if between_draws:
        low, high = np.percentile(draws, [tail * 100, 100 - tail * 100])
        return float(low), float(high)
    ordered = np.sort(draws)
    return float(ordered[math.floor(tail * len(ordered))]), float(
        ordered[max(math.ceil((1 - tail) * len(ordered)) - 1, 0)]
    )


def rate_upper_95(seen: int, trials: int) -> float:
    """The one-sided 95% upper bound of a rate seen ``seen`` times in ``trials`` (Clopper-Pearson),
    by bisection on the binomial tail (no scipy in the harness): 0 in 1000 gives about 0.3%."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1 or not 0 <= seen <= trials:
        raise ValueError(f"a rate is seen 0 to {trials!r} times in at least one trial, not {seen!r}")
    if seen == trials:
        return 1.0

    def tail(p: float) -> float:  # P(X <= seen) at rate p
        return sum(math.comb(trials, k) * p**k * (1 - p) ** (trials - k) for k in range(seen + 1))

    low, high = seen / trials, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if tail(mid) > 0.05 else (low, mid)
    return high
