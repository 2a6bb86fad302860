"""Every command the README and docs/ name, on a machine without a GPU: it does its job, or says in
one line why it can't here and exits with the code its documentation gives. No traceback for an
expected condition. The GPU is hidden (CUDA_VISIBLE_DEVICES=""), so this holds on a GPU machine too.

``DOCUMENTED`` runs the pages' commands as they give them; test_docs.py reads the pages and fails on
a command that is neither here nor in its own table of what CI can't run (with the reason). The
commands' own jobs are tested elsewhere (the main job in test_asv_pipeline.py, the tests by running,
lint and the CPU CI under act in test_act_ci.py); here, their answers where they can't run.

Every command runs in a temporary directory, and what it writes goes there: a documented
``--json gate.json`` run at the root would leave gate.json in the checkout. Each test checks that
the checkout's ``git status`` is what it was."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from dev.rehearsal import attacks
from harness.core import git

ROOT = Path(__file__).resolve().parents[2]
RECORDED_GATE = ROOT / "tests" / "fixtures" / "gate" / "issue10" / "planted-and-aa" / "planted-base.json"
NO_GPU = "no CUDA GPU"
GATE_NO_GPU = "sees no CUDA GPU"
REHEARSE_NO_GPU = "no NVIDIA GPU here"


def run(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    here = str(Path(sys.executable).parent)  # `python` in nox sessions: this environment's
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PATH": f"{here}{os.pathsep}{os.environ['PATH']}"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def said(done: subprocess.CompletedProcess) -> str:
    return done.stdout + done.stderr


def checkout_status() -> str | None:
    """`git status` of the checkout, untracked files one by one; None where it is no git checkout."""
    try:  # bytes, unstripped: a first line's leading " M" must read the same before and after
        status = git.output("status", "--porcelain", "--untracked-files=all", cwd=ROOT, binary=True)
    except git.GitError:
        return None
    return status.decode(errors="replace")


@pytest.fixture(autouse=True)
def the_checkout_is_left_as_it_was():
    before = checkout_status()
    yield
    after = checkout_status()
    if before is not None:
        appeared = sorted(set(after.splitlines()) - set(before.splitlines()))
        assert not appeared, f"new in the checkout's git status while the command ran (it wrote there?): {appeared}"


# --- The pages' commands ------------------------------------------------------------------------------


def every_format_compiled(done: subprocess.CompletedProcess) -> None:
    """`python -m nf4kernel.targets 90`: one row per format, each with its OK. Rows are found by the
    target's name and the status by its token, not by column position, so that realigned or added
    columns don't break the reading."""
    from nf4kernel.targets import FORMATS

    rows = [line for line in done.stdout.splitlines() if "sm_90" in line.split()]
    assert len(rows) == len(FORMATS), done.stdout
    failed = [row for row in rows if "OK" not in row.split() or "FAILED" in row]
    assert not failed, "\n".join(failed)


@dataclass(frozen=True)
class Documented:
    """A command as README.md or docs/ give it (test_docs.normalized reads both alike), the exit code
    and the words it must answer with here. ``run_as``: what runs instead, where the page's form can't
    run as it is (a placeholder such as DIR, an output path that nox, running in the noxfile's folder,
    would write into the checkout, a ref a CI clone may lack, a size that takes minutes); its
    comment says why. ``also``: the page's other forms of the same command, with another placeholder,
    that this run stands for. {root} is the checkout, {tmp} this test's directory (the command's
    working directory is {tmp}/work)."""

    command: str
    code: int
    says: str
    run_as: str | None = None
    also: tuple[str, ...] = ()
    check: Callable[[subprocess.CompletedProcess], None] | None = None


