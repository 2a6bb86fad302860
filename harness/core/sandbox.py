"""The sandbox every process that runs a pull request's code runs in: bubblewrap, showing an allow-list.

    python -m harness sandbox [--read PATH]... [--write PATH]... [--cwd PATH]
                                   [--env NAME=VALUE]... -- COMMAND...

Read-only the system, the Python and the ``--read`` paths; read-write the ``--write`` paths and a
private ``/tmp``; no network, no nested user namespace (``seccomp.py``), nothing of the job's
environment; its output reaches the log only behind ``::stop-commands::<nonce>`` (``run``). What it
binds and why, and why bubblewrap: docs/gpu-approval.md, "Who judges".

Exit: the command's own code; 2 for bad arguments; 126 when bubblewrap is missing or can't make
its namespaces here (the line says which).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.core import command_output, seccomp

BWRAP = "bwrap"
EXIT_NO_SANDBOX = 126
# Kept from the caller's environment: what finds programs, speaks the locale and picks the GPU.
KEPT = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LD_LIBRARY_PATH")
KEPT_PREFIXES = ("NVIDIA_",)
HOME = "/tmp/home"  # a private home: a cache written there goes with the sandbox
# The system, read-only: programs, libraries (the NVIDIA driver's, under /usr on the GPU image and in
# a container), the compiler and headers Triton builds its launcher with; /sys for the CPU and PCI
# topology that CUDA and torch read. Where /bin, /lib... are merged-/usr links, the links themselves.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys")
# Of /etc, only what is read to run a program: the dynamic loader's cache and configuration (Triton
# finds libcuda with `ldconfig -p`), the alternatives' links (`cc`), users and groups (Python's
# getpass, behind torch's cache folders), the name-service switch and the time zone.
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group", "nsswitch.conf", "localtime")


COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


class Unavailable(RuntimeError):
    """No sandbox here, or not with that view: the message says why, in one line."""


# Where this kernel keeps a limit per user namespace, which --disable-userns lowers inside (gVisor has none).
USERNS_LIMIT = "/proc/sys/user/max_user_namespaces"
# Run inside by why_not: exit 0 only if a nested user namespace is refused.
NESTED_PROBE = f"import ctypes, sys; sys.exit(3 if ctypes.CDLL(None).unshare({seccomp.CLONE_NEWUSER}) == 0 else 0)"


def namespaces() -> list[str]:
    # --unshare-user, explicitly: --disable-userns needs it, and --unshare-all only tries one as root.
    line = ["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if os.path.exists(USERNS_LIMIT):
        line += ["--disable-userns", "--assert-userns-disabled"]
    return line


@contextlib.contextmanager
def filter_fd():
    """The filter's descriptor (``seccomp.memfd``) for a bubblewrap started inside, to hand it
    (``pass_fds``); None where the ABI has no filter."""
    fd = seccomp.memfd() if seccomp.supported() else None
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def why_not() -> str | None:
    """None where a sandbox can be made here; else why not, in one line."""
    binary = shutil.which(BWRAP)
    if binary is None:
        return f"{BWRAP} (Debian's bubblewrap) is not on the PATH"
    try:
        done = run([sys.executable, "-c", NESTED_PROBE], timeout=30, stderr=subprocess.PIPE)
    except (OSError, subprocess.TimeoutExpired, Unavailable) as error:
        return f"{binary} could not be run: {error}"
    if done.returncode == 3:
        return "a nested user namespace is not refused inside it here (no filter for this ABI, no --disable-userns)"
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return f"{binary} can't make its namespaces here: {why}"
    return None


def kernel_cache(commit: str) -> Path:
    """Where the sandboxes of one kernel commit keep their compile caches from run to run:
    ``sandboxed/<commit>`` under the caller's Triton cache (``$TRITON_CACHE_DIR``, else Triton's
    default, ``~/.triton/cache``). A sandbox is given its own commit's folder read-write and no other,
    so a kernel reaches only what it compiled itself, and a second measurement of a commit starts
    warm, as an unsandboxed one does: a cold cache in every run cost the gate's measurement about 5 s
    of 32 on an H200 (benchmarks/results/sandbox-overhead). ValueError for anything but a full hash."""
    if not isinstance(commit, str) or not COMMIT.fullmatch(commit):
        raise ValueError(f"a kernel's cache is named by its full commit hash, not {commit!r}")
    root = os.environ.get("TRITON_CACHE_DIR") or os.path.join(Path.home(), ".triton", "cache")
    return Path(root) / "sandboxed" / commit


def cache_env(cache: Path) -> dict:
    """The variables that point Triton's and Inductor's caches into ``cache`` (``kernel_cache``)."""
    return {"TRITON_CACHE_DIR": str(cache / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor")}


def system_view() -> list[str]:
    """bubblewrap's arguments for ``SYSTEM`` and ``ETC``: a link as a link, a folder or file bound
    read-only, what this machine lacks left out."""
    line = []
    for path in [*SYSTEM, *(f"/etc/{name}" for name in ETC)]:
        if os.path.islink(path):
            line += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            line += ["--ro-bind", path, path]
    return line


def private_places(env: dict) -> list[str]:
    """What no path shown may contain: the job's home (the runner's own folder under ARC), its
    ``$TMPDIR`` (another kernel's staged copy), ``$RUNNER_TEMP`` (the records, the runner's
    file-command files), the folder of the job's workspace, the tool cache; and ``/``."""
    places = [env.get(name, "") for name in ("HOME", "TMPDIR", "RUNNER_TEMP", "RUNNER_WORKSPACE", "RUNNER_TOOL_CACHE")]
    places.append(tempfile.gettempdir())
    if env.get("GITHUB_WORKSPACE"):
        places.append(str(Path(env["GITHUB_WORKSPACE"]).parent))
    return sorted({os.path.realpath(p) for p in places if p} | {"/"})


