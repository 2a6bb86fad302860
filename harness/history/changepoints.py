"""Change points in main's performance history: a slowdown that crept in over several merges, each of
which passed its own PR check, opens one GitHub issue per GPU machine; a recovery closes it.

    python -m harness.history.changepoints check [--results DIR] [--rev REV] [--machine NAME] [--dry-run]
    python -m harness.history.changepoints power [--draws N] [--length L] [--after A] [--seed S] [--only REGEX]

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

Measured (``power``): null histories of 16 commits, each commit one whole run drawn with replacement
from the committed H200 history's twelve runs of one kernel (one session, ten minutes), and the ratios
to the baselines from its five full-suite runs (five kernels and sessions: their spread overstates the
ratios' noise). False alarms: 16 of 1000 histories called something (1.6% of stores, 95% upper bound
2.4%; with 40 commits: 7 of 1000, 0.7%, upper bound 1.3%), mostly the two-level 4096x1024 and the
session's first run (11008x4096 bf16 5.5% faster than the rest). The smallest slowdown spread over
three commits, with five commits after it, called in 95% of histories: 4% on 28672x8192 (kernel time,
time over copy: the first bad commit named in every call), 11-19% on 14336x4096 and 11008x4096 (named
in 84-92% of calls), 13-25% on 4096x4096 and 8192x2048, 29% to over 30% on 4096x1024, 4% on peak
memory, over 30% on the ratios.

Exit codes (check): 0 the issues agree with the verdict (or, with --dry-run, what would be done was
printed), regression or not; 1 GitHub refused or could not be reached; 2 bad arguments or input (no
results folder, no GPU machine, a result file asv can't read, a revision git doesn't know, no result on
its first-parent history, GITHUB_REPOSITORY or GITHUB_TOKEN unset). power: 0, or 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import random
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

from harness.core.paths import ROOT

STORE = ROOT / "benchmarks" / "history"

FLOOR = 0.03  # the smallest change called, relative to the earlier level
NOISE_FACTOR = 4.0  # times the series' mean change from one commit to the next: the limit noise does not reach
PERSIST = 2  # commits a level must hold before it counts
MIN_COMMITS = 2 * PERSIST  # an earlier level and a later one, each held
# Tracked, never gated (docs/performance-history.md): the synchronized time moves with the host's load.
IGNORED = re.compile(r"SynchronizedTime")
TITLE = "Performance regression on main ({machine})"
MARKER = "<!-- harness.history.changepoints machine={machine}"
RATE_UNIT = re.compile(r"(/\s*s(ec(ond)?s?)?|per second|flops)\s*$", re.IGNORECASE)

# power: the committed H200 runs of one kernel (benchmarks/results/asv-h200/README.md: b543b026's
# full-suite run and the backfill's eleven commits, one H200, one session).
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


class BadInput(Exception):
    """Input the check can't judge: the message is the one line printed."""


# --- The rule on one series ----------------------------------------------------------------------


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


def segments(y: list[float], w: list[float] | None = None) -> list[tuple]:
    """asv's piecewise-constant fit of ``y``, as ``detect_steps`` returns it: (left, right, level,
    minimum, mean absolute deviation) per segment, ``right`` exclusive."""
    from asv.step_detect import solve_potts_approx

    w = w or [1.0] * len(y)
    right, levels, dists = solve_potts_approx(list(y), list(w))
    out, left = [], 0
    for r, level, dist in zip(right, levels, dists, strict=True):
        out.append((left, r, level, min(y[left:r]), abs(dist / (r - left))))
        left = r
    return out


def find(
    y: list[float],
    w: list[float] | None = None,
    floor: float = FLOOR,
    noise_factor: float = NOISE_FACTOR,
    persist: int = PERSIST,
) -> Found | None:
    """The regression the series ``y`` (lower is better, oldest first) shows today, or None: the
    newest verdict that ``persist`` stores in a row reached (a store's own verdict: ``verdict``)."""
    reached: dict[int, Found | None] = {}

    def at(n: int) -> Found | None:
        if n not in reached:
            reached[n] = verdict(y[:n], w[:n] if w else None, floor, noise_factor, persist)
        return reached[n]

    for n in range(len(y), 2 * persist - 1, -1):
        run = [at(m) for m in range(n, n - persist, -1)]
        if all((found is None) == (run[0] is None) for found in run):
            return run[0]
    return None


