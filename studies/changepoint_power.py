"""The change-point rule's false alarms and power (``harness/history/changepoints.py``), measured
on the committed history: null histories drawn from a machine's committed runs of one kernel, and
slowdowns planted in them, each judged by the rule as a store would be. A study, run by hand; the
change-point job never imports it.

    python -m studies.changepoint_power [--machine M] [--draws N] [--length L] [--after A] [--seed S] [--only REGEX]

Null histories of 16 commits, each commit one whole run drawn with replacement
from the committed H200 history's twelve runs of one kernel (one session, ten minutes), and the ratios
to the baselines from its five full-suite runs (five kernels and sessions: their spread overstates the
ratios' noise). False alarms: 16 of 1000 histories called something (1.6% of stores, 95% upper bound
2.4%; with 40 commits: 7 of 1000, 0.7%, upper bound 1.3%), mostly the two-level 4096x1024 and the
session's first run (11008x4096 bf16 5.5% faster than the rest). The smallest slowdown spread over
three commits, with five commits after it, called in 95% of histories: 4% on 28672x8192 (kernel time,
time over copy: the first bad commit named in every call), 11-19% on 14336x4096 and 11008x4096 (named
in 84-92% of calls), 13-25% on 4096x4096 and 8192x2048, 29% to over 30% on 4096x1024, 4% on peak
memory, over 30% on the ratios.

Exit 0, or 2 for bad arguments (one line).
"""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path

from harness.core import command_output
from harness.core.stats import rate_upper_95  # numpy-free: the change-point job has none
from harness.history.changepoints import (
    MIN_COMMITS,
    STORE,
    BadInput,
    Series,
    find,
    first_parent,
    gpu_machines,
    load,
    lower_is_better,
)

# The committed H200 runs of one kernel (benchmarks/results/asv-h200/README.md): the first a full-suite
# run, the other eleven the backfill's commits; one H200, one session. Their spread is the noise a null
# history is drawn from.
SAME_KERNEL_H200 = (
    "b543b026",
    "45c61302",
    "c0dfe696",
    "6929daed",
    "aede6ee3",
    "b602cc6f",
    "02b671ae",
    "133245c7",
    "b7551f82",
    "4c475ecc",
    "25e4f9c9",
    "5ecd6903",
)


def runs_of(store: Path, machine: str) -> tuple[dict[str, dict], dict[tuple, Series]]:
    """``machine``'s committed runs, {commit: {(benchmark, combo): value}}, and its series by key."""
    series, _ = load(store, machine, first_parent("HEAD"))
    runs: dict[str, dict] = {}
    for s in series:
        for commit, value in zip(s.commits, s.values, strict=True):
            runs.setdefault(commit, {})[(s.benchmark, s.params)] = value
    return runs, {(s.benchmark, s.params): s for s in series}


def draw_history(rng: random.Random, runs: dict, noise: list[str], keys: list, length: int) -> dict:
    """A null history of ``length`` commits: each commit one whole run drawn from ``noise`` (with
    replacement: a run slow for every weight stays one run), and for the figures those runs lack, one
    drawn from every run that has them."""
    others: dict[tuple, list] = {}
    for key in keys:
        if not any(key in runs[c] for c in noise):
            others.setdefault(tuple(sorted(c for c in runs if key in runs[c])), []).append(key)
    history: dict[tuple, list] = {key: [] for key in keys}
    for _ in range(length):
        run = runs[rng.choice(noise)]
        for key in keys:
            if key in run:
                history[key].append(run[key])
        for pool, group in others.items():
            other = runs[rng.choice(pool)]
            for key in group:
                history[key].append(other[key])
    return history


def planted(values: list[float], at: int, total: float, over: int = 3) -> list[float]:
    """``values`` (lower is better) with a slowdown of ``total`` (0.08: 8%) spread evenly over ``over``
    commits from ``at`` on: each of them (1 + total) ** (1 / over) slower than the one before."""
    return [v * (1 + total) ** (min(over, max(0, i - at + 1)) / over) for i, v in enumerate(values)]


