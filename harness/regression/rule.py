"""The regression check's decision, pure: per result, the median over rounds of median(HEAD's
calls) / median(BASE's), called slower only when its whole 95% interval (a two-level bootstrap)
lies above the limit, and re-measured before it is believed (``suspects``, ``merge``). The rule,
its assumptions and what it was measured to detect: docs/performance-history.md."""

from __future__ import annotations

import math
import zlib
from dataclasses import asdict, dataclass, field

from harness.core import markdown as md
from harness.core import policy, regression_record, stats
from harness.core.schema import Where

# Weights whose packed codes are this large or larger: 14336x4096, 11008x4096 and 28672x8192 in the
# suite, the weights that dominate a real model's time.
LARGE_BYTES = 16 * 2**20

# The policy (.github/gpu-types.toml's [policy.regression], harness/core/policy.py): the trusted checkout's.
POLICY = policy.regression()
DEFAULT_MIN_CHANGE = POLICY.min_change  # one result: slower by more than this, beyond its noise
DEFAULT_MIN_GROUP_CHANGE = POLICY.min_group_change  # a group's geometric mean: likewise
# A pass of one round carries no round-to-round noise to judge a change against: no verdict from it.
MIN_ROUNDS = POLICY.min_rounds
# The bootstrap (``harness/core/stats.py``), two-level, its resamples and seed the policy's; each end
# interpolated between draws, as every recorded reading was.
CI_LEVEL = stats.CI_LEVEL
RESAMPLES = POLICY.resamples
SEED = POLICY.seed

SLOWER, FASTER, UNCHANGED, OPEN = "slower", "faster", "unchanged", "open"
UNREPEATED = "unrepeated"  # slower in the re-measurement alone: the first pass read it at or below the line
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
    memory: list[dict] = field(default_factory=list)  # results whose peak memory grew (``memory_grown``)

    @property
    def called(self) -> list[Reading]:
        return [r for r in [*self.results, *self.groups] if r.call == SLOWER]

    @property
    def failed(self) -> bool:
        return bool(self.called or self.memory)


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
    import numpy as np  # here, not at import: `--help` and a refused argument need no numpy

    if not 0 < min_change < 1 or not 0 < min_group_change < 1:
        raise ValueError(f"a practical minimum is a fraction in (0, 1), not {min_change!r} / {min_group_change!r}")
    regression_record.check_pass(record, Where("the paired record"))
    rounds = record["rounds"]
    keys = sorted(rounds[0]["base"])
    n_rounds = len(rounds)
    # One generator per result, seeded by [SEED, crc32(its name)]: the same record always gives the
    # same intervals, and a result's interval does not depend on which other results were measured.
    per_round = {}  # key -> (rounds x resamples) of round ratios, calls resampled
    for key in keys:
        rng = stats.generator([seed, zlib.crc32(key.encode())])
        per_round[key] = np.stack(
            [
                stats.medians(r["head"][key], rng, resamples) / stats.medians(r["base"][key], rng, resamples)
                for r in rounds
            ]
        )
    # Rounds resampled jointly for every result: the same round indices for all of them.
    picks = stats.resample(stats.generator([seed, n_rounds]), n_rounds, resamples)
    columns = np.arange(resamples)[:, None]
    draws = {key: np.median(per_round[key][picks, columns], axis=1) for key in keys}

    results = []
    limit = 1 + min_change
    for key in keys:
        base_medians = np.array([np.median(r["base"][key]) for r in rounds])  # one per process
        head_medians = np.array([np.median(r["head"][key]) for r in rounds])
        change = float(np.median(head_medians / base_medians))
        low, high = stats.percentile_interval(draws[key], level)
        base_s, head_s = float(np.median(base_medians)), float(np.median(head_medians))
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
            low, high = stats.percentile_interval(geo, level)
            found.append(Reading(name, change, low, high, n_rounds, group_limit, _call(low, high, group_limit)))
    return Judgement(results, found)


def suspects(judgement: Judgement) -> list[str]:
    """What a second pass must measure before anything is believed: every result the first pass
    called slower or left open, and every result where a group was (a group's call rests on all of them)."""
    if any(g.call in (SLOWER, OPEN) for g in judgement.groups):
        return [r.name for r in judgement.results]
    return [r.name for r in judgement.results if r.call in (SLOWER, OPEN)]


def _repeated(decided: Reading, first: Reading | None) -> Reading:
    """The re-measurement's reading, the first's kept beside it; a call of slower that the first
    pass did not read above the line is UNREPEATED."""
    decided.first = first.as_dict() if first is not None else None
    if decided.call == SLOWER and first is not None and first.change <= first.limit:
        decided.call = UNREPEATED
    return decided


def merge(first: Judgement, second: Judgement) -> Judgement:
    """The verdict: the second pass decides every result it re-measured (``_repeated``), and the
    groups where it re-measured every result; the first pass decides the rest."""
    again = {r.name: r for r in second.results}
    results = [_repeated(again[r.name], r) if r.name in again else r for r in first.results]
    every = {r.name for r in first.results} <= set(again)
    groups = first.groups
    if every and second.groups:
        before = {g.name: g for g in first.groups}
        groups = [_repeated(g, before.get(g.name)) for g in second.groups]
    notes = [*first.notes, *second.notes]
    if again:
        notes.append(f"re-measured before deciding: {len(again)} of {len(first.results)} results")
    return Judgement(results, groups, notes)


