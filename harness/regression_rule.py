"""The regression check's decision: each result judged against its own noise, from paired rounds.

Pure, so it is tested on recorded samples (``tests/harness/test_regression_rule.py``).

What it reads (``harness/paired_rounds.py`` measures it): *rounds*, each one fresh process of BASE's
kernel and one of HEAD's, back to back, their order alternating from round to round. Each process
times every weight it was asked for with a cold L2 and CUDA events, and keeps each call's time
(``samples``), not only their median::

    {"rounds": [{"order": ["base", "head"],
                 "base": {"14336x4096 bfloat16": [s, s, ...], ...},
                 "head": {...}}, ...],
     "bytes": {"14336x4096 bfloat16": packed bytes, ...}}

Per result (one weight shape and dtype): the change is the median over rounds of the round's ratio,
median(HEAD's calls) / median(BASE's calls). Its interval is a two-level bootstrap: rounds are
resampled whole (what a slow process, a neighbour or the clocks do to a whole run shows up there),
and within each chosen round both sides' calls are resampled (the timer's granularity and the
per-call jitter). The interval *is* the noise the result is judged against, measured in this job,
on this runner, now; the verdict prints it beside the change.

A result is **called slower** only when its whole interval lies above ``1 + min_change``: it is
slower beyond its own noise *and* by more than the practical minimum. The same rule over groups of
results catches a small slowdown spread over many: the geometric mean of the changes over every
result and over the large weights (``LARGE_BYTES``), bootstrapped with the rounds resampled *jointly*
across results, so a round that was slow for every shape counts once, not once per shape.

An outlier is re-measured before it is believed (``suspects`` and ``merge``): whatever the first
pass calls slower, or leaves open (its interval reaches past the line without lying beyond it), is
measured again in new rounds, and only the re-measurement decides it. A true slowdown shows in
both; a process that happened to be slow once (one reading 1.49x of its neighbours on an H100)
does not decide anything.

Why this holds on a shared, noisy runner: nothing here assumes a noise level. A runner that is
noisy today gives wide intervals today, and the rule then calls less (it never calls more); the
alternation makes slow drift (heat, clocks, a neighbour's job that starts or ends) hit both sides
alike; a burst that hits one process is a whole round, which the median over rounds and the
re-measurement discount. What is assumed is that rounds are exchangeable: no trend within the job
so strong that alternation can't cancel it.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import asdict, dataclass, field

import numpy as np

# Weights whose packed codes are this large or larger: 14336x4096, 11008x4096 and 28672x8192 in the
# suite, the weights that dominate a real model's time.
LARGE_BYTES = 16 * 2**20

DEFAULT_MIN_CHANGE = 0.05  # one result: slower by more than 5%, beyond its noise
DEFAULT_MIN_GROUP_CHANGE = 0.02  # a group's geometric mean: slower by more than 2%, beyond its noise
CI_LEVEL = 0.95
RESAMPLES = 2000  # the interval's ends move by well under 0.5% between seeds at this count
SEED = 21

SLOWER, FASTER, UNCHANGED, OPEN = "slower", "faster", "unchanged", "open"
GROUP_ALL = "every result"
GROUP_LARGE = "large weights (16 MB and more packed)"


@dataclass
class Reading:
    """One result's or group's change in one pass: HEAD over BASE, its interval, what it was called."""

    name: str
    change: float
    ci_low: float
    ci_high: float
    rounds: int
    limit: float  # 1 + the practical minimum it was judged at
    call: str  # SLOWER, FASTER, UNCHANGED or OPEN
    base_s: float | None = None  # median seconds per call over the rounds (results only)
    head_s: float | None = None
    first: dict | None = None  # where re-measured: the first pass's reading, which did not decide

    @property
    def noise(self) -> float:
        """The half-width of the interval, as a fraction of the change: the noise it was judged against."""
        return (self.ci_high - self.ci_low) / 2 / self.change

    def as_dict(self) -> dict:
        return {**asdict(self), "noise": self.noise}


@dataclass
class Judgement:
    results: list[Reading]
    groups: list[Reading]
    notes: list[str] = field(default_factory=list)

    @property
    def called(self) -> list[Reading]:
        return [r for r in [*self.results, *self.groups] if r.call == SLOWER]

    @property
    def failed(self) -> bool:
        return bool(self.called)

    def as_dict(self) -> dict:
        return {
            "results": [r.as_dict() for r in self.results],
            "groups": [g.as_dict() for g in self.groups],
            "notes": self.notes,
            "failed": self.failed,
        }


def check_record(record: dict, what: str = "the paired record") -> list[str]:
    """The result keys every round holds for both sides; ValueError naming the problem otherwise."""
    rounds = record.get("rounds") if isinstance(record, dict) else None
    if not isinstance(rounds, list) or not rounds:
        raise ValueError(f"{what} has no rounds")
    keys = None
    for i, rnd in enumerate(rounds):
        for side in ("base", "head"):
            timed = rnd.get(side) if isinstance(rnd, dict) else None
            if not isinstance(timed, dict) or not timed:
                raise ValueError(f"{what}: round {i + 1} timed nothing for {side}")
            for key, samples in timed.items():
                ok = isinstance(samples, list) and samples
                ok = ok and all(isinstance(s, int | float) and math.isfinite(s) and s > 0 for s in samples)
                if not ok:
                    raise ValueError(f"{what}: round {i + 1}, {side}, {key}: not a list of positive seconds")
        here = set(rnd["base"])
        if set(rnd["head"]) != here:
            raise ValueError(f"{what}: round {i + 1} timed different results for base and head")
        if keys is not None and here != keys:
            raise ValueError(f"{what}: round {i + 1} timed other results than round 1")
        keys = here
    return sorted(keys)


def _medians_resampled(samples: list[float], rng: np.random.Generator, resamples: int) -> np.ndarray:
    """``resamples`` medians of the samples resampled with replacement."""
    values = np.asarray(samples, dtype=np.float64)
    if len(values) == 1:
        return np.full(resamples, values[0])
    picks = rng.integers(0, len(values), size=(resamples, len(values)))
    return np.median(values[picks], axis=1)


def _percentiles(draws: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return float(low), float(high)


def _call(low: float, high: float, limit: float) -> str:
    if low > limit:
        return SLOWER
    if high < 1 / limit:
        return FASTER
    if high > limit:
        return OPEN
    return UNCHANGED


def judge(
    record: dict,
    min_change: float = DEFAULT_MIN_CHANGE,
    min_group_change: float = DEFAULT_MIN_GROUP_CHANGE,
    level: float = CI_LEVEL,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    groups: bool = True,
) -> Judgement:
    """Each result's reading and (with ``groups``) the groups' (see the module docstring)."""
    if not 0 < min_change < 1 or not 0 < min_group_change < 1:
        raise ValueError(f"a practical minimum is a fraction in (0, 1), not {min_change!r} / {min_group_change!r}")
    keys = check_record(record)
    rounds = record["rounds"]
    n_rounds = len(rounds)
    # One generator per result, seeded by its name: the same record always gives the same
    # intervals, and a result's interval does not depend on which other results were measured.
    per_round = {}  # key -> (rounds x resamples) of round ratios, calls resampled
    for key in keys:
        rng = np.random.default_rng([seed, zlib.crc32(key.encode())])
        per_round[key] = np.stack(
            [
                _medians_resampled(r["head"][key], rng, resamples) / _medians_resampled(r["base"][key], rng, resamples)
                for r in rounds
            ]
        )
    # Rounds resampled jointly for every result: the same round indices for all of them.
    picks = np.random.default_rng([seed, n_rounds]).integers(0, n_rounds, size=(resamples, n_rounds))
    columns = np.arange(resamples)[:, None]
    draws = {key: np.median(per_round[key][picks, columns], axis=1) for key in keys}

    results = []
    limit = 1 + min_change
    for key in keys:
        change = float(np.median([np.median(r["head"][key]) / np.median(r["base"][key]) for r in rounds]))
        low, high = _percentiles(draws[key], level)
        base_s = float(np.median([np.median(r["base"][key]) for r in rounds]))
        head_s = float(np.median([np.median(r["head"][key]) for r in rounds]))
        results.append(Reading(key, change, low, high, n_rounds, limit, _call(low, high, limit), base_s, head_s))

    found = []
    if groups:
        sizes = record.get("bytes", {})
        members = {GROUP_ALL: keys, GROUP_LARGE: [k for k in keys if sizes.get(k, 0) >= LARGE_BYTES]}
        by_key = {r.name: r for r in results}
        group_limit = 1 + min_group_change
        for name, group in members.items():
            if len(group) < 2:
                continue
            geo = np.exp(np.mean([np.log(draws[k]) for k in group], axis=0))
            change = math.exp(sum(math.log(by_key[k].change) for k in group) / len(group))
            low, high = _percentiles(geo, level)
            found.append(Reading(name, change, low, high, n_rounds, group_limit, _call(low, high, group_limit)))
    return Judgement(results, found)


def suspects(judgement: Judgement) -> list[str]:
    """What a second pass must measure before anything is believed: every result the first pass
    called slower or left open, and every result where a group was (a group's call rests on all of them)."""
    if any(g.call in (SLOWER, OPEN) for g in judgement.groups):
        return [r.name for r in judgement.results]
    return [r.name for r in judgement.results if r.call in (SLOWER, OPEN)]


def merge(first: Judgement, second: Judgement) -> Judgement:
    """The verdict: the second pass decides every result it re-measured (the first's reading kept
    beside it), and the groups where it re-measured every result; the first pass decides the rest."""
    again = {r.name: r for r in second.results}
    results = []
    for reading in first.results:
        if reading.name in again:
            decided = again[reading.name]
            decided.first = reading.as_dict()
            results.append(decided)
        else:
            results.append(reading)
    every = {r.name for r in first.results} <= set(again)
    groups = first.groups
    if every and second.groups:
        for g, before in zip(second.groups, first.groups, strict=False):
            g.first = before.as_dict()
        groups = second.groups
    notes = [*first.notes, *second.notes]
    if again:
        notes.append(f"re-measured before deciding: {len(again)} of {len(first.results)} results")
    return Judgement(results, groups, notes)
