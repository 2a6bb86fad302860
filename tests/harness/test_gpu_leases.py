"""A rehearsal of several runners on one machine (dev/rehearsal/gpu_leases.py): a job holds one GPU for
its whole length, no two running jobs hold the same one, a job waits while all are held, and the
rehearsal's world runs as many jobs at a time as it has GPUs."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import cpu_world
import pytest
import yaml

from dev.rehearsal import act, gpu_leases, rehearsal_world


def test_a_job_keeps_its_gpu_and_two_jobs_get_two(tmp_path):
    assert gpu_leases.claim(tmp_path, "gate", ["0", "1"]) == "0"
    assert gpu_leases.claim(tmp_path, "gate", ["0", "1"]) == "0"  # its later processes: the same GPU
    assert gpu_leases.claim(tmp_path, "regression", ["0", "1"]) == "1"
    assert gpu_leases.release(tmp_path, "gate") == ["0"]
    assert gpu_leases.claim(tmp_path, "gpu-tests", ["0", "1"]) == "0"


def test_a_job_waits_while_every_gpu_is_held_and_times_out_saying_so(tmp_path):
    gpu_leases.claim(tmp_path, "gate", ["0"])
    later = threading.Timer(0.3, gpu_leases.release, (tmp_path, "gate"))
    later.start()
    started = time.monotonic()
    assert gpu_leases.claim(tmp_path, "regression", ["0"], poll_s=0.05) == "0"
    assert time.monotonic() - started >= 0.25
    with pytest.raises(TimeoutError, match="no GPU of"):
        gpu_leases.claim(tmp_path, "gpu-tests", ["0"], wait_s=0.1, poll_s=0.05)
    with pytest.raises(ValueError, match="no GPUs"):
        gpu_leases.claim(tmp_path, "x", [])


def test_the_shim_sets_the_jobs_gpu_for_every_process_it_starts(tmp_path):
    shims = gpu_leases.shim(tmp_path / "shim", sys.executable)
    leases = tmp_path / "leases"
    leases.mkdir()
    env = {**os.environ, "NF4KERNEL_GPU_LEASES": str(leases), "NF4KERNEL_GPUS": "3 5", "GITHUB_JOB": "gate"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    child = "import os, subprocess, sys; print(os.environ['CUDA_VISIBLE_DEVICES'])"
    child += "; subprocess.run([sys.executable, '-c', 'import os; print(os.environ[\"CUDA_VISIBLE_DEVICES\"])'])"
    done = subprocess.run([str(shims / "python3"), "-c", child], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.split() == ["3", "3"], done.stdout + done.stderr
    other = subprocess.run(
        [str(shims / "python"), "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"],
        env={**env, "GITHUB_JOB": "regression"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert other.stdout.split() == ["5"], other.stdout + other.stderr
    # act's log (the job's stderr) says which GPU the job ran on, once per step that starts Python
    assert other.stderr.count("gpu_leases: regression runs on GPU 5") == 1, other.stderr


def test_the_shim_keeps_the_job_on_its_gpus_cores_where_it_is_given_them(tmp_path):
    shims = gpu_leases.shim(tmp_path / "shim", sys.executable)
    leases = tmp_path / "leases"
    leases.mkdir()
    cpu = min(os.sched_getaffinity(0))
    env = {
        **os.environ,
        "NF4KERNEL_GPU_LEASES": str(leases),
        "NF4KERNEL_GPUS": "3",
        "NF4KERNEL_GPU_CPUS": f"3={cpu}",
        "GITHUB_JOB": "gate",
    }
    child = "import os, subprocess, sys; print(sorted(os.sched_getaffinity(0)))"
    child += "; subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))'])"
    done = subprocess.run([str(shims / "python3"), "-c", child], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.split() == [f"[{cpu}]"] * 2, done.stdout + done.stderr
    assert f"gpu_leases: gate runs on GPU 3, CPUs {cpu}" in done.stderr, done.stderr


def test_cpu_shares_gives_each_gpu_its_share_or_refuses(tmp_path):
    split = tmp_path / "split.sh"
    split.write_text('[ "$2" -le 2 ] || { echo "too few cores" >&2; exit 2; }; echo "cpus-of-$1"\n')
    assert gpu_leases.cpu_shares(["4", "6"], split) == "4=cpus-of-0 6=cpus-of-1"
    assert gpu_leases.cpu_shares(["1"], split, host=["0", "1"]) == "1=cpus-of-1"  # beside a rehearsal on GPU 0
    with pytest.raises(RuntimeError, match="no cores of their own for 3 runners: too few cores"):
        gpu_leases.cpu_shares(["0", "1", "2"], split)


# Three GPU-less jobs, each printing its GPU and its CPUs from two processes seconds apart.
PRINT_GPU_AND_CPUS = 'import os; print("on", os.environ["CUDA_VISIBLE_DEVICES"], sorted(os.sched_getaffinity(0)))'
JOBS = {
    name: {
        "runs-on": "ubuntu-latest",
        "steps": [
            {
                "run": f"python -c '{PRINT_GPU_AND_CPUS}'\n"
                "sleep 5\n"  # long enough that two jobs started together overlap on a loaded machine
                f"python3 -c '{PRINT_GPU_AND_CPUS}'"
            }
        ],
    }
    for name in ("first", "second", "third")
}


@pytest.mark.skipif(act.why_not_here() is not None, reason=str(act.why_not_here()))
def test_the_world_runs_as_many_jobs_at_a_time_as_it_has_gpus_each_on_its_own(tmp_path):
    world = rehearsal_world.World(tmp_path / "world", working_tree=True, gpu_types=cpu_world.RECORDED_ON)
    folder = tmp_path / "workflows"
    folder.mkdir()
    (folder / "leases.yml").write_text(yaml.safe_dump({"name": "leases", "on": "push", "jobs": JOBS}, sort_keys=False))
    here = str(os.path.dirname(sys.executable))
    result = world.run(
        "push",
        world.push_event(),
        folder,
        timeout=120,
        env={"PATH": f"{here}{os.pathsep}{os.environ['PATH']}"},
        gpus=("0", "1"),
    )
    assert result.results == dict.fromkeys(JOBS, "success"), "\n".join(line for _, line in result.log)[-3000:]
    seen = {job: [] for job in JOBS}
    held = {}  # job -> [first, last] time it printed its GPU: inside its lease (act's own lines of a
    # job that ended can come after the next job's first ones, while its lease is already released)
    for at, line in result.log:
        for job in JOBS:
            if line.startswith(f"[{job}]") and "| on " in line:
                seen[job].append(line.rsplit("on ", 1)[1])
                held.setdefault(job, [at, at])[1] = at
    assert all(len(set(gpus)) == 1 and len(gpus) == 2 for gpus in seen.values()), seen  # one GPU a job
    cpus_of = {}  # GPU -> the CPUs its jobs ran on
    for printed in seen.values():
        gpu, cpus = printed[0].split(" ", 1)
        cpus_of.setdefault(gpu, set()).add(cpus)
    if len(os.sched_getaffinity(0)) >= 2:  # cores enough for two runners: each GPU's jobs on their own
        assert all(len(c) == 1 for c in cpus_of.values()), cpus_of
        assert len(set().union(*cpus_of.values())) == 2, cpus_of
    spans = held
    for a in JOBS:
        for b in JOBS:
            overlap = a < b and spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]
            if overlap:
                assert seen[a][0] != seen[b][0], (a, b, seen, spans)  # running together: two GPUs
    at_once = max(sum(s[0] <= t <= s[1] for s in spans.values()) for t in (s[0] for s in spans.values()))
    assert at_once == 2, spans  # two runners: two jobs at a time, never three
