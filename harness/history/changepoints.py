"""Change points in main's performance history: a slowdown that crept in over several merges, each of
which passed its own PR check, opens one GitHub issue per GPU machine; a recovery closes it.

    python -m harness changepoints check [--results DIR] [--rev REV] [--machine NAME] [--dry-run]

Each series (one benchmark, parameter combination and GPU machine, its latest line) over main's
first-parent commits is judged by asv's own step fit and regression decision (``changepoint_rule.py``).
The rule, why, and its measured false alarms: docs/performance-history.md, "Change points on main".

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
from harness.history import asvrun
from harness.history.changepoint_issue import TITLE, body, sync
from harness.history.changepoint_series import BadInput, verdicts

STORE = ROOT / "benchmarks" / "history"  # the committed history (studies/changepoint_power.py reads it)


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
    try:
        found = verdicts(args.results or asvrun.results_dir(), args.rev, args.machine)
    except BadInput as error:
        print(f"changepoints: {error}", file=sys.stderr)
        return 2
    server, repository = env.get("GITHUB_SERVER_URL", "https://github.com"), env.get("GITHUB_REPOSITORY", "")
    compare = f"{server}/{repository}/compare/" if repository else ""
    summary = []
    for machine, (regressions, judged, skipped, head) in found.items():
        if judged:
            line = report_line(machine, regressions, judged, skipped, head)
        else:
            line = f"{machine}: no result of a commit of {args.rev}'s first-parent history: nothing judged"
        print(md.line(line, limit=None))  # one line of the log, whatever a label holds
        summary.append(line)
        if not judged:
            continue
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


def parser() -> command_output.Parser:
    paragraphs = [" ".join(p.split()) for p in __doc__.split("\n\n")]
    cli = command_output.Parser(prog="python -m harness changepoints", description=paragraphs[0], epilog=paragraphs[-1])
    commands = cli.add_subparsers(dest="command", required=True, parser_class=command_output.Parser)
    run = commands.add_parser(
        "check",
        help="judge main's history; open, update or close each GPU machine's issue",
        description=paragraphs[2],
        epilog=paragraphs[-1],
    )
    run.add_argument("--results", type=Path, help="an asv results folder (default: asv.conf.json's, .asv/results)")
    run.add_argument("--rev", default="HEAD", help="whose first-parent history is main's (%(default)s)")
    run.add_argument("--machine", action="append", help="judge this GPU machine only (repeatable; default: every one)")
    run.add_argument("--dry-run", action="store_true", help="print what would be done; GitHub is not contacted")
    return cli


def main(argv=None) -> int:
    return check(parser().parse_args(argv))
