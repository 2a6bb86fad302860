"""The one entry point for people and CI. Every session is a thin wrapper over an importable entry
point (``python -m ...``), so the same job runs on a GPU machine where nox can't build environments:

    nox --no-venv -s gate        # use the machine's own Python (torch, triton, bitsandbytes, unsloth)

The sessions that import torch (tests, bench, gate, regression, backfill) share one environment,
``.nox/torch``, built from the pins: torch's CPU build from PyTorch's index where the machine has no
NVIDIA GPU, PyPI's CUDA build where it has one. The other sessions keep small environments of their own.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sys
from pathlib import Path

import nox

nox.needs_version = ">=2024.4.15"
nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"

TEST_REQUIREMENTS = "requirements/test.txt"
RUNTIME_REQUIREMENTS = "requirements/runtime.txt"  # torch, Triton, bitsandbytes: what measuring needs
TORCH_CPU_REQUIREMENTS = "requirements/torch-cpu.txt"  # torch's CPU build, from PyTorch's index
HARNESS_REQUIREMENTS = "requirements/harness.txt"
CI_TOOLS_REQUIREMENTS = "requirements/ci-tools.txt"  # act, and the pin check's packaging and pyyaml
# What the shared environment holds: everything a torch-importing session needs, installed once.
SHARED_REQUIREMENTS = (TEST_REQUIREMENTS, HARNESS_REQUIREMENTS, CI_TOOLS_REQUIREMENTS)
SHARED_ENV = "torch"  # its folder in nox's environment folder (.nox)
# The torch sessions' own venvs hold no pip or setuptools of their own, which would come before the
# shared environment's on sys.path (an old setuptools can't build the wheel; an old pip lacks what the
# install test uses): only the interpreter, and the .pth that adds the shared site-packages.
ON_SHARED_ENV = ["--without-pip"]


def install(session: nox.Session, *args: str) -> None:
    """Install into the session's venv; with --no-venv the machine's environment is used as it is.
    pip's output is shown: the first install fetches torch and takes a minute or two."""
    if session.venv_backend != "none":
        session.install(*args, silent=False)


def has_nvidia_gpu() -> bool:
    """An NVIDIA driver is loaded here (its kernel module's /proc entry, or nvidia-smi on PATH): then
    PyPI's torch, the CUDA build, is the one to install; elsewhere its CPU build."""
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


def _shared_fingerprint(cuda: bool) -> str:
    """What the shared environment was built from: the interpreter, the torch build and every
    requirements file's bytes (a changed pin rebuilds it, an unchanged one reuses it)."""
    digest = hashlib.sha256(f"{sys.version} {'cuda' if cuda else 'cpu'}".encode())
    for path in [*sorted(Path("requirements").glob("*.txt")), Path("pyproject.toml")]:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def shared_env(session: nox.Session) -> dict[str, str]:
    """Make (or bring up to date) the environment the torch-importing sessions share, and put it under
    this session's own (small) venv: a .pth file there adds the shared site-packages, as pipx shares
    its libraries, so the session's ``python``, its children and pytest's workers all import from it.
    Returns the variables a command needs beside that: the shared bin/ on PATH, for its tools (act).
    With --no-venv: nothing, the machine's own environment runs the command."""
    if session.venv_backend == "none":
        return {}
    location = Path(session.virtualenv.location).parent / SHARED_ENV
    python, stamp = location / "bin" / "python", location / "nf4kernel-fingerprint"
    cuda = has_nvidia_gpu()
    fingerprint = _shared_fingerprint(cuda)
    if not (stamp.is_file() and stamp.read_text() == fingerprint and python.is_file()):
        session.log(f"building the shared environment {location} ({'CUDA' if cuda else 'CPU'} torch)")
        session.run(sys.executable, "-m", "venv", "--clear", str(location), external=True)
        pip = (str(python), "-m", "pip", "install", "--disable-pip-version-check")
        if not cuda:  # torch alone from PyTorch's CPU index; its dependencies come from PyPI below
            session.run(*pip, "--no-deps", "-r", TORCH_CPU_REQUIREMENTS, external=True)
        session.run(*pip, *(arg for file in SHARED_REQUIREMENTS for arg in ("-r", file)), external=True)
        session.run(*pip, "--no-deps", "-e", ".", external=True)
        stamp.write_text(fingerprint)
    own, shared = (_site_packages(session, p) for p in ("python", str(python)))
    # addsitedir, not a bare path: the shared site-packages' own .pth files (the editable install's)
    # are read only for a site directory.
    (Path(own) / "nf4kernel-shared.pth").write_text(f"import site; site.addsitedir({shared!r})\n")
    return {"PATH": os.pathsep.join([str(location / "bin"), os.environ.get("PATH", "")])}


def _site_packages(session: nox.Session, python: str) -> str:
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    return session.run(python, "-c", code, silent=True, log=False, external=True).strip()


def run_keeping_exit_code(session: nox.Session, *args: str, **run_options) -> None:
    """Run a command; if it fails, end nox with the command's own exit code (nox would say 1), so the
    codes an entry point documents (the gate's 4 = no GPU, say) reach whoever called nox."""
    try:
        session.run(*args, **run_options)
    except nox.command.CommandFailed as failed:
        code = failed.return_code or 1
        session.log(f"{args[2] if len(args) > 2 else args[0]} exited {code}")
        raise SystemExit(code) from None