def verdict(y: list[float], w: list[float] | None, floor: float, noise_factor: float, persist: int) -> Found | None:
    """One store's verdict on ``y``: asv's fit and decision, with the series' own limit."""
    from asv.step_detect import detect_regressions

    n = len(y)
    if n < 2 * persist:
        return None
    fit = segments(y, w)
    # A level counts once held: a shorter segment is a transition (a ramp's middle) or an outlier, and
    # is left out, as asv leaves out missing points; a step then spans it.
    held = [segment for segment in fit if segment[1] - segment[0] >= persist]
    noise = sum(abs(b - a) for a, b in itertools.pairwise(y)) / (n - 1) / median(y)
    threshold = max(floor, noise_factor * noise)
    latest, _, steps = detect_regressions(held, threshold=threshold, min_size=persist)
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


# --- The history: series per machine ---------------------------------------------------------------


@dataclass
class Series:
    machine: str
    benchmark: str
    params: tuple  # this combination's values, asv's reprs
    param_names: tuple
    line: tuple  # the result's asv parameters other than the machine (toolchain, python)
    unit: str
    commits: list = field(default_factory=list)
    values: list = field(default_factory=list)
    weights: list = field(default_factory=list)

    @property
    def label(self) -> str:
        shown = ", ".join(str(p).strip("'") for p in self.params)
        return f"{self.benchmark}({shown})" if shown else self.benchmark


@dataclass(frozen=True)
class Regression:
    series: Series
    found: Found

    @property
    def good(self) -> str:
        return self.series.commits[self.found.good]

    @property
    def full(self) -> str:
        return self.series.commits[self.found.full]

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


