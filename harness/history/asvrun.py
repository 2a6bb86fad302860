"""Running asv the one way the harness runs it: ``asv run`` in this Python for one commit, under the
machine's GPU name and a stable environment name, that commit's nf4kernel first on the benchmark
processes' path: one ruler (this checkout's ``benchmarks/``), any kernel; the suites.

The asv machine: named after the GPU (``h100-80gb-hbm3``; without one ``cpu-<processor>``, which
the site leaves out), its series split by ``toolchain``, the software that shapes its figures; the
rest in ``machine.json``, nothing that changes between boots. Why: docs/performance-history.md.

Also an asv plugin (``"plugins"`` in asv.conf.json): ``StableExistingEnvironment``, this Python as
``existing-py<X.Y>`` wherever the interpreter lives (``-E stable-existing:same``). asv's own
``--python=same`` names the environment after the interpreter's path, so another clone or venv
started a new series of one-point lines."""

from __future__ import annotations

import json
import math
import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from asv import util
from asv.environment import ExistingEnvironment, get_env_name
from asv.util import get_cpu_info

from harness.core import gpu_state
from harness.core.git import output
from harness.core.paths import ROOT

SPEC = "stable-existing:same"


def python_version(executable: str) -> str:
    if executable == "same":
        return f"{sys.version_info[0]}.{sys.version_info[1]}"
    code = "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"
    return util.check_output([os.path.abspath(util.which(executable)), "-c", code]).strip()


class StableExistingEnvironment(ExistingEnvironment):
    """The running Python, as asv's ``existing`` environment, known by its version alone."""

    tool_name = "stable-existing"

    def __init__(self, conf, executable, requirements, tagged_env_vars):
        self._version = python_version(executable)  # before the base class, which reads self.name
        super().__init__(conf, executable, requirements, tagged_env_vars)

    @property
    def python(self) -> str:
        return self._version

    @property
    def name(self) -> str:
        return get_env_name("existing", self._version, {}, self._tagged_env_vars)


BASELINES_ENV = "NF4KERNEL_BENCH_BASELINES"  # read by benchmarks/_ruler.py in the measuring process


@dataclass(frozen=True)
class Suite:
    """The benchmarks a run selects (an asv ``--bench`` regex) and the baselines it measures."""

    bench: str
    baselines: str  # NF4KERNEL_BENCH_BASELINES: "all" or "none"
    about: str


SUITES = {
    "gpu": Suite(r"^(gpu|training)\.", "all", "the GPU suite, with Unsloth and bitsandbytes, and the training step"),
    "nf4kernel-only": Suite(
        r"^gpu\.(KernelTime|TimeOverCopy|PeakGpuMemory)\.", "none", "nf4kernel's own figures (no baseline imported)"
    ),
    "cpu": Suite(r"^cpu_interpreter\.", "none", "the CPU-interpreter smoke benchmarks"),
}


def add_config(parser) -> None:
    parser.add_argument("--config", default="asv.conf.json", help="asv's configuration, from the repository's root")


class ConfigError(ValueError):
    """asv's configuration could not be read: one line naming the file and why."""


def load_config(config: str) -> dict:
    """asv's configuration ``config``, a path from the repository's root (asv runs there, so its own
    relative paths start there too); ConfigError where it is none."""
    try:
        conf = util.load_json(str(ROOT / config), js_comments=True)
    except (OSError, ValueError, util.UserError) as error:  # json5 says what it can't parse as a ValueError
        raise ConfigError(f"{config}: no asv configuration here: {getattr(error, 'strerror', None) or error}") from None
    paths = ("results_dir", "html_dir")
    if not isinstance(conf, dict) or not all(isinstance(conf.get(key, ""), str) for key in paths):
        raise ConfigError(f"{config}: no asv configuration here: not a JSON object with paths {' and '.join(paths)}")
    conf.setdefault("results_dir", "results")  # asv's default
    return conf


def results_dir(config: str = "asv.conf.json") -> Path:
    return ROOT / load_config(config)["results_dir"]


def asv_env(*front: str) -> dict:
    """PYTHONPATH as ASV_PYTHONPATH, ``front`` first: asv's benchmark processes read that one instead."""
    paths = [*front, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "ASV_PYTHONPATH": os.pathsep.join(paths)} if paths else dict(os.environ)


def asv(*args: str, config: str = "asv.conf.json", env: dict | None = None) -> int:
    """``python -m asv ARGS --config CONFIG`` from the repository's root (asv.conf.json's paths and its
    plugin are relative to it). Returns asv's exit code: 2 from ``run`` means a benchmark failed."""
    command = [sys.executable, "-m", "asv", *args, "--config", str(config)]
    print("+ python", " ".join(command[1:]), flush=True)  # this Python: the one running the harness
    done = subprocess.run(command, cwd=ROOT, env=env if env is not None else asv_env(), check=False)
    if done.returncode not in (0, 2):
        raise subprocess.CalledProcessError(done.returncode, command)
    return done.returncode


