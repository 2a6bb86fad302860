"""The change-point job installs requirements/harness.txt alone (.github/workflows/history.yml), which
holds no numpy: its command must import and run without it, and so must harness/core/stats.py's
rate_upper_95, which says it needs no numpy (``studies.changepoint_power`` runs where the job does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WITHOUT_NUMPY = """
import sys


class NoNumpy:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy."):
            raise ImportError(f"No module named {name!r} (hidden by the test)")


sys.meta_path.insert(0, NoNumpy())
import harness.history.changepoints  # noqa: F401
from harness.core.stats import rate_upper_95

assert "numpy" not in sys.modules
print(round(rate_upper_95(0, 1000), 4), round(rate_upper_95(3, 200), 4), rate_upper_95(10, 10))
"""


def test_the_change_point_command_and_its_upper_bound_need_no_numpy():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_NUMPY], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0.003", "0.0383", "1.0"]
