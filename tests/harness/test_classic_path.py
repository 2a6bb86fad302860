"""benchmarks/_classic.py, Unsloth's classic path in a process of its own for the asv suite: started
wrongly it says so in one line and exits 2, and the suite's ruler reaches it from any folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import _classic

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "words,environ",
    [
        (["--weights", "4096x1024 bfloat16"], {}),  # not started with UNSLOTH_BNB_TRITON=0
        ([], {"UNSLOTH_BNB_TRITON": "0"}),  # no --weights: the suite's weights are all it times
        (["--weights", "4096x1024 bfloat16", "--rounds", "0"], {"UNSLOTH_BNB_TRITON": "0"}),
    ],
)
def test_the_classic_path_started_wrongly_says_so_in_one_line_and_exits_2(words, environ):
    inherited = {k: v for k, v in os.environ.items() if k != "UNSLOTH_BNB_TRITON"}
    env = {**inherited, "PYTHONPATH": str(ROOT), **environ}
    done = subprocess.run(
        [sys.executable, "-P", "-m", "benchmarks._classic", *words], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_the_ruler_starts_it_from_any_folder_and_reads_its_refusal(tmp_path, monkeypatch):
    """What the ruler gets back from the process: its last line, as the error, where it refused."""
    monkeypatch.chdir(tmp_path)
    found = _classic.in_own_process(["--weights", "1x1 bfloat16"], timeout=60)
    assert found["error"].startswith("python -P -m benchmarks._classic: error: not one of the suite's weights")
