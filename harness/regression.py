"""The regression check between two commits: asv on both, exit 1 when HEAD got slower.

    python -m harness.regression BASE HEAD [--factor 1.20] [--mean-factor 1.07] [--summary PATH]
    python -m harness.regression BASE HEAD --measure-only     # asv on both, no verdict
    python -m harness.regression BASE HEAD --no-run           # the verdict on stored results

BASE and HEAD are each a commit of this repository or the path of another checkout (a PR's, beside
this one: its HEAD commit is fetched here). Each commit's nf4kernel, alone (``kernel_source.py``),
is measured in this Python by *this* checkout's ruler (``benchmarks/``): one ruler, two kernels, and
the verdict is this checkout's, whatever the tree under test says about its own harness. It compares nf4kernel's own
figures (kernel time, time over copy, memory peak: the ``nf4kernel-only`` suite) and fails when

* any one result is worse than ``--factor`` times BASE's (asv's own comparison; its table is
  printed and goes to the summary), or
* the kernel times, over every shape, got slower by more than ``--mean-factor`` (geometric mean of
  HEAD / BASE): a small slowdown everywhere, which no single noisy result shows.

The two limits come from the H200 history (benchmarks/results/asv-h200/README.md): 14 runs of the
same kernel differed by up to 1.134x on one result (a 8 µs kernel) and up to 1.035x in the
geometric mean; a planted 2x slowdown gave 1.68x to 1.94x per result and 1.84x in the mean. The
synchronized per-call time (``gpu.SynchronizedTime``, host cost included) is tracked in the history
but not compared here: it moves with the host's load. ``asv compare`` itself always exits 0, and
``asv continuous`` builds environments from a registry a GPU runner may not reach.

Exit 0: nothing worse (or ``--suite cpu``: the CPU smoke run, which gives no speed verdict). Exit
1: something got slower (named on the last lines and in the summary). Exit 2: bad arguments. Exit
4: no CUDA GPU here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import math
import re
import statistics
import sys
from pathlib import Path

from harness import asvrun, kernel_source, machine

WORSE = ("+", "!")  # asv's marks: slower beyond the factor, or newly failing
KERNEL_TIME = "gpu.KernelTime.track_kernel_time"
FULL_SHA = re.compile(r"[0-9a-f]{40}")


def _results(results_dir: str, machine_name: str, commit: str, bench: re.Pattern):
    """A commit's results as ``asv compare`` reads them, only the benchmarks ``bench`` selects."""
    from asv.results import iter_results_for_machine_and_hash

    for result in iter_results_for_machine_and_hash(results_dir, machine_name, commit):
        for key in result.get_all_result_keys():
            if not bench.search(key):
                continue
            params = result.get_result_params(key)
            yield (
                key,
                params,
                result.get_result_value(key, params),
                result.get_result_stats(key, params),
                result.get_result_samples(key, params),
                result.benchmark_version.get(key),
                result.params["machine"],
                result.env_name,
            )


def compare(conf, base: str, head: str, factor: float, machine_name: str, bench: str) -> tuple[str, list[str]]:
    """asv's own comparison of the selected benchmarks, as the Markdown (GitHub) tables it prints,
    and the rows that got worse."""
    from asv.commands.compare import Compare

    pattern = re.compile(bench)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        Compare.print_table(
            conf,
            base,
            head,
            factor=factor,
            split=True,
            resultset_1=_results(conf.results_dir, machine_name, base, pattern),
            resultset_2=_results(conf.results_dir, machine_name, head, pattern),
            machine=machine_name,
            sort="ratio",
        )
    text = re.sub(r"\x1b\[[0-9;]*m", "", printed.getvalue())  # colour codes, where FORCE_COLOR is set
    worse = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] in WORSE:
            worse.append(f"{cells[4]}: {cells[1]} -> {cells[2]} ({cells[3]}x)")
    return text.strip(), worse


def kernel_time_mean_ratio(results_dir: str, machine_name: str, base: str, head: str) -> tuple[float, int]:
    """Geometric mean of HEAD's kernel time over BASE's, over the shapes both measured; (nan, 0) if none."""
    values, kernel_time = {}, re.compile(re.escape(KERNEL_TIME))
    for commit in (base, head):
        for _key, params, value, *_ in _results(results_dir, machine_name, commit, kernel_time):
            values[commit] = dict(zip(itertools.product(*params), value, strict=True))
    pairs = [
        (b, values[head][p])
        for p, b in values.get(base, {}).items()
        if b and values.get(head, {}).get(p) and not math.isnan(b) and not math.isnan(values[head][p])
    ]
    if not pairs:
        return math.nan, 0
    return math.exp(statistics.mean(math.log(h / b) for b, h in pairs)), len(pairs)


