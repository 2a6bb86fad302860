"""Main's history as the series the change-point rule judges (per GPU machine, benchmark and parameter
combination, on the machine's latest line, over main's first-parent commits), and the verdict on
each (``verdicts``). What can't be judged is counted; input that can't be read is ``BadInput``."""

from __future__ import annotations

import itertools
import math
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.paths import ROOT
from harness.core.schema import RecordError
from harness.history import result_merge
from harness.history.changepoint_rule import Found, find, lower_is_better

# Tracked, never gated (docs/performance-history.md): the synchronized time moves with the host's load.
IGNORED = re.compile(r"SynchronizedTime")


class BadInput(Exception):
    """Input the check can't judge: the message is the one line printed."""


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
            for combo, value in zip(itertools.product(*params), values, strict=True):
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
    return list(series.values()), skipped


def judge(series: Series) -> Regression | None:
    y = series.values if lower_is_better(series.unit) else [1 / v for v in series.values]
    found = find(y)
    return Regression(series, found) if found else None


def verdicts(results_dir: Path, rev: str, machines: list[str] | None, repo: Path = ROOT) -> dict:
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
