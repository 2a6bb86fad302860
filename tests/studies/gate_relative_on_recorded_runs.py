"""The gate's relative check (harness/gate/decision.py: ``compare``, ``pool``) on the committed H200 gate
runs: which planted slowdowns of nf4kernel it fails, beside the regression check's replay
(tests/studies/rule_on_recorded_runs.py).

    python tests/studies/gate_relative_on_recorded_runs.py

Five gate runs of one commit on one H200 (benchmarks/results/gate-h200-run{1..5}.json, 5 rounds
each, ``recorded.committed``) play every PR-and-base combination gpu.yml's gate job makes: one run as the PR, two others
pooled as its base (measured before and after it), 5 x 6 = 30 in all. A plant multiplies the PR's
nf4kernel times by its factor, on the large MLP (4096x14336: its weights are 29 MB packed, the
regression check's "16 MB and more") or on every MLP. It is a replay of recorded figures under an
assumed size in time, not a GPU measurement of the plants (issue 21 asks for that too; not yet run).
"""

from __future__ import annotations

import itertools
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "harness")]

import recorded  # noqa: E402

from harness.gate import decision  # noqa: E402

FACTORS = (1.0, 1.06, 1.10, 1.15, 1.20, 1.25, 1.30, 1.50)


def replay(runs: list[dict], factor: float, shapes: set[int]) -> tuple[int, int, list[float]]:
    """(failed, combinations, the PR's speed-up over its base's in each)."""
    failed, ratios = 0, []
    for i, pr in enumerate(runs):
        others = [r for j, r in enumerate(runs) if j != i]
        for before, after in itertools.combinations(others, 2):
            found = decision.compare(recorded.scaled(pr, factor, shapes=shapes), decision.pool([before, after]))
            failed += found["failed"]
            ratios.append(found["ratio"])
    return failed, len(ratios), ratios


def main() -> int:
    runs = [recorded.committed(run) for run in recorded.COMMITTED_RUNS]
    labels = [s["label"] for s in runs[0]["shapes"]]
    large = {i for i, label in enumerate(labels) if label.startswith("4096x14336")}
    share = statistics.median(sum(rnd[i] for i in large) / sum(rnd) for r in runs for rnd in r["seconds"]["nf4kernel"])
    print(f"{len(runs)} H200 gate runs ({', '.join(labels)}); the large MLP is {share:.0%} of nf4kernel's time.")
    print(f"The relative check fails a drop of more than {decision.DEFAULT_MAX_DROP:.0%} with 95% confidence.\n")
    print("| nf4kernel slower by | large MLP: failed | speed-up vs base | every MLP: failed | speed-up vs base |")
    print("| --- | ---: | --- | ---: | --- |")
    for factor in FACTORS:
        cells = []
        for shapes in (large, set(range(len(labels)))):
            failed, n, ratios = replay(runs, factor, shapes)
            cells += [f"{failed}/{n}", f"{min(ratios):.3f} to {max(ratios):.3f}"]
        print(f"| {factor - 1:+.0%} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
