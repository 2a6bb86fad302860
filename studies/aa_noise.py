"""Where an A/A run of the regression check finds its noise: HEAD's batch over BASE's, both the same
kernel, batch by batch, from the batch medians of recorded runs (standard library only).

    python -m studies.aa_noise benchmarks/results/regression-aa-h200/aa-batch-medians.json.gz
    python -m studies.aa_noise RECORD.json[.gz]...     # regression records (--record), one run each
    python -m studies.aa_noise RECORD... --medians OUT.json.gz   # and keep them as batch medians

The file maps each run to its passes' rounds, each side's median seconds per result per batch
(``{run: {"alternates": "weight", "passes": [{"rounds": [{"order": [...], "base": {result: s},
"head": {...}}]}]}}``, what ``clocked.run_pass`` records, each batch's calls reduced to their median;
``alternates`` is ``round`` for runs before 5db57cc, whose rounds ran every batch of one side
first). Per result it prints how many batch pairs, their mean change and the spread of log(HEAD /
BASE) (a batch pair's noise); per pass, the same over every result (the second pass runs in new
processes, each side on the core the other had); by which side's batch went first, the pair's
position effect; and how much of the spread between passes their rounds can't explain (a level the
pair of processes keeps for the whole pass, which resampling rounds can't see).

A regression record (``python -m harness regression ... --record R``) is read as one run, its
batches reduced to their medians; where it holds the GPU's state before each batch (``states``,
since 1cba042), a last table gives each batch's level (log of its median over its result's median in
the run) by the SM clock NVML read before it: whether batches that start on low clocks run slower.

Outliers, from regression records: per result, how many calls a batch holds over three times its
median, and what each costs beyond it; beside them, how many of a batch's timed calls follow a
check on average (the policy's draw), were they those calls. Where a record says which timed calls
the reference checked right after they answered (``checked``, in records since the checked calls were kept), a
table counts the outliers among the calls right after a check and among the others.

``--medians OUT`` writes what was read as one batch-medians file (each run's clocked batch levels,
after-check tally and outlier counts with it), a few tens of kilobytes where the records are a few
hundred each.

Exit 0: the tables. Exit 2: no such file, or one that holds no rounds, in one line.
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
import statistics
import sys
from collections import defaultdict

from harness.core.command_output import Parser


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


def from_record(record: dict) -> tuple[dict, list[tuple[float, float]]]:
    """A regression record as one run of the batch-medians form, and (level, SM clock MHz before the
    batch) for every batch whose state says its clock."""
    passes, medians = [], defaultdict(list)
    for found in record["passes"]:
        rounds = []
        for rnd in found["rounds"]:
            reduced = {
                side: {key: statistics.median(calls) for key, calls in rnd[side].items()} for side in ("base", "head")
            }
            rounds.append({"order": rnd["order"], **reduced})
            for side in ("base", "head"):
                for key, median in reduced[side].items():
                    medians[key].append(median)
        passes.append({"rounds": rounds})
    typical = {key: statistics.median(values) for key, values in medians.items()}
    clocked = []
    for found, reduced in zip(record["passes"], passes, strict=True):
        for states, rnd in zip(found.get("states") or [], reduced["rounds"], strict=False):
            for side in ("base", "head"):
                for key, around in states.get(side, {}).items():
                    mhz = (around.get("before") or {}).get("sm_clock_mhz")
                    if isinstance(mhz, int | float) and key in rnd[side]:
                        clocked.append((math.log(rnd[side][key] / typical[key]), float(mhz)))
    return {"alternates": "weight", "passes": passes}, clocked


SLOW = 3.0  # a call this many times its batch's median is an outlier of the batch


def outlier_tallies(record: dict) -> tuple[dict, dict]:
    """One walk over the record's batches, each batch's median taken once. Per result: [batches,
    calls over SLOW x their batch's median, those calls' summed excess over it in µs], what a batch's
    outliers cost whatever caused them. And, over the batches whose checked calls the record names,
    {"after a check" | "other calls": [calls, calls over SLOW x their batch's median]}."""
    by_result, after_check = {}, {}
    for found in record["passes"]:
        marked = found.get("checked") or []
        for r, rnd in enumerate(found["rounds"]):
            for side in ("base", "head"):
                for key, calls in rnd[side].items():
                    median = statistics.median(calls) if calls else 0.0
                    slow = [i for i, seconds in enumerate(calls) if seconds > SLOW * median]
                    tally = by_result.setdefault(key, [0, 0, 0.0])
                    tally[0] += 1
                    tally[1] += len(slow)
                    tally[2] += sum(calls[i] - median for i in slow) * 1e6
                    marks = marked[r].get(side, {}).get(key) if r < len(marked) else None
                    if marks is None:
                        continue
                    after = {i + 1 for i in marks if i + 1 < len(calls)}
                    slow_after = len(after.intersection(slow))
                    for name, n, n_slow in (
                        ("after a check", len(after), slow_after),
                        ("other calls", len(calls) - len(after), len(slow) - slow_after),
                    ):
                        count = after_check.setdefault(name, [0, 0])
                        count[0] += n
                        count[1] += n_slow
    return by_result, after_check


def after_a_check(repeats: int = 100) -> float:
    """How many of a suite batch's ``repeats`` timed calls follow a checked call, on average, where
    the policy's checks are drawn over the warm-up's calls and the timed ones alike (``clock.plan``)."""
    from harness.core import policy

    clock = policy.clock()
    return clock.checks_per_batch * repeats / (clock.warmup_repeats + repeats)


def summed(tallies: list[dict]) -> dict:
    """Per name, the tallies' lists added element by element (runs' counts into one)."""
    total = {}
    for tally in tallies:
        for name, counts in tally.items():
            total[name] = [a + b for a, b in zip(total.get(name, [0] * len(counts)), counts, strict=True)]
    return dict(sorted(total.items()))


def spread(name, logs: list[float]) -> tuple:
    """(name, how many, their mean as a ratio, the spread of the log values): a table's row."""
    return name, len(logs), math.exp(statistics.fmean(logs)), statistics.pstdev(logs)


def by_clock(clocked: list[tuple[float, float]], edges=(1000.0, 1700.0)) -> list[tuple]:
    """(SM clock band, batches, their mean level as a ratio, the spread of their log level)."""
    bands = defaultdict(list)
    for level, mhz in clocked:
        band = sum(mhz >= edge for edge in edges)
        bands[band].append(level)
    names = [
        f"below {edges[0]:.0f} MHz",
        *(f"{a:.0f} to {b:.0f} MHz" for a, b in itertools.pairwise(edges)),
        f"{edges[-1]:.0f} MHz and up",
    ]
    return [spread(names[band], levels) for band, levels in sorted(bands.items())]


def read(paths: list[str]) -> tuple[dict, list[tuple[float, float]]]:
    """Runs (each with its clocked batch levels and its after-check tally, where known) from
    batch-medians files and regression records."""
    runs = {}
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as handle:
            found = json.load(handle)
        if isinstance(found, dict) and "passes" in found:
            run, levels = from_record(found)
            by_result, after_check = outlier_tallies(found)
            runs[path] = {**run, "clocked": levels, "after_check": after_check, "outliers": by_result}
        elif isinstance(found, dict):
            runs.update({f"{path}: {name}": run for name, run in found.items()})
        else:
            raise ValueError("neither batch medians nor a regression record")
    clocked = [tuple(pair) for run in runs.values() for pair in run.get("clocked", [])]
    return runs, clocked


def summary(rows: list[dict], by: str) -> list[tuple]:
    """(group, pairs, mean change as a ratio, spread of the log ratio) per value of ``by``."""
    groups = defaultdict(list)
    for row in rows:
        groups[row[by]].append(row["log"])
    return [spread(name, logs) for name, logs in sorted(groups.items(), key=lambda kv: str(kv[0]))]


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
    parser = Parser(prog="python -m studies.aa_noise", description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="batch-medians files or regression records (.json or .json.gz)")
    parser.add_argument("--medians", metavar="OUT", help="also write the runs read as one batch-medians file (gzip)")
    args = parser.parse_args(argv)
    named = " ".join(args.files)
    try:
        runs, clocked = read(args.files)
        rows = pairs(runs)
    except (
        OSError,
        ValueError,
        LookupError,
        TypeError,
        AttributeError,
        ZeroDivisionError,
        statistics.StatisticsError,
    ) as error:
        print(f"aa_noise: {named}: {error}", file=sys.stderr)
        return 2
    if not rows:
        print(f"aa_noise: {named}: no rounds", file=sys.stderr)
        return 2
    if args.medians:
        try:
            with gzip.open(args.medians, "wt") as handle:
                json.dump(runs, handle, separators=(",", ":"))
        except OSError as error:
            print(f"aa_noise: {args.medians}: {error.strerror or error}", file=sys.stderr)
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
    if clocked:
        print("\n" + table("SM clock before a batch", by_clock(clocked)))
    counted = summed([run.get("outliers") or {} for run in runs.values()])
    if counted:
        print(f"\n{'calls over ' + format(SLOW, 'g') + 'x a batch':<24} {'batches':>8} {'a batch':>8} {'excess':>9}")
        for key, (batches, slow, excess) in counted.items():
            print(f"{key:<24} {batches:>8} {slow / batches:>8.2f} {excess / max(slow, 1):>6.0f} µs")
        print(f"(a batch's calls right after a check: {after_a_check():.2f} on average, the policy's draw)")
    after_check = summed([run.get("after_check") or {} for run in runs.values()])
    tallies = [(name, calls, slow, slow / calls) for name, (calls, slow) in after_check.items() if calls]
    if tallies:
        print(f"\n{'timed calls':<24} {'calls':>8} {f'over {SLOW:g}x':>8} {'share':>7}")
        print("\n".join(f"{name:<24} {calls:>8} {slow:>8} {share:>7.2%}" for name, calls, slow, share in tallies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
