"""The one entry point for people and CI. Every session is a thin wrapper over an importable entry
point (``python -m ...``), so the same job runs on a GPU machine where nox can't build environments:

    nox --no-venv -s gate        # use the machine's own Python (torch, triton, bitsandbytes, unsloth)

The sessions that import torch (tests, bench, gate, regression, backfill) share one environment,
``.nox/torch``, built from the pins: torch's CPU build from PyTorch's index where the machine has no
NVIDIA GPU, PyPI's CUDA build where it has one. Where that index doesn't answer, pip's own sources (a
find-links folder in pip.conf) are tried, then the session ends in one line naming the way out,
``NF4KERNEL_TORCH`` (a torch wheel, a folder holding one, or ``pypi``). ``kernel_tests`` runs the
kernel's tests on a torch/Triton pair of its choosing, ``release_smoke`` a built distribution's smoke
test. The other sessions keep small environments of their own.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
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
KERNEL_TESTS_REQUIREMENTS = "requirements/kernel-tests.txt"  # beside a chosen torch and Triton
# Where torch comes from where PyTorch's CPU index can't be reached: a torch wheel, a folder holding one
# (find-links), or "pypi" (PyPI's build: CUDA's on Linux, several GB).
TORCH_OVERRIDE = "NF4KERNEL_TORCH"
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
    """What the shared environment was built from: the interpreter, the torch build (and where it came
    from) and every requirements file's bytes (a changed pin rebuilds it, an unchanged one reuses it)."""
    where = os.environ.get(TORCH_OVERRIDE, "")
    digest = hashlib.sha256(f"{sys.version} {'cuda' if cuda else 'cpu'} {where}".encode())
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
    cuda = has_nvidia_gpu()

    def install(pip: tuple[str, ...]) -> None:
        if not cuda:  # torch alone, its CPU build; its dependencies come from PyPI below
            install_cpu_torch(session, pip, pin_of(TORCH_CPU_REQUIREMENTS, "torch"), pinned=True)
        session.run(*pip, *(arg for file in SHARED_REQUIREMENTS for arg in ("-r", file)), external=True)
        session.run(*pip, "--no-deps", "-e", ".", external=True)

    what = f"the shared environment {location} ({'CUDA' if cuda else 'CPU'} torch)"
    python = stamped_env(session, location, _shared_fingerprint(cuda), what, install)
    own, shared = (_site_packages(session, p) for p in ("python", str(python)))
    # addsitedir, not a bare path: the shared site-packages' own .pth files (the editable install's)
    # are read only for a site directory.
    (Path(own) / "nf4kernel-shared.pth").write_text(f"import site; site.addsitedir({shared!r})\n")
    return {"PATH": os.pathsep.join([str(location / "bin"), os.environ.get("PATH", "")])}


def stamped_env(session: nox.Session, location: Path, fingerprint: str, what: str, install) -> Path:
    """The venv at ``location``, built anew by ``install(pip)`` unless its stamp says it was built from
    ``fingerprint`` (an unchanged one is reused as it is); its python."""
    python, stamp = location / "bin" / "python", location / "nf4kernel-fingerprint"
    if not (stamp.is_file() and stamp.read_text() == fingerprint and python.is_file()):
        session.log(f"building {what}")
        session.run(sys.executable, "-m", "venv", "--clear", str(location), external=True)
        install((str(python), "-m", "pip", "install", "--disable-pip-version-check"))
        stamp.write_text(fingerprint)
    return python


def pin_of(requirements: str, name: str) -> str:
    """``name``'s version in a requirements file (``name==version``)."""
    for line in Path(requirements).read_text().splitlines():
        found = re.match(rf"{name}==(\S+)", line.split("#")[0].strip())
        if found:
            return found.group(1)
    raise ValueError(f"{requirements} pins no {name}")


def torch_cpu_index() -> str:
    """PyTorch's CPU index, as torch-cpu.txt names it."""
    for line in Path(TORCH_CPU_REQUIREMENTS).read_text().splitlines():
        if line.startswith("--index-url "):
            return line.split()[1]
    raise ValueError(f"{TORCH_CPU_REQUIREMENTS} names no --index-url")


def index_answers(index: str) -> bool:
    """Whether ``index`` serves torch's page (10 s; pip itself would retry for minutes)."""
    try:
        with urllib.request.urlopen(f"{index.rstrip('/')}/torch/", timeout=10):
            return True
    except (OSError, ValueError):
        return False


