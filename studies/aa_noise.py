"""Where an A/A run of the regression check finds its noise: HEAD's batch over BASE's, both the same
kernel, batch by batch, from the batch medians of recorded runs (standard library only).

    python -m studies.aa_noise benchmarks/results/regression-aa-h200/aa-batch-medians.json.gz

The file maps each run to its passes' rounds, each side's median seconds per result per batch
(``{run: {"alternates": "weight", "passes": [{"rounds": [{"order": [...], "base": {result: s},
"head": {...}}]}]}}``, what ``clocked.run_pass`` records, each batch's calls reduced to their median;
``alternates`` is ``round`` for runs before 5db57cc, whose rounds ran every batch of one side
first). Per result it prints how many batch pairs, their mean change and the spread of log(HEAD /
BASE) (a batch pair's noise); per pass, the same over every result (the second pass runs in new
processes, each side on the core the other had); by which side's batch went first, the pair's
position effect; and how much of the spread between passes their rounds can't explain (a level the
pair of processes keeps for the whole pass, which resampling rounds can't see).

Exit 0: the tables. Exit 2: no such file, or one that holds no rounds, in one line.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import sys
from collections import defaultdict


def pairs(runs: dict) -> list[dict]:
    """One entry per batch pair: the run, pass, round, result, log(HEAD / BASE), and whether BASE
    went first (the round's order for its first result, alternating from result to result, as
    ``clocked.run_pass`` orders them, or the round's for all where the run ``alternates`` by round)."""
    found = []
    for run, record in runs.items():
        by_weight = record.get("alternates", "weight") == "weight"
        for number, found_pass in enumerate(record["passes"]):
            for r, rnd in enumerate(found_pass["rounds"]):
                base_first = rnd["order"][0] == "base"
                for i, key in enumerate(rnd["base"]):
                    ratio = rnd["head"][key] / rnd["base"][key]
                    first = base_first if i % 2 == 0 or not by_weight else not base_first
                    row = {"run": run, "pass": number, "round": r, "key": key, "log": math.log(ratio)}
                    found.append({**row, "base_first": first})
    return found


def summary(rows: list[dict], by: str) -> list[tuple]:
    """(group, pairs, mean change as a ratio, spread of the log ratio) per value of ``by``."""
    groups = defaultdict(list)
    for row in rows:
        groups[row[by]].append(row["log"])
    return [
        (name, len(logs), math.exp(statistics.fmean(logs)), statistics.pstdev(logs))
        for name, logs in sorted(groups.items(), key=lambda kv: str(kv[0]))
    ]


def components(rows: list[dict]) -> tuple[int, float, float, float, float]:
    """Over the passes that timed every result at least twice: (passes, the spread of a round's mean
    log ratio within its pass, the spread of the passes' means, the part of it their rounds explain,
    the part they can't: a level each pass's pair of processes keeps, as a log ratio's spread)."""
    keys = {r["key"] for r in rows}
    by_pass = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by_pass[(r["run"], r["pass"])][r["round"]].append(r["log"])
    means, within, counts = [], [], []
    for rounds in by_pass.values():
        if len(rounds) < 2 or any(len(logs) != len(keys) for logs in rounds.values()):
            continue
        per_round = [statistics.fmean(logs) for logs in rounds.values()]
        means.append(statistics.fmean(per_round))
        within.append(statistics.variance(per_round))
        counts.append(len(per_round))
    if len(means) < 2:
        return len(means), math.nan, math.nan, math.nan, math.nan
    rounds_only = statistics.fmean(within) / statistics.fmean(counts)
    between = statistics.variance(means)
    spreads = (statistics.fmean(within), between, rounds_only, max(0.0, between - rounds_only))
    return (len(means), *(math.sqrt(v) for v in spreads))


def table(title: str, lines: list[tuple]) -> str:
    out = [f"{title:<24} {'pairs':>6} {'mean':>7} {'spread':>7}"]
    out += [f"{name!s:<24} {n:>6} {mean:>6.3f}x {spread:>7.3f}" for name, n, mean, spread in lines]
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.aa_noise", description=__doc__.splitlines()[0])
    parser.add_argument("medians", help="a batch-medians file (.json or .json.gz)")
    args = parser.parse_args(argv)
    try:
        opener = gzip.open if args.medians.endswith(".gz") else open
        with opener(args.medians, "rt") as handle:
            rows = pairs(json.load(handle))
    except (OSError, ValueError, LookupError, TypeError, AttributeError, ZeroDivisionError) as error:
        print(f"aa_noise: {args.medians}: {error}", file=sys.stderr)
        return 2
    if not rows:
        print(f"aa_noise: {args.medians}: no rounds", file=sys.stderr)
        return 2
    print(f"{len({r['run'] for r in rows})} runs, {len(rows)} batch pairs: HEAD / BASE, the same kernel\n")
    print(table("result", summary(rows, "key")) + "\n")
    print(table("pass (1: first)", [(p + 1, *rest) for p, *rest in summary(rows, "pass")]) + "\n")
    print(table("BASE's batch first", summary(rows, "base_first")) + "\n")
    passes, round_spread, pass_spread, explained, process = components(rows)
    print(
        f"{passes} passes timing every result: a round's mean log ratio spreads {round_spread:.3f} within "
        f"its pass; the passes' means spread {pass_spread:.3f}, rounds alone would give {explained:.3f}; "
        f"a level each pass's processes keep: {process:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