def summary(base: str, head: str, table: str, verdicts: list[str], failed: bool) -> str:
    body = "\n".join(f"- {line}" for line in verdicts)
    verdict = "FAIL" if failed else "PASS"
    return f"### asv regression check: {base[:8]} → {head[:8]}\n\n{table}\n\n{body}\n\n**{verdict}**\n"


def machine_with_both(results_dir: str, base: str, head: str) -> str:
    """The one machine whose stored results hold both commits (what ``--no-run`` compares)."""
    from asv.results import iter_results_for_machine_and_hash

    root = Path(results_dir)
    machines = sorted(p.name for p in root.iterdir() if (p / "machine.json").is_file()) if root.is_dir() else []
    both = [m for m in machines if all(any(iter_results_for_machine_and_hash(results_dir, m, c)) for c in (base, head))]
    if len(both) != 1:
        found = ", ".join(both) or "none"
        raise ValueError(f"machines with results for both {base[:8]} and {head[:8]}: {found}; name one with --machine")
    return both[0]


def resolve(source: str, no_run: bool) -> str:
    """A full commit hash for BASE or HEAD. With ``--no-run`` a full hash is taken as given: recorded
    results may be for a commit this clone lacks."""
    if no_run and FULL_SHA.fullmatch(source):
        return source
    return kernel_source.resolve(source)


def measure(base: str, head: str, suite_name: str, info: dict, config: str) -> None:
    suite = asvrun.SUITES[suite_name]
    for sha in (base, head):
        with kernel_source.staged(sha) as kernel:
            print(f"regression: {sha[:8]} ({suite.about}), {kernel.describe()}", flush=True)
            asvrun.run(sha, suite_name, info, config, source=str(kernel.path))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.regression", description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the reference: a commit, or a checkout's path (a PR's base)")
    parser.add_argument("head", help="under test: a commit, or a checkout's path (a PR's head, beside this one)")
    parser.add_argument("--factor", type=float, default=1.20, help="one result this much slower fails (%(default)s)")
    parser.add_argument(
        "--mean-factor", type=float, default=1.07, help="kernel time this much slower on average fails (%(default)s)"
    )
    parser.add_argument("--suite", default="nf4kernel-only", choices=sorted(asvrun.SUITES))
    parser.add_argument("--config", default="asv.conf.json")
    parser.add_argument("--summary", help="append the comparison as Markdown here (e.g. $GITHUB_STEP_SUMMARY)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--no-run", action="store_true", help="compare results already stored (no GPU needed)")
    mode.add_argument("--measure-only", action="store_true", help="run asv on both commits, give no verdict")
    parser.add_argument(
        "--machine", help="with --no-run: the machine whose results to compare (default: the one that has both)"
    )
    args = parser.parse_args(argv)

    from asv.config import Config

    try:
        base, head = resolve(args.base, args.no_run), resolve(args.head, args.no_run)
    except kernel_source.SourceError as error:
        parser.error(str(error))
    conf = Config.load(args.config)
    conf.results_dir = str(asvrun.ROOT / conf.results_dir)
    suite = asvrun.SUITES[args.suite]
    if args.no_run:
        try:
            machine_name = args.machine or machine_with_both(conf.results_dir, base, head)
        except ValueError as error:
            parser.error(str(error))
    else:
        info = machine.register()
        machine_name = info["machine"]
        print(f"regression: {machine.one_line(info)}", flush=True)
        if info["gpu"] == "none" and args.suite != "cpu":
            print("regression: no CUDA GPU here: nothing to measure (use --suite cpu for a smoke run)", flush=True)
            return 4
        measure(base, head, args.suite, info, args.config)
        if args.measure_only:
            print(f"regression: {base[:8]} and {head[:8]} measured on {machine_name}; no verdict asked", flush=True)
            return 0
    table, worse = compare(conf, base, head, args.factor, machine_name, suite.bench)
    mean, shapes = kernel_time_mean_ratio(conf.results_dir, machine_name, base, head)
    print(table, flush=True)
    if args.suite == "cpu":
        print("regression: the CPU smoke suite times Triton's interpreter: no speed verdict (exit 0)", flush=True)
        return 0
    verdicts = [f"{len(worse)} result(s) worse than {args.factor}x" + "".join(f"\n  - {row}" for row in worse)]
    mean_failed = shapes > 0 and mean > args.mean_factor
    if shapes:
        verdicts.append(
            f"kernel time over {shapes} shapes: {mean:.3f}x of {base[:8]} (geometric mean; limit {args.mean_factor}x)"
        )
    failed = bool(worse) or mean_failed
    for line in verdicts:
        print(f"regression: {line}", flush=True)
    if args.summary:
        with open(args.summary, "a") as f:
            f.write(summary(base, head, table, verdicts, failed))
    word = "slower than allowed" if failed else "nothing slower than allowed"
    print(f"regression: {'FAIL' if failed else 'PASS'}: {head[:8]} against {base[:8]}: {word}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