def first_parent(rev: str, repo: Path = ROOT) -> list[str]:
    """Main's commits, oldest first, along first parents."""
    try:
        command = ["git", "rev-list", "--first-parent", "--reverse", rev]
        done = subprocess.run(command, cwd=repo, capture_output=True, text=True, check=False)
    except OSError as error:
        raise BadInput(f"git could not be run in {repo}: {error}") from None
    if done.returncode != 0:
        raise BadInput(f"git rev-list --first-parent {rev} failed in {repo}: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout.split()


def gpu_machines(results_dir: Path) -> list[str]:
    names = []
    for info in sorted(Path(results_dir).glob("*/machine.json")):
        try:
            gpu = json.loads(info.read_text()).get("gpu", "none")
        except (OSError, ValueError, AttributeError) as error:
            raise BadInput(f"{info} is not a machine description: {error}") from None
        if gpu != "none":
            names.append(info.parent.name)
    return names


def load(results_dir: Path, machine: str, order: list[str]) -> tuple[list[Series], dict]:
    """``machine``'s series of its latest line, in ``order``; and what was left out, counted."""
    from asv import results as asv_results
    from asv import util
    from asv._stats import get_weight

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
    skipped = dict.fromkeys(
        (
            "result files of commits off the first-parent history",
            "result files of an earlier line (toolchain, python)",
            "results of benchmarks never gated (SynchronizedTime)",
            "values not positive and finite (no relative change)",
        ),
        0,
    )
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
            skipped["result files of commits off the first-parent history"] += 1
    if not runs:
        return [], skipped
    runs.sort(key=lambda r: position[r.commit_hash])
    line_of = {r.commit_hash: tuple(sorted((k, str(v)) for k, v in r.params.items() if k != "machine")) for r in runs}
    current = line_of[runs[-1].commit_hash]
    series: dict[tuple, Series] = {}
    for result in runs:
        if line_of[result.commit_hash] != current:
            skipped["result files of an earlier line (toolchain, python)"] += 1
            continue
        for name in sorted(result.get_result_keys(benchmarks)):
            if IGNORED.search(name):
                skipped["results of benchmarks never gated (SynchronizedTime)"] += 1
                continue
            info = benchmarks[name]
            params = info.get("params") or []
            values = result.get_result_value(name, params)
            weights = [get_weight(s) for s in result.get_result_stats(name, params)]
            for combo, value, weight in zip(itertools.product(*params), values, weights, strict=True):
                if value is None or (isinstance(value, float) and math.isnan(value)):
                    continue  # failed or skipped: missing, as asv's graphs take it
                if not 0 < value < math.inf:
                    skipped["values not positive and finite (no relative change)"] += 1
                    continue
                key = (name, combo)
                if key not in series:
                    series[key] = Series(
                        machine, name, combo, tuple(info.get("param_names", ())), current, info.get("unit", "")
                    )
                s = series[key]
                s.commits.append(result.commit_hash)
                s.values.append(float(value))
                s.weights.append(weight)
    return list(series.values()), skipped


def weights_of(series: Series) -> list[float] | None:
    """asv's weights (2 / the 99% interval's width) normalized by their median, as detect_steps
    does; None where no value has one (track_ benchmarks record no statistics)."""
    known = [w for w in series.weights if w is not None and w == w and w > 0]
    if not known:
        return None
    mid = median(known)
    return [(w / mid) if w is not None and w == w and w > 0 else 1.0 for w in series.weights]


def judge(series: Series, **rule) -> Regression | None:
    y = series.values if lower_is_better(series.unit) else [1 / v for v in series.values]
    found = find(y, weights_of(series), **rule)
    return Regression(series, found) if found else None


# --- The issue ---------------------------------------------------------------------------------------


def human(value: float, unit: str, higher_is_better: bool) -> str:
    from asv.util import human_value

    shown = 1 / value if higher_is_better else value
    return human_value(shown, unit) if unit in ("seconds", "bytes") else f"{shown:.4g}"


def called_set(regressions: list[Regression]) -> str:
    """What is called, in a few characters: the issue's marker keeps it, so a store that calls the
    same series over the same ranges edits the issue without a comment (no notification)."""
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
        MARKER.format(machine=machine) + f" called={called_set(regressions)} -->",
        f"Change-point detection on main's history of **{machine}** calls {len(regressions)} series slower "
        f"than before, as of {head[:12]} (`python -m harness.history.changepoints check`).",
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
            f"| `{r.series.label}` | {human(r.found.before, r.series.unit, rate)} | "
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


def open_issue(github, machine: str) -> dict | None:
    """The open issue this check keeps for ``machine`` (by its marker, or its title), if any."""
    title, marker = TITLE.format(machine=machine), MARKER.format(machine=machine)
    for page in range(1, 101):
        found = github.call("GET", f"issues?state=open&per_page=100&page={page}")
        if not isinstance(found, list):
            raise BadInput(f"GitHub's list of issues was not a list: {str(found)[:80]}")
        for issue in found:
            if "pull_request" in issue:  # the issues endpoint lists pull requests too
                continue
            if issue.get("title") == title or marker in (issue.get("body") or ""):
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
        names = ", ".join(f"{r.series.label} ({r.good[:12]}...{r.full[:12]})" for r in regressions)
        github.call("POST", f"issues/{number}/comments", {"body": f"As of {head[:12]}, called: {names}."})
        return f"updated #{number} {title!r}, with a comment: what is called changed"
    if issue is None:
        return "no regression, no open issue"
    note = f"As of {head[:12]} no series is above its earlier level beyond its limit: closing."
    github.call("POST", f"issues/{issue['number']}/comments", {"body": note})
    github.call("PATCH", f"issues/{issue['number']}", {"state": "closed", "state_reason": "completed"})
    return f"closed #{issue['number']} {title!r}"


# --- check ---------------------------------------------------------------------------------------------


def verdicts(results_dir: Path, rev: str, machines: list[str] | None, repo: Path = ROOT, **rule) -> dict:
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
    order = first_parent(rev, repo)
    out = {}
    for machine in machines or gpus:
        series, skipped = load(results_dir, machine, order)
        if not series:  # nothing to judge: its issue, if any, is left as it is
            out[machine] = ([], 0, skipped, "")
            continue
        position = {commit: i for i, commit in enumerate(order)}
        found = [r for r in (judge(s, **rule) for s in series) if r]
        found.sort(key=lambda r: (position[r.good], position[r.full], r.series.label))
        head = max((c for s in series for c in s.commits), key=position.__getitem__)
        out[machine] = (found, len(series), skipped, head)
    if not any(judged for _, judged, _, _ in out.values()):
        raise BadInput(
            f"none of the results in {results_dir} is of a commit of {rev}'s first-parent history "
            "(a shallow clone? check out with fetch-depth: 0)"
        )
    return out


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
            print(line)
            summary.append(line)
            continue
        line = report_line(machine, regressions, judged, skipped, head)
        print(line)
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
        print(f"{machine}: {done}")
        summary.append(f"{machine}: {done}")
    path = env.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a") as f:
            f.write("### Change points on main\n\n" + "".join(f"- {line}\n" for line in summary))
    return 0


def default_results() -> Path:
    from harness.history.asvrun import load_config

    return ROOT / load_config(str(ROOT / "asv.conf.json"))["results_dir"]


# --- power: false alarms and the smallest step found, on the committed history ----------------------


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


def upper_95(k: int, n: int) -> float:
    """The one-sided 95% upper bound of a rate seen k times in n (Clopper-Pearson, by bisection)."""
    if k >= n:
        return 1.0
    lo, hi = k / n, 1.0
    for _ in range(60):
        p = (lo + hi) / 2
        tail = sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k + 1))
        lo, hi = (p, hi) if tail > 0.05 else (lo, p)
    return hi


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
        f"{upper_95(fired, draws):.2%}), drawn from {len(noise)} runs; called: "
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
        "upper_95": upper_95(fired, draws),
        "called": {by_key[k].label: n for k, n in per_key.items()},
        "smallest": {by_key[k].label: v for k, v in smallest.items()},
    }


