"""harness/github/gpu_tests.py: the default branch's kernel tests judge the PR's staged kernel (and refuse to
start on any other copy); the PR's own test files run only where they differ; both sandboxed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core import sandbox
from harness.github import gpu_tests

ROOT = Path(__file__).resolve().parents[2]


def kernel_tests_copy(to: Path) -> Path:
    (to / "tests").mkdir(parents=True)
    for path in (ROOT / "tests").glob("*.py"):
        shutil.copy(path, to / "tests" / path.name)
    return to


def test_only_the_prs_added_or_edited_test_files_run_again(tmp_path):
    pr = kernel_tests_copy(tmp_path / "pr")
    assert gpu_tests.their_tests(pr) == []  # the same files ran on the same kernel already
    (pr / "tests" / "test_kernel.py").write_text((pr / "tests" / "test_kernel.py").read_text() + "\n# edited\n")
    (pr / "tests" / "test_new.py").write_text("def test_new():\n    pass\n")
    (pr / "tests" / "harness").mkdir()
    (pr / "tests" / "harness" / "test_theirs.py").write_text("")  # the harness's tests are not the kernel's
    assert sorted(gpu_tests.their_tests(pr)) == ["tests/test_kernel.py", "tests/test_new.py"]


def test_a_pr_that_edits_its_conftest_runs_every_test_file_of_its_own(tmp_path):
    pr = kernel_tests_copy(tmp_path / "pr")
    (pr / "tests" / "conftest.py").write_text("# its own fixtures\n")
    assert len(gpu_tests.their_tests(pr)) == len(list((ROOT / "tests").glob("test_*.py")))


def test_the_suite_refuses_to_start_on_another_copy_of_the_kernel(tmp_path):
    """NF4KERNEL_UNDER_TEST names the staged kernel; a run that imports this checkout's instead stops."""
    staged = tmp_path / "staged"
    staged.mkdir()
    env = {**os.environ, "NF4KERNEL_UNDER_TEST": str(staged), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(ROOT / "tests" / "test_public_api.py")]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, done.stdout[-2000:]
    assert "not the kernel under test" in done.stdout + done.stderr


@pytest.mark.skipif(sandbox.why_not() is not None, reason=f"no sandbox here: {sandbox.why_not()}")
def test_the_job_runs_the_default_branchs_tests_on_the_staged_kernel_in_the_sandbox():
    command = [
        sys.executable,
        "-m",
        "harness",
        "gpu-tests",
        str(ROOT),
        "--device",
        "cpu",
        "--",
        "-q",
        "-n",
        "0",
        "-k",
        "test_public_api",
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "the default branch's kernel tests on nf4kernel of" in out and "passed" in out
    assert "outputs bit for bit bitsandbytes', checked by the reference process" in out
    assert "nothing more to run" in out


@pytest.mark.timeout(900)
@pytest.mark.skipif(sandbox.why_not() is not None, reason=f"no sandbox here: {sandbox.why_not()}")
def test_a_wrong_kernel_whose_pytest_reports_are_forged_fails_the_job_on_the_reference_s_word(tmp_path):
    """The report attack rewrites pytest's reports in its own process, so its suite "passes"; the
    job's verdict rests on the reference process's check, which the candidate can't reach."""
    from dev.rehearsal import attacks

    pr = tmp_path / "pr"
    subprocess.run(["git", "clone", "-q", "--local", str(ROOT), str(pr)], check=True)
    attacks.plant(pr, "report")
    git = ["git", "-C", str(pr), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "-qam", "the report attack"], check=True)
    command = [sys.executable, "-m", "harness", "gpu-tests", str(pr), "--device", "cpu"]
    command += ["--", "-q", "-n", "0", "-k", "test_public_api"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == gpu_tests.EXIT_WRONG, out[-3000:]
    assert "wrong output: exactness matrix nf4 nested bf16 64: nf4kernel's output differs" in out, out[-3000:]
    assert "kernel tests on nf4kernel of" in out and "exit 0 in" in out  # its forged suite still "passed"


def test_bad_arguments_are_one_line_and_exit_2(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "harness", "gpu-tests", str(tmp_path)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 2 and "is not a git checkout" in done.stderr and "Traceback" not in done.stderr
