"""The regression rule (harness/regression/rule.py) on the committed H200 runs of one kernel: how
often it calls a no-op, and which planted steps it catches, over random pairings of the runs.

    python tests/studies/rule_on_recorded_runs.py [--pairings 300] [--per-shape-pairings 100]

Twelve runs of one kernel (tests/harness/recorded.py: SAME_KERNEL, one H200, ten minutes) are
shuffled into six rounds, three for the first pass and three for the re-measuring one
(``recorded.regression_record``); a plant multiplies HEAD's values by its factor. Each
run gives one median per result (a process's), so this exercises the rule's noise between processes,
not within one. It is a replay of recorded figures, not a GPU measurement of the plants. "each large
result": the runs in which every one of the six large results was called on its own. The last column
is the earlier rule (any result above 1.20x) on the same pairings' first two runs.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "harness")]

if __name__ == "__main__":  # the rule needs numpy, which the README's venv lacks: one line, not a traceback
    from harness.core import exits

    exits.require(("numpy",), "python tests/studies/rule_on_recorded_runs.py", "with .nox/torch/bin/python")

import recorded  # noqa: E402

from harness.regression import rule as regression_rule  # noqa: E402

KEYS = sorted(recorded.history_run(recorded.SAME_KERNEL[0]))
LARGE = [k for k in KEYS if recorded.packed_bytes(k) >= regression_rule.LARGE_BYTES]
PLANTS = {
    "no-op": {},
    "large weights +5%": dict.fromkeys(LARGE, 1.05),
    "large weights +10%": dict.fromkeys(LARGE, 1.10),
    "large weights +20%": dict.fromkeys(LARGE, 1.20),
    "every weight +5%": dict.fromkeys(KEYS, 1.05),
    "every weight +3%": dict.fromkeys(KEYS, 1.03),
}


def old_rule_fails(order, slower) -> bool:
    """The earlier rule, on one run of each (what it compared): any result above 1.20x, or
    the geometric mean of the kernel times above 1.07x."""
    base, head = recorded.history_run(order[0]), recorded.history_run(order[1])
    ratios = [head[k] * slower.get(k, 1.0) / base[k] for k in KEYS]
    return max(ratios) > 1.20 or math.exp(sum(map(math.log, ratios)) / len(ratios)) > 1.07


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairings", type=int, default=300)
    parser.add_argument("--per-shape-pairings", type=int, default=100)
    args = parser.parse_args()
    rng = random.Random(21)
    orders = [rng.sample(recorded.SAME_KERNEL, len(recorded.SAME_KERNEL)) for _ in range(args.pairings)]
    limits = f"{regression_rule.DEFAULT_MIN_CHANGE:.0%} per result, {regression_rule.DEFAULT_MIN_GROUP_CHANGE:.0%}"
    print(f"{args.pairings} random pairings of the 12 recorded H200 runs of one kernel; limits {limits} per group\n")
    print("| plant | runs failed | re-measured | each large result | 'every result' | 'large weights' | old rule |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, slower in PLANTS.items():
        failed = remeasured = every = large_group = old = 0
        large_called = {k: 0 for k in LARGE}
        for order in orders:
            record = recorded.regression_record(slower, runs=order)
            verdict = regression_rule.decide(record)
            called = {r.name for r in verdict.called}
            failed += verdict.failed
            remeasured += len(record["passes"]) > 1
            every += regression_rule.GROUP_ALL in called
            large_group += regression_rule.GROUP_LARGE in called
            for k in LARGE:
                large_called[k] += k in called
            old += old_rule_fails(order, slower)
        n = len(orders)
        least = min(large_called.values())
        cells = [failed, remeasured, least, every, large_group, old]
        print(f"| {name} | " + " | ".join(f"{c}/{n}" for c in cells) + " |")
    print("\nPer shape: the smallest slowdown of that result alone that the rule calls in at least 95% of")
    print(f"{args.per_shape_pairings} pairings (steps of 1%; '>30%' where none up to 30% is)\n")
    print("| result | detectable change |")
    print("| --- | ---: |")
    for key in sorted(KEYS, key=recorded.packed_bytes, reverse=True):
        found = ">30%"
        for step in range(5, 31):
            factor = 1 + step / 100
            caught = sum(
                key
                in {
                    r.name for r in regression_rule.decide(recorded.regression_record({key: factor}, runs=order)).called
                }
                for order in orders[: args.per_shape_pairings]
            )
            if caught >= 0.95 * args.per_shape_pairings:
                found = f"{step}%"
                break
        print(f"| {key} | {found} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
