"""gpu.yml and history.yml run for real on this machine, before GitHub ever sees them.

    python -m harness.github.rehearse SCENARIO [--out DIR]        # nox -s rehearse -- SCENARIO
    python -m harness.github.rehearse --list

nektos act (host mode: the jobs are processes here, on this machine's GPU) runs the workflows as
committed at this checkout's HEAD, unchanged, for the event a scenario makes, in a throwaway world:

* an "origin" laid out as GitHub lays one out: ``main`` is this checkout's HEAD, the scenario's PR
  head is ``refs/pull/8/head``; git's ``url.<origin>.insteadOf`` sends the workflows' own
  ``https://github.com/<repo>.git`` there (checkouts, the results branch's push);
* a stand-in for the GitHub REST API on 127.0.0.1 (``fake_github.py``): who has write access, the
  PR's head and base, and the commit status ``report`` posts, recorded;
* labelled local stand-ins for the actions that would download (``harness/github/standins/``): checkout
  checks out exactly the ref a step asks for; the artifact and Pages actions copy to a folder.

Scenarios (each a PR judged by ``main``, except ``push``):

* ``noop``: a PR whose head changes nothing. Every job succeeds; the summary holds the gate's table
  and chart and the regression table; ``report`` posts success.
* ``slow``: a PR with a planted 2x slowdown (harness/github/plants/2x.patch). The gate and the regression
  check fail; ``report`` posts failure.
* ``self-pass``: the same plant, and the PR also edits the harness to pass itself (thresholds,
  the allowed drop, the regression's limits) and adds record-shaped files at its root. It still
  fails: the base's harness judges.
* ``push``: a push to main. gpu-tests, the gate and history.yml run; the results branch
  (``asv-results``) gains the commit's results, and the change-point job judges main's history
  from it (one commit: nothing called, no issue opened).

What the run leaves in ``--out``: ``act.log`` (every line, timed), ``summary.md`` (each job's step
summary), ``statuses.json`` (what was posted to the API), ``checkouts.tsv`` (each checkout: job,
path, ref asked for, commit), ``jobs.json`` (each job's result and wall time) and ``verdict.txt``.
Exit 0 when the scenario's expectations held, 1 when not (named on the last lines), 2 when it could
not run here (no act, no git checkout, no ``python`` on the PATH), 4 without an NVIDIA GPU: the
jobs' steps are the real ones. On a CPU machine, ``nox -s tests -- tests/harness`` runs the same
workflows with recorded measurements in place of the GPU steps (tests/harness/cpu_world.py).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from harness.core.gpu_state import gpu_here
from harness.core.paths import ROOT
from harness.github import act
from harness.github.fake_github import FakeGitHub, Pull, Serving

STANDINS = ROOT / "harness" / "github" / "standins"
PLANT_2X = ROOT / "harness" / "github" / "plants" / "2x.patch"
REPOSITORY = "nf4kernel/nf4kernel"
SERVER = "https://github.com"
PR_NUMBER = "8"
MAINTAINER = "maintainer"
CONTRIBUTOR_REPO = "contributor/nf4kernel"
TOKEN = "rehearsal-token"  # what github.token is in the run; the fake API accepts anything
JOB_LINE = re.compile(r"^\[(?P<job>[^\]]+)\] (?P<rest>.*)$")


def git(*args: str, cwd: Path, check: bool = True) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=rehearsal", "-c", "user.email=rehearsal@localhost", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {cwd}: {done.stderr.strip()}")
    return done.stdout.strip()


@dataclass
class Run:
    """What one act run did."""

    returncode: int
    log: list = field(default_factory=list)  # (seconds since start, line)
    results: dict = field(default_factory=dict)  # job id -> "success" | "failure"
    spans: dict = field(default_factory=dict)  # job id -> [first, last] seconds
    summaries: dict = field(default_factory=dict)  # job id -> markdown
    checkouts: list = field(default_factory=list)  # (job, path, ref asked, commit)

    def summary_text(self) -> str:
        return "".join(f"<!-- job {job} -->\n{text}\n" for job, text in self.summaries.items())


def read_act_output(lines, started: float, echo: bool) -> Run:
    """Job results, wall times and step summaries from act's output (``--log-prefix-job-id``)."""
    run = Run(returncode=0)
    summary_of = None
    for raw in lines:
        line = raw.rstrip("\n")
        now = time.perf_counter() - started
        run.log.append((now, line))
        if echo:
            print(f"[{now:7.1f}s] {line}", flush=True)
        match = JOB_LINE.match(line)
        if not match:
            if summary_of is not None:  # a summary's lines after its first come unprefixed
                run.summaries[summary_of] += line + "\n"
            continue
        job, rest = match.group("job"), match.group("rest")
        summary_of = None
        span = run.spans.setdefault(job, [now, now])
        span[1] = now
        if "⚙  Summary - " in rest:
            summary_of = job
            run.summaries[job] = run.summaries.get(job, "") + rest.split("⚙  Summary - ", 1)[1] + "\n"
        elif "🏁  Job succeeded" in rest:
            run.results[job] = "success"
        elif "🏁  Job failed" in rest:
            run.results[job] = "failure"
    return run


