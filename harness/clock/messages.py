"""Setup messages between the clock and its processes: one JSON object per message, length
first, with the file descriptors it lends (the regions, ``SCM_RIGHTS``) on its first byte."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import sys
from collections.abc import Callable

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
    from harness.clock.channel import Channel
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
