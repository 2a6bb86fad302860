"""The regression check between two commits: asv on both, exit 1 on a slowdown beyond a factor.

    python -m nf4kernel.harness.regression BASE HEAD [--factor 1.10] [--summary PATH] [--suite regression]

Each commit's nf4kernel is checked out into a temporary worktree and measured in this Python by
*this* checkout's ruler (``benchmarks/``): one ruler, two kernels. Then asv compares the two: a
result counts as worse when it is more than ``factor`` times BASE's and, where asv has samples
(``synchronized.*``), the difference is statistically significant. ``asv compare`` itself always
exits 0, and ``asv continuous`` builds environments from a registry a GPU runner may not reach.

Exit 0: nothing worse. Exit 1: something got slower (named on the last lines and in the summary).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys

from nf4kernel.harness import asvrun, machine

WORSE = ("+", "!")  # asv's marks: slower beyond the factor, or newly failing


def compare(conf_path: str, base: str, head: str, factor: float, machine_name: str) -> tuple[str, list[str]]:
    """asv's own comparison, as the Markdown (GitHub) tables it prints, and the rows that got worse."""
    from asv.commands.compare import Compare
    from asv.config import Config

    conf = Config.load(conf_path)
    conf.results_dir = str(asvrun.ROOT / conf.results_dir)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        Compare.print_table(conf, base, head, factor=factor, split=True, machine=machine_name, sort="ratio")
    text = re.sub(r"\x1b\[[0-9;]*m", "", printed.getvalue())  # colour codes, where FORCE_COLOR is set
    worse = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] in WORSE:
            worse.append(f"{cells[4]}: {cells[1]} -> {cells[2]} ({cells[3]}x)")
    return text.strip(), worse


def summary(base: str, head: str, factor: float, table: str, worse: list[str]) -> str:
    verdict = (
        f"**FAIL**: {len(worse)} result(s) worse than {factor}x" if worse else f"**PASS**: nothing worse than {factor}x"
    )
    return f"### asv regression check: {base[:8]} → {head[:8]}\n\n{table}\n\n{verdict}\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nf4kernel.harness.regression", description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the reference commit (a PR's base)")
    parser.add_argument("head", help="the commit under test")
    parser.add_argument("--factor", type=float, default=1.10, help="slowdown that fails (default %(default)s)")
    parser.add_argument("--suite", default="regression", choices=sorted(asvrun.SUITES))
    parser.add_argument("--config", default="asv.conf.json")
    parser.add_argument("--summary", help="append the comparison as Markdown here (e.g. $GITHUB_STEP_SUMMARY)")
    parser.add_argument("--no-run", action="store_true", help="compare results already stored")
    args = parser.parse_args(argv)

    base, head = asvrun.git("rev-parse", args.base), asvrun.git("rev-parse", args.head)
    info = machine.register()
    print(f"regression: {machine.one_line(info)}", flush=True)
    if info["gpu"] == "none" and args.suite != "cpu":
        print("regression: no CUDA GPU here: nothing to compare (use --suite cpu for a smoke run)", flush=True)
        return 4
    if not args.no_run:
        for sha in (base, head):
            with asvrun.worktree(sha) as tree:
                print(f"regression: {sha[:8]} ({asvrun.SUITES[args.suite].about}), nf4kernel from {tree}", flush=True)
                asvrun.run(sha, args.suite, info["machine"], args.config, source=tree)
    table, worse = compare(args.config, base, head, args.factor, info["machine"])
    print(table, flush=True)
    if args.summary:
        with open(args.summary, "a") as f:
            f.write(summary(base, head, args.factor, table, worse))
    if worse:
        print(f"regression: slower than {args.factor}x of {base[:8]} at {head[:8]}:", flush=True)
        for row in worse:
            print(f"  {row}", flush=True)
        return 1
    print(f"regression: nothing slower than {args.factor}x of {base[:8]} at {head[:8]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
