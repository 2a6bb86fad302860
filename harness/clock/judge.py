"""The trusted clock: it never imports torch, a kernel or Unsloth. It starts the reference and a call
process per implementation, times each call from its command to its answer, has the reference check
drawn outputs, and ends every candidate process before anything else is timed or checked. What a
batch is and why: docs/harness-code.md, "The trusted clock".
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from dataclasses import dataclass, field

from harness.clock import channel as ch
from harness.clock import contexts, plan, processes
from harness.core import kernel_source, policy, sandbox, workload
from harness.core.paths import ROOT

POLICY = policy.clock()  # the trusted tree's .github/gpu-types.toml, [policy.clock]
CHECKS_PER_BATCH = POLICY.checks_per_batch
WARMUP_REPEATS = POLICY.warmup_repeats
CALL_TIMEOUT_S = POLICY.call_timeout_s
QUIET_FACTOR, QUIET_SLACK_S, QUIET_WAIT_S = POLICY.quiet_factor, POLICY.quiet_slack_us * 1e-6, POLICY.quiet_wait_s
TRUSTED_ONLY = ("GITHUB_", "ACTIONS_", "RUNNER_", "INPUT_")  # the job's; no process here needs them
# The baseline's implementation: trusted, it is timed on the puzzle's own call (its output its own,
# never a slot), so nothing of it is checked; a candidate is always timed writing the clock's slots.
OWN_OUTPUT = ("unsloth",)
# Implementations no pull request writes: their processes live the whole session, frozen between
# batches. Every other (nf4kernel, whichever tree the path puts first) is a candidate's.
TRUSTED = ("unsloth", "bitsandbytes")
GONE_TIMEOUT_S = 30.0  # for an ended candidate's contexts to leave the GPU (the driver tears them down)


class Failed(Exception):
    """A batch found something wrong: ``entry`` is the failed check to report."""

    def __init__(self, entry: dict):
        super().__init__(entry["reason"])
        self.entry = entry


class NotStarted(Failed):
    """A candidate's process ended, or failed, before it said it was ready."""


def failed(shape: str, weight: str, reason: str) -> Failed:
    """A failed check as the gate's record holds it: ``reason`` is what the verdict says."""
    entry = {"shape": shape, "weight": weight, "check": "the trusted clock", "ok": False, "exact": False}
    return Failed({**entry, "reason": reason})


def members(manifest: dict, group: int) -> list[int]:
    """The weights of ``group``, in the manifest's order (copy by copy, layer by layer)."""
    return [i for i, w in enumerate(manifest["weights"]) if w["group"] == group]


def group_label(manifest: dict, group: int) -> str:
    """A timed group's name: its shape and dtype (``4096x14336 bfloat16``), its weights' labels'
    first two words."""
    return " ".join(manifest["weights"][members(manifest, group)[0]]["label"].split()[:2])


