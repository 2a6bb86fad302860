"""Change points in main's performance history: a slowdown that crept in over several merges, each of
which passed its own PR check, opens one GitHub issue per GPU machine; a recovery closes it.

Each series (one benchmark, parameter combination and GPU machine, its latest line) over main's
first-parent commits is judged by asv's own step fit and regression decision (``find``).
The rule, why, and its measured false alarms: docs/performance-history.md, "Change points on main".

Exit codes (check): 0 the issues agree with the verdict (or, with --dry-run, what would be done was
printed), regression or not; 1 GitHub refused or could not be reached; 2 bad arguments or input (no
results folder, no GPU machine, a result file asv can't read, a revision git doesn't know, no result on
its first-parent history, GITHUB_REPOSITORY or GITHUB_TOKEN unset, a job summary it can't write).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

from harness.core import command_output, policy
from harness.core import markdown as md
from harness.core.paths import ROOT
from harness.core.schema import RecordError
from harness.history import asvrun, result_merge

POLICY = policy.changepoints()
FLOOR = POLICY.floor  # the smallest change called, relative to the earlier level
NOISE_FACTOR = POLICY.noise_factor  # times the series' mean change from one commit to the next: beyond noise
PERSIST = POLICY.persist  # commits a level must hold before it counts
MIN_COMMITS = 2 * PERSIST  # an earlier level and a later one, each held
RATE_UNIT = re.compile(r"(/\s*s(ec(ond)?s?)?|per second|flops)\s*$", re.IGNORECASE)
# Tracked, never gated (docs/performance-history.md): the synchronized time moves with the host's load.
IGNORED = re.compile(r"SynchronizedTime")
TITLE = "Performance regression on main ({machine})"
MARKER = "<!-- harness.history.changepoints machine={machine}"
STORE = ROOT / "benchmarks" / "history"  # the committed history (studies/changepoint_power.py reads it)
# What ``load`` leaves out, as the report names it.
OFF_MAIN = "result files of commits off the first-parent history"
EARLIER_LINE = "result files of an earlier line (toolchain, python)"
NEVER_GATED = "results of benchmarks never gated (SynchronizedTime)"
NOT_POSITIVE = "values not positive and finite (no relative change)"


@dataclass(frozen=True)
class Found:
    """A regression in one series, by index into its values (oldest first)."""

    good: int  # the last commit at the earlier level
    full: int  # the first commit at today's level: the range is (good, full]
    before: float  # the earlier level (in the judged direction: lower is better)
    now: float  # today's level
    limit: float  # the series' limit: the smallest rise called, relative to the earlier level
    steps: tuple  # asv's (last index before, first index after, level before, best level after)
    judged: int  # the store whose verdict this is (how many values): newer ones have not agreed yet


def lower_is_better(unit: str) -> bool:
    """asv's convention (its Regressions page calls every rise a regression); a rate is the exception."""
    return not RATE_UNIT.search(unit or "")


def segments(y: list[float]) -> list[tuple]:
    """asv's piecewise-constant fit of ``y``, as ``detect_steps`` returns it: (left, right, level,
    minimum, mean absolute deviation) per segment, ``right`` exclusive. Unweighted: every figure the
    check judges is a ``track_`` benchmark's, which records no statistics to weigh it by."""
    from asv.step_detect import solve_potts_approx

    right, levels, dists = solve_potts_approx(list(y), [1.0] * len(y))
    lefts = [0, *right[:-1]]
    fit = zip(lefts, right, levels, dists, strict=True)
    return [(left, r, level, min(y[left:r]), abs(dist / (r - left))) for left, r, level, dist in fit]


def find(y: list[float]) -> Found | None:
    """The regression the series ``y`` (lower is better, oldest first) shows today, or None: the
    newest verdict that PERSIST stores in a row reached (a store's own verdict: ``verdict``)."""
    at = functools.cache(lambda n: verdict(y[:n]))
    for n in range(len(y), MIN_COMMITS - 1, -1):
        run = [at(m) for m in range(n, n - PERSIST, -1)]
        if all((found is None) == (run[0] is None) for found in run):
            return run[0]
    return None


