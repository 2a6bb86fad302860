"""harness/core/sandbox.py against a hostile kernel: an ``nf4kernel/__init__.py`` that, on import, takes
each route once found from the measuring process to the verdict (a BASH_ENV line in
$GITHUB_ENV, the trusted harness rewritten, the other kernel's staged copy rewritten, the records in
$RUNNER_TEMP replaced), reaches the network and leaves a process behind. Run plainly, every route
works (so the test can fail); sandboxed, none does."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from harness.core import sandbox, seccomp

if (reason := sandbox.why_not()) is not None:
    if os.environ.get("NF4KERNEL_REQUIRE_SANDBOX"):
        raise RuntimeError(f"NF4KERNEL_REQUIRE_SANDBOX is set and there is no sandbox here: {reason}")
    pytest.skip(f"no sandbox here: {reason}", allow_module_level=True)

HOSTILE = """
import json, os, subprocess, socket
report = {{}}
def attempt(name, action):
    try:
        action()
        report[name] = "done"
    except Exception as error:
        report[name] = f"refused: {{type(error).__name__}}"
def env_line():
    with open({github_env!r}, "a") as f:
        f.write("BASH_ENV={runner_temp}/evil.sh\\n")
attempt("GITHUB_ENV", env_line)
attempt("trusted harness", lambda: open({decision!r}, "a").write("# threshold 0\\n"))
attempt("other kernel", lambda: open({other!r}, "a").write("import time; time.sleep(1)\\n"))
attempt("read record", lambda: open({record!r}).read())
attempt("record", lambda: open({record!r}, "w").write("{{}}"))
def network():
    s = socket.create_connection(("127.0.0.1", {port}), timeout=2)
    s.sendall(b"hello")
attempt("network", network)
def leave():
    subprocess.Popen(["sh", "-c", "sleep 30 & echo $! > {pidfile}"], start_new_session=True).wait()