class World:
    """The throwaway origin, the clone act runs in, the API stand-in and the stand-ins' folders."""

    def __init__(self, scratch: Path, source: Path = ROOT, working_tree: bool = False):
        """``main`` is ``source``'s HEAD as committed, or with ``working_tree`` its working tree as it is
        (tracked and untracked files git does not ignore: what the tests check is the code in front of
        them, committed or not)."""
        self.scratch = scratch
        self.origin = scratch / "origin.git"
        self.work = scratch / "main"
        self.artifacts = scratch / "artifacts"
        self.home = scratch / "home"
        self.standin_log = scratch / "checkouts.tsv"
        for folder in (self.artifacts, self.home):
            folder.mkdir(parents=True)
        head = snapshot(source) if working_tree else git("rev-parse", "HEAD", cwd=source)
        git("init", "-q", "--bare", "-b", "main", str(self.origin), cwd=scratch)
        git("push", "-q", str(self.origin), f"{head}:refs/heads/main", cwd=source)
        git("clone", "-q", "-b", "main", str(self.origin), str(self.work), cwd=scratch)
        git(
            "remote", "set-url", "origin", f"{SERVER}/{REPOSITORY}.git", cwd=self.work
        )  # act reads the repo's name here
        self.gitconfig = scratch / "gitconfig"
        self.gitconfig.write_text(f'[url "{self.origin}"]\n\tinsteadOf = {SERVER}/{REPOSITORY}.git\n')
        self.main = head
        self.fake = FakeGitHub(REPOSITORY, permissions={MAINTAINER: "write"})

    def commit_pr(self, change: Callable[[Path], str], number: str = PR_NUMBER) -> str:
        """A commit on top of main made by ``change(tree) -> message``, published as the PR's head."""
        tree = self.scratch / f"pr-{number}"
        if not tree.exists():
            git("clone", "-q", str(self.origin), str(tree), cwd=self.scratch)
        git("checkout", "-q", "--detach", self.main, cwd=tree)
        message = change(tree)
        git("add", "-A", cwd=tree)
        git("commit", "-q", "--allow-empty", "-m", message, cwd=tree)
        head = git("rev-parse", "HEAD", cwd=tree)
        git("push", "-q", "--force", str(self.origin), f"{head}:refs/pull/{number}/head", cwd=tree)
        self.fake.pulls[number] = Pull(head=head, base=self.main, head_repo=CONTRIBUTOR_REPO)
        return head

    def comment_event(self, body: str, login: str = MAINTAINER, number: str = PR_NUMBER) -> dict:
        return {
            "action": "created",
            "issue": {"number": int(number), "pull_request": {"url": f"{SERVER}/{REPOSITORY}/pull/{number}"}},
            "comment": {"body": body, "user": {"login": login, "type": "User"}},
            "repository": {"full_name": REPOSITORY, "default_branch": "main"},
            "sender": {"login": login},
        }

    def push_event(self) -> dict:
        return {
            "ref": "refs/heads/main",
            "after": self.main,
            "repository": {"full_name": REPOSITORY, "default_branch": "main"},
        }

    def workflows(self, names: tuple[str, ...], replace: dict | None = None) -> Path:
        """The committed workflows (main's, as GitHub reads them for these events), copied to a folder of
        their own; ``replace`` maps (job, step id) to a step put in that step's place (the CPU tests)."""
        folder = self.scratch / "workflows"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        for name in names:
            text = (self.work / ".github" / "workflows" / name).read_text()
            if replace:
                workflow = yaml.safe_load(text)
                workflow = {("on" if key is True else key): value for key, value in workflow.items()}
                for job_id, job in workflow["jobs"].items():
                    job["steps"] = [replace.get((job_id, step.get("id")), step) for step in job["steps"]]
                text = yaml.safe_dump(workflow, sort_keys=False)
            (folder / name).write_text(text)
        return folder

    def run(self, event: str, payload: dict, workflows: Path, *, timeout: float, echo: bool = False, env=None) -> Run:
        """act EVENT on ``workflows``, every job on this machine, one at a time (they share its GPU)."""
        labels = {"ubuntu-latest", "self-hosted", "linux", "x64", "gpu"}
        standins = {}
        for path in workflows.glob("*.yml"):
            for job in yaml.safe_load(path.read_text())["jobs"].values():
                for step in job["steps"]:
                    uses = step.get("uses", "")
                    if "@" in uses and not uses.startswith("./"):
                        action = uses.split("@")[0].split("/", 1)[1]
                        if not (STANDINS / action).is_dir():
                            raise RuntimeError(f"{uses}: no stand-in in {STANDINS} (it would be downloaded)")
                        standins[uses] = STANDINS / action
        event_file = self.scratch / f"event-{event}.json"
        event_file.write_text(json.dumps(payload))
        process_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "NOX_", "GITHUB_", "RUNNER_"))},
            "HOME": str(self.home),  # act's workspaces and caches, asv's machine file: this world's
            "GIT_CONFIG_GLOBAL": str(self.gitconfig),
            "REHEARSAL_ARTIFACTS": str(self.artifacts),
            "STANDIN_LOG": str(self.standin_log),
            "STANDIN_PYTHON": sys.executable,  # setup-python's stand-in: the interpreter with the harness's tools
            **(env or {}),
        }
        with Serving(self.fake) as api_url:
            command = [act.binary(), event, "-C", str(self.work), "-W", str(workflows), "--eventpath", str(event_file)]
            for label in sorted(labels):
                command += ["-P", f"{label}={act.HOST}"]
            for action, folder in sorted(standins.items()):
                command += ["--local-repository", f"{action}={folder}"]
            command += ["--env", f"GITHUB_API_URL={api_url}", "--secret", f"GITHUB_TOKEN={TOKEN}"]
            command += ["--log-prefix-job-id", "--concurrent-jobs", "1", "--no-cache-server"]
            command += ["--action-cache-path", str(self.scratch / "act-cache")]
            started = time.perf_counter()
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=process_env
            )
            try:
                run = read_act_output(_until(process, started + timeout), started, echo)
            finally:
                if process.poll() is None:
                    process.kill()
                process.wait()
            run.returncode = process.returncode
        if self.standin_log.exists():
            run.checkouts = [tuple(line.split("\t")) for line in self.standin_log.read_text().splitlines()]
        return run


