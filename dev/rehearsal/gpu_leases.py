"""One GPU per job in a rehearsal of several runners on one machine (``rehearse --runners N``).

act runs every job on this host; a fleet gives each job a runner with one GPU of its own. The
rehearsal emulates that: act runs N jobs at a time (``--concurrent-jobs N``), and the first
``python`` a job starts (a shim first on the job's PATH, ``shim``) claims a free GPU for the whole
job, a lease file holding the job's name, and runs with ``CUDA_VISIBLE_DEVICES`` set to it, as every
process it starts does. Where ``NF4KERNEL_GPU_CPUS`` gives the GPU's cores (``cpu_shares``), it runs
on them alone (``taskset``), as the JIT loop's ``AllowedCPUs=`` and ARC's exclusive cores keep a
runner's job off the others' cores. The rehearsal releases a job's lease when act reports the job done.

Standard library only, and run as a script by the shim (``python3 -P gpu_leases.py claim JOB``):
the shim runs before anything of the harness is on the job's path.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

WAIT_S = 1800  # a job waits this long for a GPU, as a queued job waits for a runner


def claim(folder: Path, job: str, gpus: list[str], wait_s: float = WAIT_S, poll_s: float = 0.5) -> str:
    """The GPU leased to ``job``: the one it holds already, else the first free one (the lease
    created atomically), waiting while all are held. TimeoutError after ``wait_s``."""
    if not gpus:
        raise ValueError("no GPUs to lease")
    deadline = time.monotonic() + wait_s
    while True:
        for gpu in gpus:
            lease = folder / f"gpu-{gpu}"
            try:
                if lease.read_text() == job:
                    return gpu
            except FileNotFoundError:
                pass
        for gpu in gpus:
            try:
                fd = os.open(folder / f"gpu-{gpu}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w") as lease:
                lease.write(job)
            return gpu
        if time.monotonic() > deadline:
            raise TimeoutError(f"no GPU of {gpus} came free for {job} in {wait_s:.0f} s")
        time.sleep(poll_s)


def release(folder: Path, job: str) -> list[str]:
    """Frees every GPU ``job`` holds; the GPUs freed."""
    freed = []
    for lease in sorted(folder.glob("gpu-*")):
        try:
            if lease.read_text() == job:
                lease.unlink()
                freed.append(lease.name.removeprefix("gpu-"))
        except FileNotFoundError:
            continue
    return freed


def cpu_shares(gpus: list[str], split: Path, host: list[str] | None = None) -> str:
    """``NF4KERNEL_GPU_CPUS`` for ``gpus``: each GPU's even share of this host's cores among
    ``host``'s GPUs (default ``gpus``; the JIT loop splits by every GPU of the host, so rehearsals
    side by side on other GPUs keep to their own cores), as ``GPU=CPUS`` words, from ``split``
    (tools/gpu-runner/gpu-cpus.sh, the JIT loop's). RuntimeError where the host has too few cores
    to give each GPU one."""
    every = list(host or gpus)
    shares = []
    for gpu in gpus:
        done = subprocess.run(
            ["bash", str(split), str(every.index(gpu)), str(len(every))], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"no cores of their own for {len(every)} runners: {done.stderr.strip()}")
        shares.append(f"{gpu}={done.stdout.strip()}")
    return " ".join(shares)


SHIM = """#!/bin/sh
# The rehearsal's `{name}`: the job's first Python claims a GPU for the whole job (gpu_leases.py).
if [ -z "${{NF4KERNEL_LEASED:-}}" ]; then
  lease=$("{real}" -P "{leases}" claim "${{GITHUB_JOB:?}}") || exit 1
  gpu=${{lease%% *}}; cpus=${{lease#"$gpu"}}
  export CUDA_VISIBLE_DEVICES="$gpu" NF4KERNEL_LEASED=1
  [ -z "$cpus" ] || exec taskset -c "${{cpus# }}" "{real}" "$@"
fi
exec "{real}" "$@"
"""


def shim(folder: Path, real_python: str) -> Path:
    """A folder holding ``python`` and ``python3`` that claim the job's GPU, then run ``real_python``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("python", "python3"):
        path = folder / name
        path.write_text(SHIM.format(name=name, real=real_python, leases=Path(__file__).resolve()))
        path.chmod(0o755)
    return folder


def main(argv: list[str]) -> int:
    """``claim JOB``: prints the job's GPU, and its cores where NF4KERNEL_GPU_CPUS names them
    (NF4KERNEL_GPU_LEASES: the folder; NF4KERNEL_GPUS: the GPUs)."""
    if len(argv) != 2 or argv[0] != "claim":
        print("usage: gpu_leases.py claim JOB", file=sys.stderr)
        return 2
    folder, gpus = os.environ.get("NF4KERNEL_GPU_LEASES"), os.environ.get("NF4KERNEL_GPUS", "").split()
    if not folder or not gpus:
        print("gpu_leases: NF4KERNEL_GPU_LEASES and NF4KERNEL_GPUS name the leases and the GPUs", file=sys.stderr)
        return 2
    try:
        gpu = claim(Path(folder), argv[1], gpus)
    except TimeoutError as error:
        print(f"gpu_leases: {error}", file=sys.stderr)
        return 1
    cpus = dict(word.split("=", 1) for word in os.environ.get("NF4KERNEL_GPU_CPUS", "").split()).get(gpu, "")
    # On stderr, so act's log shows where each job ran (the shim reads stdout).
    print(f"gpu_leases: {argv[1]} runs on GPU {gpu}" + (f", CPUs {cpus}" if cpus else ""), file=sys.stderr)
    print(f"{gpu} {cpus}".strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