attempt("left behind", leave)
print("HOSTILE " + json.dumps(report), flush=True)
"""
ROUTES = ("GITHUB_ENV", "trusted harness", "other kernel", "record", "read record", "network", "left behind")


@pytest.fixture
def runner(tmp_path, monkeypatch):
    """A runner's layout: the workspace with trusted/ and the two staged kernels' folders, and
    $RUNNER_TEMP with a record and the file-command file $GITHUB_ENV."""
    workspace, temp = tmp_path / "_work" / "repo" / "repo", tmp_path / "_work" / "_temp"
    trusted = workspace / "trusted"
    (trusted / "harness" / "gate").mkdir(parents=True)
    (trusted / "harness" / "gate" / "decision.py").write_text("THRESHOLD = 1.15\n")
    (temp / "_runner_file_commands").mkdir(parents=True)
    github_env = temp / "_runner_file_commands" / "set_env_1"
    github_env.write_text("")
    record = temp / "gate-base.json"
    record.write_text('{"base": true}')
    other = tmp_path / "stage-base" / "nf4kernel" / "__init__.py"
    other.parent.mkdir(parents=True)
    other.write_text("")
    for name, value in (("GITHUB_WORKSPACE", workspace), ("RUNNER_TEMP", temp), ("GITHUB_ENV", github_env)):
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv("GITHUB_TOKEN", "a-token")
    return {"trusted": trusted, "temp": temp, "github_env": github_env, "record": record, "other": other}


@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    heard = []

    def serve():
        try:
            while True:
                conn, _ = server.accept()
                heard.append(conn.recv(16))
                conn.close()
        except OSError:
            pass

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], heard
    server.close()


def hostile_kernel(tmp_path: Path, runner: dict, port: int) -> Path:
    staged = tmp_path / "stage-head"
    (staged / "nf4kernel").mkdir(parents=True)
    code = HOSTILE.format(
        github_env=str(runner["github_env"]),
        runner_temp=str(runner["temp"]),
        decision=str(runner["trusted"] / "harness" / "gate" / "decision.py"),
        other=str(runner["other"]),
        record=str(runner["record"]),
        port=port,
        pidfile="/tmp/left.pid",  # the sandbox's /tmp is its own: the file goes with it
    )
    (staged / "nf4kernel" / "__init__.py").write_text(code)
    return staged


def report(done: subprocess.CompletedProcess) -> dict:
    line = next(line for line in done.stdout.splitlines() if line.startswith("HOSTILE "))
    return json.loads(line.removeprefix("HOSTILE "))


def import_it(staged: Path, sandboxed: bool, runner: dict) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-P", "-c", "import nf4kernel"]
    env = {"PYTHONPATH": str(staged)}
    if sandboxed:
        return sandbox.run(argv, timeout=60, read=[staged, runner["trusted"]], cwd=staged, env=env)
    return subprocess.run(argv, cwd=staged, env={**os.environ, **env}, capture_output=True, text=True, timeout=60)


def test_plainly_every_route_of_a_hostile_kernel_works(tmp_path, runner, listener):
    """What the sandbox takes away: in a plain process (the job's user, as before) every route works."""
    port, heard = listener
    done = import_it(hostile_kernel(tmp_path, runner, port), sandboxed=False, runner=runner)
    assert report(done) == dict.fromkeys(ROUTES, "done"), done.stderr
    assert "BASH_ENV=" in runner["github_env"].read_text()
    assert heard == [b"hello"]
    pid = int(Path("/tmp/left.pid").read_text())
    os.kill(pid, 0)  # still running after the process that started it ended
    os.kill(pid, 9)


def test_sandboxed_no_route_of_a_hostile_kernel_works(tmp_path, runner, listener):
    port, heard = listener
    before = {key: Path(runner[key]).read_text() for key in ("github_env", "record", "other")}
    decision = (runner["trusted"] / "harness" / "gate" / "decision.py").read_text()
    done = import_it(hostile_kernel(tmp_path, runner, port), sandboxed=True, runner=runner)
    found = report(done)
    # Writing a record "works" into the empty private folder over $RUNNER_TEMP: the real one is untouched.
    refused = [route for route in ROUTES if route not in ("record", "left behind")]
    assert {route: found[route][:7] for route in refused} == dict.fromkeys(refused, "refused"), found
    assert {key: Path(runner[key]).read_text() for key in ("github_env", "record", "other")} == before
    assert (runner["trusted"] / "harness" / "gate" / "decision.py").read_text() == decision
    time.sleep(0.5)
    assert heard == []
    # The process it left behind went with the sandbox (its PID namespace), and its pid file with its /tmp.
    assert not Path("/tmp/left.pid").exists() or not _alive(int(Path("/tmp/left.pid").read_text()))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return "sleep" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")


def test_the_sandbox_passes_on_nothing_of_the_jobs_environment(runner):
    done = sandbox.run(
        [sys.executable, "-P", "-c", "import os, json; print(json.dumps(sorted(os.environ)))"], timeout=60
    )
    names = json.loads(done.stdout)
    assert not [n for n in names if n.startswith(("GITHUB_", "RUNNER_", "ACTIONS_")) or n in ("BASH_ENV", "GH_TOKEN")]
    assert "PATH" in names and done.returncode == 0


def test_the_command_line_tool_runs_a_command_sandboxed_and_keeps_its_exit_code(tmp_path, runner):
    argv = [sys.executable, "-m", "harness", "sandbox", "--", sys.executable, "-P", "-c", "import sys; sys.exit(7)"]
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=root)
    assert done.returncode == 7, done.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "harness", "sandbox", "--env", "NOEQUALS", "--", "true"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "NAME=VALUE" in bad.stderr and "Traceback" not in bad.stderr


CACHE_WRITER = """
import os, pathlib
own, other = pathlib.Path(os.environ["OWN"]), pathlib.Path(os.environ["OTHER"])
print("found", sorted(p.name for p in own.iterdir()))
(own / "compiled.bin").write_text("compiled")
for target in (other / "compiled.bin", other.parent / "planted.bin"):
    try:
        target.write_text("planted")
        print("wrote", target.name)
    except OSError:
        print("refused", target.name)
"""


