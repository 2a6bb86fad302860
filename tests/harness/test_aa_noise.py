"""``python -m studies.aa_noise``: the A/A noise table from recorded batch medians
(benchmarks/results/regression-aa-h200), and one line for a file it can't read."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_any_input import ARGUMENT, BOUNDED, run

from studies import aa_noise

ROOT = Path(__file__).resolve().parents[2]
MEDIANS = ROOT / "benchmarks" / "results" / "regression-aa-h200" / "aa-batch-medians.json.gz"


def test_each_pair_is_head_over_base_with_the_side_that_went_first():
    runs = {
        "by weight": {
            "passes": [
                {"rounds": [{"order": ["head", "base"], "base": {"a": 1.0, "b": 2.0}, "head": {"a": 2.0, "b": 2.0}}]}
            ]
        },
        "by round": {
            "alternates": "round",
            "passes": [
                {"rounds": [{"order": ["head", "base"], "base": {"a": 1.0, "b": 1.0}, "head": {"a": 1.0, "b": 1.0}}]}
            ],
        },
    }
    rows = aa_noise.pairs(runs)
    assert [(r["run"], r["key"], round(math.exp(r["log"]), 6), r["base_first"]) for r in rows] == [
        ("by weight", "a", 2.0, False),
        ("by weight", "b", 1.0, True),  # the next weight's batches in the other order
        ("by round", "a", 1.0, False),
        ("by round", "b", 1.0, False),
    ]
    ((name, n, mean, spread),) = aa_noise.summary(rows[:2], "run")
    assert (name, n) == ("by weight", 2) and mean == pytest.approx(math.sqrt(2)) and spread > 0


def test_a_level_each_pass_keeps_is_told_from_the_rounds_noise():
    """Passes whose rounds agree but whose levels differ: all of the passes' spread is a level their
    processes keep; passes at one level whose rounds differ: none of it."""

    def run(levels):  # one pass per entry, rounds' HEAD / BASE as given, two results each
        passes = [
            {
                "rounds": [
                    {"order": ["base", "head"], "base": {"a": 1.0, "b": 1.0}, "head": {"a": x, "b": x}} for x in rounds
                ]
            }
            for rounds in levels
        ]
        return aa_noise.pairs({"r": {"passes": passes}})

    passes, within, between, explained, process = aa_noise.components(run([[1.1, 1.1], [0.9, 0.9], [1.0, 1.0]]))
    assert passes == 3 and within == 0 and explained == 0 and process == pytest.approx(between) and process > 0.09
    _, within, between, _, process = aa_noise.components(run([[1.1, 0.9], [0.9, 1.1], [1.1, 0.9]]))
    assert within > 0.1 and between == pytest.approx(0, abs=1e-12) and process == 0


def test_a_record_is_one_run_and_its_batches_levels_go_by_the_clock_before_them(tmp_path, capsys):
    """A regression record with the GPU's state before each batch: the batches that started on a low
    SM clock (HEAD's, here) ran at twice the others' time."""

    def state(mhz):
        return {"before": {"sm_clock_mhz": mhz}, "after": {"sm_clock_mhz": 1980}}

    rounds = [{"order": ["base", "head"], "base": {"a": [1.0, 1.0, 1.0]}, "head": {"a": [2.0, 2.0, 2.0]}}] * 2
    states = [{"base": {"a": state(1980)}, "head": {"a": state(345)}}] * 2
    record = {"base": "b" * 40, "head": "h" * 40, "passes": [{"rounds": rounds, "states": states}]}
    path = tmp_path / "r.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump(record, handle)
    runs, clocked = aa_noise.read([str(path)])
    assert list(runs) == [str(path)] and len(clocked) == 4
    bands = {name: (n, round(mean, 6)) for name, n, mean, _ in aa_noise.by_clock(clocked)}
    # Each batch against its result's median batch in the run: 1.5 s, the median of 1, 1, 2 and 2.
    assert bands == {"below 1000 MHz": (2, round(2 / 1.5, 6)), "1700 MHz and up": (2, round(1 / 1.5, 6))}
    assert aa_noise.main([str(path)]) == 0
    assert "SM clock before a batch" in capsys.readouterr().out

    # Kept as batch medians: the same tables, the clock's included, from a file of medians.
    medians = tmp_path / "m.json.gz"
    assert aa_noise.main([str(path), "--medians", str(medians)]) == 0
    whole = capsys.readouterr().out
    assert aa_noise.main([str(medians)]) == 0
    assert capsys.readouterr().out.split("\n")[1:] == whole.split("\n")[1:]
    assert aa_noise.main([str(path), "--medians", str(tmp_path / "no" / "m.json.gz")]) == 2


def test_the_recorded_runs_give_their_table(capsys):
    assert aa_noise.main([str(MEDIANS)]) == 0
    out = capsys.readouterr().out
    with gzip.open(MEDIANS, "rt") as handle:
        runs = json.load(handle)
    assert out.startswith(f"{len(runs)} runs, ") and "28672x8192 bfloat16" in out and "BASE's batch first" in out
    assert "a level each pass's processes keep: 0." in out


@pytest.mark.parametrize("content", [b"", b"[]", b"{}", b'{"r": {"passes": [{"rounds": [{"order": []}]}]}}'])
def test_a_file_it_cannot_read_is_one_line_and_exit_2(tmp_path, capsys, content):
    bad = tmp_path / "m.json"
    bad.write_bytes(content)
    assert aa_noise.main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("aa_noise: ") and err.count("\n") == 1


@BOUNDED
@given(argv=st.lists(ARGUMENT, max_size=4))
def test_any_arguments_end_in_an_exit_code_without_a_traceback(argv):
    code, out, err = run(aa_noise.main, argv)
    assert code in {0, 2} and "Traceback" not in out + err, (argv, code, out, err)


def test_calls_right_after_a_check_are_told_from_the_others(tmp_path, capsys):
    """A record naming its checked calls: the call after each check (here 10x the rest) counts as
    over three times its batch's median, among the calls after a check; none of the others does."""
    calls = [1.0] * 10
    slow = [1.0, 1.0, 10.0, 1.0, 1.0, 1.0, 10.0, 1.0, 1.0, 1.0]  # after the checks of calls 1 and 5
    rounds = [{"order": ["base", "head"], "base": {"a": calls}, "head": {"a": slow}}] * 2
    checked = [{"base": {"a": [1, 5]}, "head": {"a": [1, 5]}}] * 2
    record = {"passes": [{"rounds": rounds, "checked": checked}]}
    assert aa_noise.outlier_tallies(record)[1] == {"after a check": [8, 4], "other calls": [32, 0]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record))
    medians = tmp_path / "m.json.gz"
    assert aa_noise.main([str(path), "--medians", str(medians)]) == 0
    assert aa_noise.main([str(medians)]) == 0  # the tally travels with the medians
    out = capsys.readouterr().out
    assert out.count("after a check                   8        4  50.00%") == 2, out


def test_a_batch_s_outliers_are_counted_with_what_each_costs(tmp_path, capsys):
    record = {
        "passes": [
            {
                "rounds": [
                    {"order": ["base", "head"], "base": {"a": [1e-5] * 8 + [5e-5] * 2}, "head": {"a": [1e-5] * 10}}
                ]
            }
        ]
    }
    assert aa_noise.outlier_tallies(record)[0] == {"a": [2, 2, pytest.approx(80.0)]}  # two of 40 µs each
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record))
    assert aa_noise.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "a                               2     1.00     40 µs" in out, out
    assert f"right after a check: {aa_noise.after_a_check():.2f} on average" in out