def snapshot(source: Path) -> str:
    """A commit of ``source``'s working tree on top of its HEAD, made with a scratch index (the
    checkout's own index, branch and files are left alone)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}

        def plumbing(*args: str) -> str:
            return subprocess.run(
                ["git", *args], cwd=source, env=env, capture_output=True, text=True, check=True
            ).stdout

        plumbing("add", "-A")
        tree = plumbing("write-tree").strip()
        return subprocess.run(
            [
                "git",
                "-c",
                "user.name=rehearsal",
                "-c",
                "user.email=rehearsal@localhost",
                "commit-tree",
                tree,
                "-p",
                "HEAD",
                "-m",
                "the working tree",
            ],
            cwd=source,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()


def _until(process: subprocess.Popen, deadline: float):
    """The process's output lines, until it ends or the deadline passes (then it is killed)."""
    for line in process.stdout:
        yield line
        if time.perf_counter() > deadline:
            process.kill()
            yield f"[rehearsal] killed: past its time limit of {deadline:.0f} s\n"
            return


# --- The scenarios ----------------------------------------------------------------------------------


def no_change(tree: Path) -> str:
    return "scratch: a no-op PR"


def plant_2x(tree: Path) -> str:
    subprocess.run(["git", "apply", str(PLANT_2X)], cwd=tree, check=True)
    return "scratch: every planned launch made twice (a planted 2x slowdown)"