def check_shown(paths: list[str], env: dict) -> None:
    """Unavailable if a path to show is a private place or holds one (``private_places``)."""
    private = private_places(env)
    for path in paths:
        inside = path.rstrip(os.sep) + os.sep
        for place in private:
            if place == path or place.startswith(inside):
                raise Unavailable(f"the sandbox would show {path}, which holds {place}: name a folder inside it")


def python_paths(python: str, exclude: list[Path]) -> list[str]:
    """The folders ``python`` imports from (its prefixes and its path), less those inside an
    excluded folder: shown read-only."""
    code = "import sys, json; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path]))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    done = subprocess.run([python, "-P", "-c", code], capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise Unavailable(f"{python} could not list its path: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    out = []
    excluded = [os.path.realpath(p) for p in exclude]
    for entry in json.loads(done.stdout):
        if not entry or not os.path.exists(entry):
            continue
        real = os.path.realpath(entry)
        if any(real == e or real.startswith(e + os.sep) for e in excluded):
            continue
        if any(real == s or real.startswith(s + os.sep) for s in SYSTEM):
            continue  # shown already
        out.append(real)
    return sorted(set(out))


def environment(env: dict, extra: dict) -> dict:
    kept = {k: v for k, v in env.items() if k in KEPT or k.startswith(KEPT_PREFIXES)}
    return {**kept, "HOME": HOME, "TMPDIR": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", **extra}


def command(
    argv: list[str],
    *,
    read: list[Path] = (),
    write: list[Path] = (),
    exclude: list[Path] = (),
    cwd: Path | None = None,
    env: dict | None = None,
    python: str = sys.executable,
    seccomp_fd: int | None = None,
) -> tuple[list[str], dict]:
    """The bubblewrap command line that runs ``argv`` sandboxed, and the environment to start it
    with (bubblewrap passes it on; ``--clearenv`` is not used so the variables stay off its command
    line, where ``ps`` would show them); ``seccomp_fd`` is the filter's descriptor (``filter_fd``), for
    the caller to pass to bubblewrap. Unavailable if a path to show would show a private place."""
    binary = shutil.which(BWRAP)
    if binary is None:
        raise Unavailable(f"{BWRAP} (Debian's bubblewrap) is not on the PATH")
    outside = dict(os.environ)
    shown = python_paths(python, list(exclude)) + [os.path.realpath(p) for p in read]
    writable = [os.path.realpath(p) for p in write]
    check_shown([*shown, *writable], outside)
    line = [binary, *namespaces()]
    if seccomp_fd is not None:
        line += ["--seccomp", str(seccomp_fd)]
    line += system_view()
    line += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    line += ["--tmpfs", "/dev/shm"]  # CUDA's and torch's shared memory: private
    for node in sorted(glob.glob("/dev/nvidia*")):
        line += ["--dev-bind", node, node]
    for path in sorted(set(shown), key=lambda p: (p.count(os.sep), p)):  # parents before children
        line += ["--ro-bind", path, path]
    for path in writable:
        os.makedirs(path, exist_ok=True)
        line += ["--bind", path, path]
    line += ["--dir", HOME, "--chdir", os.path.realpath(cwd) if cwd else "/tmp"]
    return [*line, "--", *argv], environment(outside, dict(env or {}))


def run(
    argv: list[str], *, timeout: float | None, stdout=subprocess.PIPE, stderr=None, **view
) -> subprocess.CompletedProcess:
    """``argv`` sandboxed (``command``'s view); its output as text. What it prints to a stream not
    piped here (``None``) goes to this process's stdout, one stream, between ``::stop-commands::``
    and its resume line, under a nonce it never sees: the job's runner acts on no workflow command it
    prints. On timeout the whole sandbox goes (its namespace's first process is killed, and with it
    every process it started)."""
    with started(argv, stdout=stdout, stderr=stderr, **view) as process:
        out, err = process.communicate(timeout=timeout)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


@contextlib.contextmanager
def started(argv: list[str], *, pass_fds: tuple[int, ...] = (), stdout=None, stderr=None, **view):
    """``argv`` sandboxed as ``run`` does, not waited for: the Popen, for the length of the block,
    handed ``pass_fds`` besides the filter's (the clock's socket and channel). Its output goes to
    this process's stdout behind ``::stop-commands::`` until the block ends; then it is killed
    with everything it started, if it is still running."""
    with filter_fd() as fd:
        line, env = command(argv, seccomp_fd=fd, **view)
        with _commands_stopped(stdout is None or stderr is None) as to_log:
            with subprocess.Popen(
                line,
                env=env,
                stdout=to_log if stdout is None else stdout,
                stderr=to_log if stderr is None else stderr,
                text=True,
                start_new_session=True,
                pass_fds=(*(() if fd is None else (fd,)), *pass_fds),
            ) as process:
                try:
                    yield process
                finally:
                    if process.poll() is None:
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(process.pid, 9)


@contextlib.contextmanager
def _commands_stopped(to_log: bool):
    """With ``to_log``: this process's stdout descriptor, ``::stop-commands::<nonce>`` written to it
    before the block and ``::<nonce>::`` after, the nonce made here and never shown to what the
    block runs; without, None and nothing written."""
    if not to_log:
        yield None
        return
    sys.stderr.flush()
    sys.stdout.flush()
    try:
        log = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        log = 1  # standard output's, where sys.stdout has no descriptor (a capture)
    nonce = secrets.token_hex(16)
    os.write(log, f"::stop-commands::{nonce}\n".encode())
    try:
        yield log
    finally:
        os.write(log, f"::{nonce}::\n".encode())


def main(argv=None) -> int:
    parser = command_output.Parser(prog="python -m harness sandbox", description=__doc__.split("\n\n")[0])
    parser.add_argument("--read", action="append", default=[], type=Path, help="shown read-only")
    parser.add_argument("--write", action="append", default=[], type=Path, help="bound read-write")
    parser.add_argument("--exclude", action="append", default=[], type=Path, help="never shown (the PR's checkout)")
    parser.add_argument("--cwd", type=Path, help="where the command starts (default: the private /tmp)")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE set inside")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND...")
    args = parser.parse_args(argv)
    words = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not words:
        parser.error("no command given (after --)")
    bad = [pair for pair in args.env if "=" not in pair or not pair.split("=", 1)[0]]
    if bad:
        parser.error(f"--env takes NAME=VALUE, not {bad[0]!r}")
    missing = [str(p) for p in [*args.read, *([args.cwd] if args.cwd else [])] if not p.exists()]
    if missing:
        parser.error(f"no such path: {missing[0]}")
    why = why_not()
    if why:
        print(f"sandbox: {why}", file=sys.stderr)
        return EXIT_NO_SANDBOX
    env = dict(pair.split("=", 1) for pair in args.env)
    view = {"read": args.read, "write": args.write, "exclude": args.exclude, "cwd": args.cwd, "env": env}
    try:
        return run(words, timeout=None, stdout=None, **view).returncode
    except Unavailable as error:
        print(f"sandbox: {error}", file=sys.stderr)
        return 2