def verdict(y: list[float]) -> Found | None:
    """One store's verdict on ``y``: asv's fit and decision, with the series' own limit."""
    from asv.step_detect import detect_regressions

    n = len(y)
    if n < MIN_COMMITS:
        return None
    # A level counts once held: a shorter segment is a transition (a ramp's middle) or an outlier, and
    # is left out, as asv leaves out missing points; a step then spans it.
    held = [segment for segment in segments(y) if segment[1] - segment[0] >= PERSIST]
    noise = sum(abs(b - a) for a, b in itertools.pairwise(y)) / (n - 1) / median(y)
    threshold = max(FLOOR, NOISE_FACTOR * noise)
    latest, _, steps = detect_regressions(held, threshold=threshold, min_size=PERSIST)
    if not steps:
        return None
    last_before, first_after, before, _ = steps[0]
    # The range: from the last commit at the earlier level to the first at today's. A commit is at the
    # earlier level within a sixth of the change (at most twice the series' noise), so a ramp's first
    # commit, a third of the way up, is named; at today's level within a quarter of the change.
    change = latest - before
    low, high = before + min(change / 6, 2 * noise * median(y)), latest - change / 4
    good = next((i for i in range(last_before, -1, -1) if y[i] <= low), last_before)
    full = next((i for i in range(first_after, n) if y[i] >= high), first_after)
    return Found(good, full, before, latest, threshold, tuple(steps), n)


class BadInput(Exception):
    """Input the check can't judge: the message is the one line printed."""


@dataclass
class Series:
    machine: str
    benchmark: str
    params: tuple  # this combination's values, asv's reprs
    unit: str
    commits: list = field(default_factory=list)
    values: list = field(default_factory=list)

    @property
    def label(self) -> str:
        shown = ", ".join(str(p).strip("'") for p in self.params)
        return f"{self.benchmark}({shown})" if shown else self.benchmark


@dataclass(frozen=True)
class Regression:
    series: Series
    found: Found
    good: str  # the commits at found.good and found.full
    full: str

    @property
    def commits(self) -> list[str]:
        return self.series.commits[self.found.good + 1 : self.found.full + 1]

    @property
    def change(self) -> float:
        """How much worse, in the judged direction (lower is better): 0.08 is 8% slower."""
        return self.found.now / self.found.before - 1

    @property
    def shown(self) -> str:
        """The change as the figure moved: +8.0% for a time, -7.4% for a rate that dropped."""
        return f"{1 / (1 + self.change) - 1:+.1%}" if not lower_is_better(self.series.unit) else f"{self.change:+.1%}"


