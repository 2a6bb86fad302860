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
HARNESS_REQUIREMENTS = "requirements/harness.txt"
CI_TOOLS_REQUIREMENTS = "requirements/ci-tools.txt"  # act, and the pin check's packaging and pyyaml


def install(session: nox.Session, *args: str) -> None:
    """Install into the session's venv; with --no-venv the machine's environment is used as it is."""
    if session.venv_backend != "none":
        session.install(*args)


def install_project(session: nox.Session, *requirements: str) -> None:
    for requirement in requirements:
        install(session, "-r", requirement)
    install(session, "--no-deps", "-e", ".")


@nox.session(default=True)
def tests(session: nox.Session) -> None:
    """The correctness suite (fp16, bf16, fp32), in parallel. Without a GPU the kernel runs in the
    Triton interpreter. Arguments after -- go to pytest: ``nox -s tests -- -k launch_cache``."""
    install_project(session, TEST_REQUIREMENTS, HARNESS_REQUIREMENTS, CI_TOOLS_REQUIREMENTS)
    session.run("python", "-m", "pytest", "-n", "auto", *session.posargs)


@nox.session(default=False, venv_params=["--system-site-packages"])
def gate(session: nox.Session) -> None:
    """The PR speed gate against the real Unsloth (needs a CUDA GPU and unsloth installed).
    ``nox -s gate -- --threshold 1.2 --json gate.json``."""
    install(session, "--no-deps", "-e", ".")
    session.run("python", "-m", "nf4kernel.harness.gate", *session.posargs)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """The asv suite for the current commit (results in .asv/results), then the history site. On a
    machine without a GPU it runs the CPU-interpreter benchmarks only: a smoke run, no speed verdict."""
    install_project(session, TEST_REQUIREMENTS, HARNESS_REQUIREMENTS)
    session.run("python", "-m", "nf4kernel.harness.bench", *session.posargs)


@nox.session(default=False)
def publish(session: nox.Session) -> None:
    """``asv publish``: the static performance-history site in .asv/html (open .asv/html/index.html,
    or ``python -m asv preview``)."""
    install(session, "-r", HARNESS_REQUIREMENTS)
    session.run("python", "-m", "asv", "publish", *session.posargs)


@nox.session(default=False, venv_params=["--system-site-packages"])
def regression(session: nox.Session) -> None:
    """asv on two commits, failing on a slowdown beyond a factor: ``nox -s regression -- BASE HEAD``."""
    install(session, "--no-deps", "-e", ".")
    install(session, "-r", HARNESS_REQUIREMENTS)
    session.run("python", "-m", "nf4kernel.harness.regression", *session.posargs)


@nox.session(default=False)
def pins(session: nox.Session) -> None:
    """Every pin in requirements/ has a wheel for every Python that ci.yml sets up (index pages only,
    nothing downloaded); set PIP_EXTRA_INDEX_URL as the installing steps do."""
    install(session, "-r", CI_TOOLS_REQUIREMENTS)
    session.run("python", "-m", "tools.pins")


@nox.session(default=False)
def act(session: nox.Session) -> None:
    """ci.yml's CPU jobs on this machine under nektos act (host mode, no Docker), the setup-python
    download replaced by a labelled stand-in: ``nox -s act -- lint tests``."""
    install(session, "-r", CI_TOOLS_REQUIREMENTS)
    session.run("python", "-m", "tools.act_ci", *session.posargs)


@nox.session(default=True)
def lint(session: nox.Session) -> None:
    """ruff (lint and format check), and actionlint and zizmor (offline) on the workflows."""
    install(session, "-r", "requirements/lint.txt")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("actionlint")  # reads .github/actionlint.yaml for the self-hosted runner's labels
    session.run("zizmor", "--offline", ".github/", "tools/standins/")  # and act's local stand-in actions