def torch_from_override(version: str) -> list[str] | None:
    """pip's arguments for NF4KERNEL_TORCH's torch ``version``; [] for "pypi" (the requirements' own
    torch then comes from PyPI); None where it is not set. ValueError: it names nothing usable."""
    override = os.environ.get(TORCH_OVERRIDE, "").strip()
    if not override:
        return None
    if override == "pypi":
        return []
    path = Path(override).expanduser().resolve()
    if path.is_file() and path.name.startswith((f"torch-{version}-", f"torch-{version}+")):
        return [str(path)]
    if path.is_dir():  # that folder alone, so that PyPI's CUDA build of the same version can't win
        return ["--no-index", "--find-links", str(path), f"torch=={version}"]
    raise ValueError(f"{TORCH_OVERRIDE}={override} is neither a torch {version} wheel, a folder, nor 'pypi'")


def install_cpu_torch(session: nox.Session, pip: tuple[str, ...], version: str, *, pinned: bool) -> None:
    """torch ``version``'s CPU build, alone (--no-deps): from NF4KERNEL_TORCH where it is set, else from
    PyTorch's CPU index (torch-cpu.txt where ``pinned``), else from pip's own sources (a find-links
    folder pip.conf names). Where none has it, the session ends in one line naming the override: a
    multi-gigabyte CUDA build is taken only when asked for (NF4KERNEL_TORCH=pypi)."""
    try:
        override = torch_from_override(version)
    except ValueError as error:
        session.error(str(error))
    if override is not None:
        session.log(f"{TORCH_OVERRIDE}: torch {version} from {os.environ[TORCH_OVERRIDE]}")
        if override:
            session.run(*pip, "--no-deps", *override, external=True)
        return
    index = torch_cpu_index()
    if index_answers(index):
        source = ["-r", TORCH_CPU_REQUIREMENTS] if pinned else ["--index-url", index, f"torch=={version}+cpu"]
        session.run(*pip, "--no-deps", *source, external=True)
        return
    session.log(f"PyTorch's CPU index {index} does not answer: torch {version}+cpu from pip's own sources?")
    found = subprocess.run([*pip, "--no-deps", f"torch=={version}+cpu"], capture_output=True, text=True)
    if found.returncode == 0:
        session.log(f"torch {version}+cpu installed from pip's own sources")
        return
    session.error(
        f"PyTorch's CPU index {index} does not answer and pip has no torch {version}+cpu elsewhere: set "
        f"{TORCH_OVERRIDE} to a torch {version} CPU wheel, a folder holding one, or 'pypi' (PyPI's CUDA build, "
        "several GB), and run again"
    )


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
        session.log(f"{' '.join(args[2:4]) if len(args) > 2 else args[0]} exited {code}")  # "harness gate exited 3"
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
    run_keeping_exit_code(session, "python", "-m", "harness", "gate", *session.posargs, env=shared_env(session))


@nox.session(default=False, venv_params=ON_SHARED_ENV)
def bench(session: nox.Session) -> None:
    """The main job: asv for this commit on this machine, then the self-contained history site.

    GPU: the full suite; CPU: the interpreter smoke benchmarks. Then ``asv preview`` (or ``nox -s
    preview``). ``nox --no-venv -s bench`` measures the machine's own torch build (the GPU runner's)."""
    run_keeping_exit_code(session, "python", "-m", "harness", "bench", *session.posargs, env=shared_env(session))


@nox.session(default=False)
def publish(session: nox.Session) -> None:
    """Builds the history site in .asv/html from the stored and committed results (asv publish)."""
    install(session, "-r", HARNESS_REQUIREMENTS)
    run_keeping_exit_code(session, "python", "-m", "harness", "site", "publish", *session.posargs)


@nox.session(default=False)
def preview(session: nox.Session) -> None:
    """Serves the history site on http://127.0.0.1:8080; Ctrl-C or SIGTERM stops it (exit 0).

    Exit 1 where no site is built yet. A person's tool, beside the harness (``tools/history.py``)."""
    install(session, "-r", HARNESS_REQUIREMENTS)
    # SIGTERM to nox alone (a service manager, `kill`) would end nox at once and leave the server
    # running. Taken as Ctrl-C, nox waits interrupt_timeout for the preview (which a terminal's Ctrl-C
    # reached too), then sends it SIGTERM, and waits terminate_timeout while it stops asv's server
    # (up to 10 s) before killing it: nox's defaults, 0.3 s and 0.2 s, kill it mid-stop.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    preview_args = ("python", "-m", "tools.history", "preview", *session.posargs)
    run_keeping_exit_code(session, *preview_args, interrupt_timeout=1, terminate_timeout=20)


