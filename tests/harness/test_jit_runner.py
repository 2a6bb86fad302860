"""tools/gpu-runner/jit-runner.sh, one loop per GPU, run once (ONE_JOB=1) against stand-ins for what it
calls on a host (nvidia-smi, curl to GitHub, systemd-run, install/chown): the runner it registers
carries its GPU type's label, and the job's unit may open that GPU's device node alone, sees it by
UUID, has that GPU's share of the host's cores, and runs as that GPU's own user in that GPU's own
folder. Bad settings stop it with one line."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "gpu-runner" / "jit-runner.sh"
CPUS = SCRIPT.with_name("gpu-cpus.sh")

# Two GPUs: index 0 (minor number 0) and index 1 (minor number 3, as on hosts whose device nodes are
# numbered apart from nvidia-smi's order).
FAKES = {
    "nvidia-smi": """#!/usr/bin/env python3
import sys
args = sys.argv[1:]
gpus = {"0": ("GPU-aaaa-0", "0"), "1": ("GPU-bbbb-1", "3")}
if args == ["-L"]:
    for index, (uuid, _) in gpus.items():
        print(f"GPU {index}: NVIDIA H100 80GB HBM3 (UUID: {uuid})")
    sys.exit(0)
index = args[args.index("-i") + 1]
if index not in gpus:
    print(f"No devices were found", file=sys.stderr); sys.exit(6)
uuid, minor = gpus[index]
if "-q" in args:
    print(f"GPU 00000000:1{index}:00.0\\n    Minor Number                          : {minor}")
else:
    print(uuid)
""",
    "curl": """#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
with open(os.environ["CALLS"], "a") as log:
    log.write(json.dumps({"tool": "curl", "args": args}) + "\\n")
print(json.dumps({"encoded_jit_config": "CONFIG"}))
""",
    "systemd-run": """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["CALLS"], "a") as log:
    log.write(json.dumps({"tool": "systemd-run", "args": sys.argv[1:]}) + "\\n")
""",
    # Eight CPUs: four cores, each with a second thread numbered four above it, as Linux numbers
    # hyperthreads (LSCPU_CORES overrides the core count, one thread each).
    "lscpu": """#!/usr/bin/env python3
import os
cores = int(os.environ.get("LSCPU_CORES", "0"))
print("# The following is the parsable format\\n# CPU,Core")
rows = [(cpu, cpu) for cpu in range(cores)] if cores else [(cpu, cpu % 4) for cpu in range(8)]
for cpu, core in rows:
    print(f"{cpu},{core}")
