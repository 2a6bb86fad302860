"""The sandbox every process that runs a pull request's code runs in: bubblewrap (Debian's
``bubblewrap``, Flatpak's sandbox).

    python -P -m harness.core.sandbox [--read PATH]... [--write PATH]... [--cwd PATH]
                                      [--env NAME=VALUE]... -- COMMAND...

Inside, the process sees:

* the machine's files read-only (``/`` bound read-only), with these hidden behind empty, private
  folders: ``/tmp``, ``/run``, ``$HOME``, and the runner's own places (``$RUNNER_TEMP``, where the
  records and the runner's file-command files such as ``$GITHUB_ENV`` live; ``$GITHUB_WORKSPACE``
  and the folder holding it, where the checkouts live; ``$RUNNER_TOOL_CACHE``);
* shown again, read-only, only what the command needs: the Python that runs it (its prefix and every
  folder on its path, except those inside a folder the caller excludes: the PR's checkout), and the
  ``--read`` paths (the trusted tree, the staged kernel);
* read-write only the ``--write`` paths (the kernel's own compile cache, ``kernel_cache``) and its
  private ``/tmp``;
* a minimal ``/dev`` with the NVIDIA device nodes bound in, and no other device;
* no network (a network namespace of its own: not even the host's loopback), its own process, IPC,
  UTS and cgroup namespaces, a new session (no terminal to inject into), no capabilities;
* an environment with nothing of the job's (no ``GITHUB_*``, ``RUNNER_*``, ``ACTIONS_*``, token or
  ``BASH_ENV``): only ``PATH``, the locale, the CUDA and NVIDIA selectors and what the caller sets.

Every process it starts ends with it: the sandbox's first process is PID 1 of its namespace, and
the kernel ends the others when it exits; ``--die-with-parent`` ends it if the caller dies.

Why bubblewrap rather than a second Unix user: it needs no root and no setup on the runner (it runs
as the job's user, with unprivileged user namespaces, or as root on the rehearsal machine), one
command line states the whole view, and the view doesn't depend on every file's owner and mode
being right (a second user still reads every world-readable file, the runner's included, and needs
the workspace's permissions kept right by hand). CUDA and Triton work inside with the device nodes
bound (seen on the GPU image).

Exit: the command's own code; 2 for bad arguments; 126 when bubblewrap is missing or can't make
its namespaces here (the line says which).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

BWRAP = "bwrap"
EXIT_NO_SANDBOX = 126
# Kept from the caller's environment: what finds programs, speaks the locale and picks the GPU.
KEPT = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LD_LIBRARY_PATH")
KEPT_PREFIXES = ("NVIDIA_",)
HOME = "/tmp/home"  # a private home: a cache written there goes with the sandbox


COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


class Unavailable(RuntimeError):
    """No sandbox here: the message says why, in one line."""


def why_not() -> str | None:
    """None where a sandbox can be made here; else why not, in one line."""
    binary = shutil.which(BWRAP)
    if binary is None:
        return f"{BWRAP} (Debian's bubblewrap) is not on the PATH"
    try:
        done = subprocess.run(
            [binary, *namespaces(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", "true"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{binary} could not be run: {error}"
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


def namespaces() -> list[str]:
    return ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]


def hidden_places(env: dict) -> list[str]:
    """Where the job keeps what a PR's code must not touch: the records, the runner's file-command
    files, the checkouts, the runner's own files (under its user's home)."""
    places = ["/tmp", "/run", "/var/run", env.get("HOME", "")]
    for name in ("RUNNER_TEMP", "GITHUB_WORKSPACE", "RUNNER_WORKSPACE", "RUNNER_TOOL_CACHE"):
        places.append(env.get(name, ""))
    if env.get("GITHUB_WORKSPACE"):
        places.append(str(Path(env["GITHUB_WORKSPACE"]).parent))
    real = {os.path.realpath(p) for p in places if p and os.path.isdir(p)}
    return sorted(p for p in real if p != "/")


def python_paths(python: str, exclude: list[Path]) -> list[str]:
    """The folders ``python`` imports from (its prefixes and its path), less those inside an
    excluded folder: shown again read-only where a hidden place covers them."""
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
) -> tuple[list[str], dict]:
    """The bubblewrap command line that runs ``argv`` sandboxed, and the environment to start it
    with (bubblewrap passes it on; ``--clearenv`` is not used so the variables stay off its command
    line, where ``ps`` would show them)."""
    binary = shutil.which(BWRAP)
    if binary is None:
        raise Unavailable(f"{BWRAP} (Debian's bubblewrap) is not on the PATH")
    outside = dict(os.environ)
    line = [binary, *namespaces(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for place in hidden_places(outside):
        line += ["--tmpfs", place]
    line += ["--tmpfs", "/dev/shm"]  # CUDA's and torch's shared memory: private
    for node in sorted(glob.glob("/dev/nvidia*")):
        line += ["--dev-bind", node, node]
    shown = python_paths(python, list(exclude)) + [os.path.realpath(p) for p in read]
    for path in sorted(set(shown), key=lambda p: (p.count(os.sep), p)):  # parents before children
        line += ["--ro-bind", path, path]
    for path in write:
        real = os.path.realpath(path)
        os.makedirs(real, exist_ok=True)
        line += ["--bind", real, real]
    line += ["--dir", HOME, "--chdir", os.path.realpath(cwd) if cwd else "/tmp"]
    return [*line, "--", *argv], environment(outside, dict(env or {}))


def run(argv: list[str], *, timeout: float, stdout=subprocess.PIPE, stderr=None, **view) -> subprocess.CompletedProcess:
    """``argv`` sandboxed (``command``'s view); its output as text. On timeout the whole sandbox
    goes (its namespace's first process is killed, and with it every process it started)."""
    line, env = command(argv, **view)
    process = subprocess.Popen(line, env=env, stdout=stdout, stderr=stderr, text=True, start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.communicate()
        raise
    return subprocess.CompletedProcess(line, process.returncode, out, err)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -P -m harness.core.sandbox", description=__doc__.split("\n\n")[0])
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
    line, full_env = command(words, read=args.read, write=args.write, exclude=args.exclude, cwd=args.cwd, env=env)
    return subprocess.run(line, env=full_env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