def trusted_env(extra: dict | None = None) -> dict:
    """The environment of the processes the clock starts outside the sandbox (the reference,
    Unsloth's): this one's, less the job's variables and anything named like a token, with
    ``extra`` (their PYTHONPATH: the trusted tree, then the job's packages)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(TRUSTED_ONLY) and "TOKEN" not in k}
    env.pop("PYTHONPATH", None)
    return {**env, **(extra or {})}


def candidate(kernel: kernel_source.Staged, extra: dict | None = None, sandboxed: bool = True):
    """How a candidate's call process starts: in bubblewrap's sandbox (the staged kernel and this
    checkout read-only, the kernel's commit's compile cache read-write, nothing of the job's, no
    network), the staged kernel first on its path and ``extra`` in its environment; plain without
    ``sandboxed`` (``--no-sandbox`` of gpu-tests and the regression check: a machine without
    bubblewrap; the workflows never pass it)."""
    cache = sandbox.kernel_cache(kernel.commit)
    env = {"PYTHONPATH": kernel_source.python_path(kernel.path, ROOT), **sandbox.cache_env(cache), **(extra or {})}
    if not sandboxed:
        return processes.plain(trusted_env(env))

    def launch(argv, fds, held):
        view = {"read": [kernel.path, ROOT], "write": [cache], "env": env}
        return held.enter_context(sandbox.started(argv, pass_fds=fds, **view))

    return launch


@dataclass
class Session:
    reference: processes.Process
    impls: dict  # name -> its process now (a candidate's: the one in hand, or the last, ended)
    manifest: dict
    facts: dict
    repeats: int = workload.ROUNDS_PER_TIMING  # Challenge A's 1000 x (up, gate, down)
    checks: int = CHECKS_PER_BATCH
    warmup: int = WARMUP_REPEATS
    quiet: bool = True
    unchecked: frozenset = frozenset()  # names of OWN_OUTPUT's processes
    rng: random.Random = field(default_factory=random.SystemRandom)
    last_calls: list = field(default_factory=list)
    last_checked: list = field(default_factory=list)  # which of last_calls the reference checked after
    stats: dict = field(
        default_factory=lambda: {
            "calls": 0,
            "checks": 0,
            "slowest_probe_s": 0.0,
            "closest_to_physics": None,
            "candidate_processes": 0,
            "starting_s": 0.0,
            "clearing_s": 0.0,
        }
    )
    starter: object = None  # name -> a new process set up and ready (session()), for candidates
    trusted: frozenset = frozenset()  # names whose process lives the session (TRUSTED's)
    holders: object = None  # () -> the PIDs NVML lists on the GPU; None where there is no GPU
    allowed: frozenset = frozenset()  # what NVML listed before any candidate's process started
    current: str | None = None  # the name whose batches run now

    def enter(self, name: str) -> None:
        """Make ``name``'s the process in hand: unless it already is, every candidate's process is
        ended, the GPU must hold no context but the trusted ones (Failed otherwise), and a
        candidate gets a new process."""
        if self.current == name and self.impls[name].alive():
            return
        self.current = None
        for other, process in self.impls.items():
            if other not in self.trusted:
                processes.end(process)
        self.clear()
        if name not in self.trusted:
            began = time.monotonic()
            self.impls[name] = self.starter(name)
            took = time.monotonic() - began
            self.stats["candidate_processes"] += 1
            self.stats["starting_s"] += took
            self.stats["last_start"] = {"wall": round(took, 3), **self.impls[name].said.get("setup_s", {})}
        self.current = name

    def costs(self) -> str:
        """What the candidates' new processes cost the session so far, for the log."""
        stats = self.stats
        last = ", ".join(f"{k} {v:.2f} s" for k, v in stats.get("last_start", {}).items())
        return (
            f"{stats['candidate_processes']} candidate processes, {stats['starting_s']:.1f} s starting them "
            f"(the last: {last or 'none'}), {stats['clearing_s']:.2f} s waiting for the GPU to hold none of "
            "their contexts"
        )

    def clear(self) -> None:
        """Until the GPU holds no context but those it held before any candidate's process
        started; Failed naming the PIDs left after GONE_TIMEOUT_S."""
        if self.holders is None:
            return
        began = time.monotonic()
        left = contexts.wait_until_only(self.allowed, self.holders, GONE_TIMEOUT_S)
        self.stats["clearing_s"] += time.monotonic() - began
        if left:
            pids = ", ".join(str(p) for p in sorted(left))
            raise failed("-", "-", f"a process the clock did not start kept a CUDA context on the GPU (NVML: {pids})")

    def label(self, weight: int) -> str:
        """The weight's name within its shape: ``up #0`` (Challenge A), ``#1`` (a suite weight), or
        the matrix's whole label."""
        entry = self.manifest["weights"][weight]
        if entry["group"] >= len(self.manifest["copies"]):
            return entry["label"]  # the matrix's
        return " ".join(entry["label"].split()[2:])  # less its shape's two words

    def groups(self) -> list[int]:
        """The timed groups: Challenge A's MLPs or the suite's weights (the matrix's, if any, is
        the last and not timed)."""
        return list(range(len(self.manifest["copies"])))

    def run(self, name: str, batch: plan.Batch, shape: str) -> float:
        """The batch's calls' seconds, each from its command to its answer; Failed naming what was
        wrong."""
        self.enter(name)
        worker, reference = self.impls[name], self.reference
        if reference.ask(ch.POISON) != ch.YES:
            raise failed(shape, "-", "the reference could not poison the slots")
        line, alive, now = worker.line, worker.alive, time.perf_counter
        checking = name not in self.unchecked
        took = []
        worker.thaw()
        try:
            for i, (w, s) in enumerate(batch.calls):
                began = now()
                line.send(ch.CALL, w, s)
                try:
                    ch.wait(line.answered, alive, CALL_TIMEOUT_S)
                except ch.Gone as gone:
                    raise failed(shape, self.label(w), f"{name}'s call got no answer: {gone}") from None
                if i >= batch.timed_from:
                    took.append(now() - began)
                if line.words[1] & 0xFFFFFFFF != ch.YES:
                    raise failed(shape, self.label(w), f"{name}'s call failed in its process")
                if checking and i in batch.checks:
                    self.check(name, w, s, shape)
            for s, w in batch.final if checking else ():
                self.check(name, w, s, shape)
        finally:
            worker.freeze()
        self.physics(name, batch, took, shape)
        self.last_calls = took
        timed_checks = (i - batch.timed_from for i in batch.checks if i >= batch.timed_from)
        self.last_checked = sorted(timed_checks) if checking else []
        self.stats["calls"] += len(took)
        if self.quiet:
            self.wait_quiet(name, shape)
        return sum(took)

    def check(self, name: str, weight: int, slot: int, shape: str) -> None:
        self.stats["checks"] += 1
        if self.reference.ask(ch.CHECK, weight, slot) != ch.YES:
            raise failed(shape, self.label(weight), f"{name}'s output differs from bitsandbytes' (reference process)")

    def physics(self, name: str, batch: plan.Batch, took: list, shape: str) -> None:
        """No call faster than its bytes at the copy bandwidth the reference measured."""
        bandwidth = self.facts["copy_bytes_per_s"]
        weights = self.manifest["weights"]
        for (w, _), seconds in zip(batch.calls[batch.timed_from :], took, strict=True):
            floor = weights[w]["bytes_moved"] / bandwidth
            ratio = seconds / floor
            closest = self.stats["closest_to_physics"]
            self.stats["closest_to_physics"] = ratio if closest is None else min(closest, ratio)
            if seconds < floor:
                raise failed(
                    shape,
                    self.label(w),
                    f"{name} answered in {seconds * 1e6:.1f} us; its {weights[w]['bytes_moved']} bytes take at "
                    f"least {floor * 1e6:.1f} us at this GPU's copy bandwidth",
                )

    def wait_quiet(self, name: str, shape: str) -> None:
        """Until the reference's fixed copy takes its time alone again; Failed after QUIET_WAIT_S."""
        alone = self.facts["probe_s"]
        limit = max(QUIET_FACTOR * alone, alone + QUIET_SLACK_S)
        deadline = time.monotonic() + QUIET_WAIT_S
        while True:
            probe = self.reference.ask(ch.PROBE) / 1e6
            self.stats["slowest_probe_s"] = max(self.stats["slowest_probe_s"], probe)
            if probe <= limit:
                return
            if time.monotonic() > deadline:
                raise failed(
                    shape,
                    "-",
                    f"the GPU stayed busy after {name}'s batch: the reference's copy took {probe * 1e6:.0f} us, "
                    f"{alone * 1e6:.0f} us alone",
                )
            time.sleep(0.01)

    def timed_batch(self, name: str, group: int) -> float:
        """One timed batch of ``group`` (a Challenge A MLP, or a suite weight) by ``name``:
        its seconds; each call's in ``last_calls``."""
        first = members(self.manifest, group)[0]
        copies, layers = self.manifest["copies"][group], self.manifest["layers"][group]
        slots = self.manifest["groups"][group]["count"]
        batch = plan.batch(self.rng, first, copies, layers, slots, self.repeats, self.checks, self.warmup)
        return self.run(name, batch, group_label(self.manifest, group))

    def exactness(self, name: str) -> list[dict]:
        """Every weight once (the matrix and every copy of Challenge A's), each checked: the
        correctness entries, one per weight, or the first failure's. A candidate's process that
        ran them is ended after: every process timed is then alike, warmed on what it times alone
        (the one that had run the matrix first read about 25% slower on an H200)."""
        entries = []
        weights = self.manifest["weights"]
        try:
            for group, spec in enumerate(self.manifest["groups"]):
                ids = members(self.manifest, group)
                batch = plan.each_once(ids, spec["count"])
                matrix = group >= len(self.manifest["copies"])
                shape = "exactness matrix" if matrix else group_label(self.manifest, group)
                try:
                    self.run(name, batch, shape)
                except Failed as failure:
                    return [*entries, failure.entry]
                check = "bitsandbytes, in the reference process"
                entries += [
                    {"shape": shape, "weight": weights[w]["label"], "check": check, "ok": True, "exact": True}
                    for w in ids
                ]
            return entries
        finally:
            self.retire()

    def retire(self) -> None:
        """End the candidate's process in hand: the next batch, of any name, starts anew."""
        if self.current is not None and self.current not in self.trusted:
            processes.end(self.impls[self.current])
        self.current = None