def test_a_kernel_keeps_its_own_compile_cache_from_run_to_run_and_reaches_no_other(tmp_path, runner, monkeypatch):
    """The caches live under the job's $TRITON_CACHE_DIR (in $RUNNER_TEMP, hidden from the sandbox):
    a commit's folder is bound read-write into that commit's sandboxes only, so its second run finds
    what its first compiled (warm, as an unsandboxed run is) and no run can touch another commit's."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(runner["temp"] / "triton-cache-gate"))
    own, other = sandbox.kernel_cache("a" * 40), sandbox.kernel_cache("b" * 40)
    assert own == runner["temp"] / "triton-cache-gate" / "sandboxed" / ("a" * 40)
    other.mkdir(parents=True)
    (other / "compiled.bin").write_text("the base's")
    argv = [sys.executable, "-P", "-c", CACHE_WRITER]
    runs = [
        sandbox.run(argv, timeout=60, write=[own], env={"OWN": str(own), "OTHER": str(other)}).stdout for _ in range(2)
    ]
    # Beside its own folder it sees only the empty private folders bubblewrap made to hold the mount:
    # another commit's cache isn't there, and what it writes there goes with the sandbox.
    assert runs[0].splitlines()[:2] == ["found []", "refused compiled.bin"]
    assert runs[1].splitlines()[0] == "found ['compiled.bin']"
    assert (other / "compiled.bin").read_text() == "the base's" and not (other.parent / "planted.bin").exists()


@pytest.mark.parametrize("commit", ["a" * 12, "HEAD", "../" + "a" * 37, "A" * 40, None])
def test_a_kernel_cache_is_named_only_by_a_full_commit_hash(commit):
    with pytest.raises(ValueError, match="full commit hash"):
        sandbox.kernel_cache(commit)


# The routes the sandbox's review found, each against the view the sandbox had before (``/`` bound read-only with the
# job's places hidden behind empty folders, bubblewrap allowed a nested user namespace), built here
# as it was, and against today's allow-list. The JIT loop's layout: the runner's folder holds the
# workspace, beside the job's home and $TMPDIR, outside /tmp (which both views hide).
def todays_view_before(argv: list[str], env: dict) -> list[str]:
    hidden = ["/tmp", "/run", env["HOME"], env["RUNNER_TEMP"], env["GITHUB_WORKSPACE"]]
    hidden.append(str(Path(env["GITHUB_WORKSPACE"]).parent))
    line = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    line += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for place in hidden:
        line += ["--tmpfs", place]
    for path in sandbox.python_paths(sys.executable, []):  # the Python shown again, as it was
        line += ["--ro-bind", path, path]
    return [*line, "--", *argv]


@pytest.fixture
def jit_job(monkeypatch):
    """/var/tmp/…/{runner/{.credentials,_work/repo/repo,_work/_temp}, home, tmp/nf4kernel-base/…}."""
    root = Path(tempfile.mkdtemp(prefix="nf4kernel-jit-", dir="/var/tmp"))
    runner, home, tmp = root / "runner", root / "home", root / "tmp"
    workspace, temp = runner / "_work" / "repo" / "repo", runner / "_work" / "_temp"
    for folder in (workspace, temp, home, tmp / "nf4kernel-base" / "nf4kernel"):
        folder.mkdir(parents=True)
    (runner / ".credentials").write_text("runner-credentials-secret\n")
    (tmp / "nf4kernel-base" / "nf4kernel" / "__init__.py").write_text("# the base's staged copy\n")
    env = {"HOME": str(home), "TMPDIR": str(tmp), "RUNNER_TEMP": str(temp), "GITHUB_WORKSPACE": str(workspace)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    yield {"root": root, "env": env}
    subprocess.run(["rm", "-rf", str(root)], check=False)


READ_ROUTES = "for f in {credentials} {base}; do cat $f 2>/dev/null || echo refused; done"


def test_before_the_allow_list_a_job_read_the_runners_credentials_and_its_tmpdir_now_neither(jit_job):
    root = jit_job["root"]
    script = READ_ROUTES.format(
        credentials=root / "runner" / ".credentials", base=root / "tmp" / "nf4kernel-base" / "nf4kernel" / "__init__.py"
    )
    before = subprocess.run(
        todays_view_before(["sh", "-c", script], jit_job["env"]), capture_output=True, text=True, timeout=60
    )
    assert before.stdout.splitlines() == ["runner-credentials-secret", "# the base's staged copy"], before.stderr
    now = sandbox.run(["sh", "-c", script], timeout=60)
    assert now.stdout.splitlines() == ["refused", "refused"]


@pytest.mark.parametrize("name", ["runner", "tmp", "home", "root"])
def test_a_folder_to_show_that_holds_the_jobs_places_is_refused(jit_job, name):
    folder = jit_job["root"] if name == "root" else jit_job["root"] / name
    with pytest.raises(sandbox.Unavailable, match="which holds"):
        sandbox.command(["true"], read=[folder])
    with pytest.raises(sandbox.Unavailable, match="which holds"):
        sandbox.command(["true"], read=[Path("/")])


NESTED = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000 | 0x00020000) == 0:  # CLONE_NEWUSER | CLONE_NEWNS
    caps = [line for line in open("/proc/self/status") if line.startswith("CapEff")][0].split()[1]
    mounted = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) == 0
    print(f"nested user namespace: CapEff {caps}, tmpfs mounted: {mounted}")
else:
    print(f"refused: {os.strerror(ctypes.get_errno())}")
"""