def power(store: Path, machine: str, draws: int, length: int, seed: int, after: int, only: str = "", log=print) -> dict:
    """False alarms: how many null histories drawn from ``machine``'s committed runs call anything.
    Power: per series whose label matches ``only`` (a regex; "" every one, "^$" none), the smallest
    slowdown (1% steps, spread over three commits, ``after`` commits at the new level after them)
    called in 95% of the same histories, and how many of those calls name the ramp's first commit."""
    runs, by_key = runs_of(store, machine)
    same = [c for c in runs if c[:8] in SAME_KERNEL_H200]
    noise = same if machine == "h200" and same else list(runs)
    keys = sorted(by_key)
    rng = random.Random(seed)
    histories = [draw_history(rng, runs, noise, keys, length) for _ in range(draws)]
    rates = {key for key in keys if not lower_is_better(by_key[key].unit)}

    def judged(key, values: list[float]) -> list[float]:  # lower is better, as find takes it
        return [1 / v for v in values] if key in rates else values

    fired, per_key = 0, {}
    for history in histories:
        hit = [key for key in keys if find(judged(key, history[key]))]
        fired += bool(hit)
        for key in hit:
            per_key[key] = per_key.get(key, 0) + 1
    log(
        f"{machine}: {fired} of {draws} null histories of {length} commits called something (95% upper bound "
        f"{rate_upper_95(fired, draws):.2%}), drawn from {len(noise)} runs; called: "
        + (", ".join(f"{by_key[k].label} {n}" for k, n in sorted(per_key.items())) or "nothing")
    )
    at = length - after - 3  # the ramp's first commit
    smallest = {}
    log(
        f"smallest slowdown (1% steps) spread over three commits, {after} commits after them, called in 95% of "
        f"{draws}; of those calls, how many name the ramp's first commit, and how many name the ramp exactly:"
    )
    for key in [k for k in keys if re.search(only, by_key[k].label)]:
        for pct in range(1, 31):
            calls = []
            for history in histories:
                calls.append(find(planted(judged(key, history[key]), at, pct / 100)))
                if calls.count(None) > 0.05 * draws:
                    break
            if calls.count(None) <= 0.05 * draws:
                named = sum(1 for f in calls if f and f.good < at <= f.full)
                exact = sum(1 for f in calls if f and (f.good, f.full) == (at - 1, at + 2))
                smallest[key] = (pct, draws - calls.count(None), named, exact)
                break
        shown = "more than 30%"
        if key in smallest:
            pct, found, named, exact = smallest[key]
            shown = f"{pct}% (called {found}, the first bad commit named {named}, the ramp exactly {exact})"
        log(f"  {by_key[key].label}: {shown}")
    return {
        "machine": machine,
        "draws": draws,
        "length": length,
        "after": after,
        "fired": fired,
        "upper_95": rate_upper_95(fired, draws),
        "called": {by_key[k].label: n for k, n in per_key.items()},
        "smallest": {by_key[k].label: v for k, v in smallest.items()},
    }


def main(argv=None) -> int:
    paragraphs = [" ".join(p.split()) for p in __doc__.split("\n\n")]
    cli = command_output.Parser(
        prog="python -m studies.changepoint_power", description=paragraphs[0], epilog=paragraphs[-1]
    )
    cli.add_argument("--machine", default="h200")
    cli.add_argument("--draws", type=int, default=300, help="null histories drawn (%(default)s)")
    cli.add_argument("--length", type=int, default=16, help="commits in each (%(default)s)")
    cli.add_argument("--after", type=int, default=5, help="commits at the new level after a planted ramp (%(default)s)")
    cli.add_argument("--seed", type=int, default=0)
    cli.add_argument("--only", default="", help="find the smallest step only for series matching this regex")
    args = cli.parse_args(argv)
    if args.draws < 1 or args.length < MIN_COMMITS + 3 or not 0 < args.after <= args.length - 4:
        cli.error("needs --draws >= 1, --length >= 7 and 0 < --after <= length - 4")
    try:
        re.compile(args.only)
    except re.error as error:
        cli.error(f"--only {args.only!r} is not a regular expression: {error}")
    try:
        if args.machine not in gpu_machines(STORE):
            raise BadInput(f"no GPU machine {args.machine} in {STORE}")
        power(STORE, args.machine, args.draws, args.length, args.seed, args.after, args.only)
    except BadInput as error:
        cli.error(str(error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
