"""The regression check's measurement, by the trusted clock (``harness/clock``): BASE's and HEAD's
kernels each in call processes of their own in bubblewrap's sandbox, timed by the clock, checked by
the reference process; then again where the first pass saw something (``rule.suspects``).

The reference builds each suite weight in copies that outgrow L2; both kernels are first checked on
the exactness matrix and every copy (a kernel with a wrong output gets no figures: exit 3). A round
is one phase of each kernel, which goes first alternating from round to round: a phase is one
batch per weight, in a process of that kernel's own, and every process of the other kernel is
ended, and its contexts gone from the GPU, before it starts (``judge.Session.enter``): a kernel's
queued work can't run while the other is timed. The kernel that ends a round opens the next in the
same process, so a pass of R rounds starts R + 1 processes (and one more per kernel for its
exactness check, ended before any timing), and each process's level (one kept
about 20% slower on one weight for a whole run in an A/A on an H200,
benchmarks/results/regression-aa-h200) varies from round to round, where the interval sees it. A
batch is ``CALLS`` calls of one weight, each synchronized (after the clock's untimed warm-up), and
every call's go-to-done time on the clock is a sample: host time included, so a host sync per call
shows. Neither kernel's process times, checks or writes anything the record takes, but its peak
memory per call. The re-measurement that decides (``rule.suspects``) runs in a new session, a new
reference and each kernel's processes on the core the other had.

The record (what ``regression --replay`` decides from)::

    {"device": ..., "measured_by": "the trusted clock", "rule": {...},
     "passes": [{"rounds": [...], "bytes": {...}, "peak_bytes": {"base": {...}, "head": {...}}}, ...]}
"""

from __future__ import annotations

import contextlib
import math

from harness.clock import judge
from harness.core import gpu_state, kernel_source, sandbox
from harness.core.paths import ROOT
from harness.regression import rule

SIDES = ("base", "head")
FIRST_ROUNDS = rule.POLICY.first_rounds
SECOND_ROUNDS = rule.POLICY.second_rounds
CALLS = 100  # calls per weight per batch (the asv suite's synchronized loop)
CPU_CALLS = 3  # in Triton's interpreter
CPU_WORKING_SET = 1 << 20


