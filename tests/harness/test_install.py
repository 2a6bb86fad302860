"""The install as a user's machine sees it: pip's defaults, no local wheels, no extra index, no
configuration. Every requirements file resolves with pip's own resolver (a dry run, its report
read back); a CPU machine gets torch's CPU build and no CUDA package; the GPU runner's set resolves
for its Python.

A machine that pre-seeds a torch wheel or adds an index hides exactly the conflicts this catches, so
every run here drops the PIP_* variables and pip's configuration files. The dry runs read each
wheel's metadata by HTTP range requests (pip's fast-deps), not the wheels themselves."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from packaging.version import Version

from dev.rehearsal import act
from tools import pins

ROOT = pins.ROOT
REQUIREMENTS = ROOT / "requirements"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# What the environment the torch sessions share is built from (noxfile.SHARED_REQUIREMENTS).
SHARED_SET = ("test.txt", "harness.txt", "ci-tools.txt")
# Resolved from PyPI alone; torch-cpu.txt names PyTorch's index (its own test below).
ON_PYPI = sorted(p.name for p in REQUIREMENTS.glob("*.txt") if p.name not in {"torch-cpu.txt", "gpu-runner.txt"})

needs_index = pytest.mark.skipif(
    not act.ci_tools_installed(), reason="needs the package index and pip 26; `nox -s tests` installs both"
)


def pin(file: str, name: str) -> str:
    for line in (REQUIREMENTS / file).read_text().splitlines():
        found = re.match(rf"{name}==(\S+)", line.split("#")[0].strip())
        if found:
            return found.group(1)
    raise AssertionError(f"{file} pins no {name}")


def resolve(tmp_path: Path, *args: str) -> dict[str, str]:
    """pip's resolution of ``args`` with its defaults alone: {project: version} it would install.
    Fails with pip's own words where it can't resolve."""
    assert Version(pip_version()) >= Version("26"), "the dry runs need pip 26 (requirements/ci-tools.txt)"
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # no /etc/pip.conf, no user file: only what the command says
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed", "--quiet"]
    command += ["--use-feature=fast-deps", "--disable-pip-version-check", "--report", str(report), *args]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(args)} does not resolve:\n{done.stderr[-3000:]}"
    installs = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"] for item in installs}


def pip_version() -> str:
    from importlib.metadata import version

    return version("pip")


def cuda_packages(resolved: dict[str, str]) -> list[str]:
    return sorted(name for name in resolved if name.startswith(("nvidia-", "cuda-")))


def test_the_torch_pins_agree():
    """torch-cpu.txt installs the same torch as runtime.txt asks for, from PyTorch's CPU index, so
    that runtime.txt's pin is already met on a CPU machine."""
    assert pin("torch-cpu.txt", "torch") == pin("runtime.txt", "torch")
    assert pins.file_indexes(REQUIREMENTS / "torch-cpu.txt", {}) == [TORCH_CPU_INDEX]


@needs_index
@pytest.mark.parametrize("file", ON_PYPI)
def test_each_requirements_file_resolves_from_pypi_alone(file, tmp_path):
    """On a GPU machine nox installs runtime.txt's torch from PyPI: there the CUDA build and the
    Triton it pins must agree with runtime.txt's Triton."""
    # kernel-tests.txt goes in beside the torch and Triton a leg names: here the oldest (.ci/run's first).
    leg = re.search(r"kernel_tests -- (torch==\S+) (triton==\S+)", (ROOT / ".ci" / "run").read_text())
    resolved = resolve(tmp_path, "-r", f"requirements/{file}", *(leg.groups() if file == "kernel-tests.txt" else ()))
    if file == "kernel-tests.txt":
        assert [f"torch=={resolved['torch']}", f"triton=={resolved['triton']}"] == list(leg.groups())
    elif "torch" in resolved:
        assert resolved["torch"] == pin("runtime.txt", "torch") and resolved["triton"] == pin("runtime.txt", "triton")


def torch_cpu_source(tmp_path: Path) -> tuple[list[str], str]:
    """Where the CPU build comes from in this check: PyTorch's own index where it answers; where it
    doesn't (a sandbox that reaches PyPI only), a folder holding the very wheel that index serves,
    taken from this machine's pip find-links. Returns pip's arguments and what they stand for."""
    try:
        with urllib.request.urlopen(f"{TORCH_CPU_INDEX}/torch/", timeout=20):
            return ["--extra-index-url", TORCH_CPU_INDEX], TORCH_CPU_INDEX
    except (urllib.error.URLError, TimeoutError):
        pass
    version = pin("torch-cpu.txt", "torch")
    for folder in os.environ.get("PIP_FIND_LINKS", "").split():
        wheels = sorted(Path(folder).glob(f"torch-{version}+cpu-*.whl"))
        if wheels:
            stand_in = tmp_path / "torch-cpu-index"
            stand_in.mkdir()
            for wheel in wheels:
                (stand_in / wheel.name).symlink_to(wheel)
            return ["--find-links", str(stand_in)], f"{wheels[0].name} from {folder}, standing in for {TORCH_CPU_INDEX}"
    pytest.skip(f"{TORCH_CPU_INDEX} does not answer here and no local copy of its torch {version} wheel is found")


