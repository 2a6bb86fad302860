"""The gate's measurement of a tree's kernel against Unsloth's, by the trusted clock (``harness/ab.py``):
exactness on the matrix and every Challenge A weight, then interleaved rounds until the speed-up's
interval clears the threshold or the bound is reached; the record. This process never imports torch,
a kernel or Unsloth: docs/harness-code.md says which process runs what.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness import ab
from harness.clock import judge
from harness.core import gate_record, gpu_state, kernel_source, sandbox, workload
from harness.gate import decision

BASELINE = "unsloth"
NAMES = ("nf4kernel", BASELINE)
ROUNDS_PER_BATCH = 2  # rounds added at a time while the interval straddles the threshold


@dataclass(frozen=True)
class Plan:
    """What one measurement is asked for: the command line stops at ``cli.py``."""

    kernel: str  # a commit, or a checkout's path: its committed nf4kernel/ is staged alone
    rounds: int  # interleaved rounds first
    max_rounds: int  # at most, while the interval straddles the threshold
    threshold: float  # the speed-up the rounds must decide about
    command: str  # as the record says it was run


def log(message: str) -> None:
    print(f"[gate] {message}", flush=True)


def measure(plan: Plan) -> dict:
    """The record of ``plan.kernel`` measured by the clock; ValueError (exit 2) where there is no
    sandbox here or a process could not be set up."""
    why = sandbox.why_not()
    if why:
        raise ValueError(
            f"the gate measures a kernel in a sandbox, and there is none here: {why} "
            "(it needs bubblewrap: apt-get install bubblewrap)"
        )
    with kernel_source.staged(plan.kernel) as kernel:
        setup = {"device": "cuda", "challenge": [list(mlp) for mlp in workload.CHALLENGE_A], "matrix": True}
        log(f"measuring {kernel.describe()}: the candidate in bubblewrap's sandbox, timed by the trusted clock")
        with ab.session({"nf4kernel": kernel}, setup, baseline=BASELINE) as (session, ready):
            record = start_record(plan, kernel, session.facts, ready)
            if BASELINE in session.impls:
                measure_in(session, record, plan.threshold)
            if ready.get("nf4kernel", {}).get("imported_from"):
                record["kernel"]["imported_from"] = ready["nf4kernel"]["imported_from"]
    return record


def start_record(plan: Plan, kernel: kernel_source.Staged, facts: dict, ready: dict) -> dict:
    env = {"cuda": True, "device": facts.get("name", "?"), "copy_bytes_per_s": facts["copy_bytes_per_s"]}
    env.update({k: facts.get(k) for k in ("torch", "triton", "bitsandbytes")}, versions=gpu_state.versions())
    baseline = ready.get(BASELINE, {})
    env["unsloth"] = baseline.get("version") if not baseline.get("error") else None
    if baseline.get("error"):
        env["unsloth_error"] = baseline["error"]
    return {
        "command": plan.command,
        "environment": env,
        "kernel": {"source": plan.kernel, "commit": kernel.commit, "staged": str(kernel.path)},
        "rounds": plan.rounds,
        "rounds_first": plan.rounds,
        "max_rounds": max(plan.rounds, plan.max_rounds),
        "harness_version": gate_record.HARNESS_VERSION,
        "clock": {"l2_bytes": facts.get("l2_bytes"), "probe_s": facts.get("probe_s")},
    }


def measure_in(session: judge.Session, record: dict, threshold: float) -> None:
    """Exactness, then timed rounds until decided; a failure anywhere becomes the record's failed check."""
    manifest = session.manifest
    record["calls_per_timing"] = session.repeats
    record["shapes"] = judge.sizes(manifest)
    record["clock"].update(copies=manifest["copies"], slots=[g["count"] for g in manifest["groups"]])
    log(f"exactness: {len(manifest['weights'])} weights, checked by the reference process")
    record["correctness"] = session.exactness("nf4kernel")
    if not all(c["ok"] for c in record["correctness"]):
        return
    rounds = ab.Rounds(session, NAMES)
    groups = {group: group for group in session.groups()}

    def add_rounds(count: int) -> None:
        seconds = record.setdefault("seconds", {name: [] for name in NAMES})
        states = record.setdefault("round_states", [])
        for _ in range(count):
            order, found = rounds.next(groups)
            before, after = found[order[0]][0].before, rounds.state
            throttled = sorted(set(gpu_state.is_throttled(before)) | set(gpu_state.is_throttled(after)))
            states.append({"state_before": before, "state_after": after, "throttled": throttled})
            times = {name: [batch.seconds for batch in found[name].values()] for name in NAMES}
            for name in NAMES:
                seconds[name].append(times[name])
            log(f"round {len(states)}: " + ", ".join(f"{n} {sum(times[n]):.3f} s" for n in NAMES))

    try:
        time_until_decided(record, add_rounds, threshold)
    except judge.Failed as failure:
        record["correctness"].append(failure.entry)
        for key in ("seconds", "round_states"):
            record.pop(key, None)
        record["rounds"] = record["rounds_first"]
    record["clock"].update(session.stats)
    stats = session.stats
    log(
        f"{stats['calls']} calls timed, {stats['checks']} outputs checked; the closest call to its physical floor "
        f"took {stats['closest_to_physics'] or 0:.2f}x it; {session.costs()}"
    )


def time_until_decided(record: dict, add_rounds, threshold: float) -> None:
    """``add_rounds(count)`` times rounds into the record: more while the interval straddles the threshold."""
    add_rounds(record["rounds_first"])
    bound = record["max_rounds"]
    while (done := len(record["seconds"]["nf4kernel"])) < bound and decision.more_rounds_would_help(record, threshold):
        more = min(ROUNDS_PER_BATCH, bound - done)
        log(f"the 95% interval straddles the threshold after {done} rounds: {more} more (at most {bound})")
        add_rounds(more)
    record["rounds"] = len(record["seconds"]["nf4kernel"])
