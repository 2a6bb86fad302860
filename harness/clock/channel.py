"""The clock's line to its processes. Setup goes over a socket: one JSON object per message, length
first, with the file descriptors it lends (the regions, ``SCM_RIGHTS``) on its first byte. Calls go
over a ``Channel``: two 64-bit words in a shared ``memfd``, one written by each side with one aligned
8-byte store. Both sides spin on the other's word, so a call's go-to-done costs about a microsecond,
not a socket's wake-up; a long wait yields the core, then sleeps.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import socket
import struct
import sys
import time
from collections.abc import Callable

SIZE = 16
TIGHT = 20_000  # spins before yielding: about a millisecond
YIELDING_S = 0.1  # then yield the core for this long, then sleep between looks
SLEEP_S = 0.0002

# Operations (the command word's byte 3).
CALL = 1  # a = weight, b = slot: dequantize weight a into slot b
CHECK = 2  # reference: is slot b exactly weight a's output? 1 yes, 2 no
POISON = 3  # reference: fill every output slot with 0xFF (NaN in every float dtype)
PROBE = 4  # reference: time its fixed device copy; the answer is microseconds
STOP = 5

YES, NO = 1, 2


class Gone(RuntimeError):
    """The other side died, or did not answer in time."""


def pack(seq: int, op: int, a: int = 0, b: int = 0) -> int:
    if not (0 <= a < 1 << 12 and 0 <= b < 1 << 12):
        raise ValueError(f"operands {a}, {b} do not fit 12 bits")
    return (seq & 0xFFFFFFFF) << 32 | op << 24 | a << 12 | b


def unpack(word: int) -> tuple[int, int, int, int]:
    return word >> 32, word >> 24 & 0xFF, word >> 12 & 0xFFF, word & 0xFFF


def wait(ready: Callable[[], bool], alive: Callable[[], bool] = lambda: True, timeout: float | None = None) -> None:
    """Until ``ready()``; Gone when ``alive()`` turns false or ``timeout`` seconds pass."""
    for _ in range(TIGHT):
        if ready():
            return
    start = time.monotonic()
    looks = 0
    while not ready():
        looks += 1
        waited = time.monotonic() - start
        if looks % 64 == 0:
            if not alive():
                raise Gone("the other side ended")
            if timeout is not None and waited > timeout:
                raise Gone(f"no answer in {timeout:.0f} s")
        if waited < YIELDING_S:
            os.sched_yield()
        else:
            time.sleep(SLEEP_S)


class Channel:
    def __init__(self, fd: int):
        self.fd = fd
        self._memory = mmap.mmap(fd, SIZE)
        self.words = memoryview(self._memory).cast("Q")
        self.seq = 0

    @classmethod
    def create(cls) -> Channel:
        fd = os.memfd_create("nf4kernel-channel")
        os.ftruncate(fd, SIZE)
        return cls(fd)

    # --- the clock's side -------------------------------------------------------------------------

    def send(self, op: int, a: int = 0, b: int = 0) -> None:
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        self.words[0] = pack(self.seq, op, a, b)

    def answered(self) -> bool:
        return self.words[1] >> 32 == self.seq

    def answer(self, alive: Callable[[], bool], timeout: float | None) -> int:
        wait(self.answered, alive, timeout)
        return self.words[1] & 0xFFFFFFFF

    def ask(self, op: int, a: int = 0, b: int = 0, *, alive=lambda: True, timeout: float | None = None) -> int:
        self.send(op, a, b)
        return self.answer(alive, timeout)

    # --- the worker's side ------------------------------------------------------------------------

    def next(self) -> tuple[int, int, int]:
        """The next command (op, a, b), waiting for it without end."""
        words = self.words
        wait(lambda: words[0] >> 32 != self.seq)
        seq, op, a, b = unpack(words[0])
        self.seq = seq
        return op, a, b

    def reply(self, value: int) -> None:
        self.words[1] = (self.seq & 0xFFFFFFFF) << 32 | (value & 0xFFFFFFFF)


# --- setup messages, on the socket ---------------------------------------------------------------

MAX_BYTES = 1 << 24
MAX_FDS = 8


def send(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    body = json.dumps(message).encode()
    header = struct.pack("!I", len(body))
    if fds:
        socket.send_fds(sock, [header], list(fds))
    else:
        sock.sendall(header)
    sock.sendall(body)


def receive(sock: socket.socket) -> tuple[dict, list[int]]:
    """The next message and the descriptors that came with it; ValueError where the other side
    closed or sent no such message."""
    header, fds, _, _ = socket.recv_fds(sock, 4, MAX_FDS)
    if len(header) < 4:
        header += _exactly(sock, 4 - len(header))
    (size,) = struct.unpack("!I", header)
    if size > MAX_BYTES:
        raise ValueError(f"a setup message of {size} bytes: more than any this protocol sends")
    try:
        return json.loads(_exactly(sock, size)), list(fds)
    except ValueError:
        raise ValueError("a setup message that is not JSON") from None


def _exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ValueError("the other side closed the connection mid-message")
        data += chunk
    return data


def said(error: BaseException, limit: int = 300) -> str:
    """An exception in one capped line, for a setup message (the traceback stays in the log)."""
    first = (str(error).strip().splitlines() or [""])[0]
    text = f"{type(error).__name__}: {first}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def serve_clock(prog: str, usage: str, fds: list[str], serve: Callable, ok: bool = True) -> int:
    """The entry of a process the clock starts (the reference, a call process): ``serve(sock,
    line)`` on the socket and channel whose descriptors ``fds`` name. A wrong start (``ok`` false,
    or no two descriptors of the clock's) is one line and exit 2; a failure while serving is told
    to the clock in one line, then raised for the log."""
    from harness.clock.spin import spin_while_waiting

    if not ok or len(fds) != 2 or not all(w.isdigit() for w in fds):
        print(f"usage: python -P -m {prog} {usage} (started by the clock; exit 2)", file=sys.stderr)
        return 2
    try:
        sock = socket.socket(fileno=int(fds[0]))
        line = Channel(int(fds[1]))
    except (OSError, ValueError) as error:
        print(f"{prog}: descriptors {fds[0]}, {fds[1]} are not the clock's: {error} (exit 2)", file=sys.stderr)
        return 2
    try:
        spin_while_waiting()  # before serve() imports torch or an implementation
        return serve(sock, line)
    except Exception as error:
        with contextlib.suppress(OSError):
            send(sock, {"error": said(error)})
        raise