# --- CLI -----------------------------------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, as every other bad input
        print(f"{self.prog}: {message}", file=sys.stderr)
        raise SystemExit(2)


def parser() -> Parser:
    paragraphs = [" ".join(p.split()) for p in __doc__.split("\n\n")]
    cli = Parser(prog="python -m harness.history.changepoints", description=paragraphs[0], epilog=paragraphs[-1])
    commands = cli.add_subparsers(dest="command", required=True, parser_class=Parser)
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
    measure = commands.add_parser(
        "power",
        help="false alarms and the smallest step found, on benchmarks/history",
        description=paragraphs[5],
        epilog=paragraphs[-1],
    )
    measure.add_argument("--machine", default="h200")
    measure.add_argument("--draws", type=int, default=300, help="null histories drawn (%(default)s)")
    measure.add_argument("--length", type=int, default=16, help="commits in each (%(default)s)")
    measure.add_argument(
        "--after", type=int, default=5, help="commits at the new level after a planted ramp (%(default)s)"
    )
    measure.add_argument("--seed", type=int, default=0)
    measure.add_argument("--only", default="", help="find the smallest step only for series matching this regex")
    return cli


def main(argv=None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    if args.command == "check":
        return check(args)
    if args.draws < 1 or args.length < MIN_COMMITS + 3 or not 0 < args.after <= args.length - 4:
        print("changepoints: power needs --draws >= 1, --length >= 7 and 0 < --after <= length - 4", file=sys.stderr)
        return 2
    try:
        re.compile(args.only)
    except re.error as error:
        print(f"changepoints: --only {args.only!r} is not a regular expression: {error}", file=sys.stderr)
        return 2
    try:
        if args.machine not in gpu_machines(STORE):
            raise BadInput(f"no GPU machine {args.machine} in {STORE}")
        power(STORE, args.machine, args.draws, args.length, args.seed, args.after, args.only)
    except BadInput as error:
        print(f"changepoints: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
