"""Change points in main's performance history: a slowdown that crept in over several merges, each of
which passed its own PR check, opens one GitHub issue per GPU machine; a recovery closes it.

    python -m harness changepoints check [--results DIR] [--rev REV] [--machine NAME] [--dry-run]

Each series is judged on its own: one benchmark, one parameter combination, one GPU machine, one line
(asv's result parameters besides the machine: a new toolchain starts a new line, and only the line of
the machine's latest run is judged), over main's first-parent commits in order (``git rev-list
--first-parent REV``; results of other commits are left out, and counted). A regression is a rise:
every figure the suite records is lower-is-better (seconds, bytes, nf4kernel's time over a copy's or
a baseline's: benchmarks.json's units); a rate (a unit in ``/s``) is judged by its inverse.

The rule (``find``): asv's own piecewise-constant fit (``asv.step_detect.solve_potts_approx``, L1, its
default penalty) and asv's own decision on it (``detect_regressions``): the series' latest level is
above its best earlier level by more than the series' limit, the larger of 3% (``FLOOR``) and 4 times
(``NOISE_FACTOR``) its mean change from one commit to the next, its noise as measured in its own
history (in the committed H200 history: 0.7% for the 160 µs 28672x8192, 0.2% between runs of one
kernel and the rest c56b2633's 5% step; 3.6-4.5% for the 8 µs 4096x1024, which times on one of two
levels 8% apart). A level counts once held for 2 commits (``PERSIST``), and a verdict once reached
at 2 stores in a row, so one slow run neither opens an issue nor closes one: a sharp step is called at
its third commit, a ramp over three commits (on the steady 28672x8192) at the commit after it. The
range named runs from the last commit at the earlier level to the first at today's.

Why this fit and not asv's ``detect_steps`` (its Regressions page's): its penalty search fits the
noise's correlation and, on 16 commits, takes a ramp for correlated noise; in this rule, on 1000
histories drawn as below, it called an 8% ramp on 28672x8192 in 52-103 of 1000 (this fit: 1000) and
false alarms in 24 (this fit: 16). Not E-Divisive (Otava): not among the pinned tools, and its
permutation test wants more commits per line than main's history holds.

Measured by ``python -m studies.changepoint_power`` (null histories drawn from the committed H200
history, and ramps planted in them; its docstring gives the figures): 16 of 1000 null histories of 16
commits called something, and a 4% slowdown of 28672x8192 over three commits was called in 95%.

Exit codes (check): 0 the issues agree with the verdict (or, with --dry-run, what would be done was
printed), regression or not; 1 GitHub refused or could not be reached; 2 bad arguments or input (no
results folder, no GPU machine, a result file asv can't read, a revision git doesn't know, no result on
its first-parent history, GITHUB_REPOSITORY or GITHUB_TOKEN unset, a job summary it can't write).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from harness.core import command_output
from harness.core import markdown as md
from harness.core.paths import ROOT
from harness.history.changepoint_issue import TITLE, body, sync
from harness.history.changepoint_series import BadInput, verdicts

STORE = ROOT / "benchmarks" / "history"


# --- check ---------------------------------------------------------------------------------------------


def report_line(machine: str, found: list, judged: int, skipped: dict, head: str) -> str:
    left = "; ".join(f"{n} {why}" for why, n in skipped.items() if n)
    text = f"{machine}: {judged} series judged up to {head[:12]}" + (f" ({left} left out)" if left else "")
    if not found:
        return text + ": no regression"
    names = ", ".join(f"{r.series.label} {r.shown} in {r.good[:12]}...{r.full[:12]}" for r in found)
    return text + f": {len(found)} called: {names}"


def check(args) -> int:
    env = os.environ
    github = None
    if not args.dry_run:
        repository, token = env.get("GITHUB_REPOSITORY", ""), env.get("GITHUB_TOKEN") or env.get("GH_TOKEN", "")
        if not repository or not token:
            print("changepoints: GITHUB_REPOSITORY and GITHUB_TOKEN must be set (or pass --dry-run)", file=sys.stderr)
            return 2
        from harness.github.approval import GitHub

        github = GitHub(env.get("GITHUB_API_URL", "https://api.github.com"), token, repository)
    results_dir = args.results or default_results()
    try:
        found = verdicts(results_dir, args.rev, args.machine)
    except BadInput as error:
        print(f"changepoints: {error}", file=sys.stderr)
        return 2
    server, repository = env.get("GITHUB_SERVER_URL", "https://github.com"), env.get("GITHUB_REPOSITORY", "")
    compare = f"{server}/{repository}/compare/" if repository else ""
    summary = []
    for machine, (regressions, judged, skipped, head) in found.items():
        if not judged:
            line = f"{machine}: no result of a commit of {args.rev}'s first-parent history: nothing judged"
            print(md.line(line, limit=None))  # one line of the log, whatever a label holds
            summary.append(line)
            continue
        line = report_line(machine, regressions, judged, skipped, head)
        print(md.line(line, limit=None))
        summary.append(line)
        title = TITLE.format(machine=machine)
        if args.dry_run:
            if regressions:
                print(f"dry run: would open or update the issue {title!r} with:\n")
                print(body(machine, regressions, head, compare))
            else:
                print(f"dry run: would close the issue {title!r} if one is open")
            continue
        from harness.github.approval import Refused

        try:
            done = sync(github, machine, regressions, head, compare)
        except (Refused, BadInput) as error:
            print(f"changepoints: {machine}: {error}", file=sys.stderr)
            return 1
        print(md.line(f"{machine}: {done}", limit=None))
        summary.append(f"{machine}: {done}")
    # A line names the asv results' machines and series: escaped, as Markdown can act on them.
    text = "### Change points on main\n\n" + "".join(f"- {md.text(line, limit=None)}\n" for line in summary)
    try:
        command_output.written("GITHUB_STEP_SUMMARY", env.get("GITHUB_STEP_SUMMARY"), text, append=True)
    except command_output.Unwritten as error:
        print(f"changepoints: {error}; the summary was not written (exit 2)", file=sys.stderr)
        return 2
    return 0


def default_results() -> Path:
    from harness.history.asvrun import results_dir

    return results_dir()


# --- CLI -----------------------------------------------------------------------------------------------


def parser() -> command_output.Parser:
    paragraphs = [" ".join(p.split()) for p in __doc__.split("\n\n")]
    cli = command_output.Parser(prog="python -m harness changepoints", description=paragraphs[0], epilog=paragraphs[-1])
    commands = cli.add_subparsers(dest="command", required=True, parser_class=command_output.Parser)
    run = commands.add_parser(
        "check",
        help="judge main's history; open, update or close each GPU machine's issue",
        description=paragraphs[3],
        epilog=paragraphs[-1],
    )
    run.add_argument("--results", type=Path, help="an asv results folder (default: asv.conf.json's, .asv/results)")
    run.add_argument("--rev", default="HEAD", help="whose first-parent history is main's (%(default)s)")
    run.add_argument("--machine", action="append", help="judge this GPU machine only (repeatable; default: every one)")
    run.add_argument("--dry-run", action="store_true", help="print what would be done; GitHub is not contacted")
    return cli


def main(argv=None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    return check(args)
