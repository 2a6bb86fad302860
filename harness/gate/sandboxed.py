"""The gate's measurement of another tree's kernel, by the trusted clock (``harness/clock``): this
process never imports torch, a kernel or Unsloth; it stages the kernel, starts

* the reference process (bitsandbytes, the inputs, the expected outputs, the checks; never the
  candidate),
* the candidate's call processes in bubblewrap's sandbox (``sandbox.py``): the staged kernel and the
  trusted tree read-only, the commit's compile cache read-write, nothing of the job's, no network;
  each ended, and gone from the GPU, before Unsloth's batches (``judge.Session.enter``),
* Unsloth's call process, on the trusted tree alone (Unsloth's ``fast_dequantize``; it never imports
  the candidate, so nothing the candidate does at import reaches it),

checks the candidate's outputs on the exactness matrix and every Challenge A weight, then times
interleaved rounds of Challenge A batches (1000 x (up, gate, down) per MLP, every call
synchronized), each call from its command to its answer on its own clock, and writes the record. The candidate's
process writes no record and times nothing: what it prints is log.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass

from harness.clock import judge, processes
from harness.core import gpu_state, kernel_source, records, sandbox, workload
from harness.core.paths import ROOT
from harness.gate import measurement

BASELINE = "unsloth"


@dataclass(frozen=True)
class Plan:
    """What one measurement is asked for: the command line stops at ``cli.py``."""

    kernel: str  # a commit, or a checkout's path: its committed nf4kernel/ is staged alone
    rounds: int  # interleaved rounds first
    max_rounds: int  # at most, while the interval straddles the threshold
    threshold: float  # the speed-up the rounds must decide about
    command: str  # as the record says it was run


def measure(plan: Plan) -> dict:
    """The record of ``plan.kernel`` measured by the clock; ValueError (exit 2) where there is no
    sandbox here or a process could not be set up."""
    why = sandbox.why_not()
    if why:
        raise ValueError(
            f"the gate measures a kernel in a sandbox, and there is none here: {why} "
            "(it needs bubblewrap: apt-get install bubblewrap)"
        )
    with kernel_source.staged(plan.kernel) as kernel, contextlib.ExitStack() as stack:
        trusted = judge.trusted_env({"PYTHONPATH": kernel_source.python_path(ROOT)})
        unsloth_home = stack.enter_context(tempfile.TemporaryDirectory(prefix="nf4kernel-unsloth-"))
        launchers = {
            "nf4kernel": ("nf4kernel", judge.candidate(kernel)),
            BASELINE: (BASELINE, processes.plain(trusted, cwd=unsloth_home)),
        }
        setup = {"device": "cuda", "challenge": [list(mlp) for mlp in workload.CHALLENGE_A], "matrix": True}
        measurement.log(
            f"measuring {kernel.describe()}: the candidate in bubblewrap's sandbox, timed by the trusted clock"
        )
        with judge.session(launchers, setup, trusted) as (session, ready):
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
    record = {
        "command": plan.command,
        "environment": env,
        "kernel": {"source": plan.kernel, "commit": kernel.commit, "staged": str(kernel.path)},
        "rounds": plan.rounds,
        "rounds_first": plan.rounds,
        "max_rounds": max(plan.rounds, plan.max_rounds),
        "harness_version": records.HARNESS_VERSION,
        "clock": {"l2_bytes": facts.get("l2_bytes"), "probe_s": facts.get("probe_s")},
    }
    return record


def measure_in(session: judge.Session, record: dict, threshold: float) -> None:
    """Exactness, then timed rounds until decided; a failure anywhere becomes the record's failed check."""
    manifest = session.manifest
    record["calls_per_timing"] = session.repeats
    record["shapes"] = judge.sizes(manifest)
    record["clock"].update(copies=manifest["copies"], slots=[g["count"] for g in manifest["groups"]])
    measurement.log(f"exactness: {len(manifest['weights'])} weights, checked by the reference process")
    record["correctness"] = session.exactness("nf4kernel")
    if not all(c["ok"] for c in record["correctness"]):
        return
    names = ["nf4kernel", BASELINE]
    device = session.facts.get("nvml", 0)

    def add_rounds(count: int) -> None:
        seconds = record.setdefault("seconds", {name: [] for name in names})
        states = record.setdefault("round_states", [])
        for _ in range(count):
            index = len(states)
            before = gpu_state.snapshot(device)
            order = names if index % 2 == 0 else names[::-1]
            times = {name: [session.timed_batch(name, group) for group in session.groups()] for name in order}
            after = gpu_state.snapshot(device)
            throttled = sorted(set(gpu_state.is_throttled(before)) | set(gpu_state.is_throttled(after)))
            states.append({"state_before": before, "state_after": after, "throttled": throttled})
            for name in names:
                seconds[name].append(times[name])
            measurement.log(f"round {index + 1}: " + ", ".join(f"{n} {sum(times[n]):.3f} s" for n in names))

    try:
        measurement.time_until_decided(record, add_rounds, threshold)
    except judge.Failed as failure:
        record["correctness"].append(failure.entry)
        for key in ("seconds", "round_states"):
            record.pop(key, None)
        record["rounds"] = record["rounds_first"]
    record["clock"].update(session.stats)
    stats = session.stats
    measurement.log(
        f"{stats['calls']} calls timed, {stats['checks']} outputs checked; the closest call to its physical floor "
        f"took {stats['closest_to_physics'] or 0:.2f}x it; {session.costs()}"
    )
