"""The regression check's measurement, by the trusted clock (``harness/ab.py``): BASE's and HEAD's
kernels each in call processes of their own in bubblewrap's sandbox, both checked exact first, then
paired rounds of one batch per weight, which kernel goes first alternating; again, in new processes
on swapped cores, where the first pass saw something (``rule.suspects``). How and why it measures
so, and the record it writes: docs/performance-history.md.
"""

from __future__ import annotations

import contextlib
import math

from harness import ab
from harness.clock import judge
from harness.core import kernel_source, sandbox
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
    """``rounds`` paired rounds of ``keys``: one record pass, with the GPU's state before and after
    each batch and which of its timed calls the reference checked right after they answered
    (``checked``). A side's first phase in the session opens with its exactness check."""
    found = {"rounds": [], "bytes": {}, "peak_bytes": {side: {} for side in SIDES}, "states": [], "checked": []}
    for key in keys:
        first = session.manifest["weights"][judge.members(session.manifest, groups[key])[0]]
        found["bytes"][key] = math.prod(first["tensors"]["packed"][2])  # uint8 codes: one byte each
    paired, wanted = ab.Rounds(session, SIDES), {key: groups[key] for key in keys}
    for r in range(rounds):
        order, batches = paired.next(wanted, (lambda side: exact(session, side)) if r == 0 else None)
        log(f"regression: round {r + 1}/{rounds}: {len(keys)} weights, {', '.join(order)} first")
        found["rounds"].append({"order": list(order), **_each(batches, lambda b: b.calls)})
        found["states"].append(_each(batches, lambda b: {"before": b.before, "after": b.after}))
        found["checked"].append(_each(batches, lambda b: b.checked))
    for side in SIDES:
        peaks = ready[side].get("peak_bytes", {})
        found["peak_bytes"][side] = {key: int(peaks.get(f"{key} #0", 0)) for key in keys}
    return found


def _each(batches: dict, what) -> dict:
    return {side: {key: what(batch) for key, batch in batches[side].items()} for side in SIDES}


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
    """A new session of the clock (``ab.session``); ``swapped``: each side's processes on the core
    the other's have without it."""
    cpu = device == "cpu"
    extra = {"TRITON_INTERPRET": "1"} if cpu else {}
    setup = {"device": device, "suite": list(keys), "matrix": True, "working_set": CPU_WORKING_SET if cpu else None}
    sides = SIDES[::-1] if swapped else SIDES  # judge.session gives cores in this order
    with ab.session({side: staged[side] for side in sides}, setup, extra, sandboxed) as (session, ready):
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