def memory_grown(found: dict) -> list[dict]:
    """Results whose peak memory (one call's, beyond what was allocated before it) is larger in
    HEAD: deterministic bytes, so any growth is a change, with no noise to judge it against."""
    peak = found.get("peak_bytes") or {}
    base, head = peak.get("base", {}), peak.get("head", {})
    return [
        {"name": key, "base_bytes": base[key], "head_bytes": head[key]}
        for key in sorted(base)
        if key in head and head[key] > base[key]
    ]


def decide(
    record: dict, min_change: float | None = None, min_group_change: float | None = None, resamples: int = RESAMPLES
) -> Judgement:
    """The verdict on a whole record (``clocked.measure``): the first pass judged, its suspects
    decided by the second pass, peak memory compared. The limits are the caller's, else this
    module's defaults: never the record's own ``rule``, which a record under test could loosen (it
    says what the measurement used; a note says where that differs). ValueError: no verdict."""
    regression_record.check_regression(record, "the record")
    for number, found in enumerate(record["passes"], 1):
        if len(found["rounds"]) < MIN_ROUNDS:
            raise ValueError(
                f"pass {number} has {len(found['rounds'])} round(s): a verdict needs at least {MIN_ROUNDS}, "
                "to judge each change against its round-to-round noise"
            )
    min_change = min_change or DEFAULT_MIN_CHANGE
    min_group_change = min_group_change or DEFAULT_MIN_GROUP_CHANGE
    passes = record["passes"]
    first = judge(passes[0], min_change, min_group_change, resamples=resamples)
    again = suspects(first)
    verdict = first
    if again:
        if len(passes) < 2:
            raise ValueError(f"the first pass left {len(again)} result(s) to re-measure; the record has no second pass")
        measured = passes[1]["rounds"][0]["base"]  # check_regression saw every round time the same
        missing = sorted(set(again) - set(measured))
        if missing:
            raise ValueError(f"the second pass did not re-measure {', '.join(missing)}")
        every = set(measured) >= {r.name for r in first.results}
        second = judge(passes[1], min_change, min_group_change, resamples=resamples, groups=every)
        second.results = [r for r in second.results if r.name in again]
        verdict = merge(first, second)
    verdict.memory = memory_grown(passes[0])
    verdict.notes += throttled(passes) + other_limits(record, min_change, min_group_change)
    return verdict


def other_limits(record: dict, min_change: float, min_group_change: float) -> list[str]:
    """A note where the record was measured with other limits than the verdict applies: which results
    it re-measured followed from those."""
    measured = record.get("rule") or {}
    applied = {"min_change": min_change, "min_group_change": min_group_change}
    differ = {key: value for key, value in measured.items() if key in applied and value != applied[key]}
    said = ", ".join(f"{key} {value:g} (applied: {applied[key]:g})" for key, value in differ.items())
    return [f"the record was measured with other limits ({said}); the verdict applies this harness's"] if differ else []


def throttled(passes: list[dict]) -> list[str]:
    """Where the GPU slowed its clocks while a result was timed (the probes' snapshots before and
    after each weight): evidence beside an outlier, not a reason to drop it."""
    from harness.core import gpu_state

    seen = []
    for p, found in enumerate(passes):
        for r, sides in enumerate(found.get("states") or []):
            for side, states in sides.items():
                for key, around in states.items():
                    reasons = sorted({x for s in around.values() for x in gpu_state.is_throttled(s)})
                    if reasons:
                        where = f"pass {p + 1}, round {r + 1}, {side}, {key}"
                        seen.append(f"the GPU throttled while timing: {where}: {', '.join(reasons)}")
    return seen


def _us(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds * 1e6:.1f}"


def table(verdict: Judgement) -> str:
    """The job summary's table, per result and group. A result's name is the record's: shown with
    ``md.text``, as the table is printed as well."""
    header = ("result", "BASE µs", "HEAD µs", "change", "95% interval", "noise ±", "limit", "rounds", "called")
    words = {
        SLOWER: "**slower**",
        FASTER: "faster",
        UNCHANGED: "no",
        OPEN: "no (inside its noise)",
        UNREPEATED: "no (slower in the re-measurement only)",
    }
    rows = []
    for r in [*verdict.results, *verdict.groups]:
        said = words[r.call]
        if r.first is not None:
            f = r.first
            said += f"; re-measured (first pass {f['change']:.3f}x, {f['ci_low']:.3f} to {f['ci_high']:.3f})"
        interval = f"{r.ci_low:.3f} to {r.ci_high:.3f}"
        change, noise, limit = f"{r.change:.3f}x", f"{r.noise:.1%}", f"{r.limit:.2f}x"
        rows.append(
            [md.text(r.name), _us(r.base_s), _us(r.head_s), change, interval, noise, limit, str(r.rounds), said]
        )
    for m in verdict.memory:
        blank = [None] * 5  # a byte count has no change, interval, noise, limit or rounds
        rows.append(
            [f"{md.text(m['name'])}: peak memory", f"{m['base_bytes']} B", f"{m['head_bytes']} B", *blank, "**grew**"]
        )
    return "\n".join(md.table(header, rows, align="lrrrlrrrl"))
