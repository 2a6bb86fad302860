"""harness/history/changepoints.py: change points in main's GPU history. The committed H200 history calls
nothing at any of its stores; a slowdown of 8% spread over three commits, planted in its result files,
is called with the commits it came in and the benchmarks it hit; the issue is opened, updated (never a
second one) and closed against a stand-in GitHub; bad input is one line and exit 2."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from another_gpu_type import add_another_gpu_type

from dev.rehearsal.fake_github import FakeGitHub, Pull, Serving
from harness.history import changepoints
from studies import changepoint_power

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "benchmarks" / "history"
REPO = "nf4kernel/nf4kernel"
TITLE = "Performance regression on main (h200)"
KERNEL_TIME = "gpu.KernelTime.track_kernel_time"
TIME_OVER_COPY = "gpu.TimeOverCopy.track_time_over_copy"
LARGE = ("28672x8192", "bfloat16"), ("28672x8192", "float16")


def main_commits() -> list[str]:
    """The committed history's commits in main's first-parent order (all sixteen are on it)."""
    stored = {json.loads(p.read_text())["commit_hash"] for p in (STORE / "h200").glob("*-*.json")}
    return [c for c in changepoints.first_parent("HEAD") if c in stored]


ORDER = main_commits()


def ramp(at: int, total: float = 0.08, recover_at: int | None = None):
    """A slowdown of ``total`` spread evenly over three commits from ORDER[at] on (each commit
    (1 + total) ** (1/3) slower than the one before), gone again from ORDER[recover_at] on."""

    def factor(i: int) -> float:
        if recover_at is not None and i >= recover_at:
            return 1.0
        return (1 + total) ** (min(3, max(0, i - at + 1)) / 3)

    return factor


def plant(results: Path, benchmarks: dict, factor) -> None:
    """Multiply the chosen figures (benchmark -> set of (shape, dtype)) of ORDER[i] by factor(i), in
    the result files themselves."""
    for path in (results / "h200").glob("*-*.json"):
        data = json.loads(path.read_text())
        f = factor(ORDER.index(data["commit_hash"]))
        for name, combos in benchmarks.items():
            if name not in data["results"]:
                continue
            row = data["results"][name]
            keys = [tuple(p.strip("'") for p in combo) for combo in itertools.product(*row[1])]
            row[0] = [v * f if key in combos else v for key, v in zip(keys, row[0], strict=True)]
        path.write_text(json.dumps(data))


def index(prefix: str) -> int:
    return next(i for i, c in enumerate(ORDER) if c.startswith(prefix))


@pytest.fixture
def results(tmp_path) -> Path:
    """A copy of the committed history, to plant in."""
    shutil.copytree(STORE, tmp_path / "results")
    return tmp_path / "results"


def called(results_dir: Path, upto: int) -> list:
    """What the check calls on h200 at the store after ORDER[upto]."""
    (regressions, _, _, head) = changepoints.verdicts(results_dir, ORDER[upto], ["h200"])["h200"]
    assert head == ORDER[upto]
    return regressions


def shape(regression) -> tuple:
    return tuple(p.strip("'") for p in regression.series.params)


# --- The rule on the committed history --------------------------------------------------------------


def test_the_history_is_main_s_first_parent_commits_and_holds_sixteen():
    assert len(ORDER) == 16
    assert ORDER[0].startswith("6929daed") and ORDER[-1].startswith("644a4ed2")


@pytest.mark.parametrize("upto", range(3, 16), ids=lambda i: ORDER[i][:8])
def test_the_committed_history_calls_nothing_at_any_store(upto):
    """Every store the committed history went through, judged as the workflow would have judged it."""
    assert called(STORE, upto) == []


def test_every_gpu_figure_is_judged_and_lower_is_better():
    regressions, judged, _skipped, _ = changepoints.verdicts(STORE, "HEAD", None)["h200"]
    assert (regressions, judged) == ([], 72)  # 6 benchmarks x 6 shapes x 2 dtypes (no SynchronizedTime stored)
    units = {v["unit"] for k, v in json.loads((STORE / "benchmarks.json").read_text()).items() if k != "version"}
    assert all(changepoints.lower_is_better(u) for u in units), units  # seconds, bytes, time over time


@pytest.mark.parametrize(
    "unit,lower",
    [
        ("seconds", True),
        ("bytes", True),
        ("nf4kernel time / copy time", True),
        ("GB/s", False),
        ("calls / s", False),
        ("tokens per second", False),
    ],
)
def test_a_rate_is_judged_by_its_inverse(unit, lower):
    assert changepoints.lower_is_better(unit) is lower


# --- Planted slowdowns ----------------------------------------------------------------------------------


def test_an_8pct_slowdown_over_three_commits_is_called_with_its_range_and_benchmarks(results):
    """+2.6% a commit for three commits (8% in all) from b7551f82 on, in the 28672x8192 weights' kernel
    time and time over copy, judged at the store after b7b48218 (before c56b2633's tiles made these
    weights 5% faster: past it, 3% of the 8% is left, and the rule judges what is left)."""
    at = index("b7551f82")
    plant(results, {KERNEL_TIME: set(LARGE), TIME_OVER_COPY: set(LARGE)}, ramp(at))
    found = called(results, index("b7b48218"))
    assert sorted((r.series.benchmark, shape(r)) for r in found) == sorted(
        (name, combo) for name in (KERNEL_TIME, TIME_OVER_COPY) for combo in LARGE
    )
    for r in found:
        assert (r.good, r.full) == (ORDER[at - 1], ORDER[at + 2]), r.series.label  # the ramp, whole
        assert r.commits == ORDER[at : at + 3]
        assert 0.07 < r.change < 0.09


def test_planted_in_every_weight_only_planted_figures_are_called_each_from_the_ramp(results):
    """The same ramp in every weight's kernel time: only planted figures are called, the steady large
    weights among them, and each range holds the ramp's first commit and ends within the ramp (it may
    start earlier where the earlier level is noisy)."""
    at = 5
    params = json.loads((STORE / "benchmarks.json").read_text())[KERNEL_TIME]["params"]
    every = {tuple(p.strip("'") for p in combo) for combo in itertools.product(*params)}
    plant(results, {KERNEL_TIME: every}, ramp(at))
    found = called(results, 12)
    assert {r.series.benchmark for r in found} == {KERNEL_TIME}
    assert set(LARGE) <= {shape(r) for r in found}
    for r in found:
        assert ORDER[at] in r.commits and ORDER.index(r.full) <= at + 2, r.series.label


def test_each_gpu_type_is_judged_on_its_own_history(results):
    """Two types' histories in one results folder (history.yml stores one per type): the 8% ramp
    planted in h200's alone is called on h200, and h100's copy of the unplanted figures calls nothing."""
    add_another_gpu_type(results, "h100")
    at = index("b7551f82")
    plant(results, {KERNEL_TIME: set(LARGE)}, ramp(at))
    judged = changepoints.verdicts(results, ORDER[index("b7b48218")], None)
    assert sorted(judged) == ["h100", "h200"]
    assert [(r.series.benchmark, shape(r)) for r in judged["h100"][0]] == []
    assert sorted(shape(r) for r in judged["h200"][0]) == sorted(LARGE)
    assert judged["h100"][1] == judged["h200"][1] > 0  # the same series judged on each


def test_a_verdict_changes_once_two_stores_in_a_row_reach_it(results):
    """A level counts once held for two commits, and a verdict once two stores in a row reach it: a
    sharp 20% step is called at its third commit, never on one slow run."""
    plant(results, {KERNEL_TIME: set(LARGE)}, lambda i: 1.2 if i >= 10 else 1.0)
    assert called(results, 10) == []  # one commit at the new level
    assert called(results, 11) == []  # held for two commits: one store has called it
    found = called(results, 12)
    assert {shape(r) for r in found} == set(LARGE)
    assert all((r.good, r.full) == (ORDER[9], ORDER[10]) and r.commits == [ORDER[10]] for r in found)
    one_run = results.parent / "one-run"
    shutil.copytree(STORE, one_run)
    plant(one_run, {KERNEL_TIME: set(LARGE)}, lambda i: 1.2 if i == 10 else 1.0)
    assert all(called(one_run, upto) == [] for upto in range(10, 16))


def test_a_recovery_ends_the_regression_as_a_slowdown_starts_it(results):
    plant(results, {KERNEL_TIME: set(LARGE)}, ramp(5, recover_at=11))
    assert called(results, 8) == []  # the ramp's last commit: not yet
    for upto in (9, 10, 11, 12):  # called the commit after the ramp; back for one or two commits: still
        assert {shape(r) for r in called(results, upto)} == set(LARGE), upto
    assert called(results, 13) == []


def test_a_drop_in_a_rate_is_a_regression():
    steady = [100.0, 100.2, 99.9, 100.1, 100.0, 99.8, 100.1, 100.0]
    series = changepoints.Series("h200", "gpu.Bandwidth.track_gbps", ("'x'",), "GB/s")
    series.commits = [f"{i:040x}" for i in range(12)]
    series.values = [*steady, 92.0, 92.1, 91.9, 92.0]
    series.weights = [None] * 12
    found = changepoints.judge(series)
    assert found is not None and found.good == series.commits[7] and found.full == series.commits[8]
    assert 0.08 < found.change < 0.09  # in time per unit of work: 100/92
    series.values = [*steady, 108.0, 108.1, 107.9, 108.0]  # faster
    assert changepoints.judge(series) is None


# --- The measured figures the module states ----------------------------------------------------------------


def test_power_measures_the_false_alarms_the_docstring_states():
    """1000 null histories of 16 commits drawn from the committed runs (seed 0): 16 call something."""
    found = changepoint_power.power(
        STORE, "h200", draws=1000, length=16, seed=0, after=5, only="^$", log=lambda _: None
    )
    assert found["fired"] == 16 and found["smallest"] == {}
    assert "16 of 1000 histories called something (1.6% of stores" in " ".join(changepoint_power.__doc__.split())
    page = " ".join((ROOT / "docs" / "performance-history.md").read_text().split())  # where the figure is stated
    assert "null histories of 16 commits" in page and "16 of 1000 null histories called something" in page


def test_power_finds_4pct_over_three_commits_on_the_steadiest_weight():
    found = changepoint_power.power(
        STORE, "h200", draws=200, length=16, seed=0, after=5, only=r"KernelTime.*28672x8192", log=lambda _: None
    )
    assert {label: v[0] for label, v in found["smallest"].items()} == {
        f"{KERNEL_TIME}(28672x8192, {dtype})": 4 for dtype in ("bfloat16", "float16")
    }
    assert all(named == called for _, called, named, _ in found["smallest"].values())  # the first bad commit named


# --- The issue, against a stand-in GitHub -----------------------------------------------------------------


@pytest.fixture
def github():
    fake = FakeGitHub(REPO)
    fake.pulls["1"] = Pull(head="1" * 40, base="2" * 40, head_repo=REPO, title=TITLE)  # a PR, not the issue
    with Serving(fake) as url:
        yield fake, url


def run_check(results_dir: Path, upto: int, url: str, *extra: str, env: dict | None = None):
    """``python -m harness changepoints check`` at the store after ORDER[upto], as the workflow runs it."""
    environment = {**os.environ, "GITHUB_API_URL": url, "GITHUB_REPOSITORY": REPO, "GITHUB_TOKEN": "token"}
    environment.pop("GITHUB_STEP_SUMMARY", None)
    environment.update(env or {})
    command = [sys.executable, "-m", "harness", "changepoints", "check", "--results", str(results_dir)]
    command += ["--rev", ORDER[upto], *extra]
    return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120)


def writes(fake) -> list[tuple[str, str]]:
    return [(method, path.split("/repos/" + REPO + "/")[1]) for method, path, _ in fake.requests if method != "GET"]


def test_the_issue_is_opened_updated_never_duplicated_and_closed_by_a_recovery(results, github):
    fake, url = github
    at = index("b7551f82")  # ORDER[5]: the ramp is ORDER[5:8], the recovery from ORDER[11]
    plant(results, {KERNEL_TIME: set(LARGE), TIME_OVER_COPY: set(LARGE)}, ramp(at, recover_at=11))

    first = run_check(results, 10, url)
    assert first.returncode == 0, first.stderr
    assert writes(fake) == [("POST", "issues")]
    ((number, issue),) = fake.issues.items()
    assert number == 2  # after the pull request's number, which the listing's first entry was
    assert issue.title == TITLE and issue.state == "open"
    assert f"**First bad commit's range:** {ORDER[at - 1][:12]}...{ORDER[at + 2][:12]}" in issue.body
    assert ", ".join(c[:12] for c in ORDER[at : at + 3]) in issue.body
    for name in (KERNEL_TIME, TIME_OVER_COPY):
        for combo in LARGE:
            assert f"| `{name}({', '.join(combo)})` |" in issue.body
    assert issue.body.count("| `gpu.") == 4  # nothing unplanted
    assert f"opened #{number}" in first.stdout

    fake.requests.clear()
    second = run_check(results, 11, url)  # the next store: the same issue, edited, no comment
    assert second.returncode == 0, second.stderr
    assert writes(fake) == [("PATCH", f"issues/{number}")]
    assert len(fake.issues) == 1 and f"as of {ORDER[11][:12]}" in fake.issues[number].body

    fake.requests.clear()
    again = run_check(results, 11, url)  # the same store again: nothing to change
    assert again.returncode == 0 and writes(fake) == [] and "already says this" in again.stdout

    fake.issues[number].body = fake.issues[number].body.replace("called=", "called=0")
    changed = run_check(results, 12, url)  # what is called changed: edited, and a comment says so
    assert writes(fake)[-2:] == [("PATCH", f"issues/{number}"), ("POST", f"issues/{number}/comments")]
    assert changed.returncode == 0 and "with a comment" in changed.stdout and len(fake.issues) == 1

    closed = run_check(results, 13, url)  # the recovery, reached at two stores in a row
    assert closed.returncode == 0, closed.stderr
    assert fake.issues[number].state == "closed" and len(fake.issues) == 1
    assert "closing" in fake.issues[number].comments[-1] and f"closed #{number}" in closed.stdout

    fake.requests.clear()
    quiet = run_check(results, 14, url)  # nothing called, nothing open: nothing written
    assert quiet.returncode == 0 and writes(fake) == [] and "no regression, no open issue" in quiet.stdout


def test_a_dry_run_prints_what_it_would_do_and_contacts_nobody(results, github):
    fake, url = github
    at = index("b7551f82")
    plant(results, {KERNEL_TIME: set(LARGE)}, ramp(at))
    done = run_check(results, 10, url, "--dry-run", env={"GITHUB_TOKEN": "", "GITHUB_REPOSITORY": ""})
    assert done.returncode == 0, done.stderr
    assert fake.requests == []
    assert f"would open or update the issue {TITLE!r}" in done.stdout
    assert f"{ORDER[at - 1][:12]}...{ORDER[at + 2][:12]}" in done.stdout
    summary = results.parent / "summary.md"
    quiet = run_check(STORE, 15, url, "--dry-run", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert quiet.returncode == 0 and fake.requests == []
    assert summary.read_text().startswith("### Change points on main\n\n- h200: 72 series judged")
    assert "h200: 72 series judged up to 644a4ed2cc4b: no regression" in quiet.stdout
    assert f"would close the issue {TITLE!r} if one is open" in quiet.stdout


def test_a_job_summary_that_cannot_be_written_is_one_line_and_exit_2(github, tmp_path):
    _, url = github
    done = run_check(STORE, 15, url, "--dry-run", env={"GITHUB_STEP_SUMMARY": str(tmp_path)})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    said = f"changepoints: GITHUB_STEP_SUMMARY {tmp_path}: Is a directory; the summary was not written (exit 2)"
    assert done.stderr.strip() == said


def test_github_refusing_is_exit_1_in_one_line(results):
    at = index("b7551f82")
    plant(results, {KERNEL_TIME: set(LARGE)}, ramp(at))
    with Serving(FakeGitHub("someone/else")) as url:  # another repository: every answer 404
        done = run_check(results, 10, url)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "GitHub answered 404" in done.stderr


# --- Bad input: one line, exit 2 ----------------------------------------------------------------------------


def one_line(*args: str, env: dict | None = None):
    environment = {**os.environ, "GITHUB_REPOSITORY": REPO, "GITHUB_TOKEN": "token", **(env or {})}
    done = subprocess.run(
        [sys.executable, "-m", "harness", "changepoints", *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    return done


@pytest.mark.parametrize(
    "args,says",
    [
        (["check", "--results", "/nonexistent"], "is not a results folder"),
        (["check", "--results", str(STORE), "--machine", "h100"], "no GPU machine h100"),
        (["check", "--results", str(STORE), "--rev", "no-such-rev"], "git rev-list --first-parent no-such-rev failed"),
        (["check", "--results", str(STORE), "--rev", "6929daed~1"], "none of the results in"),
        (["check", "--bogus"], "unrecognized arguments"),
        (["nothing"], "invalid choice"),
        (["power"], "invalid choice"),  # the study left: python -m studies.changepoint_power
    ],
    ids=[
        "no-folder",
        "no-machine",
        "bad-rev",
        "before-the-history",
        "bad-option",
        "bad-command",
        "power-left",
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, says):
    done = one_line(*args)
    assert done.returncode == 2 and says in done.stderr, done.stderr


@pytest.mark.parametrize(
    "args,says",
    [
        (["--draws", "0"], "--draws >= 1"),
        (["--only", "("], "is not a regular expression"),
        (["--machine", "h100"], "no GPU machine h100"),
    ],
    ids=["no-draws", "bad-regex", "no-machine"],
)
def test_the_power_study_refuses_bad_arguments_in_one_line(args, says, capsys):
    with pytest.raises(SystemExit) as stopped:
        changepoint_power.main(args)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and says in err and err.count("\n") == 1


def test_no_github_settings_without_dry_run_is_exit_2():
    done = one_line("check", "--results", str(STORE), env={"GITHUB_TOKEN": "", "GH_TOKEN": ""})
    assert done.returncode == 2 and "GITHUB_TOKEN must be set" in done.stderr


def test_a_folder_without_a_gpu_machine_or_with_a_broken_file_is_exit_2(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "machine.json").write_text(json.dumps({"machine": "cpu", "gpu": "none", "version": 1}))
    done = one_line("check", "--dry-run", "--results", str(tmp_path))
    assert done.returncode == 2 and "holds no GPU machine's results" in done.stderr
    shutil.copytree(STORE, tmp_path / "store")
    next((tmp_path / "store" / "h200").glob("*-*.json")).write_text("{not json")
    done = one_line("check", "--dry-run", "--results", str(tmp_path / "store"))
    assert done.returncode == 2 and "a result file asv can't read" in done.stderr
    shutil.copytree(STORE, tmp_path / "suite")
    (tmp_path / "suite" / "benchmarks.json").write_text("[]")
    done = one_line("check", "--dry-run", "--results", str(tmp_path / "suite"))
    assert done.returncode == 2 and "is not asv's list of benchmarks" in done.stderr