""",
    "taskset": '#!/bin/sh\necho "pid $2\'s current affinity list: ${AFFINITY:-0-7}"\n',
    # The job user doesn't exist here: ownership is the host's business, not this test's.
    "chown": "#!/bin/sh\nexit 0\n",
    "install": (
        "#!/bin/sh\n"
        'while [ $# -gt 0 ]; do case $1 in -o|-g|-m) shift 2 ;; -d) shift ;; *) mkdir -p "$1"; shift ;; esac; done\n'
    ),
}


def run_loop(tmp_path: Path, **settings: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    bin_dir, template, credentials = tmp_path / "bin", tmp_path / "template", tmp_path / "credentials"
    for folder in (bin_dir, template, credentials):
        folder.mkdir(exist_ok=True)
    for name, text in FAKES.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (template / "run.sh").write_text("#!/bin/sh\n")
    (credentials / "github-token").write_text("token")
    calls = tmp_path / "calls.jsonl"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "CALLS": str(calls),
        "GITHUB_ORG": "acme",
        "RUNNER_GROUP_ID": "7",
        "CREDENTIALS_DIRECTORY": str(credentials),
        "RUNNER_TEMPLATE": str(template),
        "ONE_JOB": "1",
        **settings,
    }
    env.setdefault("JOB_ROOT", str(tmp_path / f"gpu-job{env.get('GPU_INDEX', '')}"))
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    logged = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    return done, logged


def test_a_loop_registers_its_gpu_types_runner_and_gives_the_job_its_one_gpu(tmp_path):
    done, calls = run_loop(tmp_path, GPU_TYPE="h100", GPU_INDEX="1")
    assert done.returncode == 0, done.stdout + done.stderr
    curl = next(c["args"] for c in calls if c["tool"] == "curl")
    body = json.loads(curl[curl.index("-d") + 1])
    assert body["labels"] == ["self-hosted", "linux", "x64", "gpu", "gpu-h100"]
    assert body["name"].startswith("gpu-h100-") and body["runner_group_id"] == 7
    unit = next(c["args"] for c in calls if c["tool"] == "systemd-run")
    assert unit[unit.index("DevicePolicy=closed") - 1] == "-p"
    allowed = [unit[i + 1] for i, arg in enumerate(unit) if arg == "-p" and unit[i + 1].startswith("DeviceAllow=")]
    assert "DeviceAllow=/dev/nvidia3 rw" in allowed  # GPU 1's node, by its minor number
    assert not [a for a in allowed if a.startswith("DeviceAllow=/dev/nvidia0")], allowed  # not GPU 0's
    assert "CUDA_VISIBLE_DEVICES=GPU-bbbb-1" in unit
    # GPU 1 of 2 gets the second half of the cores, each with both its threads
    assert unit[unit.index("AllowedCPUs=2,3,6,7") - 1] == "-p"
    assert unit[unit.index("--uid") + 1] == "gpu-job1"
    properties = {unit[i + 1] for i, arg in enumerate(unit) if arg == "-p"}
    assert {"NoNewPrivileges=yes", "SystemCallArchitectures=native", "RestrictSUIDSGID=yes"} <= properties
    # bubblewrap builds the sandbox from namespaces and mounts, and a fresh /proc: none may be taken away
    assert not [p for p in properties if p.startswith(("RestrictNamespaces", "ProtectKernelTunables", "ProtectProc"))]
    assert not [p for p in properties if p.startswith("SystemCallFilter") and "mount" in p]
    assert unit[-2:] == ["--jitconfig", "CONFIG"]


@pytest.mark.parametrize(
    "settings, why",
    [
        ({"GPU_INDEX": "0"}, "GPU_TYPE"),
        ({"GPU_TYPE": "h100"}, "GPU_INDEX"),
        ({"GPU_TYPE": "H100", "GPU_INDEX": "0"}, "GPU_TYPE: lower-case letters and digits"),
        ({"GPU_TYPE": "h100", "GPU_INDEX": "0;rm"}, "GPU_INDEX: a number"),
        ({"GPU_TYPE": "h100", "GPU_INDEX": "5"}, "no GPU 5 here"),
        ({"GPU_TYPE": "h100", "GPU_INDEX": "1", "LSCPU_CORES": "1"}, "no CPU cores left for GPU 1"),
    ],
)
def test_a_loop_with_bad_settings_registers_nothing(tmp_path, settings, why):
    done, calls = run_loop(tmp_path, **settings)
    assert done.returncode != 0 and why in done.stderr, done.stdout + done.stderr
    assert not [c for c in calls if c["tool"] in ("curl", "systemd-run")]


@pytest.mark.parametrize("args", [[], ["1"], ["x", "2"], ["2", "2"], ["0", "-1"]])
def test_gpu_cpus_refuses_bad_arguments_in_one_line(tmp_path, args):
    done = subprocess.run(["bash", str(CPUS), *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and not done.stdout, done.stderr


@pytest.mark.parametrize(
    "affinity, shares",
    [
        ("0-7", ["0,1,4,5", "2,3,6,7"]),  # every core: two each, with both their threads
        ("0-1,4-5", ["0,4", "1,5"]),  # a cpuset of two cores (a container's): split those alone
        ("2,6", None),  # one core for two GPUs: refused
    ],
)
def test_gpu_cpus_splits_the_cores_this_process_may_run_on(tmp_path, affinity, shares):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("lscpu", "taskset"):
        (bin_dir / name).write_text(FAKES[name])
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "AFFINITY": affinity}
    runs = [
        subprocess.run(["bash", str(CPUS), str(i), "2"], env=env, capture_output=True, text=True, timeout=30)
        for i in (0, 1)
    ]
    if shares is None:
        assert runs[1].returncode == 2 and "no CPU cores left for GPU 1" in runs[1].stderr, runs[1].stderr
    else:
        assert [r.stdout.strip() for r in runs] == shares, [r.stdout + r.stderr for r in runs]
