"""gpu.yml and history.yml run for real on this machine, before GitHub ever sees them.

    python -m dev.rehearsal rehearse SCENARIO [--out DIR]        # nox -s rehearse -- SCENARIO
    python -m dev.rehearsal rehearse SCENARIO --runners 2        # two runners at once, one GPU each
    python -m dev.rehearsal rehearse SCENARIO --gpus 2,3         # runners on GPUs 2 and 3, beside another
    python -m dev.rehearsal rehearse --list

nektos act (host mode: the jobs are processes here, on this machine's GPU) runs the workflows as
committed at this checkout's HEAD, unchanged, for the event a scenario makes, in a throwaway world:

* an "origin" laid out as GitHub lays one out: ``main`` is this checkout's HEAD, the scenario's PR
  head is ``refs/pull/8/head``; git's ``url.<origin>.insteadOf`` sends the workflows' own
  ``https://github.com/<repo>.git`` there (checkouts, the results branch's push);
* a stand-in for the GitHub REST API on 127.0.0.1 (``fake_github.py``): who has write access, the
  PR's head and base, and the commit status ``report`` posts, recorded;
* labelled local stand-ins for the actions that would download (``dev/rehearsal/standins/``): checkout
  checks out exactly the ref a step asks for; the artifact and Pages actions copy to a folder.

Scenarios (each a PR judged by ``main``, except ``push``):

* ``noop``: a PR whose head changes nothing. Every job succeeds; the summary holds the gate's table
  and chart and the regression table; ``report`` posts success.
* ``slow``: a PR with a planted 2x slowdown (dev/rehearsal/plants/2x.patch). The gate and the regression
  check fail; ``report`` posts failure.
* ``self-pass``: the same plant, and the PR also edits the harness to pass itself (thresholds,
  the allowed drop, the regression's limits) and adds record-shaped files at its root. It still
  fails: the base's harness judges.
* ``hostile``: the 2x plant and an ``__init__.py`` that takes every route to the runner and the log
  it can reach; sandboxed, none works, and the gate and the regression check fail.
* ``hostile-<attack>``: one attack of the set (``dev/rehearsal/attacks.py``: timers, report,
  skip, unsynced, slow-baseline, exit, record); the trusted clock and the reference judge it: the
  gate fails and ``report`` posts failure.
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

The jobs run on this machine's GPU type alone (``.github/gpu-types.toml``), one at a time; with
``--runners N``, N at a time, each job on one GPU of its own for its whole length
(``gpu_leases.py``), as N one-GPU runners of a fleet would run them. ``jobs.json`` then shows what
ran in parallel and the wall time. ``--gpus`` names the runners' GPUs, each job then on its GPU's
share of the host's cores as the JIT loop splits them, so that rehearsals on a host's other GPUs
keep to theirs.

The world and act's runner are ``rehearsal_world.py``; the scenarios, their plants and what each
expects, ``scenarios.py``; this module is the command and what it writes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dev.rehearsal import act
from dev.rehearsal.rehearsal_world import Run, World, git, of_device
from dev.rehearsal.scenarios import SCENARIOS, check
from harness.core import command_output, exits, policy
from harness.core.gpu_state import gpu_here
from harness.core.paths import ROOT


def local_gpus() -> list[tuple[str, str]]:
    """``(index, type)`` of each GPU here whose type (.github/gpu-types.toml) nvidia-smi's name gives."""
    done = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"], capture_output=True, text=True, timeout=60
    )
    types = policy.gpu_types()
    found = []
    for line in done.stdout.splitlines():
        index, _, name = line.partition(",")
        found += [(index.strip(), t) for t in of_device(name.strip(), types)[:1]]
    return found


def local_gpu_types(found: list[tuple[str, str]] | None = None) -> tuple[str, ...]:
    """The types of this machine's GPUs (``found``: ``local_gpus()``, asked here if not given), first
    GPU's first."""
    return tuple(dict.fromkeys(t for _, t in (local_gpus() if found is None else found)))


def rehearse(
    name: str,
    out: Path,
    timeout: float = 1500,
    echo: bool = True,
    types: tuple[str, ...] = (),
    gpus: tuple[str, ...] = (),
    host_gpus: tuple[str, ...] = (),
) -> int:
    scenario = SCENARIOS[name]
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"rehearsal-{name}-") as tmp:
        world = World(Path(tmp), gpu_types=types or None)
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
        run = world.run(event, payload, workflows, timeout=timeout, echo=echo, gpus=gpus, host_gpus=host_gpus)
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
    parser = command_output.Parser(prog="python -m dev.rehearsal rehearse", description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", nargs="?", choices=sorted(SCENARIOS))
    parser.add_argument("--out", type=Path, help="where the logs go (default .rehearsal/SCENARIO)")
    parser.add_argument("--timeout", type=float, default=1500, help="seconds before act is stopped (%(default)s)")
    parser.add_argument("--list", action="store_true", help="the scenarios and what each proves")
    parser.add_argument(
        "--runners",
        type=int,
        default=1,
        help="runners at once, each job on one GPU of its own (a fleet on one host); at most this type's GPUs (1)",
    )
    parser.add_argument(
        "--gpus",
        help="the runners' GPUs, nvidia-smi's indices (2,3): a rehearsal beside another on this host's other GPUs, "
        "each job on its GPU's share of the cores; replaces --runners",
    )
    args = parser.parse_args(argv)
    if args.list:
        width = max(map(len, SCENARIOS))
        for name, scenario in SCENARIOS.items():
            print(f"{name:{width}s} {scenario.about}")
        return 0
    if not args.scenario:
        parser.error("which scenario? --list names each one and what it proves")
    if not gpu_here():
        print(
            "rehearsal: no NVIDIA GPU here (nvidia-smi -L found none): the jobs run their real GPU steps. "
            "On a CPU, `nox -s tests -- tests/harness` runs the same workflows with recorded measurements",
            file=sys.stderr,
        )
        return exits.NO_GPU
    found = local_gpus()
    types = local_gpu_types(found)
    if not types:
        print(
            "rehearsal: this machine's GPU is of no type in .github/gpu-types.toml, so no job would run on it",
            file=sys.stderr,
        )
        return 2
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
    gpus = tuple(index for index, gpu_type in found if gpu_type == types[0])
    if args.gpus is not None:  # named: each job's cores are its GPU's share among all the host's
        chosen = tuple(args.gpus.split(","))
        if not chosen or len(set(chosen)) != len(chosen) or not set(chosen) <= set(gpus):
            print(
                f"rehearsal: --gpus is a list of this machine's {types[0]} GPUs ({','.join(gpus)}), not {args.gpus!r}",
                file=sys.stderr,
            )
            return 2
        host = tuple(i for i, _ in found)
    else:
        if not 1 <= args.runners <= len(gpus):
            print(
                f"rehearsal: --runners is 1 to {len(gpus)} (this machine's {types[0]} GPUs), not {args.runners}",
                file=sys.stderr,
            )
            return 2
        chosen, host = (gpus[: args.runners] if args.runners > 1 else ()), ()
    out = args.out or ROOT / ".rehearsal" / args.scenario
    return rehearse(args.scenario, out, args.timeout, types=types[:1], gpus=chosen, host_gpus=host)
