"""One A against B timing session, for the gate's rule and the regression rule: each kernel staged in
bubblewrap's sandbox (or plainly), a trusted baseline's process beside them, the trusted clock's
session (``clock/judge.py``), and paired rounds: which goes first alternating by round, the GPU's
state read between batches. What a rule makes of the timings is its own (``gate/``, ``regression/``).
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass

from harness.clock import judge, processes
from harness.core import gpu_state, kernel_source
from harness.core.paths import ROOT


@contextlib.contextmanager
def session(
    kernels: dict[str, kernel_source.Staged],
    setup: dict,
    extra: dict | None = None,
    sandboxed: bool = True,
    baseline: str | None = None,
):
    """The clock's session: a candidate's call processes per staged kernel (name -> kernel, in this
    order of cores; in the sandbox unless not ``sandboxed``), ``baseline``'s trusted process in a
    folder of its own, ``extra`` in each one's environment. Yields (the Session, ready messages)."""
    trusted = judge.trusted_env({"PYTHONPATH": kernel_source.python_path(ROOT), **(extra or {})})
    launchers = {name: ("nf4kernel", judge.candidate(kernel, extra, sandboxed)) for name, kernel in kernels.items()}
    with contextlib.ExitStack() as stack:
        if baseline:
            home = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"nf4kernel-{baseline}-"))
            launchers[baseline] = (baseline, processes.plain(trusted, cwd=home))
        yield stack.enter_context(judge.session(launchers, setup, trusted))


@dataclass
class Batch:
    """One timed batch: its seconds, each timed call's, which the reference checked, the GPU's state around it."""

    seconds: float
    calls: list
    checked: list
    before: dict
    after: dict


class Rounds:
    """Paired rounds of ``names`` in one session. Nothing runs between one batch and the next, so the
    state after one is the state before the next."""

    def __init__(self, session: judge.Session, names: tuple):
        self.session, self.names, self.done = session, tuple(names), 0
        self.device = session.facts.get("nvml", 0)
        self.state = self.read()

    def read(self) -> dict:
        self.state = gpu_state.snapshot(self.device)
        return self.state

    def next(self, groups: dict, first=None) -> tuple[tuple, dict]:
        """One round: each name's batch of every group (label -> the clock's group), the names in
        turn, the first alternating by round; ``first(name)`` before a name's batches. Returns the
        order and {name: {label: Batch}}."""
        order = self.names if self.done % 2 == 0 else self.names[::-1]
        found = {}
        for name in order:
            if first is not None:
                first(name)
                self.read()
            found[name] = {}
            for label, group in groups.items():
                seconds = self.session.timed_batch(name, group)
                before = self.state
                calls, checked = list(self.session.last_calls), list(self.session.last_checked)
                found[name][label] = Batch(seconds, calls, checked, before, self.read())
        self.done += 1
        return order, found