class MeasureError(RuntimeError):
    """Nothing to decide on: the message and the exit code say why (2 no sandbox or a process that
    could not start, 3 a wrong output)."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def run_pass(session: judge.Session, ready: dict, keys: list[str], groups: dict, rounds: int, log=print) -> dict:
    """``rounds`` paired rounds of ``keys``: one record pass, with the GPU's state (NVML: clocks,
    throttle reasons) before and after each batch: a batch that starts on an idling GPU's clocks, or
    one the GPU slowed, shows beside the figure (``rule.throttled`` names the latter); and which of
    each batch's timed calls the reference checked right after they answered (``checked``: on an H200
    the call after a check pays about 150 us more, ``python -m studies.aa_noise``; it stays timed,
    since dropping it would tell the candidate which calls go untimed). A side's first phase in the
    session opens with its exactness check, in the same process."""
    found = {"rounds": [], "bytes": {}, "peak_bytes": {side: {} for side in SIDES}, "states": [], "checked": []}
    device = session.facts.get("nvml", 0)
    for key in keys:
        first = session.manifest["weights"][judge.members(session.manifest, groups[key])[0]]
        found["bytes"][key] = math.prod(first["tensors"]["packed"][2])  # uint8 codes: one byte each
    # Nothing runs between one batch and the next: the state after one is the state before the next.
    state = gpu_state.snapshot(device)
    for r in range(rounds):
        timed, states, checked = ({side: {} for side in SIDES} for _ in range(3))
        order = SIDES if r % 2 == 0 else SIDES[::-1]
        for side in order:
            if r == 0:  # the side's first phase in this session
                exact(session, side)
                state = gpu_state.snapshot(device)
            for key in keys:
                session.timed_batch(side, groups[key])
                before, state = state, gpu_state.snapshot(device)
                states[side][key] = {"before": before, "after": state}
                timed[side][key] = list(session.last_calls)
                checked[side][key] = list(session.last_checked)
        log(f"regression: round {r + 1}/{rounds}: {len(keys)} weights, {', '.join(order)} first")
        found["rounds"].append({"order": list(order), **timed})
        found["states"].append(states)
        found["checked"].append(checked)
    for side in SIDES:
        peaks = ready[side].get("peak_bytes", {})
        found["peak_bytes"][side] = {key: int(peaks.get(f"{key} #0", 0)) for key in keys}
    return found


def exact(session: judge.Session, side: str) -> None:
    """``side``'s kernel checked on the exactness matrix and every copy, in the process that goes
    on to its batches; MeasureError (exit 3) naming the first wrong output."""
    wrong = [e for e in session.exactness(side) if not e["ok"]]
    if wrong:
        said = wrong[0].get("reason") or f"{wrong[0]['check']} differs"
        raise MeasureError(f"{side}: {wrong[0]['shape']} {wrong[0]['weight']}: {said}", 3)


@contextlib.contextmanager
def measuring(
    staged: dict[str, kernel_source.Staged], keys: list[str], device: str, swapped: bool = False, sandboxed: bool = True
):
    """A new session of the clock, the reference started (each side's processes start at its first
    phase); yields the session and the processes' ready messages. ``swapped``: each side's
    processes on the core the other's have without it."""
    cpu = device == "cpu"
    extra = {"TRITON_INTERPRET": "1"} if cpu else {}
    setup = {"device": device, "suite": list(keys), "matrix": True, "working_set": CPU_WORKING_SET if cpu else None}
    trusted = judge.trusted_env({"PYTHONPATH": kernel_source.python_path(ROOT), **extra})
    sides = SIDES[::-1] if swapped else SIDES  # judge.session gives cores in this order
    launchers = {side: ("nf4kernel", judge.candidate(staged[side], extra, sandboxed)) for side in sides}
    with judge.session(launchers, setup, trusted) as (session, ready):
        session.repeats = CPU_CALLS if cpu else CALLS
        if cpu:
            session.warmup = 0  # the interpreter wakes nothing up: its calls cost alike
        session.quiet = not cpu  # a CPU copy's time says nothing of a GPU's queue
        yield session, ready


def measure(
    staged: dict[str, kernel_source.Staged],
    keys: list[str],
    device: str = "cuda",
    first_rounds: int = FIRST_ROUNDS,
    second_rounds: int = SECOND_ROUNDS,
    min_change: float = rule.DEFAULT_MIN_CHANGE,
    min_group_change: float = rule.DEFAULT_MIN_GROUP_CHANGE,
    sandboxed: bool = True,
    log=print,
) -> dict:
    """Both passes: the first over ``keys``, the second, in new processes (``measuring``), over what
    the first calls slower or leaves open, judged with the limits given (the record keeps them, so a
    replay re-measures nothing)."""
    if sandboxed:
        why = sandbox.why_not()
        if why:
            raise MeasureError(f"no sandbox here: {why} (--no-sandbox measures without)")
    groups = {key: i for i, key in enumerate(keys)}
    record = {
        "measured_by": "the trusted clock",
        "rule": {"min_change": min_change, "min_group_change": min_group_change},
        "processes": "a new one per phase: one side's process ended and off the GPU before the other's runs",
    }
    try:
        with measuring(staged, keys, device, sandboxed=sandboxed) as (session, ready):
            record["device"] = session.facts.get("name", device)
            record["passes"] = [run_pass(session, ready, keys, groups, first_rounds, log)]
            log(f"regression: {session.costs()}")
        again = rule.suspects(rule.judge(record["passes"][0], min_change, min_group_change))
        if again:
            log(f"regression: {len(again)} of {len(keys)} to measure again in new processes: {', '.join(again)}")
            with measuring(staged, keys, device, swapped=True, sandboxed=sandboxed) as (session, ready):
                record["passes"].append(run_pass(session, ready, again, groups, second_rounds, log))
                log(f"regression: {session.costs()}")
    except judge.NotStarted as failure:
        raise MeasureError(failure.entry["reason"]) from None
    except judge.Failed as failure:
        entry = failure.entry
        raise MeasureError(f"{entry['shape']} {entry['weight']}: {entry['reason']}", 3) from None
    return record
