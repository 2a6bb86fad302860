"""A server run in the foreground until it ends or this process is told to stop (SIGINT or SIGTERM,
sent here or to the server itself), then stopped and waited for: no server is left listening, and
the exit status is the one a person or nox expects (``serve``; the site's preview runs asv's)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOPPED_BY_A_SIGNAL = (-signal.SIGINT, -signal.SIGTERM)  # Popen's returncode of a child those ended
POLL_S = 0.1
STOP_WAIT_S = 10


def serve(command: list[str], cwd: Path, env: dict) -> int:
    """Run ``command``, a server, until it ends or SIGINT or SIGTERM reaches this process; then stop
    it and wait for it. Either signal is how a server is stopped, sent here or to the server itself:
    0. Any other end of the server: 1.

    Unhandled, SIGTERM would kill this process and leave the server listening. And a server ended by
    SIGTERM has Popen's returncode -15: returned as it is, ``SystemExit(-15)`` is exit status 241
    (-15 modulo 256), which nox passes on."""
    told_to_stop = []

    def take_note(signum, frame):
        told_to_stop.append(signum)

    # The handler only takes note: one that raised could interrupt Popen after the server had started,
    # leaving it running and unknown here. The loop below looks every POLL_S.
    previous = {number: signal.signal(number, take_note) for number in STOP_SIGNALS}
    try:
        print("+ python", " ".join(command[1:]), flush=True)
        server = subprocess.Popen(command, cwd=cwd, env=env)
        while server.poll() is None and not told_to_stop:
            time.sleep(POLL_S)
        if told_to_stop:
            stop(server)
            return 0
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return 0 if server.returncode in (0, *STOPPED_BY_A_SIGNAL) else 1


def stop(server: subprocess.Popen) -> None:
    """SIGTERM (an HTTP server has nothing to save), then SIGKILL if it is still there STOP_WAIT_S later."""
    server.terminate()
    try:
        server.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