@nox.session(default=False, venv_params=ON_SHARED_ENV)
def regression(session: nox.Session) -> None:
    """Paired rounds of two commits' kernels, exit 1 when HEAD's is slower: ``nox -s regression -- BASE HEAD``."""
    run_keeping_exit_code(session, "python", "-m", "harness", "regression", *session.posargs, env=shared_env(session))


@nox.session(default=False, venv_params=ON_SHARED_ENV)
def backfill(session: nox.Session) -> None:
    """asv on earlier commits of main, for the history: ``nox -s backfill -- main~10..main --store``."""
    run_keeping_exit_code(session, "python", "-m", "harness", "backfill", *session.posargs, env=shared_env(session))


@nox.session(default=False)
def rehearse(session: nox.Session) -> None:
    """gpu.yml and history.yml for real on this GPU machine, under nektos act: ``nox -s rehearse -- noop``.

    Scenarios: noop, slow, self-pass, push (``-- --list`` says what each proves); logs in .rehearsal/.
    Exits 4 without an NVIDIA GPU."""
    install(session, "-r", CI_TOOLS_REQUIREMENTS)
    install(session, "-r", HARNESS_REQUIREMENTS)
    run_keeping_exit_code(session, "python", "-m", "dev.rehearsal", "rehearse", *session.posargs)


@nox.session(default=False)
def pins(session: nox.Session) -> None:
    """Checks that every pin has a wheel for every Python that ci.yml sets up (reads index pages only).

    Nothing is downloaded; set PIP_EXTRA_INDEX_URL as the installing steps do."""
    install(session, "-r", CI_TOOLS_REQUIREMENTS)
    session.run("python", "-m", "tools.pins")


@nox.session(default=False)
def act(session: nox.Session) -> None:
    """Runs ci.yml's CPU jobs on this machine under nektos act (host mode, no Docker).

    setup-python's download is replaced by a labelled stand-in: ``nox -s act -- lint tests``."""
    install(session, "-r", CI_TOOLS_REQUIREMENTS)
    session.run("python", "-m", "dev.rehearsal", "act-ci", *session.posargs)


@nox.session(default=True)
def lint(session: nox.Session) -> None:
    """ruff (lint and format check), and actionlint and zizmor (offline) on the workflows."""
    install(session, "-r", "requirements/lint.txt")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("actionlint")  # reads .github/actionlint.yaml for the self-hosted runner's labels
    session.run("zizmor", "--offline", ".github/", "dev/rehearsal/standins/")  # and act's local stand-in actions


# The kernel's tests a torch or Triton release can change: every layout, dtype and size against
# bitsandbytes, the launch path and its plans (the private handles), and the unseen-version path
# (which also checks that _triton_compat.SEEN lists the leg's releases).
# About 75 s a leg on a 2-core CPU machine (test_kernel.py, the kernel's internals, would add 35 s).
KERNEL_TESTS = ("tests/test_dequantize.py", "tests/test_launch_cache.py", "tests/test_unseen_versions.py")
LEG_SPEC = re.compile(r"(torch|triton)==(\d+(?:\.\d+)*)")


