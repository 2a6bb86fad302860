"""The one entry point for people and CI. Every session is a thin wrapper over an importable entry
point (``python -m ...``), so the same job runs on a GPU machine where nox can't build environments:

    nox --no-venv -s gate        # use the machine's own Python (torch, triton, bitsandbytes, unsloth)

Sessions that need the GPU's own torch build reuse the system site-packages in their venv.
"""

from __future__ import annotations

import nox

nox.needs_version = ">=2024.4.15"
nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"

TEST_REQUIREMENTS = "requirements/test.txt"
RUNTIME_REQUIREMENTS = "requirements/runtime.txt"  # torch, Triton, bitsandbytes: what measuring needs
HARNESS_REQUIREMENTS = "requirements/harness.txt"
CI_TOOLS_REQUIREMENTS = "requirements/ci-tools.txt"  # act, and the pin check's packaging and pyyaml


def install(session: nox.Session, *args: str) -> None:
    """Install into the session's venv; with --no-venv the machine's environment is used as it is.
    pip's output is shown: the first install fetches torch and takes a minute or two."""
    if session.venv_backend != "none":
        session.install(*args, silent=False)


def install_project(session: nox.Session, *requirements: str) -> None:
    for requirement in requirements:
        install(session, "-r", requirement)
    install(session, "--no-deps", "-e", ".")


def run_keeping_exit_code(session: nox.Session, *args: str) -> None:
    """Run a command; if it fails, end nox with the command's own exit code (nox would say 1), so the
    codes an entry point documents (the gate's 4 = no GPU, say) reach whoever called nox."""
    try:
        session.run(*args)
    except nox.command.CommandFailed as failed:
        code = failed.return_code or 1
        session.log(f"{args[2] if len(args) > 2 else args[0]} exited {code}")
        raise SystemExit(code) from None


@nox.session(default=True)
def tests(session: nox.Session) -> None:
    """The correctness suite, in parallel (pytest -n auto; args after -- go to pytest).

    Without a GPU the kernel runs in the Triton interpreter: ``nox -s tests -- -k launch_cache``.
    The suite is the one of the directory nox was started in: gpu.yml starts it in a PR's checkout
    with the base's noxfile (``nox --noxfile ../trusted/noxfile.py``)."""
    install_project(session, TEST_REQUIREMENTS, HARNESS_REQUIREMENTS, CI_TOOLS_REQUIREMENTS)
    # With the CI tools installed, the act and package-index tests must run; under --no-venv (the GPU
    # runner: no act, no general internet) they skip, saying why.
    ci_tools = {} if session.venv_backend == "none" else {"NF4KERNEL_CI_TOOLS": "installed"}
    with session.chdir(session.invoked_from):
        session.run("python", "-m", "pytest", "-n", "auto", *session.posargs, env=ci_tools)


@nox.session(default=False, venv_params=["--system-site-packages"])
def gate(session: nox.Session) -> None:
    """The PR speed gate against Unsloth; exit 0 pass, 1 slow, 2 bad input, 3 wrong, 4 no GPU, 5 no Unsloth.

    Needs a CUDA GPU and unsloth: ``nox --no-venv -s gate -- --threshold 1.2 --json gate.json``. In a
    fresh venv on a machine without torch it installs the pinned (CPU) torch, so that the gate can
    tell the true cause (no GPU) instead of failing on an import."""
    install_runtime(session)
    install(session, "--no-deps", "-e", ".")
    run_keeping_exit_code(session, "python", "-m", "harness.gate", *session.posargs)


def install_runtime(session: nox.Session) -> None:
    """The machine's own torch where it has one (a GPU build: these sessions' venvs see the system's
    packages); elsewhere the pinned CPU build, Triton and bitsandbytes (requirements/runtime.txt)."""
    if session.venv_backend != "none" and not _imports(session, "torch"):
        install(session, "-r", RUNTIME_REQUIREMENTS)