DOCUMENTED = [
    Documented("python -m harness", 2, "regression"),  # the program's commands, listed
    Documented("python -m harness gate", 4, GATE_NO_GPU, also=(".nox/torch/bin/python -m harness gate",)),
    Documented("python -m harness gate --json gate.json", 4, GATE_NO_GPU),
    # ../pr-checkout: a clone of this checkout beside the working directory, as a PR's would be.
    Documented("python -m harness gate --kernel ../pr-checkout --json pr.json", 4, GATE_NO_GPU),
    Documented(".nox/torch/bin/python -m studies.sweep --json tiles.json", 4, NO_GPU),
    # DIR, here and below: a folder of this test's.
    Documented(
        "python -m studies.power noop --runs 10 --out DIR",
        4,
        NO_GPU,
        "python -m studies.power noop --runs 10 --out {tmp}/power",
    ),
    Documented(
        "python -m studies.power ladder --out DIR",
        4,
        NO_GPU,
        "python -m studies.power ladder --out {tmp}/power",
    ),
    # The committed H100 records: the report reads them and writes nothing.
    Documented(
        ".nox/torch/bin/python -m studies.power report --out tests/fixtures/power-h100",
        0,
        "| gate plant |",
        "python -m studies.power report --out {root}/tests/fixtures/power-h100",
        also=(".nox/torch/bin/python -m studies.power report --out DIR",),
    ),
    # The committed A/A runs' batch medians (three call processes per kernel), with the SM clock
    # before every batch: the noise tables, from the checkout (no GPU).
    Documented(
        "python -m studies.aa_noise benchmarks/results/regression-aa-h200/aa-batch-medians-processes3.json.gz",
        0,
        "SM clock before a batch",
        "python -m studies.aa_noise {root}/benchmarks/results/regression-aa-h200/aa-batch-medians-processes3.json.gz",
    ),
    Documented(
        "python -m benchmarks._training --out DIR --no-unsloth",
        4,
        "needs a CUDA GPU",
        "python -m benchmarks._training --out {tmp}/training --no-unsloth",
    ),
    # One target: every target and format takes 34 s on 2 cores (tests/test_targets.py compiles each).
    Documented("python -m nf4kernel.targets", 0, "OK", "python -m nf4kernel.targets 90", check=every_format_compiled),
    Documented("python -m torch.utils.collect_env", 0, "PyTorch version"),
    # 2 pairings instead of 300: the same replay, in 2 s instead of over 5 minutes.
    Documented(
        ".nox/torch/bin/python tests/studies/rule_on_recorded_runs.py",
        0,
        "| plant | runs failed |",
        "python {root}/tests/studies/rule_on_recorded_runs.py --pairings 2 --per-shape-pairings 1",
    ),
    # The committed history, judged as the workflow judges the branch's, GitHub left alone.
    Documented(
        "python -m harness changepoints check --results benchmarks/history --dry-run",
        0,
        "h200: 72 series judged",
        "python -m harness changepoints check --results {root}/benchmarks/history --dry-run",
    ),
    # 20 null histories and no power search instead of 300 and every series: the same code, in seconds.
    Documented(
        "python -m studies.changepoint_power",
        0,
        "null histories of 16 commits called something",
        "python -m studies.changepoint_power --draws 20 --only '^$'",
    ),
    # SCENARIO: noop (the nox -s rehearse entries below run all four).
    Documented(
        "python -m dev.rehearsal rehearse SCENARIO", 4, REHEARSE_NO_GPU, "python -m dev.rehearsal rehearse noop"
    ),
    Documented("nox -s gate", 4, GATE_NO_GPU),
    Documented("nox -s bench -- --store", 4, "--store needs a CUDA GPU"),
    # nox runs a session in the noxfile's folder: a relative gate.json would land in the checkout.
    Documented("nox -s gate -- --json gate.json", 4, GATE_NO_GPU, "nox -s gate -- --json {tmp}/gate.json"),
    # HEAD~1: a ref every clone has (a PR's checkout may have no origin/main).
    Documented(
        "nox -s regression -- BASE HEAD",
        4,
        NO_GPU,
        "nox -s regression -- HEAD~1 HEAD",
        also=("nox -s regression -- origin/main HEAD",),
    ),
    # HEAD~1..HEAD: a CI checkout may have no branch main, or a shallow history.
    Documented("nox -s backfill -- main~10..main --store", 4, NO_GPU, "nox -s backfill -- HEAD~1..HEAD --store"),
    Documented("nox -s rehearse -- noop", 4, REHEARSE_NO_GPU, also=("nox -s rehearse -- SCENARIO",)),
    Documented("nox -s rehearse -- slow", 4, REHEARSE_NO_GPU),
    Documented("nox -s rehearse -- self-pass", 4, REHEARSE_NO_GPU),
    Documented("nox -s rehearse -- hostile", 4, REHEARSE_NO_GPU),
    Documented("nox -s rehearse -- push", 4, REHEARSE_NO_GPU),
    Documented("nox -l", 0, "bench"),
    # A site of its own in {tmp}: none is built there, so preview says how to build one and exits 1
    # (the checkout's own .asv/html may hold a site, which it would serve until stopped).
    Documented("nox -s preview", 1, "no site in", "nox -s preview -- --config {tmp}/asv.conf.json"),
    Documented("tools/gpu-runner/offline-bundle.sh --list", 0, "bitsandbytes=="),
]


def argv(command: str, tmp: Path) -> list[str]:
    """The words to run: ``python`` and ``.nox/torch/bin/python`` are this interpreter, ``nox`` this
    environment's nox with --no-venv on the checkout's noxfile, a repository script its path in the
    checkout."""
    words = [word.format(root=ROOT, tmp=tmp) for word in shlex.split(command)]
    if words[0] in ("python", ".nox/torch/bin/python"):  # this test's environment has torch, as the sessions' has
        return [sys.executable, *words[1:]]
    if words[0] == "nox":
        return [sys.executable, "-m", "nox", "--no-venv", "--noxfile", str(ROOT / "noxfile.py"), *words[1:]]
    if (ROOT / words[0]).is_file():
        return [str(ROOT / words[0]), *words[1:]]
    return words


