"""studies/probes/host_ab.py's parts that need no GPU: the verdict over pairs of processes, and its answers
where it can't measure."""

from __future__ import annotations

import pytest
import torch

from studies.probes import host_ab


def pair(before_planned, before_torch, after_planned, after_torch):
    return {
        "before": {"planned_us": before_planned, "torch_us": before_torch},
        "after": {"planned_us": after_planned, "torch_us": after_torch},
    }


def test_a_process_that_is_slow_all_over_is_no_change():
    """The H100's case: the after process ran every torch call 2x slower, and the planned call with it."""
    pairs = [pair(11.0, 2.1, 11.0 * 2.9 / 2.1 * f, 2.9 * f) for f in (1.0, 1.02, 0.98, 1.01, 0.99, 1.0)]
    found = host_ab.verdict(pairs)
    assert found["change"] == pytest.approx(1.0, abs=0.001)
    assert found["ci_low"] <= 1.0 <= found["ci_high"]
    assert found["planned_us_median"]["after"] > 1.3 * found["planned_us_median"]["before"]  # the raw figure misleads


def test_a_cost_of_one_microsecond_shows_beyond_the_noise():
    pairs = [pair(11.0 * f, 2.0 * f, 12.0 * f, 2.0 * f) for f in (1.0, 1.3, 0.9, 1.6, 1.1, 2.0, 1.2, 0.95)]
    found = host_ab.verdict(pairs)
    assert found["change"] == pytest.approx(12 / 11, rel=1e-9)
    assert found["ci_low"] > 1.05


def test_bad_arguments_exit_2(tmp_path, capsys):
    assert host_ab.main([str(tmp_path)]) == 2
    assert "must be a folder holding nf4kernel/" in capsys.readouterr().err
    (tmp_path / "nf4kernel").mkdir()
    (tmp_path / "nf4kernel" / "__init__.py").write_text("")
    assert host_ab.main([str(tmp_path), "--pairs", "1"]) == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what the script says on a machine without a GPU")
def test_without_a_gpu_it_says_so_and_exits_4(tmp_path, capsys):
    (tmp_path / "nf4kernel").mkdir()
    (tmp_path / "nf4kernel" / "__init__.py").write_text("")
    assert host_ab.main([str(tmp_path)]) == 4
    assert "needs a CUDA GPU" in capsys.readouterr().err