def test_before_a_sandboxed_process_regained_every_capability_in_a_nested_user_namespace_now_it_cant(jit_job):
    argv = [sys.executable, "-c", NESTED]
    before = subprocess.run(todays_view_before(argv, jit_job["env"]), capture_output=True, text=True, timeout=60)
    assert before.stdout.strip() == "nested user namespace: CapEff 000001ffffffffff, tmpfs mounted: True", before.stderr
    now = sandbox.run(argv, timeout=60)
    assert now.stdout.strip() == "refused: Operation not permitted", now.stdout  # the filter's EPERM


def test_the_filter_alone_refuses_a_nested_user_namespace_where_disable_userns_cant_run(monkeypatch):
    """Under gVisor (no /proc/sys/user) the sandbox runs without --disable-userns: its filter refuses
    unshare and clone with CLONE_NEWUSER, and clone3, whose flags it can't read."""
    monkeypatch.setattr(sandbox, "USERNS_LIMIT", "/proc/sys/user/as-under-gvisor")
    assert "--disable-userns" not in sandbox.namespaces()
    assert sandbox.why_not() is None
    assert sandbox.run([sys.executable, "-c", NESTED], timeout=60).stdout.strip() == "refused: Operation not permitted"
    calls = (
        "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True)\n"
        "def errno(result): return os.strerror(ctypes.get_errno()) if result == -1 else 'done'\n"
        "print(errno(libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)))\n"  # clone(CLONE_NEWUSER | SIGCHLD)
        "print(errno(libc.syscall(435, 0, 0)))\n"  # clone3
        "print(errno(libc.syscall(308, 0, 0)))\n"  # setns
        "print(errno(libc.unshare(0x00020000)))"  # CLONE_NEWNS alone: the filter lets it by, no capability stops it
    )
    lines = sandbox.run([sys.executable, "-c", calls], timeout=60).stdout.splitlines()
    refused, missing = "Operation not permitted", "Function not implemented"
    assert lines == [refused, missing, refused, refused]


def test_without_the_filter_or_the_limit_there_is_no_sandbox(monkeypatch):
    """Fail closed: where nothing would refuse a nested user namespace, why_not says so."""
    monkeypatch.setattr(sandbox, "USERNS_LIMIT", "/proc/sys/user/as-under-gvisor")
    monkeypatch.setattr(sandbox.seccomp, "supported", lambda: False)
    assert "a nested user namespace is not refused" in sandbox.why_not()


def test_the_filter_is_well_formed():
    program = seccomp.program()
    assert len(program) % 8 == 0
    entries = [struct.unpack("<HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    for at, (code, jt, jf, _) in enumerate(entries):
        if code & 0x07 == 0x05:  # a jump: forward, and within the program
            assert at + 1 + max(jt, jf) < len(entries), f"entry {at} jumps past the end"
    assert entries[-1][0] == seccomp.RET_K and entries[0] == (seccomp.LD_W_ABS, 0, 0, seccomp.ARCH)


def test_what_the_sandbox_prints_reaches_the_log_behind_stop_commands_with_a_nonce_it_never_sees(capfd):
    """A workflow command the child prints (to either stream) is between ``::stop-commands::N`` and
    ``::N::`` on this process's stdout; N is in neither its environment nor its arguments."""
    child = "import os, sys; print('::add-mask::FAIL'); print('::error::x', file=sys.stderr)"
    child += "; print(dict(os.environ), sys.argv)"
    sandbox.run([sys.executable, "-c", child], timeout=60, stdout=None)
    lines = capfd.readouterr().out.splitlines()
    nonce = lines[0].removeprefix("::stop-commands::")
    assert len(nonce) == 32 and lines[-1] == f"::{nonce}::", lines
    assert {"::add-mask::FAIL", "::error::x"} <= set(lines[1:-1])
    assert not any(nonce in line for line in lines[1:-1])
    # Output read back through a pipe never reaches the log: no marker is printed for it.
    done = sandbox.run([sys.executable, "-c", "print('::add-mask::FAIL')"], timeout=60, stderr=subprocess.PIPE)
    assert done.stdout == "::add-mask::FAIL\n" and capfd.readouterr().out == ""
