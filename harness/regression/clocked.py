"""The regression check's measurement, by the trusted clock (``harness/clock``): BASE's and HEAD's
kernels each in a call process of its own in bubblewrap's sandbox, timed by the clock, checked by
the reference process; then again where the first pass saw something (``rule.suspects``).

The reference builds each suite weight in copies that outgrow L2; both kernels are first checked on
the exactness matrix and every copy (a kernel with a wrong output gets no figures: exit 3). A round
is one batch of each kernel per weight, BASE first in odd rounds and HEAD first in even ones; a
batch is ``CALLS`` calls of one weight, each synchronized, and every call's go-to-done time on the
clock is a sample: host time included, so a host sync per call shows. Neither kernel's process
times, checks or writes anything the record takes, but its peak memory per call.

The record (what ``regression --replay`` decides from)::

    {"device": ..., "measured_by": "the trusted clock", "rule": {...},
     "passes": [{"rounds": [...], "bytes": {...}, "peak_bytes": {"base": {...}, "head": {...}}}, ...]}
"""

from __future__ import annotations

import contextlib
import math

from harness.clock import judge, processes
from harness.core import kernel_source, sandbox
from harness.core.paths import ROOT
from harness.regression import rule

SIDES = ("base", "head")
FIRST_ROUNDS = rule.POLICY.first_rounds
SECOND_ROUNDS = rule.POLICY.second_rounds
CALLS = 100  # calls per weight per batch (the asv suite's synchronized loop)
CPU_CALLS = 3  # in Triton's interpreter
CPU_WORKING_SET = 1 << 20
NO_SANDBOX = False  # --no-sandbox: a machine without bubblewrap (the workflows never pass it)


class MeasureError(RuntimeError):
    """Nothing to decide on: the message and the exit code say why (2 no sandbox or a process that
    could not start, 3 a wrong output)."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def launcher(kernel: kernel_source.Staged, stack: contextlib.ExitStack, extra: dict):
    """How a side's call process starts: sandboxed (the staged kernel and this checkout read-only,
    the kernel's commit's compile cache read-write, nothing of the job's), or plain with
    ``NO_SANDBOX``."""
    cache = sandbox.kernel_cache(kernel.commit)
    env = {"PYTHONPATH": kernel_source.python_path(kernel.path, ROOT), **sandbox.cache_env(cache), **extra}
    if NO_SANDBOX:
        return processes.plain(judge.trusted_env(env))

    def launch(argv, fds):
        view = {"read": [kernel.path, ROOT], "write": [cache], "env": env}
        return stack.enter_context(sandbox.started(argv, pass_fds=fds, **view))

    return launch


def run_pass(session: judge.Session, ready: dict, keys: list[str], groups: dict, rounds: int, log=print) -> dict:
    """``rounds`` paired rounds of ``keys``: one record pass."""
    found = {"rounds": [], "bytes": {}, "peak_bytes": {side: {} for side in SIDES}}
    for key in keys:
        first = session.manifest["weights"][judge.members(session.manifest, groups[key])[0]]
        found["bytes"][key] = math.prod(first["tensors"]["packed"][2])  # uint8 codes: one byte each
    for r in range(rounds):
        order = SIDES if r % 2 == 0 else SIDES[::-1]
        timed = {side: {} for side in SIDES}
        for side in order:
            for key in keys:
                session.timed_batch(side, groups[key])
                timed[side][key] = list(session.last_calls)
        log(f"regression: round {r + 1}/{rounds}: {len(keys)} weights, {', '.join(order)}")
        found["rounds"].append({"order": list(order), **timed})
    for side in SIDES:
        peaks = ready[side].get("peak_bytes", {})
        found["peak_bytes"][side] = {key: int(peaks.get(f"{key} #0", 0)) for key in keys}
    return found


def measure(
    staged: dict[str, kernel_source.Staged],
    keys: list[str],
    device: str = "cuda",
    first_rounds: int = FIRST_ROUNDS,
    second_rounds: int = SECOND_ROUNDS,
    min_change: float = rule.DEFAULT_MIN_CHANGE,
    min_group_change: float = rule.DEFAULT_MIN_GROUP_CHANGE,
    log=print,
) -> dict:
    """Both passes: the first over ``keys``, the second over what the first calls slower or leaves
    open, judged with the limits given (the record keeps them, so a replay re-measures nothing)."""
    if not NO_SANDBOX:
        why = sandbox.why_not()
        if why:
            raise MeasureError(f"no sandbox here: {why} (--no-sandbox measures without)")
    cpu = device == "cpu"
    extra = {"TRITON_INTERPRET": "1"} if cpu else {}
    setup = {"device": device, "suite": list(keys), "matrix": True, "working_set": CPU_WORKING_SET if cpu else None}
    trusted = judge.trusted_env({"PYTHONPATH": kernel_source.python_path(ROOT), **extra})
    with contextlib.ExitStack() as stack:
        launchers = {side: ("nf4kernel", launcher(staged[side], stack, extra)) for side in SIDES}
        with judge.session(launchers, setup, trusted) as (session, ready):
            for side in SIDES:
                if ready[side].get("error"):
                    raise MeasureError(f"{side}'s process: {ready[side]['error']}")
            session.repeats = CPU_CALLS if cpu else CALLS
            session.quiet = not cpu  # a CPU copy's time says nothing of a GPU's queue
            for side in SIDES:
                wrong = [e for e in session.exactness(side) if not e["ok"]]
                if wrong:
                    said = wrong[0].get("reason") or f"{wrong[0]['check']} differs"
                    raise MeasureError(f"{side}: {wrong[0]['shape']} {wrong[0]['weight']}: {said}", 3)
            groups = {key: i for i, key in enumerate(keys)}
            record = {
                "device": session.facts.get("name", device),
                "measured_by": "the trusted clock",
                "rule": {"min_change": min_change, "min_group_change": min_group_change},
            }
            try:
                record["passes"] = [run_pass(session, ready, keys, groups, first_rounds, log)]
                first = rule.judge(record["passes"][0], min_change, min_group_change)
                again = rule.suspects(first)
                if again:
                    log(f"regression: {len(again)} of {len(keys)} results to measure again: {', '.join(again)}")
                    record["passes"].append(run_pass(session, ready, again, groups, second_rounds, log))
            except judge.Failed as failure:
                entry = failure.entry
                raise MeasureError(f"{entry['shape']} {entry['weight']}: {entry['reason']}", 3) from None
    return record