def _imports(session: nox.Session, module: str) -> bool:
    """Whether the session's Python finds ``module`` (looked up, not imported)."""
    code = f"import importlib.util; print(importlib.util.find_spec({module!r}) is not None)"
    return session.run("python", "-c", code, silent=True, log=False).strip().endswith("True")


@nox.session(default=False, venv_params=["--system-site-packages"])
def bench(session: nox.Session) -> None:
    """The main job: asv for this commit on this machine, then the self-contained history site.

    GPU: the full suite; CPU: the interpreter smoke benchmarks. Then ``nox -s preview``. The machine's
    own torch (a GPU build) is used where it has one; elsewhere the pinned CPU build is installed."""
    install_runtime(session)
    install_project(session, HARNESS_REQUIREMENTS)
    session.run("python", "-m", "harness.bench", *session.posargs)


@nox.session(default=False)
def publish(session: nox.Session) -> None:
    """Builds the history site in .asv/html from the stored and committed results (asv publish)."""
    install(session, "-r", HARNESS_REQUIREMENTS)
    install(session, "--no-deps", "-e", ".")
    session.run("python", "-m", "harness.site", "publish", *session.posargs)


@nox.session(default=False)
def preview(session: nox.Session) -> None:
    """Serves the history site on http://127.0.0.1:8080 (Ctrl-C stops it); exit 1 where none is built."""
    install(session, "-r", HARNESS_REQUIREMENTS)
    run_keeping_exit_code(session, "python", "-m", "harness.site", "preview", *session.posargs)


@nox.session(default=False, venv_params=["--system-site-packages"])
def regression(session: nox.Session) -> None:
    """asv on two commits, exit 1 when HEAD got slower than BASE: ``nox -s regression -- BASE HEAD``."""
    install_runtime(session)
    install_project(session, HARNESS_REQUIREMENTS)
    run_keeping_exit_code(session, "python", "-m", "harness.regression", *session.posargs)


@nox.session(default=False, venv_params=["--system-site-packages"])
def backfill(session: nox.Session) -> None:
    """asv on earlier commits of main, for the history: ``nox -s backfill -- main~10..main --store``."""
    install_runtime(session)
    install_project(session, HARNESS_REQUIREMENTS)
    run_keeping_exit_code(session, "python", "-m", "harness.backfill", *session.posargs)


@nox.session(default=False, venv_params=["--system-site-packages"])
def rehearse(session: nox.Session) -> None:
    """gpu.yml and history.yml for real on this GPU machine, under nektos act: ``nox -s rehearse -- noop``.

    Scenarios: noop, slow, self-pass, push (``-- --list`` says what each proves); logs in .rehearsal/.
    Exits 4 without an NVIDIA GPU."""
    install(session, "-r", CI_TOOLS_REQUIREMENTS)
    install(session, "-r", HARNESS_REQUIREMENTS)
    run_keeping_exit_code(session, "python", "-m", "harness.rehearse", *session.posargs)


@nox.session(default=False)
def pins(session: nox.Session) -> None:
    """Checks that every pin has a wheel for every Python that ci.yml sets up (reads index pages only).

    Nothing is downloaded; set PIP_EXTRA_INDEX_URL as the installing steps do."""
    install(session, "-r", CI_TOOLS_REQUIREMENTS)
    session.run("python", "-m", "harness.pins")


@nox.session(default=False)
def act(session: nox.Session) -> None:
    """Runs ci.yml's CPU jobs on this machine under nektos act (host mode, no Docker).

    setup-python's download is replaced by a labelled stand-in: ``nox -s act -- lint tests``."""
    install(session, "-r", CI_TOOLS_REQUIREMENTS)
    session.run("python", "-m", "harness.act_ci", *session.posargs)


@nox.session(default=True)
def lint(session: nox.Session) -> None:
    """ruff (lint and format check), and actionlint and zizmor (offline) on the workflows."""
    install(session, "-r", "requirements/lint.txt")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("actionlint")  # reads .github/actionlint.yaml for the self-hosted runner's labels
    session.run("zizmor", "--offline", ".github/", "harness/standins/")  # and act's local stand-in actions
