"""harness/kernel_source.py: the tree under test contributes its nf4kernel/ and nothing else, and the
gate measures exactly that one (``--kernel``), or refuses to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import gate, kernel_source
from harness import rehearse as scratch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def checkouts(tmp_path):
    """This tree (as it is) as the trusted checkout, and a PR's checkout beside it whose commit adds
    a harness/ that would pass anything, a sitecustomize.py, and a symlink in nf4kernel/."""
    trusted = tmp_path / "trusted"
    head = scratch.snapshot(ROOT)
    scratch.git("clone", "-q", "--no-checkout", str(ROOT), str(trusted), cwd=tmp_path)
    scratch.git("fetch", "-q", str(ROOT), head, cwd=trusted)
    scratch.git("checkout", "-q", "--detach", head, cwd=trusted)
    candidate = tmp_path / "candidate"
    scratch.git("clone", "-q", str(trusted), str(candidate), cwd=tmp_path)
    (candidate / "harness" / "decision.py").write_text("DEFAULT_THRESHOLD = 0.0\n")
    (candidate / "sitecustomize.py").write_text("raise SystemExit('the PR ran code outside nf4kernel/')\n")
    (candidate / "nf4kernel" / "leak").symlink_to("../harness")
    (candidate / "nf4kernel" / "marker.py").write_text("WHO = 'the candidate'\n")
    scratch.git("add", "-A", cwd=candidate)
    scratch.git("commit", "-q", "-m", "a candidate", cwd=candidate)
    return trusted, candidate


def test_a_checkout_beside_this_one_contributes_its_nf4kernel_alone(checkouts):
    trusted, candidate = checkouts
    sha = scratch.git("rev-parse", "HEAD", cwd=candidate)
    with kernel_source.staged(str(candidate), repo=trusted) as kernel:
        assert kernel.commit == sha
        assert [p.name for p in kernel.path.iterdir()] == ["nf4kernel"]
        assert (kernel.path / "nf4kernel" / "marker.py").is_file()
        assert not (kernel.path / "nf4kernel" / "leak").exists()  # no link out of the package
    assert scratch.git("cat-file", "-t", sha, cwd=trusted) == "commit"  # fetched: asv can record it


def test_a_commit_of_this_repository_is_a_source_too(checkouts):
    trusted, _ = checkouts
    with kernel_source.staged("HEAD", repo=trusted) as kernel:
        assert kernel.commit == scratch.git("rev-parse", "HEAD", cwd=trusted)
        assert not (kernel.path / "nf4kernel" / "marker.py").exists()


@pytest.mark.parametrize("source", ["no-such-ref", "/nonexistent/checkout"])
def test_a_source_that_names_no_commit_is_refused(checkouts, source):
    trusted, _ = checkouts
    with pytest.raises(kernel_source.SourceError, match="neither a commit"):
        kernel_source.resolve(source, repo=trusted)


def test_a_commit_without_the_package_is_refused(checkouts):
    trusted, candidate = checkouts
    scratch.git("rm", "-r", "-q", "nf4kernel", cwd=candidate)
    scratch.git("commit", "-q", "-m", "no kernel", cwd=candidate)
    with (
        pytest.raises(kernel_source.SourceError, match="has no nf4kernel/"),
        kernel_source.staged(str(candidate), repo=trusted),
    ):
        pass


def measure_kernel_in(trusted: Path, source: str) -> dict:
    """What the gate records of the kernel it measures, as `python -m harness.gate` in ``trusted``
    sets it up (cwd first on the path: the trusted checkout's own nf4kernel is there to shadow)."""
    probe = (
        "import contextlib, json, sys; from harness import gate; "
        "stack = contextlib.ExitStack(); record = {'kernel': gate.use_kernel(sys.argv[1], stack)}; "
        "gate.check_kernel(record); from nf4kernel import marker; record['who'] = marker.WHO; "
        "print(json.dumps(record))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", probe, source], cwd=trusted, env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_gate_imports_the_kernel_under_test_not_the_checkouts_own(checkouts):
    trusted, candidate = checkouts
    record = measure_kernel_in(trusted, "../candidate")
    assert record["who"] == "the candidate"
    assert record["kernel"]["commit"] == scratch.git("rev-parse", "HEAD", cwd=candidate)
    assert record["kernel"]["imported_from"].startswith(record["kernel"]["staged"])


def test_a_kernel_that_is_not_the_one_under_test_is_caught(tmp_path, monkeypatch):
    staged = tmp_path / "elsewhere"
    staged.mkdir()
    with pytest.raises(kernel_source.SourceError, match="not from the kernel under test"):
        gate.check_kernel({"kernel": {"staged": str(staged)}})


@pytest.mark.parametrize(
    "args,message",
    [
        (["--replay", "x.json", "--kernel", "HEAD"], "--kernel and --measure-only are for measuring"),
        (["--kernel", "no-such-ref"], "neither a commit"),
    ],
)
def test_the_gate_refuses_a_kernel_it_cannot_measure(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        gate.main(args)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_measure_only_without_a_gpu_exits_4_and_records_why(tmp_path):
    record = tmp_path / "gate.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # on a GPU machine too: this is about having none
    command = [sys.executable, "-m", "harness.gate", "--measure-only", "--json", str(record)]
    assert subprocess.run(command, cwd=ROOT, env=env, capture_output=True, check=False).returncode == 4
    assert not json.loads(record.read_text())["environment"]["cuda"]


@pytest.mark.parametrize("kind", ["missing", "a-directory"])
def test_a_baseline_that_is_not_a_record_fails_closed(tmp_path, kind, capsys):
    recorded = ROOT / "benchmarks" / "results" / "issue10" / "planted-and-aa" / "planted-base.json"
    baseline = tmp_path / "base-gate.json"
    if kind == "a-directory":
        baseline.mkdir()
    with pytest.raises(SystemExit) as exit_:
        gate.main(["--replay", str(recorded), "--baseline", str(baseline)])
    assert exit_.value.code == 2 and "--baseline" in capsys.readouterr().err
