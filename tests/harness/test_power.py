"""studies/power.py on the CPU: the planted commits it measures, and its report from runs (built
here from the H200 runs, as the rule's tests build them). Its measurements need a GPU."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import recorded

from studies import power

ROOT = Path(__file__).resolve().parents[2]
LARGE = [k for k in recorded.history_run(recorded.SAME_KERNEL[0]) if recorded.packed_bytes(k) >= 16 * 2**20]


def test_a_planted_commit_is_head_with_the_plant_and_nothing_else():
    commit = power.planted_commit("large-10pct")
    changed = subprocess.run(
        ["git", "diff", "--name-only", "HEAD", commit], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert changed == ["nf4kernel/api.py"]
    source = subprocess.run(["git", "show", f"{commit}:nf4kernel/api.py"], cwd=ROOT, capture_output=True, text=True)
    assert "int(0.10 * moved" in source.stdout
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "plant-large-10pct" not in worktrees  # the throwaway worktree is gone


def test_the_report_says_each_runs_verdict_and_how_close_it_came(tmp_path):
    runs = [
        {"kind": "noop", "plant": None, "run": 1, "exit": 0, **power.summarize(recorded.regression_record())},
        {
            "kind": "ladder",
            "plant": "large-10pct",
            "run": 1,
            "exit": 0,
            **power.summarize(recorded.regression_record(dict.fromkeys(LARGE, 1.10))),
        },
        {"kind": "noop", "plant": None, "run": 2, "exit": 4},
    ]
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    lines = power.report(tmp_path).splitlines()
    assert lines[2].startswith("| noop  #1 | pass | 0 | ")
    assert lines[3].startswith("| ladder large-10pct #1 | FAIL | ")
    assert "limit 1.05" in lines[3] or "limit 1.02" in lines[3]
    assert lines[4] == "| noop  #2 | measurement exit 4 | | | |"


def test_report_without_runs_says_measure_first(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        power.main(["report", "--out", str(tmp_path)])
    assert stopped.value.code == 2 and "measure first" in capsys.readouterr().err


# --- False alarms beyond the runs made: no-op runs built from recorded processes ---------------------


def _h100_noops() -> list[dict]:
    """The six no-op runs of 637a7c4, on one machine (the directory also holds later commits' runs)."""
    return power.noop_records(recorded.H100_LADDER, "637a7c4")


def test_resampled_no_ops_are_built_from_whole_processes_of_one_commit():
    records = _h100_noops()
    pool = power.noop_processes(records)
    assert len(pool) >= 36 and all(len(p) == 12 for p in pool)
    done = []
    found = power.resampled_noops(records, draws=3, seed=1, progress=done.append)
    assert found["draws"] == 3 and found["processes"] == len(pool)
    assert done == [1, 2, 3]  # progress after every draw
    assert found == power.resampled_noops(records, draws=3, seed=1)  # the seed names the draws


def test_resampling_refuses_records_of_two_commits():
    records = _h100_noops()
    other = {**records[0], "base": "f" * 40, "head": "f" * 40}
    with pytest.raises(ValueError, match="one commit"):
        power.resampled_noops([*records[:2], other], draws=1)


def test_resampling_counts_the_false_alarms_a_rule_without_a_practical_minimum_raises():
    """No-op runs drawn from the H100's real processes: called where any change beyond the noise is
    called, never under the rule's 5%. The estimate can fail, and the 5% minimum is what it shows
    matters (the same ten draws, one seed)."""
    records = _h100_noops()
    lax = power.resampled_noops(records, draws=10, seed=2, min_change=1e-9)
    assert lax["failed"] > 0 and sum(lax["called"].values()) >= lax["failed"], lax
    assert power.resampled_noops(records, draws=10, seed=2)["failed"] == 0


def test_the_upper_bound_of_a_rate_never_seen():
    assert power._upper_95(0, 1000) == pytest.approx(0.0030, abs=0.0001)  # the "rule of three"
    assert power._upper_95(5, 1000) == pytest.approx(0.0105, abs=0.0002)


def _noop_records_in(folder: Path) -> Path:
    """A copy of the H100's recorded no-op runs, to resample without touching the committed ones."""
    for path in recorded.H100_LADDER.glob("noop-*.json.gz"):
        shutil.copyfile(path, folder / path.name)
    return folder


def test_resample_never_overwrites_its_result_unless_forced(tmp_path, capsys):
    result = _noop_records_in(tmp_path) / power.RESAMPLED
    result.write_text("a committed result\n")
    assert power.main(["resample", "--out", str(tmp_path), "--commit", "637a7c4", "--draws", "2"]) == 2
    said = capsys.readouterr()
    assert said.out == "" and said.err == f"power: {result} exists: pass --force to overwrite it\n"
    assert result.read_text() == "a committed result\n"
    assert power.main(["resample", "--out", str(tmp_path), "--commit", "637a7c4", "--draws", "2", "--force"]) == 0
    assert json.loads(result.read_text())["draws"] == 2


def test_resample_says_how_far_it_has_come(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(power, "PROGRESS_SECONDS", 0.0)  # a line after every draw
    _noop_records_in(tmp_path)
    assert power.main(["resample", "--out", str(tmp_path), "--commit", "637a7c4", "--draws", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"power: resample: 2 no-op runs to build from 6 no-op records in {tmp_path}")
    assert [re.sub(r"\d+ s$", "N s", line) for line in lines[1:3]] == [
        "power: resample: 1 of 2 draws, N s",
        "power: resample: 2 of 2 draws, N s",
    ]
    assert lines[3].startswith("power: 0 of 2 no-op runs built from 36 recorded processes failed")


def test_progress_lines_come_every_so_often_and_at_the_end(capsys):
    times = iter([0.0, 10.0, 29.0, 31.0, 45.0, 50.0])  # the start, then after each of five draws
    report = power.progress_line(5, every=30.0, clock=lambda: next(times))
    for done in range(1, 6):
        report(done)
    assert capsys.readouterr().out.splitlines() == [
        "power: resample: 3 of 5 draws, 31 s",
        "power: resample: 5 of 5 draws, 50 s",
    ]


def test_resample_refuses_fewer_than_one_draw(tmp_path, capsys):
    _noop_records_in(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        power.main(["resample", "--out", str(tmp_path), "--draws", "0"])
    assert stopped.value.code == 2 and "--draws must be at least 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / power.RESAMPLED).exists()


def test_help_gives_whole_sentences(capsys):
    with pytest.raises(SystemExit) as stopped:
        power.main(["--help"])
    assert stopped.value.code == 0
    paragraphs = [" ".join(p.split()) for p in capsys.readouterr().out.split("\n\n")]
    description, epilog = paragraphs[1], paragraphs[-1]
    assert description == " ".join(power.__doc__.split("\n\n")[0].split())
    assert description.endswith("a ladder of planted slowdowns of known size (``dev/rehearsal/plants/``).")
    assert epilog.startswith("Exit 0:") and epilog.endswith("Exit 4: no CUDA GPU.")