@nox.session(default=True, venv_params=ON_SHARED_ENV)
def tests(session: nox.Session) -> None:
    """The correctness suite, in parallel (pytest -n auto; args after -- go to pytest).

    Without a GPU the kernel runs in the Triton interpreter: ``nox -s tests -- -k launch_cache``.
    The suite is the one of the directory nox was started in: gpu.yml starts it in a PR's checkout
    with the base's noxfile (``nox --noxfile ../trusted/noxfile.py``)."""
    env = shared_env(session)
    # With the CI tools installed, the act and package-index tests must run; under --no-venv (the GPU
    # runner: no act, no general internet) they skip, saying why.
    if session.venv_backend != "none":
        env["NF4KERNEL_CI_TOOLS"] = "installed"
    with session.chdir(session.invoked_from):
        session.run("python", "-m", "pytest", "-n", "auto", *session.posargs, env=env)


@nox.session(default=False, venv_params=ON_SHARED_ENV)
def gate(session: nox.Session) -> None:
    """The PR speed gate against Unsloth; exit 0 pass, 1 slow, 2 bad input, 3 wrong, 4 no GPU, 5 no Unsloth.

    Needs a CUDA GPU and unsloth: ``nox --no-venv -s gate -- --threshold 1.2 --json gate.json`` runs
    on the machine's own torch and Unsloth. Without --no-venv it runs in the shared environment, so
    that on a machine without a GPU the gate can tell the true cause (no GPU) instead of failing on an
    import."""
    run_keeping_exit_code(session, "python", "-m", "harness.gate", *session.posargs, env=shared_env(session))


@nox.session(default=False, venv_params=ON_SHARED_ENV)
def bench(session: nox.Session) -> None:
    """The main job: asv for this commit on this machine, then the self-contained history site.

    GPU: the full suite; CPU: the interpreter smoke benchmarks. Then ``asv preview`` (or ``nox -s
    preview``). ``nox --no-venv -s bench`` measures the machine's own torch build (the GPU runner's)."""
    run_keeping_exit_code(session, "python", "-m", "harness.history.bench", *session.posargs, env=shared_env(session))


@nox.session(default=False)
def publish(session: nox.Session) -> None:
    """Builds the history site in .asv/html from the stored and committed results (asv publish)."""
    install(session, "-r", HARNESS_REQUIREMENTS)
    run_keeping_exit_code(session, "python", "-m", "harness.history.site", "publish", *session.posargs)


@nox.session(default=False)
def preview(session: nox.Session) -> None:
    """Serves the history site on http://127.0.0.1:8080; Ctrl-C or SIGTERM stops it (exit 0).

    Exit 1 where no site is built yet."""
    install(session, "-r", HARNESS_REQUIREMENTS)
    # SIGTERM to nox alone (a service manager, `kill`) would end nox at once and leave the server
    # running. Taken as Ctrl-C, nox waits interrupt_timeout for the preview (which a terminal's Ctrl-C
    # reached too), then sends it SIGTERM, and waits terminate_timeout while it stops asv's server
    # (up to 10 s) before killing it: nox's defaults, 0.3 s and 0.2 s, kill it mid-stop.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    preview_args = ("python", "-m", "harness.history.site", "preview", *session.posargs)
    run_keeping_exit_code(session, *preview_args, interrupt_timeout=1, terminate_timeout=20)


@nox.session(default=False, venv_params=ON_SHARED_ENV)
def regression(session: nox.Session) -> None:
    """Paired rounds of two commits' kernels, exit 1 when HEAD's is slower: ``nox -s regression -- BASE HEAD``."""
    run_keeping_exit_code(session, "python", "-m", "harness.regression", *session.posargs, env=shared_env(session))


@nox.session(default=False, venv_params=ON_SHARED_ENV)
def backfill(session: nox.Session) -> None:
    """asv on earlier commits of main, for the history: ``nox -s backfill -- main~10..main --store``."""
    run_keeping_exit_code(
        session, "python", "-m", "harness.history.backfill", *session.posargs, env=shared_env(session)
    )


@nox.session(default=False)
def rehearse(session: nox.Session) -> None:
    """gpu.yml and history.yml for real on this GPU machine, under nektos act: ``nox -s rehearse -- noop``.

    Scenarios: noop, slow, self-pass, push (``-- --list`` says what each proves); logs in .rehearsal/.
    Exits 4 without an NVIDIA GPU."""
    install(session, "-r", CI_TOOLS_REQUIREMENTS)
    install(session, "-r", HARNESS_REQUIREMENTS)
    run_keeping_exit_code(session, "python", "-m", "harness.github.rehearse", *session.posargs)


@nox.session(default=False)
def pins(session: nox.Session) -> None:
    """Checks that every pin has a wheel for every Python that ci.yml sets up (reads index pages only).

    Nothing is downloaded; set PIP_EXTRA_INDEX_URL as the installing steps do."""
    install(session, "-r", CI_TOOLS_REQUIREMENTS)
    session.run("python", "-m", "harness.github.pins")


@nox.session(default=False)
def act(session: nox.Session) -> None:
    """Runs ci.yml's CPU jobs on this machine under nektos act (host mode, no Docker).

    setup-python's download is replaced by a labelled stand-in: ``nox -s act -- lint tests``."""
    install(session, "-r", CI_TOOLS_REQUIREMENTS)
    session.run("python", "-m", "harness.github.act_ci", *session.posargs)


@nox.session(default=True)
def lint(session: nox.Session) -> None:
    """ruff (lint and format check), and actionlint and zizmor (offline) on the workflows."""
    install(session, "-r", "requirements/lint.txt")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("actionlint")  # reads .github/actionlint.yaml for the self-hosted runner's labels
    session.run("zizmor", "--offline", ".github/", "harness/github/standins/")  # and act's local stand-in actions