def first_parent(rev: str) -> list[str]:
    try:
        command = ["git", "rev-list", "--first-parent", "--reverse", rev]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    except OSError as error:
        raise BadInput(f"git could not be run in {ROOT}: {error}") from None
    if done.returncode != 0:
        raise BadInput(f"git rev-list --first-parent {rev} failed in {ROOT}: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout.split()


def gpu_machines(results_dir: Path) -> list[str]:
    try:
        return result_merge.gpu_machines(results_dir)
    except RecordError as error:  # a machine.json that isn't asv's
        raise BadInput(str(error)) from None


def load(results_dir: Path, machine: str, order: list[str]) -> tuple[list[Series], dict]:
    """``machine``'s series of its latest line, in ``order``; and what was left out, counted."""
    from asv import results as asv_results
    from asv import util

    results_dir = Path(results_dir)
    try:
        benchmarks = util.load_json(str(results_dir / "benchmarks.json"))
    except (OSError, ValueError, util.UserError) as error:
        raise BadInput(f"{results_dir / 'benchmarks.json'}: {error}") from None
    if not isinstance(benchmarks, dict) or not all(
        isinstance(v, dict) for k, v in benchmarks.items() if k != "version"
    ):
        raise BadInput(f"{results_dir / 'benchmarks.json'} is not asv's list of benchmarks")
    position = {commit: i for i, commit in enumerate(order)}
    runs: list = []
    skipped = dict.fromkeys((OFF_MAIN, EARLIER_LINE, NEVER_GATED, NOT_POSITIVE), 0)
    for path in sorted((results_dir / machine).glob("*.json")):
        if path.name == "machine.json":
            continue
        try:  # asv's own iteration skips a file it can't read with a warning: here that is bad input
            result = asv_results.Results.load(str(path), machine_name=machine)
        except (OSError, ValueError, KeyError, TypeError, util.UserError) as error:
            why = (str(error).splitlines() or [type(error).__name__])[0][:200]
            raise BadInput(f"{path}: a result file asv can't read: {why}") from None
        if result.commit_hash in position:
            runs.append(result)
        else:
            skipped[OFF_MAIN] += 1
    if not runs:
        return [], skipped
    runs.sort(key=lambda r: position[r.commit_hash])
    line_of = {r.commit_hash: tuple(sorted((k, str(v)) for k, v in r.params.items() if k != "machine")) for r in runs}
    current = line_of[runs[-1].commit_hash]
    series: dict[tuple, Series] = {}
    for result in runs:
        if line_of[result.commit_hash] != current:
            skipped[EARLIER_LINE] += 1
            continue
        for name in sorted(result.get_result_keys(benchmarks)):
            if IGNORED.search(name):
                skipped[NEVER_GATED] += 1
                continue
            info = benchmarks[name]
            params = info.get("params") or []
            values = result.get_result_value(name, params)
            for combo, value in zip(itertools.product(*params), values, strict=True):
                if value is None or (isinstance(value, float) and math.isnan(value)):
                    continue  # failed or skipped: missing, as asv's graphs take it
                if not 0 < value < math.inf:
                    skipped[NOT_POSITIVE] += 1
                    continue
                key = (name, combo)
                if key not in series:
                    series[key] = Series(machine, name, combo, info.get("unit", ""))
                s = series[key]
                s.commits.append(result.commit_hash)
                s.values.append(float(value))
    return list(series.values()), skipped


def judge(series: Series) -> Regression | None:
    y = series.values if lower_is_better(series.unit) else [1 / v for v in series.values]
    found = find(y)
    return Regression(series, found, series.commits[found.good], series.commits[found.full]) if found else None


def verdicts(results_dir: Path, rev: str, machines: list[str] | None) -> dict:
    """{machine: (regressions, series judged, what was left out, the newest commit judged)}."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise BadInput(f"{results_dir} is not a results folder")
    gpus = gpu_machines(results_dir)
    if machines:
        unknown = [m for m in machines if m not in gpus]
        if unknown:
            raise BadInput(
                f"no GPU machine {', '.join(unknown)} in {results_dir} (it holds: {', '.join(gpus) or 'none'})"
            )
    elif not gpus:
        raise BadInput(f"{results_dir} holds no GPU machine's results")
    order = first_parent(rev)
    out = {}
    for machine in machines or gpus:
        series, skipped = load(results_dir, machine, order)
        if not series:  # nothing to judge: its issue, if any, is left as it is
            out[machine] = ([], 0, skipped, "")
            continue
        position = {commit: i for i, commit in enumerate(order)}
        found = [r for r in map(judge, series) if r]
        found.sort(key=lambda r: (position[r.good], position[r.full], r.series.label))
        head = max((c for s in series for c in s.commits), key=position.__getitem__)
        out[machine] = (found, len(series), skipped, head)
    if not any(judged for _, judged, _, _ in out.values()):
        raise BadInput(
            f"none of the results in {results_dir} is of a commit of {rev}'s first-parent history "
            "(a shallow clone? check out with fetch-depth: 0)"
        )
    return out


def human(value: float, unit: str, higher_is_better: bool) -> str:
    from asv.util import human_value

    shown = 1 / value if higher_is_better else value
    return human_value(shown, unit) if unit in ("seconds", "bytes") else f"{shown:.4g}"


def called_set(regressions: list[Regression]) -> str:
    """What is called, in a few characters, kept in the marker: the same calls edit without a comment."""
    text = "\n".join(sorted(f"{r.series.label} {r.good} {r.full}" for r in regressions))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def body(machine: str, regressions: list[Regression], head: str, compare_url: str = "") -> str:
    """The issue's text: the first bad commit's range, then every series called and its own range.
    ``regressions`` come in main's order of their ranges (``verdicts``): the first is the first bad."""
    first = regressions[0]
    span = f"{first.good[:12]}...{first.full[:12]}"
    link = f" ([compare]({compare_url}{first.good}...{first.full}))" if compare_url else ""
    count = len(first.commits)
    lines = [
        marker(machine) + f" called={called_set(regressions)} -->",
        f"Change-point detection on main's history of **{md.text(machine)}** calls {len(regressions)} series slower "
        f"than before, as of {head[:12]} (`python -m harness changepoints check`).",
        "",
        f"**First bad commit's range:** {span}{link}: after {first.good[:12]}, up to and including "
        f"{first.full[:12]}: {count} commit{'s' if count != 1 else ''}, {', '.join(c[:12] for c in first.commits)}.",
        "",
        "| benchmark | before | now | change | limit | range: last at the earlier level...first at today's |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in regressions:
        rate = not lower_is_better(r.series.unit)
        lines.append(
            f"| `{md.code(r.series.label)}` | {human(r.found.before, r.series.unit, rate)} | "
            f"{human(r.found.now, r.series.unit, rate)} | {r.shown} | {r.found.limit:.1%} | "
            f"{r.good[:12]}...{r.full[:12]} |"
        )
    lines += [
        "",
        "The rule (harness/history/changepoints.py): asv's step fit of each series over main's first-parent commits. A "
        "series is called when its latest level is above its best earlier one by more than its limit: the larger "
        f"of {FLOOR:.0%} and {NOISE_FACTOR:g} times its mean change from one commit to the next (a rate: below, "
        f"by its inverse). A level counts once held for {PERSIST} commits, and a verdict once reached at "
        f"{PERSIST} stores in a row. This issue is updated after every store, and closed when nothing is called.",
    ]
    return "\n".join(lines) + "\n"


def marker(machine: str) -> str:
    """The marker's opening; escaped, the machine's name can't end the comment (``-->``)."""
    return MARKER.format(machine=md.text(machine))


def open_issue(github, machine: str) -> dict | None:
    """The open issue this check keeps for ``machine`` (by its marker, or its title), if any."""
    title, opening = TITLE.format(machine=machine), marker(machine)
    for page in range(1, 101):
        found = github.call("GET", f"issues?state=open&per_page=100&page={page}")
        if not isinstance(found, list):
            raise BadInput(f"GitHub's list of issues was not a list: {str(found)[:80]}")
        for issue in found:
            if "pull_request" in issue:  # the issues endpoint lists pull requests too
                continue
            if issue.get("title") == title or opening in (issue.get("body") or ""):
                return issue
        if len(found) < 100:
            return None
    return None


def sync(github, machine: str, regressions: list[Regression], head: str, compare_url: str = "") -> str:
    """Open, update or close ``machine``'s issue to agree with ``regressions``; says what it did."""
    title = TITLE.format(machine=machine)
    issue = open_issue(github, machine)
    if regressions:
        text = body(machine, regressions, head, compare_url)
        if issue is None:
            made = github.call("POST", "issues", {"title": title, "body": text})
            return f"opened #{made.get('number')} {title!r}"
        number, old = issue["number"], issue.get("body") or ""
        if old == text:
            return f"#{number} {title!r} already says this"
        github.call("PATCH", f"issues/{number}", {"body": text})
        if f"called={called_set(regressions)} -->" in old:
            return f"updated #{number} {title!r} (the same series and ranges)"
        names = ", ".join(f"{md.text(r.series.label)} ({r.good[:12]}...{r.full[:12]})" for r in regressions)
        github.call("POST", f"issues/{number}/comments", {"body": f"As of {head[:12]}, called: {names}."})
        return f"updated #{number} {title!r}, with a comment: what is called changed"
    if issue is None:
        return "no regression, no open issue"
    note = f"As of {head[:12]} no series is above its earlier level beyond its limit: closing."
    github.call("POST", f"issues/{issue['number']}/comments", {"body": note})
    github.call("PATCH", f"issues/{issue['number']}", {"state": "closed", "state_reason": "completed"})
    return f"closed #{issue['number']} {title!r}"


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
            left = "; ".join(f"{n} {why}" for why, n in skipped.items() if n)
            line = f"{machine}: {judged} series judged up to {head[:12]}" + (f" ({left} left out)" if left else "")
            names = ", ".join(f"{r.series.label} {r.shown} in {r.good[:12]}...{r.full[:12]}" for r in regressions)
            line += f": {len(regressions)} called: {names}" if regressions else ": no regression"
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


def main(argv=None) -> int:
    paragraphs = [" ".join(p.split()) for p in __doc__.split("\n\n")]
    cli = command_output.Parser(prog="python -m harness changepoints", description=paragraphs[0], epilog=paragraphs[-1])
    commands = cli.add_subparsers(dest="command", required=True, parser_class=command_output.Parser)
    run = commands.add_parser(
        "check",
        help="judge main's history; open, update or close each GPU machine's issue",
        description=paragraphs[1],
        epilog=paragraphs[-1],
    )
    run.add_argument("--results", type=Path, help="an asv results folder (default: asv.conf.json's, .asv/results)")
    run.add_argument("--rev", default="HEAD", help="whose first-parent history is main's (%(default)s)")
    run.add_argument("--machine", action="append", help="judge this GPU machine only (repeatable; default: every one)")
    run.add_argument("--dry-run", action="store_true", help="print what would be done; GitHub is not contacted")
    return check(cli.parse_args(argv))
