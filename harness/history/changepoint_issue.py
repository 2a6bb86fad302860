"""The GitHub issue the change-point check keeps for each GPU machine: its text, found again by its
marker or title, opened, updated (a comment only when what is called changed) or closed."""

from __future__ import annotations

import hashlib

from harness.core import markdown as md
from harness.history.changepoint_rule import FLOOR, NOISE_FACTOR, PERSIST, lower_is_better
from harness.history.changepoint_series import BadInput, Regression

TITLE = "Performance regression on main ({machine})"
MARKER = "<!-- harness.history.changepoints machine={machine}"


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
