"""The throwaway world a rehearsal runs nektos act in, and the runner of act: an origin laid out as
GitHub lays one out (``main``, the PR's ``refs/pull/<n>/head``), the clone act runs in, the fake
GitHub API (``fake_github.py``) and the stand-ins' folders; act run on the workflows with every
downloaded action mapped to its stand-in, and its output read into a ``Run`` (each job's result,
wall time and step summary, each checkout the stand-ins made).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import yaml

from dev.rehearsal import act, gpu_leases
from dev.rehearsal.fake_github import FakeGitHub, Pull, Serving
from harness.core import policy
from harness.core.git import output
from harness.core.paths import ROOT
from harness.core.policy import GpuType

STANDINS = ROOT / "dev" / "rehearsal" / "standins"
GPU_CPUS = ROOT / "tools" / "gpu-runner" / "gpu-cpus.sh"  # a GPU's share of the host's cores, the JIT loop's split
REPOSITORY = "nf4kernel/nf4kernel"
SERVER = "https://github.com"
PR_NUMBER = "8"
MAINTAINER = "maintainer"
CONTRIBUTOR_REPO = "contributor/nf4kernel"
TOKEN = "rehearsal-token"  # what github.token is in the run; the fake API accepts anything
JOB_LINE = re.compile(r"^\[(?P<job>[^\]]+)\] (?P<rest>.*)$")


IDENTITY = ("user.name=rehearsal", "user.email=rehearsal@localhost")  # the scratch commits' author


def dump_types(types: dict[str, GpuType], policy_tables: dict | None = None) -> str:
    """The file's text for ``types`` and the ``[policy.*]`` tables given (comments are not kept):
    what a rehearsal commits in its world."""
    lines = []
    for gpu in types.values():
        lines.append(f"[{gpu.name}]")
        for name in (f.name for f in fields(GpuType) if f.name != "name"):
            value = getattr(gpu, name)
            lines.append(f"{name} = {str(value).lower() if isinstance(value, bool) else json.dumps(value)}")
        lines.append("")
    for name, table in (policy_tables or {}).items():
        lines += [f"[policy.{name}]", *(f"{key} = {json.dumps(value)}" for key, value in table.items()), ""]
    return "\n".join(lines)


def only_on(types: dict[str, GpuType], names: tuple[str, ...]) -> dict[str, GpuType]:
    """``types`` with ``pull_requests`` and ``history`` true for ``names`` alone (a rehearsal's machine
    has its own GPUs only); ValueError for a name that is no type."""
    unknown = sorted(set(names) - set(types))
    if unknown or not names:
        raise ValueError(f"no GPU type {unknown or '(none given)'}; the types: {', '.join(types)}")
    return {name: replace(gpu, pull_requests=name in names, history=name in names) for name, gpu in types.items()}


def of_device(device_name: str, types: dict[str, GpuType]) -> list[str]:
    """The types a GPU named ``device_name`` is of (its name as torch or nvidia-smi give it)."""
    return [gpu.name for gpu in types.values() if gpu.runs(device_name)]


def git(*args: str, cwd: Path, check: bool = True) -> str:
    return output(*args, cwd=cwd, config=IDENTITY, check=check)


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


def read_act_output(lines, started: float, echo: bool, on_job_end=None) -> Run:
    """Job results, wall times and step summaries from act's output (``--log-prefix-job-id``);
    ``on_job_end(job)`` as each job ends."""
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
        if "🏁  Job" in rest and on_job_end is not None:
            on_job_end(job)
    return run


class World:
    """The throwaway origin, the clone act runs in, the API stand-in and the stand-ins' folders."""

    def __init__(
        self, scratch: Path, source: Path = ROOT, working_tree: bool = False, gpu_types: tuple[str, ...] | None = None
    ):
        """``main`` is ``source``'s HEAD as committed, or with ``working_tree`` its working tree as it is
        (tracked and untracked files git does not ignore: what the tests check is the code in front of
        them, committed or not), plus one commit where ``.github/gpu-types.toml`` has pull requests and
        the history run on ``gpu_types`` alone (default: the file's first type pull requests run on):
        this machine's GPUs."""
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
        head = self._run_gpu_jobs_on(gpu_types)
        git(
            "remote", "set-url", "origin", f"{SERVER}/{REPOSITORY}.git", cwd=self.work
        )  # act reads the repo's name here
        self.gitconfig = scratch / "gitconfig"
        self.gitconfig.write_text(f'[url "{self.origin}"]\n\tinsteadOf = {SERVER}/{REPOSITORY}.git\n')
        self.main = head
        self.fake = FakeGitHub(REPOSITORY, permissions={MAINTAINER: "write"})
        # The runner's own files, as the JIT loop lays them out: in the folder that holds the work
        # (act's workspaces are under home/). A secret no log may show.
        self.canary = f"runner-credentials-{secrets.token_hex(8)}"
        (scratch / ".credentials").write_text(self.canary + "\n")

    def _run_gpu_jobs_on(self, names: tuple[str, ...] | None) -> str:
        """Main's new head: the GPU types file with every GPU job's legs on ``names`` alone."""
        path = self.work / policy.FILE.relative_to(ROOT)
        types = policy.gpu_types(path)
        names = names or tuple(t.name for t in types.values() if t.pull_requests)[:1]
        path.write_text(dump_types(only_on(types, names), policy.read(path).get("policy")))
        git("add", str(path), cwd=self.work)
        git("commit", "-q", "--allow-empty", "-m", f"rehearsal: the GPU jobs run on {', '.join(names)}", cwd=self.work)
        git("push", "-q", "origin", "HEAD:refs/heads/main", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)

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

    def run(
        self,
        event: str,
        payload: dict,
        workflows: Path,
        *,
        timeout: float,
        echo: bool = False,
        env=None,
        gpus: tuple[str, ...] = (),
        host_gpus: tuple[str, ...] = (),
    ) -> Run:
        """act EVENT on ``workflows``, every job on this machine: one at a time (they share its GPU),
        or with ``gpus`` as many at a time as there are GPUs, each job on one GPU of its own and that
        GPU's share of the cores (among ``host_gpus``, default ``gpus``) for its whole length
        (``gpu_leases.py``), as a fleet of one-GPU runners runs them."""
        labels = {"ubuntu-latest", "self-hosted", "linux", "x64", "gpu", *act.runner_labels()}
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
        leases = self.scratch / "gpu-leases"
        if gpus:
            real = shutil.which("python", path=process_env.get("PATH"))
            if real is None:
                raise RuntimeError("the jobs run `python`, and there is none on the PATH")
            leases.mkdir(exist_ok=True)
            shims = gpu_leases.shim(self.scratch / "gpu-shim", real)
            try:
                cpus = gpu_leases.cpu_shares(list(gpus), GPU_CPUS, list(host_gpus) or None)
            except RuntimeError as error:  # a GPU host has cores enough; a small CPU machine may not
                print(f"rehearsal: the jobs share this machine's cores, not pinned ({error})", file=sys.stderr)
                cpus = ""
            process_env.update(
                PATH=f"{shims}{os.pathsep}{process_env.get('PATH', '')}",
                NF4KERNEL_GPU_LEASES=str(leases),
                NF4KERNEL_GPUS=" ".join(gpus),
                NF4KERNEL_GPU_CPUS=cpus,
            )
        with Serving(self.fake) as api_url:
            command = [act.binary(), event, "-C", str(self.work), "-W", str(workflows), "--eventpath", str(event_file)]
            for label in sorted(labels):
                command += ["-P", f"{label}={act.HOST}"]
            for action, folder in sorted(standins.items()):
                command += ["--local-repository", f"{action}={folder}"]
            command += ["--env", f"GITHUB_API_URL={api_url}", "--secret", f"GITHUB_TOKEN={TOKEN}"]
            command += ["--log-prefix-job-id", "--concurrent-jobs", str(max(1, len(gpus))), "--no-cache-server"]
            command += ["--action-cache-path", str(self.scratch / "act-cache")]
            started = time.perf_counter()
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=process_env
            )
            try:
                freed = (lambda job: gpu_leases.release(leases, job)) if gpus else None
                run = read_act_output(_until(process, started + timeout), started, echo, freed)
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