@contextlib.contextmanager
def session(launchers: dict, setup: dict, env: dict, setup_timeout: float = 900.0):
    """The reference and the trusted call processes of ``launchers`` (name -> (impl, launch)), set
    up and frozen, each on a core of its own and this process on another where there are cores
    enough; a candidate's process starts at its first batch (``Session.enter``), on its name's core.
    Yields (the Session, {name: ready message or error}): a candidate's ready message is its first
    process's, there once it started; one that could not start is Failed at its first batch."""
    with contextlib.ExitStack() as stack:
        cores = processes.cores(2 + len(launchers)) or [None] * (2 + len(launchers))
        core_of = dict(zip(launchers, cores[2:], strict=True))
        stack.enter_context(processes.pinned(cores[0]))
        reference = processes.start(
            "the reference process", ["harness._process", "reference"], processes.plain(env), core=cores[1]
        )
        stack.callback(processes.end, reference)
        ch.send(reference.sock, setup)
        reference.sock.settimeout(setup_timeout)
        reply, fds = reference.receive("lending its regions")
        for fd in fds:
            stack.callback(os.close, fd)  # lent again to each candidate's new process
        handout = {k: reply[k] for k in ("manifest", "inputs_bytes", "slots_bytes")} | {"device": setup["device"]}
        ready, impls = {}, {}

        def start(name: str) -> processes.Process:
            impl, launch = launchers[name]
            process = processes.start(
                f"the {name} process", ["harness._process", "worker", impl], launch, core_of[name]
            )
            stack.callback(processes.end, process)
            process.sock.settimeout(setup_timeout)
            ch.send(process.sock, handout | {"lean": name in ready}, fds)  # a later process
            return process

        def ready_of(process: processes.Process) -> dict:
            try:
                return process.receive("saying it is ready")[0]
            except ValueError as error:
                return {"error": str(error)}

        trusted = [name for name, (impl, _) in launchers.items() if impl in TRUSTED]
        started = {name: start(name) for name in trusted}
        for name, process in started.items():
            ready[name] = ready_of(process)
            process.freeze()
            if not ready[name].get("error"):
                impls[name] = process

        def candidate(name: str) -> processes.Process:
            process = start(name)
            said = process.said = ready_of(process)
            ready.setdefault(name, said)
            if said.get("error"):
                processes.end(process)
                raise NotStarted(failed("-", "-", f"the {name} process: {said['error']}").entry)
            return process

        gpu = setup["device"] == "cuda"
        nvml = reply["facts"].get("nvml", 0)
        holders = (lambda: contexts.holders(nvml)) if gpu else None
        try:
            allowed = holders() if gpu else frozenset()  # the reference's and the trusted processes'
        except contexts.Unavailable as error:
            raise ValueError(f"nothing could confirm a candidate's processes left the GPU: {error}") from None
        # A candidate has no process yet: its first batch starts one.
        impls |= {name: processes.Process(name, None, None, None) for name in launchers if name not in trusted}
        own = frozenset(name for name, (impl, _) in launchers.items() if impl in OWN_OUTPUT)
        found = Session(reference, impls, reply["manifest"], reply["facts"], unchecked=own)
        found.starter, found.trusted, found.holders, found.allowed = candidate, frozenset(trusted), holders, allowed
        yield found, ready


def sizes(manifest: dict) -> list[dict]:
    """The record's shapes: each timed group's label and mean bytes per call."""
    out = []
    for group in range(len(manifest["copies"])):
        moved = [manifest["weights"][w]["bytes_moved"] for w in members(manifest, group)]
        out.append({"label": group_label(manifest, group), "bytes_per_call": sum(moved) / len(moved)})
    return out