def plant_and_pass_myself(tree: Path) -> str:
    """The plant, and every edit a PR could make so that its *own* harness passes it."""
    plant_2x(tree)
    edits = {
        "harness/gate/decision.py": [
            (r"DEFAULT_THRESHOLD = [0-9.]+", "DEFAULT_THRESHOLD = 0.5"),
            (r"DEFAULT_MAX_DROP = [0-9.]+", "DEFAULT_MAX_DROP = 0.95"),
        ],
        "harness/gate/cli.py": [
            (  # whatever the workflow sets, the PR's own gate would ask for 0.5x
                r"(def threshold_from_environment\(parser: argparse\.ArgumentParser\) -> float:\n)",
                r"\1    return 0.5\n",
            )
        ],
        "harness/regression/rule.py": [
            (r"DEFAULT_MIN_CHANGE = [0-9.]+", "DEFAULT_MIN_CHANGE = 0.99"),
            (r"DEFAULT_MIN_GROUP_CHANGE = [0-9.]+", "DEFAULT_MIN_GROUP_CHANGE = 0.99"),
        ],
    }
    for name, replacements in edits.items():
        path = tree / name
        text = path.read_text()
        for pattern, new in replacements:
            text, count = re.subn(pattern, new, text)
            if not count:
                raise RuntimeError(f"self-pass: {pattern!r} is no longer in {name}; update the scenario")
        path.write_text(text)
    (tree / "base-gate.json").mkdir()  # a directory where a record once was read from
    (tree / "base-gate.json" / "keep").write_text("")
    (tree / "gate.json").write_text(json.dumps({"environment": {"cuda": True}, "verdict": {"passed": True}}))
    return "scratch: the 2x plant, and the harness edited to pass it (thresholds, drop, limits)"


# Issue 35's three routes from an approved kernel's import to the verdict, as a PR would hide them:
# fifteen lines named like a cache warm-up, at the top of nf4kernel/__init__.py. Each fails silently
# where it can't act, so the kernel still imports and measures (with the 2x plant: slower).
HOSTILE_INIT = """\
def _warm_autotune_cache():  # looks like a cache warm-up; is the three routes of issue 35
    import glob, os, re, sys, tempfile
    temp = os.environ.get("RUNNER_TEMP", "")
    try:  # 1. every later step of the job sources a script that hands in the base's record as ours
        script = os.path.join(temp, "autotune-warm.sh")
        with open(script, "w") as f:
            f.write('cp "$RUNNER_TEMP/gate-base.json" "$RUNNER_TEMP/gate.json" 2>/dev/null || true\\n')
        with open(os.environ["GITHUB_ENV"], "a") as f:
            f.write(f"BASH_ENV={script}\\n")
    except Exception:
        pass
    for entry in sys.path:  # 2. the trusted harness's thresholds, where it is importable
        for name, pattern, value in (("gate/decision.py", r"THRESHOLD = [0-9.]+", "THRESHOLD = 0.01"),
                                     ("regression/rule.py", r"MIN_CHANGE = [0-9.]+", "MIN_CHANGE = 0.99")):
            try:
                path = os.path.join(entry, "harness", *name.split("/"))
                text = open(path).read()
                open(path, "w").write(re.sub(pattern, value, text))
            except Exception:
                pass
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for other in glob.glob(os.path.join(tempfile.gettempdir(), "nf4kernel-*", "nf4kernel", "__init__.py")):
        if not other.startswith(here):  # 3. the other kernel's staged copy, made slower
            try:
                open(other, "a").write("\\nimport time as _t; _t.sleep(0.001)\\n")
            except Exception:
                pass


_warm_autotune_cache()
"""


def plant_hostile(tree: Path) -> str:
    """The 2x plant, and an ``__init__.py`` that takes every route to the verdict it can reach."""
    plant_2x(tree)
    init = tree / "nf4kernel" / "__init__.py"
    text = init.read_text()
    body = ast.parse(text).body  # after the module's docstring
    cut = sum(len(line) for line in text.splitlines(keepends=True)[: body[0].end_lineno]) if body else 0
    init.write_text(text[:cut] + "\n" + HOSTILE_INIT + text[cut:])
    return "scratch: the 2x plant, and an __init__.py that warms an autotune cache"


