"""The gate's measurement of another tree's kernel, sandboxed: this process (the trusted harness,
which never imports the kernel under test) stages the kernel, runs ``python -P -m harness.gate
--measure-only --staged DIR COMMIT --json -`` in bubblewrap's sandbox (``sandbox.py``), reads the
record from the child's stdout (a pipe: the child's log and table go to stderr, into the job's log),
and checks it before anything decides on it:

* it is a gate record (``records.check_gate``: types, finite positive times, counts that agree);
* it measured the kernel staged here: its commit is the staged commit, imported from the staged
  folder;
* it is of this harness version;
* the times it reports fit in the time the child ran: every timing it reports (nf4kernel's,
  Unsloth's, bitsandbytes', each 1000 x (up, gate, down)) was taken while it ran, so their sum can't
  exceed this process's clock around the child. A kernel that reported Unsloth slower than the run
  allowed is refused; one that reports itself faster is not caught here (docs/gpu-approval.md, "What
  a sandboxed kernel can still do").

The child sees the trusted tree and the staged kernel read-only, the compile cache of the kernel's
commit read-write (``sandbox.kernel_cache``: warm from that commit's last run, no other kernel's);
nothing of the job's (``$RUNNER_TEMP``, the workspace, ``$GITHUB_ENV``) and no network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from harness.core import kernel_source, records, sandbox
from harness.core.paths import ROOT

TIMEOUT_S = 1500  # the gate's rounds, the classic path's process and Unsloth's import, with room


def measure(args) -> dict:
    """The checked record of ``args.kernel`` measured in the sandbox; ValueError (exit 2) where there
    is no sandbox here or the child's answer is no record of that kernel."""
    why = sandbox.why_not()
    if why:
        raise ValueError(
            f"--kernel measures in a sandbox, and there is none here: {why} (--no-sandbox measures without)"
        )
    with kernel_source.staged(args.kernel) as kernel:
        child = [sys.executable, "-P", "-m", "harness.gate", "--measure-only", "--json", "-"]
        child += ["--staged", str(kernel.path), kernel.commit, "--rounds", str(args.rounds)]
        child += ["--max-rounds", str(args.max_rounds), "--threshold", repr(args.threshold)]
        child += ["--no-classic"] if args.no_classic else []
        cache = sandbox.kernel_cache(kernel.commit)
        env = {"PYTHONPATH": kernel_source.python_path(kernel.path, ROOT), **sandbox.cache_env(cache)}
        print(f"[gate] measuring {kernel.describe()} in bubblewrap's sandbox", flush=True)
        started = time.perf_counter()
        try:
            done = sandbox.run(child, timeout=TIMEOUT_S, read=[kernel.path, ROOT], write=[cache], env=env)
        except subprocess.TimeoutExpired:
            raise ValueError(f"the sandboxed measurement ran past {TIMEOUT_S} s and was ended") from None
        wall = time.perf_counter() - started
        return checked(done, kernel, args.kernel, wall)


def checked(done: subprocess.CompletedProcess, kernel: kernel_source.Staged, source: str, wall: float) -> dict:
    """The child's record, checked (module docstring); ValueError naming what is wrong."""
    name = "the sandboxed measurement's record"
    lines = [line for line in (done.stdout or "").splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"the sandboxed measurement wrote no record (exit {done.returncode})")
    if len(lines) > 1:
        raise ValueError(f"the sandboxed measurement wrote {len(lines)} lines on its record pipe, not one record")
    try:
        record = json.loads(lines[0])
    except ValueError:
        raise ValueError(f"{name} is not JSON: {lines[0][:120]!r}") from None
    records.check_gate(record, name)
    if record.get("mode") is not None:
        raise records.RecordError(name, "mode", "an A/A record, not the gate's")
    found = record.get("kernel") or {}
    if found.get("commit") != kernel.commit:
        raise records.RecordError(name, "kernel.commit", f"{found.get('commit')!r}, not the staged {kernel.commit}")
    imported = found.get("imported_from")
    if record["environment"].get("cuda") and not (imported or "").startswith(str(kernel.path) + os.sep):
        raise records.RecordError(name, "kernel.imported_from", f"{imported!r}, not the staged {kernel.path}")
    if record.get("harness_version") != records.HARNESS_VERSION:
        raise records.RecordError(
            name, "harness_version", f"{record.get('harness_version')!r}, not {records.HARNESS_VERSION}"
        )
    reported = sum(sum(timings) for rounds in (record.get("seconds") or {}).values() for timings in rounds)
    if reported > wall:
        raise records.RecordError(
            name, "seconds", f"{reported:.1f} s of timings in a run of {wall:.1f} s: more than it could have timed"
        )
    record["kernel"].update(source=source, staged=str(kernel.path))
    record["sandbox"] = {"tool": "bubblewrap", "wall_s": round(wall, 3), "reported_s": round(reported, 3)}
    return record
