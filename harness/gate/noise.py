"""The A/A noise check: nf4kernel timed against itself, to learn a machine's noise floor before
trusting a threshold on it.

``python -m harness gate --aa`` times the same function as two interleaved
"implementations", A and B, exactly as the gate times nf4kernel and Unsloth. Any ratio between them
other than 1 is noise (clocks, heat, neighbours, the order within a round). This module turns such
a record into the spread a runner owner reads: per shape and per whole round, the median, min,
max, the bootstrap interval and the largest deviation from 1, and the margin a threshold needs.
Pure, so it is tested on recorded-shaped data.
"""

from __future__ import annotations

from harness.core import markdown as md
from harness.core import stats
from harness.gate import decision, table

A, B = "A", "B"  # the two slots of the same nf4kernel.dequantize
MODE = "aa"  # record["mode"]: how --replay tells an A/A record from a gate record


def report(record: dict) -> dict:
    """The spread of B's time over A's: per shape, per whole round (what the gate decides on), the
    interval of the median over all rounds and of a median of MIN_ROUNDS rounds (the gate's start).

    ``noise_floor``: how far from 1 the 95% interval of a MIN_ROUNDS-round median reaches, i.e. how
    far noise alone can carry the gate's first decision; a threshold needs more margin than that."""
    decision.check_timings(record, names=(A, B), what="the A/A record")
    rounds = decision.round_ratios(record, baseline=B, candidate=A)
    pairs = list(zip(record["seconds"][B], record["seconds"][A], strict=True))
    labels = [s["label"] for s in record.get("shapes", [])] or [f"shape {i + 1}" for i in range(len(pairs[0][0]))]
    shapes = [{"label": label, **stats.spread([b[i] / a[i] for b, a in pairs])} for i, label in enumerate(labels)]
    # The gate's own bootstrap (its stream, resamples and ends): the noise floor is that of its decision.
    low, high = decision.bootstrap_interval(rounds)
    first_low, first_high = decision.bootstrap_interval(rounds, size=decision.MIN_ROUNDS)
    return {
        "rounds": len(rounds),
        "round_ratios": rounds,
        "whole_round": {**stats.spread(rounds), "ci_low": low, "ci_high": high},
        "median_of_min_rounds": {"rounds": decision.MIN_ROUNDS, "ci_low": first_low, "ci_high": first_high},
        "noise_floor": max(abs(first_low - 1), abs(first_high - 1)),
        "shapes": shapes,
        "throttled_rounds": [n for n, _ in decision.throttled_rounds(record)],
    }


def text(record: dict, found: dict, threshold: float = decision.DEFAULT_THRESHOLD) -> str:
    """What a person reads: a table of the spread per shape and per round, then the noise floor in words."""
    env = record.get("environment", {})
    whole, first = found["whole_round"], found["median_of_min_rounds"]
    marked = set(found["throttled_rounds"])
    lines = [
        f"A/A noise check on {md.line(env.get('device', 'an unnamed GPU'))}: nf4kernel against itself, "
        f"{found['rounds']} interleaved rounds (ratio = B's time / A's; 1 is no noise)",
        "",
    ]
    rows = [
        [
            md.text(row["label"]),
            *(f"{row[key]:.4f}" for key in ("median", "min", "max")),
            f"{row['largest_deviation']:.2%}",
        ]
        for row in [*found["shapes"], {"label": "whole round", **whole}]
    ]
    # The deviations are padded to 16, one narrower than their heading, so the text matches the
    # A/A summaries already written.
    header = ("", "median", "min", "max", "largest deviation")
    lines += md.table(header, rows, align="lrrrr", widths=(22, 7, 7, 7, 16))
    lines += [
        "",
        "per round: "
        + " ".join(f"{r:.4f}{'*' if i + 1 in marked else ''}" for i, r in enumerate(found["round_ratios"])),
    ]
    if marked:
        lines.append(f"{len(marked)} of {found['rounds']} rounds were taken while the GPU throttled: marked *")
    floor = found["noise_floor"]
    lines += [
        f"median of all {found['rounds']} rounds: {whole['median']:.4f}, {stats.CI_LEVEL:.0%} interval "
        f"{whole['ci_low']:.4f} to {whole['ci_high']:.4f}",
        f"median of {first['rounds']} rounds (where the gate starts): {stats.CI_LEVEL:.0%} interval "
        f"{first['ci_low']:.4f} to {first['ci_high']:.4f}",
        f"noise floor: {floor:.1%}. A speed-up threshold needs a margin above {floor:.1%} to be decided from noise "
        f"(at {threshold:.2f}x: noise alone rarely fails a true {threshold * (1 + floor):.3f}x or passes a true "
        f"{threshold * (1 - floor):.3f}x; between them it can go either way). A single round strayed up to "
        f"{whole['largest_deviation']:.1%} from 1.",
    ]
    return "\n".join(lines)


def markdown(text_: str) -> str:
    """The job summary: the same text, its table as Markdown and every other line a paragraph."""
    return "\n\n".join(["### nf4kernel A/A noise check", *table.paragraphs(text_)]) + "\n"