@dataclass(frozen=True)
class Scenario:
    about: str
    change: Callable | None  # the PR's commit; None: a push to main
    expect: dict  # job id -> result it must have ("" : must not have run)
    status: str | None  # the `gpu` status report must post, None: no status


PR_JOBS = ("approve", "gpu-tests", "gate", "regression", "report")
SCENARIOS = {
    "noop": Scenario(
        "a no-op PR: every job green, status success",
        no_change,
        {"approve": "success", "gpu-tests": "success", "gate": "success", "regression": "success", "report": "success"},
        "success",
    ),
    "slow": Scenario(
        "a PR with a planted 2x slowdown: the gate and the regression check fail, status failure",
        plant_2x,
        {"approve": "success", "gate": "failure", "regression": "failure", "report": "success"},
        "failure",
    ),
    "self-pass": Scenario(
        "the 2x plant in a PR that edits the harness to pass itself: it still fails",
        plant_and_pass_myself,
        {"approve": "success", "gate": "failure", "regression": "failure", "report": "success"},
        "failure",
    ),
    "hostile": Scenario(
        "the 2x plant in a PR whose nf4kernel/__init__.py, on import, writes BASH_ENV into $GITHUB_ENV, rewrites "
        "the trusted harness's thresholds and slows the base's staged copy: sandboxed, none reaches the verdict",
        plant_hostile,
        {"approve": "success", "gate": "failure", "regression": "failure", "report": "success"},
        "failure",
    ),
    "push": Scenario(
        "a push to main: gpu-tests, the gate and the history run; the results branch gains the commit; "
        "main's history is judged for change points (nothing called: no issue)",
        None,
        {
            "approve": "success",
            "gpu-tests": "success",
            "gate": "success",
            "benchmark": "success",
            "store": "success",
            "changepoints": "success",
        },
        None,
    ),
}


def wrong_checkouts(run: Run, trusted: str, candidate: str) -> list[str]:
    """Every checkout that took another commit than it should: the PR's commit (``candidate/``) must
    be the approved one, everything else (``trusted/``, a push's workspace) the judging commit."""
    problems = []
    for job, path, asked, commit in run.checkouts:
        allowed = candidate if path == "candidate" else trusted
        if commit != allowed:
            problems.append(
                f"job {job} checked out {commit[:12]} into {path} (asked for {asked}); expected {allowed[:12]}"
            )
    return problems


def check(scenario: Scenario, run: Run, world: World, candidate: str) -> list[str]:
    """What did not go as the scenario expects ([] when everything did)."""
    problems = []
    for job, wanted in scenario.expect.items():
        got = run.results.get(job, "")
        if got != wanted:
            problems.append(f"job {job}: {got or 'did not run'}, expected {wanted}")
    posted = [(sha, body["state"]) for sha, body in world.fake.statuses]
    if scenario.status and posted != [(candidate, scenario.status)]:
        problems.append(f"commit status: {posted}, expected [({candidate[:12]}, {scenario.status})]")
    if not scenario.status and posted:
        problems.append(f"a commit status was posted: {posted}")
    summaries = run.summary_text()
    wanted_text = ["### nf4kernel speed gate"]
    if scenario.change is not None:
        wanted_text.append("### Regression check")
    if scenario.status == "success" or scenario.change is None:
        wanted_text.append("```mermaid")
    problems += [f"the step summaries lack {text!r}" for text in wanted_text if text not in summaries]
    problems += wrong_checkouts(run, trusted=world.main, candidate=candidate)
    if scenario.change is None:
        stored = git("ls-tree", "-r", "--name-only", "asv-results", cwd=world.origin, check=False)
        if f"{candidate[:8]}-" not in stored:
            problems.append(f"the asv-results branch holds no results for {candidate[:8]}")
        if world.fake.issues:  # one commit's results: there is no earlier level to have left
            problems.append(f"the change-point job opened an issue: {[i.title for i in world.fake.issues.values()]}")
    return problems


