"""``python -m tools.history preview`` (``nox -s preview``) serves the site with asv's own server, a
process of its own, until it is stopped. SIGINT (Ctrl-C) and SIGTERM (a service manager, ``kill``,
``timeout``) are both how it is stopped: exit 0, no traceback, asv's server gone with it, whether the
signal reached this process, the server (the process listening, the one a person finds), or both."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds asv's server through /proc")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def config(tmp_path) -> Path:
    """A built site, as small as one: asv's server serves whatever its html_dir holds."""
    (tmp_path / "html").mkdir()
    (tmp_path / "html" / "index.html").write_text("<html><head></head><body>the site</body></html>")
    conf = {"version": 1, "repo": str(ROOT), "html_dir": str(tmp_path / "html"), "results_dir": str(tmp_path)}
    (tmp_path / "asv.conf.json").write_text(json.dumps(conf))
    return tmp_path / "asv.conf.json"


def children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def wait_until_served(port: int, preview: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert preview.poll() is None, f"preview ended with exit {preview.returncode} before serving"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=5) as answer:
                if b"the site" in answer.read():
                    return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"nothing served on port {port} within 60 s")


def running(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def end_server(pid: int, port: int) -> None:
    """Leave no server behind where the preview under test did; a process by that id is killed only
    while it is still this test's server (its command names the port)."""
    try:
        if f"\0{port}\0".encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGKILL)
    except (FileNotFoundError, ProcessLookupError):
        pass


@pytest.mark.parametrize(
    "stop,to",
    [
        (signal.SIGTERM, "the preview"),
        (signal.SIGTERM, "asv's server"),
        (signal.SIGTERM, "both"),
        (signal.SIGINT, "both"),  # Ctrl-C: the terminal signals the whole foreground group
    ],
    ids=["SIGTERM-to-the-preview", "SIGTERM-to-asvs-server", "SIGTERM-to-both", "SIGINT-to-both"],
)
def test_a_stopped_preview_exits_0_and_leaves_nothing_listening(config, stop, to, tmp_path):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "tools.history", "preview", "--config", str(config), "--port", str(port)]
    # Its output to a file, not a pipe: a server left behind would hold a pipe open, and reading it
    # would wait for that server. A group of its own: "both" signals it as a terminal or `timeout`
    # would, and pytest stays out of it.
    output = tmp_path / "preview.out"
    with output.open("w") as out:
        preview = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out, start_new_session=True)
    servers = []
    try:
        wait_until_served(port, preview)
        servers = children(preview.pid)
        assert len(servers) == 1, servers
        if to == "the preview":
            preview.send_signal(stop)
        elif to == "asv's server":
            os.kill(servers[0], stop)
        else:
            os.killpg(preview.pid, stop)
        preview.wait(timeout=60)
        left = {"listening on the port": listening(port), "asv's server running": running(servers[0])}
    finally:
        if preview.poll() is None:
            preview.kill()
            preview.wait()
        for pid in servers:
            end_server(pid, port)
    said = output.read_text()
    assert not any(left.values()), left
    assert preview.returncode == 0, said
    assert "Traceback" not in said, said


def descendants(pid: int) -> list[int]:
    found = []
    for child in children(pid):
        found += [child, *descendants(child)]
    return found


def test_sigterm_to_nox_alone_stops_the_preview_session(config, tmp_path):
    """`nox -s preview` stopped by SIGTERM sent to nox only (a service manager, `kill <pid>`): nox hands
    it on as an interrupt, the server stops, and nox exits 0 (nox's own default ends at once, 143,
    and leaves the server running)."""
    port = free_port()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    command = [sys.executable, "-m", "nox", "--no-venv", "-f", str(ROOT / "noxfile.py"), "-s", "preview", "--"]
    command += ["--config", str(config), "--port", str(port)]
    output = tmp_path / "nox.out"
    with output.open("w") as out:
        nox = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out, start_new_session=True)
    below = []
    try:
        wait_until_served(port, nox)
        below = descendants(nox.pid)
        nox.send_signal(signal.SIGTERM)
        nox.wait(timeout=60)
        time.sleep(0.5)
        left = {"listening on the port": listening(port), "still running": [p for p in below if running(p)]}
    finally:
        if nox.poll() is None:
            nox.kill()
            nox.wait()
        for pid in below:
            end_server(pid, port)
    said = output.read_text()
    assert not left["listening on the port"] and not left["still running"], (left, said)
    assert nox.returncode == 0, said