@needs_index
def test_a_cpu_machine_gets_torchs_cpu_build_and_no_cuda(tmp_path):
    """The set nox installs on a machine without an NVIDIA GPU: torch from PyTorch's CPU index, the
    rest from PyPI. No nvidia-*/cuda-* package, and Triton is runtime.txt's."""
    source, about = torch_cpu_source(tmp_path)
    print(f"torch's CPU build: {about}")
    resolved = resolve(tmp_path, *source, *(arg for file in SHARED_SET for arg in ("-r", f"requirements/{file}")))
    assert resolved["torch"] == pin("runtime.txt", "torch") + "+cpu", resolved["torch"]
    assert cuda_packages(resolved) == [], cuda_packages(resolved)
    assert resolved["triton"] == pin("runtime.txt", "triton")


@needs_index
def test_the_gpu_runners_set_resolves_for_its_python(tmp_path):
    """gpu-runner.txt beside the runner image's torch 2.11 (CUDA 13) and Triton 3.6, on CPython 3.12."""
    platforms = [arg for platform in pins.PLATFORMS for arg in ("--platform", platform)]
    target = ["--target", str(tmp_path / "unused"), "--python-version", "3.12", "--only-binary=:all:", *platforms]
    resolved = resolve(tmp_path, *target, "-r", "requirements/gpu-runner.txt")
    assert resolved["torch"] == pin("gpu-runner.txt", "torch") and resolved["triton"] == pin("gpu-runner.txt", "triton")
    assert "nvidia-cuda-runtime" in resolved  # PyPI's torch 2.11 is the CUDA build, as on the image


# --- The built wheel beside the torch a user already has ------------------------------------------------

# torch 2.14.1's CUDA build pins triton~=3.8.0 (its metadata): the pair a user on 2.14.1 has.
TORCH_2_14_1 = ("2.14.1", "3.8.0")


def newest_on_pypi(project: str) -> str:
    """The newest release PyPI serves (pip's own answer, with no configuration: no local cap)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    command = [sys.executable, "-m", "pip", "index", "versions", project, "--isolated", "--disable-pip-version-check"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    found = re.search(rf"^{project} \(([^)]+)\)", done.stdout, re.MULTILINE)
    assert found, done.stdout + done.stderr
    return found.group(1)


def fake_installed(site: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A distribution's metadata alone, as pip reads an installed one: enough to stand for a user's
    torch (a few GB) in a dry run, which reads metadata and installs nothing."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        *(f"Requires-Dist: {r}" for r in requires),
    ]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        (source / name).write_bytes((ROOT / name).read_bytes())
    shutil.copytree(ROOT / "nf4kernel", source / "nf4kernel", ignore=shutil.ignore_patterns("__pycache__"))
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(out),
        str(source),
    ]
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=300)
    (wheel,) = out.glob("nf4kernel-*.whl")
    return wheel


@needs_index
@pytest.mark.parametrize("which", ["2.14.1", "newest"])
def test_the_wheel_installs_beside_a_users_torch_without_changing_it(which, built_wheel, tmp_path):
    """A venv holding torch X (and the Triton its CUDA build pins, and numpy): pip's dry run of
    installing the wheel there, with pip's defaults, installs nf4kernel and nothing else. A cap below
    X (the old torch<2.14) would have pip replace the user's torch, and this would list it."""
    if which == "newest":
        torch_version, triton_version = newest_on_pypi("torch"), newest_on_pypi("triton")
    else:
        torch_version, triton_version = TORCH_2_14_1
    venv = tmp_path / "user"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = Path(next((venv / "lib").glob("python3.*")) / "site-packages")
    fake_installed(site, "torch", torch_version, (f"triton=={triton_version}",))
    fake_installed(site, "triton", triton_version)
    fake_installed(site, "numpy", pin("runtime.txt", "numpy"))
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--isolated"]
    command += ["--dry-run", "--quiet", "--use-feature=fast-deps", "--disable-pip-version-check"]
    command += ["--report", str(report), str(built_wheel)]  # fast-deps: a replaced torch is read, not downloaded
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    installs = {i["metadata"]["name"]: i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    print(f"beside torch {torch_version} + Triton {triton_version}: pip would install {installs}")
    assert list(installs) == ["nf4kernel"], installs
