"""The GPU types file (.github/gpu-types.toml): read and checked, its measured thresholds recomputed
from the recorded runs, the gate's --gpu-type, and what the workflows read from it."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import recorded

from dev.rehearsal import rehearsal_world
from harness.core import exits, gate_record, policy
from harness.core.paths import ROOT
from harness.gate import cli as gate
from harness.gate import decision

GATE_RECORDS = ROOT / "tests" / "fixtures" / "gate"
PLANTED = {"planted-2x.json", "planted-25pct.json"}  # slowed on purpose: no measure of a type's speed
ALLOWED_DROP = 0.10  # a type's threshold: its slowest recorded no-op gate, less this
IN_PROCESS = 1  # the harness version of the records timed in the process that imported the kernel


def no_op_medians(gpu: policy.GpuType) -> list[float]:
    """The median speed-up of every recorded gate run on ``gpu``'s type that was no planted slowdown."""
    medians = []
    for path in sorted(GATE_RECORDS.rglob("*.json")):
        record = json.loads(path.read_text())
        if path.name in PLANTED or "unsloth" not in record.get("seconds", {}):
            continue
        if record.get("harness_version", gate_record.UNVERSIONED) != IN_PROCESS:
            continue  # the thresholds are the in-process measurement's until ten clock runs a type are kept
        if gpu.runs(record["environment"].get("device", "")):
            medians.append(decision.decide(record, 1.0).ratio_median)
    return medians


def test_the_file_reads_and_every_type_has_its_runner_label():
    types = policy.gpu_types()
    assert {"h100", "h200", "t4"} <= set(types)
    assert all(t.runner == f"gpu-{t.name}" for t in types.values())
    assert [t.name for t in types.values() if t.pull_requests] == ["h100", "h200"]
    assert types["t4"].gate_threshold == 1.15 and not types["t4"].measured and types["t4"].compute_capability == "7.5"


@pytest.mark.parametrize("name", [t.name for t in policy.gpu_types().values() if t.measured])
def test_a_measured_threshold_follows_from_the_recorded_runs(name):
    gpu = policy.gpu_types()[name]
    medians = no_op_medians(gpu)
    assert len(medians) >= 10, f"{name}: {len(medians)} recorded runs are too few to set a threshold from"
    expected = math.floor(min(medians) * (1 - ALLOWED_DROP) * 100) / 100
    assert gpu.gate_threshold == expected, f"{name}: the slowest of {len(medians)} runs is {min(medians):.3f}x"


@pytest.mark.parametrize(
    "text, problem",
    [
        ("", "no GPU types"),
        ("[h100\n", "gpu-types.toml: "),  # not TOML: the file named, and TOML's reason
        ('H100 = "x"\n', "a type is a table"),
        ("[h100]\ndevice = 'H100'\n", "missing"),
        (
            "[a]\ndevice='A'\ncompute_capability='8.0'\ngate_threshold=1.2\nmeasured=true\npull_requests=true\n"
            "history=true\nextra=1\n",
            "unknown ['extra']",
        ),
        (
            "[a]\ndevice='A'\ncompute_capability='8.0'\ngate_threshold='1.2'\nmeasured=true\npull_requests=true\n"
            "history=true\n",
            "gate_threshold = '1.2' is not a finite number above 0",
        ),
        (
            "[a]\ndevice='A'\ncompute_capability='8.0'\ngate_threshold=nan\nmeasured=true\npull_requests=true\n"
            "history=true\n",
            "gate_threshold = nan is not a finite number above 0",
        ),
        (
            "[a]\ndevice=''\ncompute_capability='8.0'\ngate_threshold=1.2\nmeasured=true\npull_requests=1\n"
            "history=true\n",
            "device = '' is not a nonempty string",
        ),
    ],
)
def test_a_wrong_file_is_refused_naming_what(tmp_path, text, problem):
    path = tmp_path / "gpu-types.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        policy.gpu_types(path)


def test_a_rehearsal_world_keeps_every_type_but_runs_on_its_own(tmp_path):
    types = policy.gpu_types()
    only = rehearsal_world.only_on(types, ("h200",))
    path = tmp_path / "gpu-types.toml"
    path.write_text(rehearsal_world.dump_types(only))
    assert policy.gpu_types(path) == only
    assert [t.name for t in only.values() if t.pull_requests] == ["h200"] and set(only) == set(types)
    assert [t.name for t in only.values() if t.history] == ["h200"]
    with pytest.raises(ValueError, match="no GPU type"):
        rehearsal_world.only_on(types, ("a100",))
    assert rehearsal_world.of_device("NVIDIA H100 80GB HBM3", types) == ["h100"]
    assert rehearsal_world.of_device("Tesla T4", types) == ["t4"]
    assert rehearsal_world.of_device("NVIDIA A100", types) == []


@pytest.mark.parametrize(
    "args, code, out",
    [
        (["pull-requests"], 0, '["h100", "h200"]'),
        (["history"], 0, '["h100", "h200"]'),
        (["threshold", "t4"], 0, "1.15"),
        (["threshold", "a100"], 2, "no GPU type 'a100'"),
        (["threshold"], 2, "a TYPE goes with threshold"),
    ],
)
def test_the_command_the_workflows_run(args, code, out):
    done = subprocess.run(
        [sys.executable, "-m", "harness", "gpu-types", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == code and out in done.stdout + done.stderr, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and (done.stdout + done.stderr).strip().splitlines()[-1].count(out) == 1


def test_the_gate_takes_a_types_threshold_and_refuses_another_types_record(tmp_path, capsys):
    record = Path(tmp_path / "gate.json")
    record.write_text(json.dumps(recorded.committed(1)))  # an H200 run, 1.425x
    assert gate.main(["--replay", str(record), "--gpu-type", "h200"]) == decision.EXIT_PASS
    assert "threshold 1.20x" in capsys.readouterr().out
    with pytest.raises(SystemExit) as ended:
        gate.main(["--replay", str(record), "--gpu-type", "h100"])
    assert ended.value.code == exits.BAD_INPUT
    assert "environment.device: 'NVIDIA H200', not a GPU of type h100" in capsys.readouterr().err
    with pytest.raises(SystemExit) as ended:
        gate.main(["--replay", str(record), "--gpu-type", "a100"])
    assert ended.value.code == exits.BAD_INPUT
    # --threshold still wins: the type's record check stays
    assert gate.main(["--replay", str(record), "--gpu-type", "h200", "--threshold", "1.5"]) == decision.EXIT_TOO_SLOW


def test_every_types_compute_capability_is_compiled_in_ci():
    """CI compiles the kernel for every target of nf4kernel.targets.FLEET (tests/test_targets.py):
    a type the checks may run on, T4 included though none has run, is one of them."""
    from nf4kernel import targets

    for gpu in policy.gpu_types().values():
        major, _, minor = gpu.compute_capability.partition(".")
        assert int(major) * 10 + int(minor) in targets.FLEET, f"{gpu.name}: sm_{major}{minor} is not compiled in CI"
