"""The clock's processes: started with their socket and channel, each on a core of its own where
there are cores enough, frozen whole between their batches (``SIGSTOP`` to the process and every
descendant: its CPU, not its GPU work, so candidates are ended instead: ``judge.Session.enter``),
ended whole.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness.clock import channel as ch


@dataclass
class Process:
    name: str
    popen: subprocess.Popen
    sock: socket.socket
    line: ch.Channel
    frozen: set = field(default_factory=set)
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)  # what its launcher holds open
    said: dict = field(default_factory=dict)  # its ready message, once it gave one

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def ask(self, op: int, a: int = 0, b: int = 0, timeout: float | None = 60.0) -> int:
        try:
            return self.line.ask(op, a, b, alive=self.alive, timeout=timeout)
        except ch.Gone as gone:
            raise ValueError(f"{self.name}: {gone} (exit {self.popen.poll()})") from None

    def receive(self, what: str) -> tuple[dict, list[int]]:
        try:
            message, fds = ch.receive(self.sock)
        except (OSError, ValueError) as error:
            raise ValueError(f"{self.name} ended before {what} (exit {self.popen.poll()}): {error}") from None
        if message.get("error"):
            raise ValueError(f"{self.name} failed before {what}: {message['error']}")
        return message, fds

    def freeze(self) -> None:
        """SIGSTOP to the process and all its descendants, again until no new one shows."""
        while True:
            found = descendants(self.popen.pid) - self.frozen
            if not found:
                return
            for pid in found:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            self.frozen |= found

    def thaw(self) -> None:
        for pid in self.frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self.frozen = set()


def die_with_the_clock() -> None:
    """Run in the child before it executes: SIGKILL when the clock ends, however it ends
    (``PR_SET_PDEATHSIG``, kept across exec; a frozen process too), so none is left behind polling
    or stopped. A sandboxed process has bubblewrap's ``--die-with-parent`` instead."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def descendants(root: int) -> set[int]:
    """``root`` and every process whose parent chain reaches it (``/proc/*/stat``)."""
    parents = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found = {root}
    while more := {pid for pid, parent in parents.items() if parent in found} - found:
        found |= more
    return found


def core_of(cpu: int, sysfs: Path = Path("/sys/devices/system/cpu")) -> tuple[int, int]:
    """The physical core ``cpu`` is a thread of: (package, core id); the CPU alone where sysfs
    does not say."""
    try:
        topology = sysfs / f"cpu{cpu}" / "topology"
        return int((topology / "physical_package_id").read_text()), int((topology / "core_id").read_text())
    except (OSError, ValueError):
        return -1, cpu


def cores(count: int, allowed=None, core=core_of) -> list[int] | None:
    """``count`` of the CPUs this process may run on (the job's share, on a fleet's runner), one for
    each process of a session, the clock's first; None where there are fewer. Each on a physical
    core of its own where there are cores enough: two threads of one core share its pipeline, so
    the clock's spinning thread would slow the host code of the call it times. Otherwise threads of
    one core go to neighbours in the list (the clock beside the reference, the call processes,
    timed one at a time, beside each other)."""
    allowed = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    if len(allowed) < count:
        return None
    core_of_cpu = {cpu: core(cpu) for cpu in allowed}  # sysfs read once a CPU
    first_thread = {}
    for cpu in allowed:
        first_thread.setdefault(core_of_cpu[cpu], cpu)
    if len(first_thread) >= count:
        return sorted(first_thread.values())[:count]
    rank = {key: i for i, key in enumerate(first_thread)}
    return sorted(allowed, key=lambda cpu: (rank[core_of_cpu[cpu]], cpu))[:count]


@contextlib.contextmanager
def pinned(core: int | None):
    """This process on ``core`` alone for the block (a process it starts inherits it), then on the
    cores it had; nothing where ``core`` is None."""
    if core is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def start(name: str, argv_tail: list[str], launch, core: int | None = None) -> Process:
    """``launch(argv, pass_fds, stack) -> Popen`` started on ``python -P -m <module> ... SOCK
    CHANNEL``, on ``core`` alone where one is given (inherited through bubblewrap and exec); what
    the launcher holds open for the process goes on ``stack``, closed when the process ends."""
    mine, theirs = socket.socketpair()
    line = ch.Channel.create()
    argv = [sys.executable, "-P", "-m", *argv_tail, str(theirs.fileno()), str(line.fd)]
    stack = contextlib.ExitStack()
    try:
        with pinned(core):
            popen = launch(argv, (theirs.fileno(), line.fd), stack)
    except BaseException:
        stack.close()
        mine.close()
        os.close(line.fd)
        raise
    finally:
        theirs.close()
    return Process(name, popen, mine, line, stack=stack)


def plain(env: dict, cwd: str | None = None):
    """A launcher for a trusted process: the environment given (the trusted tree's harness on its
    path), started in ``cwd`` (Unsloth writes a compile cache into its working folder)."""

    def launch(argv, fds, stack=None):
        return subprocess.Popen(
            argv, env=env, cwd=cwd, pass_fds=fds, start_new_session=True, preexec_fn=die_with_the_clock
        )

    return launch


def end(process: Process) -> None:
    """Ask it to stop, then end it and everything it started; its launcher's hold closed."""
    if process.sock is None or process.sock.fileno() < 0:
        return  # never started, or ended already
    process.thaw()
    if process.alive():
        with contextlib.suppress(ValueError):
            process.ask(ch.STOP, timeout=10)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.popen.wait(timeout=10)
    for pid in descendants(process.popen.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.popen.wait(timeout=10)
    process.stack.close()
    process.sock.close()
    with contextlib.suppress(OSError):
        os.close(process.line.fd)