def leg_versions(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """({"torch": X, "triton": Y}, the other arguments) from ``torch==X triton==Y ...``; ValueError
    naming what is missing or given twice."""
    versions: dict[str, str] = {}
    rest = []
    for arg in args:
        found = LEG_SPEC.fullmatch(arg)
        if not found:
            rest.append(arg)
        elif found.group(1) in versions:
            raise ValueError(f"{found.group(1)} given twice")
        else:
            versions[found.group(1)] = found.group(2)
    missing = [name for name in ("torch", "triton") if name not in versions]
    if missing:
        raise ValueError(
            f"name both versions: nox -s kernel_tests -- torch==X triton==Y (missing {', '.join(missing)})"
        )
    return versions, rest


@nox.session(default=False, venv_params=ON_SHARED_ENV)
def kernel_tests(session: nox.Session) -> None:
    """The kernel's tests on a chosen torch and Triton: ``nox -s kernel_tests -- torch==2.11.0 triton==3.6.0``.

    Each pair gets its own environment in .nox (built once): torch's CPU build where there is no
    NVIDIA GPU (NF4KERNEL_TORCH, PyTorch's CPU index or pip's own sources; where none has it, one
    line naming NF4KERNEL_TORCH: ``pypi`` takes PyPI's build, CUDA's on Linux),
    that Triton, and requirements/kernel-tests.txt. ``--record FILE`` writes what ran and how it
    ended as JSON, the support table's input (``python tools/release/support_table.py``); other
    arguments go to pytest. pytest's own exit code ends the session."""
    try:
        versions, rest = leg_versions(session.posargs)
    except ValueError as error:
        session.error(str(error))
    record = None
    if "--record" in rest:
        at = rest.index("--record")
        record, rest = Path(rest[at + 1]).resolve(), rest[:at] + rest[at + 2 :]
    cuda = has_nvidia_gpu()
    location = Path(session.virtualenv.location).parent / f"kernel-torch{versions['torch']}-triton{versions['triton']}"
    # Rebuilt when what it is built from changes: the interpreter, the torch build and its source, the pins.
    pins = Path(KERNEL_TESTS_REQUIREMENTS).read_text()
    built_from = f"{sys.version} {cuda} {os.environ.get(TORCH_OVERRIDE, '')} {pins}"

    def install(pip: tuple[str, ...]) -> None:
        if not cuda:
            install_cpu_torch(session, pip, versions["torch"], pinned=False)
        wanted = [f"torch=={versions['torch']}", f"triton=={versions['triton']}", "-r", KERNEL_TESTS_REQUIREMENTS]
        session.run(*pip, *wanted, external=True)

    python = stamped_env(session, location, hashlib.sha256(built_from.encode()).hexdigest(), str(location), install)
    report = location / "junit.xml"
    command = [str(python), "-m", "pytest", "-n", "auto", "-p", "no:cacheprovider", f"--junitxml={report}"]
    command += rest or KERNEL_TESTS
    session.log(" ".join(command))
    with session.chdir(session.invoked_from):
        code = subprocess.call(command)
    ran = _leg_record(str(python), report if code in (0, 1) else None, code)
    session.log(json.dumps(ran))
    if record:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(ran, indent=2) + "\n")
    if code:
        raise SystemExit(code)


# The leg's own torch and Triton, and its device, as the leg's Python sees them.
_LEG_VERSIONS = """
import json, platform, torch, triton
device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (Triton's interpreter)"
print(json.dumps({"torch": str(torch.__version__), "triton": triton.__version__,
                  "python": platform.python_version(), "device": device}))
"""


def _leg_record(python: str, report: Path | None, code: int) -> dict:
    """What a kernel_tests run was: versions, device, pytest's counts (from its JUnit report) and exit
    code, and the commit it tested."""
    import xml.etree.ElementTree as ElementTree

    ran = json.loads(subprocess.run([python, "-c", _LEG_VERSIONS], capture_output=True, text=True).stdout)
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    if report is not None and report.is_file():
        suite = ElementTree.parse(report).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped = int(suite.get("skipped", 0))
        counts = {"passed": int(suite.get("tests", 0)) - failed - skipped, "failed": failed, "skipped": skipped}
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {**ran, **counts, "exit_code": code, "commit": commit}


@nox.session(default=False, venv_params=ON_SHARED_ENV)
def release_smoke(session: nox.Session) -> None:
    """Each built distribution in a fresh venv, then the API's smoke test: ``nox -s release_smoke -- dist/*``.

    The release workflow's check before publishing; the smoke test runs from outside the checkout.

    Each venv gets torch's CPU build first where there is no NVIDIA GPU (as ``tests`` does, with the
    same NF4KERNEL_TORCH way out), then the distribution and bitsandbytes, runtime.txt's pins as
    constraints; tools/release/smoke.py checks the installed copy against the distribution's version."""
    dists = [Path(arg).resolve() for arg in session.posargs]
    if not dists or not all(d.is_file() and d.name.endswith((".whl", ".tar.gz")) for d in dists):
        session.error("name the built distributions: nox -s release_smoke -- dist/*.whl dist/*.tar.gz")
    smoke = Path(session.invoked_from).resolve() / "tools" / "release" / "smoke.py"
    for dist in dists:
        version = dist.name.split("-")[1].removesuffix(".tar.gz")  # nf4kernel-V-py3-...whl, nf4kernel-V.tar.gz
        location = Path(session.virtualenv.location).parent / f"release-smoke-{dist.name}"
        session.log(f"{dist.name}: a fresh venv, {location}")
        session.run(sys.executable, "-m", "venv", "--clear", str(location), external=True)
        python = str(location / "bin" / "python")
        pip = (python, "-m", "pip", "install", "--disable-pip-version-check", "-q")
        if not has_nvidia_gpu():
            install_cpu_torch(session, pip, pin_of(RUNTIME_REQUIREMENTS, "torch"), pinned=True)
        session.run(*pip, str(dist), "bitsandbytes", "-c", RUNTIME_REQUIREMENTS, external=True)
        with tempfile.TemporaryDirectory() as away, session.chdir(away):
            session.run(python, str(smoke), version, external=True)