def run(commit: str, suite: str, info: dict, config: str, source: str | None = None, quick: bool = False) -> int:
    """``asv run`` of ``suite`` for ``commit`` (results stored under that hash), nf4kernel from ``source``
    (that commit's alone) or this checkout: asv's benchmark processes start elsewhere, and on a runner
    nothing installs it. ``info`` (``register``) is then written whole as machine.json."""
    chosen = SUITES[suite]
    ensure_branches(config)
    # This checkout behind the kernel: the suite measures through harness/core (staged alone, a
    # commit's nf4kernel brings nothing else of its tree, so this harness is the one imported).
    env = asv_env(*([source] if source else []), str(ROOT))
    env[BASELINES_ENV] = chosen.baselines
    command = ["run", "-E", SPEC, "--set-commit-hash", commit, "--machine", info["machine"], "--bench", chosen.bench]
    command += ["--show-stderr"] + (["--quick"] if quick else [])
    code = asv(*command, config=config, env=env)
    record(results_dir(config), info)
    return code


def ensure_branches(config: str) -> None:
    """Each branch the configuration names made at HEAD where it is no local branch (a workflow's
    checkout of one commit): asv refuses to run otherwise ("Unknown branch main in configuration")."""
    conf = load_config(config)
    repo = ROOT / conf.get("repo", ".")
    for branch in conf.get("branches", []):
        verify = ["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"]
        if subprocess.run(verify, cwd=repo, capture_output=True, check=False).returncode != 0:
            subprocess.run(["git", "branch", branch, "HEAD"], cwd=repo, capture_output=True, check=True)
            print(f"asv: no local branch {branch} in {repo}; made one at HEAD for asv", flush=True)


@dataclass
class Outcome:
    measured: int
    skipped: list
    failed: list

    def line(self) -> str:
        text = f"{self.measured} measured, {len(self.skipped)} skipped, {len(self.failed)} failed"
        return text + (f" (failed: {', '.join(self.failed[:5])})" if self.failed else "")


def outcome(results_dir: str, machine: str, commit: str, bench: str) -> Outcome:
    """What ``asv run`` stored for ``commit``: how many values were measured, which were skipped
    (NaN: asv's mark for a setup that raised NotImplementedError) and which failed (None)."""
    from asv.results import iter_results_for_machine_and_hash

    measured, skipped, failed = 0, [], []
    pattern = re.compile(bench)
    for result in iter_results_for_machine_and_hash(results_dir, machine, commit):
        for name in result.get_all_result_keys():
            if not pattern.search(name):
                continue
            for value in result.get_result_value(name, result.get_result_params(name)):
                if value is None:
                    failed.append(name)
                elif isinstance(value, float) and math.isnan(value):
                    skipped.append(name)
                else:
                    measured += 1
    return Outcome(measured, sorted(set(skipped)), sorted(set(failed)))


def git(*args: str) -> str:
    return output(*args, cwd=ROOT)


def slug(text: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``h100-80gb-hbm3``: lower case, vendor dropped, one dash between words."""
    text = re.sub(r"^(nvidia|amd)\s+", "", text.strip(), flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "unknown"


def driver_version() -> str:
    """The driver's version (NVML); ``unknown`` where it doesn't answer: every value of machine.json is
    a string."""
    return gpu_state.driver_versions()["driver"] or "unknown"


def describe() -> dict:
    try:
        import torch
    except ImportError:  # a fresh venv without torch: then there is no CUDA GPU to use either
        torch = None

    info = {
        "arch": platform.machine(),
        "os": platform.system(),
        "cpu": get_cpu_info() or platform.processor() or platform.machine(),
        "num_cpu": str(os.cpu_count()),
        "ram": "",  # not recorded: a VM's memory can grow while it runs, which would split the series
    }
    if torch is not None and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
        info.update(machine=slug(gpu), gpu=gpu, driver=driver_version(), cuda=torch.version.cuda or "unknown")
    else:
        info.update(machine=f"cpu-{slug(info['cpu'])}", gpu="none", driver="none", cuda="none")
    info.update({package: gpu_state.package_version(package) or "not installed" for package in gpu_state.PACKAGES})
    return info


def toolchain(info: dict) -> str:
    """The versions that shape the figures, in one value: ``torch 2.11.0, triton 3.6.0, CUDA 13.0, ...``."""
    parts = [f"torch {info['torch']}", f"triton {info['triton']}"]
    if info.get("gpu", "none") != "none":
        parts += [f"CUDA {info['cuda']}", f"driver {info['driver']}"]
    parts += [f"bitsandbytes {info['bitsandbytes']}"]
    if info.get("unsloth", "not installed") != "not installed":
        parts += [f"unsloth {info['unsloth']}"]
    return ", ".join(parts)


def register(path: str | None = None) -> dict:
    """Describe this machine, and store the parameters its series split on where ``asv run --machine
    NAME`` reads them (~/.asv-machine.json). Returns the whole description (``record`` writes it)."""
    from asv.machine import MachineCollection

    info = describe()
    MachineCollection.save(info["machine"], {"machine": info["machine"], "toolchain": toolchain(info)}, _path=path)
    return info


def record(results_dir, info: dict) -> None:
    """The whole description in ``<results_dir>/<machine>/machine.json``, which asv's site shows beside
    the machine's name (asv writes only the parameters there at each run)."""
    path = Path(results_dir) / info["machine"] / "machine.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**info, "toolchain": toolchain(info), "version": 1}, indent=4, sort_keys=True) + "\n")


def one_line(info: dict) -> str:
    if info["gpu"] == "none":
        return f"machine {info['machine']}: {info['cpu']}, no CUDA GPU"
    versions = ", ".join(f"{p} {info[p]}" for p in gpu_state.PACKAGES)
    return f"machine {info['machine']}: {info['gpu']}, driver {info['driver']}, CUDA {info['cuda']}, {versions}"
