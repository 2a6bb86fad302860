"""The change-point rule on one series, lower is better, oldest first: asv's own piecewise-constant fit
(``solve_potts_approx``) and decision (``detect_regressions``), with the series' own limit and the
persistence that keeps one slow run from opening or closing an issue. Pure: no files, git or GitHub.
The rule in words, why this fit, its false alarms and power: docs/performance-history.md."""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass
from statistics import median

from harness.core import policy

POLICY = policy.changepoints()
FLOOR = POLICY.floor  # the smallest change called, relative to the earlier level
NOISE_FACTOR = POLICY.noise_factor  # times the series' mean change from one commit to the next: beyond noise
PERSIST = POLICY.persist  # commits a level must hold before it counts
MIN_COMMITS = 2 * PERSIST  # an earlier level and a later one, each held
RATE_UNIT = re.compile(r"(/\s*s(ec(ond)?s?)?|per second|flops)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Found:
    """A regression in one series, by index into its values (oldest first)."""

    good: int  # the last commit at the earlier level
    full: int  # the first commit at today's level: the range is (good, full]
    before: float  # the earlier level (in the judged direction: lower is better)
    now: float  # today's level
    limit: float  # the series' limit: the smallest rise called, relative to the earlier level
    steps: tuple  # asv's (last index before, first index after, level before, best level after)
    judged: int  # the store whose verdict this is (how many values): newer ones have not agreed yet


def lower_is_better(unit: str) -> bool:
    """asv's convention (its Regressions page calls every rise a regression); a rate is the exception."""
    return not RATE_UNIT.search(unit or "")


def segments(y: list[float]) -> list[tuple]:
    """asv's piecewise-constant fit of ``y``, as ``detect_steps`` returns it: (left, right, level,
    minimum, mean absolute deviation) per segment, ``right`` exclusive. Unweighted: every figure the
    check judges is a ``track_`` benchmark's, which records no statistics to weigh it by."""
    from asv.step_detect import solve_potts_approx

    right, levels, dists = solve_potts_approx(list(y), [1.0] * len(y))
    lefts = [0, *right[:-1]]
    fit = zip(lefts, right, levels, dists, strict=True)
    return [(left, r, level, min(y[left:r]), abs(dist / (r - left))) for left, r, level, dist in fit]


def find(y: list[float]) -> Found | None:
    """The regression the series ``y`` (lower is better, oldest first) shows today, or None: the
    newest verdict that PERSIST stores in a row reached (a store's own verdict: ``verdict``)."""
    at = functools.cache(lambda n: verdict(y[:n]))
    for n in range(len(y), MIN_COMMITS - 1, -1):
        run = [at(m) for m in range(n, n - PERSIST, -1)]
        if all((found is None) == (run[0] is None) for found in run):
            return run[0]
    return None


def verdict(y: list[float]) -> Found | None:
    """One store's verdict on ``y``: asv's fit and decision, with the series' own limit."""
    from asv.step_detect import detect_regressions

    n = len(y)
    if n < MIN_COMMITS:
        return None
    # A level counts once held: a shorter segment is a transition (a ramp's middle) or an outlier, and
    # is left out, as asv leaves out missing points; a step then spans it.
    held = [segment for segment in segments(y) if segment[1] - segment[0] >= PERSIST]
    noise = sum(abs(b - a) for a, b in itertools.pairwise(y)) / (n - 1) / median(y)
    threshold = max(FLOOR, NOISE_FACTOR * noise)
    latest, _, steps = detect_regressions(held, threshold=threshold, min_size=PERSIST)
    if not steps:
        return None
    last_before, first_after, before, _ = steps[0]
    # The range: from the last commit at the earlier level to the first at today's. A commit is at the
    # earlier level within a sixth of the change (at most twice the series' noise), so a ramp's first
    # commit, a third of the way up, is named; at today's level within a quarter of the change.
    change = latest - before
    low, high = before + min(change / 6, 2 * noise * median(y)), latest - change / 4
    good = next((i for i in range(last_before, -1, -1) if y[i] <= low), last_before)
    full = next((i for i in range(first_after, n) if y[i] >= high), first_after)
    return Found(good, full, before, latest, threshold, tuple(steps), n)