def place_to_run(tmp: Path, command: str) -> Path:
    """{tmp}/work, beside a clone of this checkout named pr-checkout where the command names one, and
    an asv configuration of {tmp}'s own."""
    work = tmp / "work"
    work.mkdir()
    (tmp / "asv.conf.json").write_text(
        json.dumps({"version": 1, "html_dir": str(tmp / "html"), "results_dir": str(tmp / "results")})
    )
    if "../pr-checkout" in command:
        try:
            head = git.output("rev-parse", "HEAD", cwd=ROOT)
        except git.GitError:
            pytest.skip("this tree is no git checkout: there is no commit to clone")
        clone = tmp / "pr-checkout"
        git.output("clone", "-q", "--shared", "--no-checkout", str(ROOT), str(clone), cwd=tmp)
        git.output("update-ref", "--no-deref", "HEAD", head, cwd=clone)
    return work


@pytest.mark.parametrize("doc", DOCUMENTED, ids=lambda doc: doc.command)
def test_a_documented_command_on_a_cpu(doc, tmp_path):
    command = doc.run_as or doc.command
    done = run(*argv(command, tmp_path), cwd=place_to_run(tmp_path, command))
    assert done.returncode == doc.code, said(done)[-3000:]
    assert doc.says in said(done) and "Traceback" not in said(done), said(done)[-3000:]
    if doc.code == 4:  # can't here: one line says why
        line = next(line for line in said(done).splitlines() if doc.says in line)
        assert len(line) < 240, line
    if doc.check:
        doc.check(done)


# --- The entry points' own answers, beyond the pages' forms ------------------------------------------

# (command, exit code, what the one line says)
CANNOT_RUN_HERE = [
    (["-m", "harness", "gate", "--measure-only", "--kernel", "HEAD"], 4, GATE_NO_GPU),
    (["-m", "harness", "regression", "HEAD~1", "HEAD"], 4, NO_GPU),
    (["-m", "harness", "backfill", "HEAD~1..HEAD"], 4, NO_GPU),
    (["-m", "harness", "bench", "--suite", "gpu", "--no-publish"], 4, "needs a CUDA GPU"),
]


@pytest.mark.parametrize("args,code,why", CANNOT_RUN_HERE, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_a_gpu_command_says_why_in_one_line(args, code, why, tmp_path):
    done = run(sys.executable, *args, cwd=tmp_path)
    assert done.returncode == code, said(done)[-2000:]
    assert why in said(done) and "Traceback" not in said(done)
    line = next(line for line in said(done).splitlines() if why in line)
    assert len(line) < 240  # a sentence, not a dump


@pytest.mark.parametrize(
    "args,code,why",
    [
        (["-m", "harness", "gate", "--rounds", "2"], 2, "--rounds must be at least 5"),
        (["-m", "harness", "gate", "--replay", "nonexistent.json"], 2, "--replay nonexistent.json"),
        (["-m", "harness", "regression", "no-such-ref", "HEAD"], 2, "neither a commit"),
        (["-m", "harness", "backfill", "nothing..here"], 2, "not a revision range here"),
        (["-m", "dev.rehearsal", "rehearse"], 2, "--list names each one"),
    ],
    ids=["gate-rounds", "gate-replay-missing", "regression-unknown-ref", "backfill-bad-range", "rehearse-no-scenario"],
)
def test_bad_arguments_exit_2_with_the_reason(args, code, why, tmp_path):
    done = run(sys.executable, *args, cwd=tmp_path)
    assert done.returncode == code and why in said(done) and "Traceback" not in said(done), said(done)[-2000:]


def test_a_nox_session_passes_a_bad_arguments_code_on(tmp_path):
    """`nox -s` ends with the command's own code (nox alone would say 1); DOCUMENTED's nox commands
    show it for 4. --no-venv: this environment, so that the test installs nothing."""
    done = run(*argv("nox -s backfill -- nothing..here", tmp_path), cwd=tmp_path)
    assert done.returncode == 2, said(done)[-2000:]
    assert "not a revision range here" in said(done) and "Traceback" not in said(done)


def test_preview_before_any_site_says_how_to_build_one(tmp_path):
    config = tmp_path / "asv.conf.json"
    config.write_text(json.dumps({"version": 1, "html_dir": str(tmp_path / "html"), "results_dir": str(tmp_path)}))
    done = run(sys.executable, "-m", "tools.history", "preview", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in said(done)
    assert (
        said(done).strip()
        == f"site: no site in {tmp_path / 'html'} yet: build it with `nox -s publish` (or `nox -s bench`)"
    )


def test_what_needs_no_gpu_does_its_job(tmp_path):
    replayed = run(sys.executable, "-m", "harness", "gate", "--replay", str(RECORDED_GATE), cwd=tmp_path)
    assert replayed.returncode == 0 and said(replayed).strip().endswith("PASS")
    listed = run(sys.executable, "-m", "tools.history", "list", cwd=tmp_path)
    assert listed.returncode == 0 and listed.stdout.startswith("h200: 16 commits")
    scenarios = run(sys.executable, "-m", "dev.rehearsal", "rehearse", "--list", cwd=tmp_path)
    listed = [line.split()[0] for line in scenarios.stdout.splitlines()]
    assert scenarios.returncode == 0 and {"noop", "slow", "self-pass", "hostile", "push"} <= set(listed)
    assert len([name for name in listed if name.startswith("hostile-")]) == len(attacks.ATTACKS)  # the whole set