def rehearse(name: str, out: Path, timeout: float = 1500, echo: bool = True) -> int:
    scenario = SCENARIOS[name]
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"rehearsal-{name}-") as tmp:
        world = World(Path(tmp))
        if scenario.change is None:
            candidate, event, payload = world.main, "push", world.push_event()
            workflows = world.workflows(("gpu.yml", "history.yml"))
        else:
            candidate = world.commit_pr(scenario.change)
            event, payload = "issue_comment", world.comment_event(f"/gpu-approve {candidate}")
            workflows = world.workflows(("gpu.yml",))
        print(f"rehearsal {name}: {scenario.about}", flush=True)
        print(f"rehearsal {name}: main {world.main[:12]}, under test {candidate[:12]}, event {event}", flush=True)
        started = time.perf_counter()
        run = world.run(event, payload, workflows, timeout=timeout, echo=echo)
        wall = time.perf_counter() - started
        problems = check(scenario, run, world, candidate)
        write_outputs(out, name, scenario, run, world, candidate, wall, problems)
    for problem in problems:
        print(f"rehearsal {name}: {problem}", flush=True)
    verdict = "as expected" if not problems else f"{len(problems)} expectation(s) not met"
    print(f"rehearsal {name}: {verdict} in {wall:.0f} s (act exit {run.returncode})", flush=True)
    return 0 if not problems else 1


def write_outputs(out: Path, name, scenario, run: Run, world: World, candidate: str, wall: float, problems) -> None:
    (out / "act.log").write_text("".join(f"[{t:7.1f}s] {line}\n" for t, line in run.log))
    (out / "summary.md").write_text(run.summary_text())
    statuses = [{"sha": sha, **body} for sha, body in world.fake.statuses]
    requests = [{"method": m, "path": p, "body": b} for m, p, b in world.fake.requests]
    (out / "statuses.json").write_text(json.dumps({"statuses": statuses, "requests": requests}, indent=1))
    (out / "checkouts.tsv").write_text("".join("\t".join(row) + "\n" for row in run.checkouts))
    jobs = {
        job: {"result": run.results.get(job, "did not finish"), "wall_s": round(span[1] - span[0], 1)}
        for job, span in run.spans.items()
    }
    (out / "jobs.json").write_text(json.dumps({"scenario": name, "wall_s": round(wall, 1), "jobs": jobs}, indent=1))
    lines = [f"scenario {name}: {scenario.about}", f"main {world.main}", f"under test {candidate}"]
    lines += [f"{job}: {info['result']} in {info['wall_s']} s" for job, info in jobs.items()]
    lines += [f"problem: {p}" for p in problems] or ["every expectation held"]
    (out / "verdict.txt").write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.github.rehearse", description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", choices=sorted(SCENARIOS))
    parser.add_argument("--out", type=Path, help="where the logs go (default .rehearsal/SCENARIO)")
    parser.add_argument("--timeout", type=float, default=1500, help="seconds before act is stopped (%(default)s)")
    parser.add_argument("--list", action="store_true", help="the scenarios and what each proves")
    args = parser.parse_args(argv)
    if args.list or not args.scenario:
        for name, scenario in SCENARIOS.items():
            print(f"{name:10s} {scenario.about}")
        return 0 if args.list else 2
    if not gpu_here():
        print(
            "rehearsal: no NVIDIA GPU here (nvidia-smi -L found none): the jobs run their real GPU steps. "
            "On a CPU, `nox -s tests -- tests/harness` runs the same workflows with recorded measurements",
            file=sys.stderr,
        )
        return 4
    if shutil.which("python") is None:
        print("rehearsal: the workflows run `python`, and there is none on the PATH", file=sys.stderr)
        return 2
    why = act.why_not_here()
    if why:
        print(f"rehearsal: {why}; it needs nektos act (pip install -r requirements/ci-tools.txt)", file=sys.stderr)
        return 2
    if git("rev-parse", "--is-inside-work-tree", cwd=ROOT, check=False) != "true":
        print(f"rehearsal: {ROOT} is not a git checkout; it rehearses a checkout's HEAD", file=sys.stderr)
        return 2
    if git("status", "--porcelain", "--untracked-files=no", cwd=ROOT):
        print("rehearsal: uncommitted changes are not rehearsed: main is HEAD as committed", flush=True)
    return rehearse(args.scenario, args.out or ROOT / ".rehearsal" / args.scenario, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
