"""dev/rehearsal/rehearse.py's parts that need no GPU: reading act's output, the scenarios' commits (each
still applies to this tree), and the command's answers where it can't rehearse."""

from __future__ import annotations

import os

import cpu_world
import pytest

from dev.rehearsal import rehearsal_world, rehearse, scenarios

ACT_OUTPUT = """\
[approve] ⭐ Run Main Check the approval
[approve]   | @maintainer approved 0123456789ab, the head of PR #8
[approve]   ⚙  Summary - ### GPU approval

@maintainer approved it.
[approve] 🏁  Job succeeded
[gate]   ⚙  Summary - ### nf4kernel speed gate

| shape | implementation |
|---|---|

**FAIL: slow**
[gate] exit status 1
[gate] 🏁  Job failed
[report]   | status 'gpu' on ...: failure
[report] 🏁  Job succeeded
"""


def test_act_output_gives_each_jobs_result_and_summary():
    run = rehearsal_world.read_act_output(ACT_OUTPUT.splitlines(keepends=True), started=0.0, echo=False)
    assert run.results == {"approve": "success", "gate": "failure", "report": "success"}
    assert (
        run.summaries["gate"] == "### nf4kernel speed gate\n\n| shape | implementation |\n|---|---|\n\n**FAIL: slow**\n"
    )
    assert run.summaries["approve"].startswith("### GPU approval")
    assert set(run.spans) == {"approve", "gate", "report"} and len(run.log) == len(ACT_OUTPUT.splitlines())


@pytest.mark.parametrize("name", [n for n, s in scenarios.SCENARIOS.items() if s.change is not None])
def test_each_scenarios_commit_still_applies_to_this_tree(tmp_path, name):
    world = rehearsal_world.World(tmp_path, working_tree=True, gpu_types=cpu_world.RECORDED_ON)
    head = world.commit_pr(scenarios.SCENARIOS[name].change)
    changed = rehearsal_world.git("diff", "--name-only", world.main, head, cwd=world.scratch / "pr-8").split()
    if name == "noop":
        assert changed == []
    elif name.startswith("hostile-"):  # the attacks: the package's __init__.py alone
        assert changed == ["nf4kernel/__init__.py"]
    else:
        assert "nf4kernel/launch_cache.py" in changed
    if name == "self-pass":
        assert ".github/gpu-types.toml" in changed  # the policy: thresholds and limits
    assert rehearsal_world.git("rev-parse", "refs/pull/8/head", cwd=world.origin) == head


def test_the_command_lists_its_scenarios(capsys):
    assert rehearse.main(["--list"]) == 0
    assert set(line.split()[0] for line in capsys.readouterr().out.splitlines()) == set(scenarios.SCENARIOS)


def test_without_a_gpu_it_says_so_and_exits_4(monkeypatch, capsys):
    monkeypatch.setattr(rehearse, "gpu_here", lambda: False)
    assert rehearse.main(["noop"]) == 4
    assert "no NVIDIA GPU here" in capsys.readouterr().err


@pytest.mark.parametrize("gpus", ["", "2", "0,0", "1,x"])
def test_gpus_must_name_this_machines_gpus_of_its_type(monkeypatch, capsys, gpus):
    monkeypatch.setattr(rehearse, "gpu_here", lambda: True)
    monkeypatch.setattr(rehearse, "local_gpus", lambda: [("0", "h200"), ("1", "h200")])
    monkeypatch.setattr(rehearse.act, "why_not_here", lambda: None)
    monkeypatch.setattr(rehearse.shutil, "which", lambda name: "/usr/bin/python")
    monkeypatch.setattr(rehearse, "rehearse", lambda *a, **k: pytest.fail("rehearsed with bad --gpus"))
    assert rehearse.main(["noop", "--gpus", gpus]) == 2
    assert "--gpus is a list of this machine's h200 GPUs (0,1)" in capsys.readouterr().err


def test_gpus_split_the_cores_among_every_gpu_of_the_host(monkeypatch):
    monkeypatch.setattr(rehearse, "gpu_here", lambda: True)
    monkeypatch.setattr(rehearse, "local_gpus", lambda: [("0", "h200"), ("1", "h200"), ("2", "h200")])
    monkeypatch.setattr(rehearse.act, "why_not_here", lambda: None)
    monkeypatch.setattr(rehearse.shutil, "which", lambda name: "/usr/bin/python")
    seen = {}
    monkeypatch.setattr(rehearse, "rehearse", lambda *a, **k: seen.update(k) or 0)
    assert rehearse.main(["noop", "--gpus", "2"]) == 0
    assert seen["gpus"] == ("2",) and seen["host_gpus"] == ("0", "1", "2")


@pytest.mark.parametrize("hidden", ["", "-1"])
def test_a_gpu_hidden_from_cuda_is_no_gpu_even_where_nvidia_smi_lists_one(tmp_path, monkeypatch, hidden):
    """The CPU tests hide a GPU machine's GPU with CUDA_VISIBLE_DEVICES=""; nvidia-smi ignores it. On
    the GPU runner, a rehearsal started by a test once ran the whole workflow inside the test job."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert rehearse.gpu_here()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
    assert not rehearse.gpu_here()
