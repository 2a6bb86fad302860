"""The A/A noise check's report, on recorded-shaped data: nf4kernel's own H200 timings in slot A and
the same timings, disturbed by known factors, in slot B."""

from __future__ import annotations

import json
import sys

import pytest
from recorded import committed, with_states

from harness.gate import cli as gate
from harness.gate import decision, noise

FACTORS = [1 + 0.01 * (r % 5 - 2) for r in range(15)]  # 0.98, 0.99, 1.00, 1.01, 1.02, three times


def aa_record(factors=FACTORS) -> dict:
    """15 rounds of nf4kernel's Challenge A times from the committed H200 runs (A), and B = A times
    one factor per round: every ratio of B to A is known."""
    runs = [committed(run) for run in (1, 2, 3)]
    a = [shapes for run in runs for shapes in run["seconds"]["nf4kernel"]][: len(factors)]
    b = [[s * f for s in shapes] for shapes, f in zip(a, factors, strict=True)]
    return {
        "mode": noise.MODE,
        "environment": {"cuda": True, "device": "NVIDIA H200", "versions": {}},
        "rounds": len(factors),
        "calls_per_timing": 1000,
        "shapes": runs[0]["shapes"],
        "seconds": {noise.A: a, noise.B: b},
    }


def test_the_report_holds_the_spread_it_was_given():
    found = noise.report(aa_record())
    whole = found["whole_round"]
    assert found["rounds"] == 15 and found["round_ratios"] == pytest.approx(FACTORS)
    assert whole["median"] == pytest.approx(1.0)
    assert (whole["min"], whole["max"]) == (pytest.approx(0.98), pytest.approx(1.02))
    assert whole["largest_deviation"] == pytest.approx(0.02)
    assert whole["ci_low"] <= 1.0 <= whole["ci_high"]
    assert [s["label"] for s in found["shapes"]] == ["2048x8192 float16", "1024x4096 bfloat16", "4096x14336 bfloat16"]
    for shape in found["shapes"]:  # one factor per round: every shape sees the same spread
        assert shape["largest_deviation"] == pytest.approx(0.02) and shape["median"] == pytest.approx(1.0)
    # A median of 5 such rounds is 0.98 (three or more of the five at 0.98) 5.8% of the time, more
    # than the 2.5% a 95% interval leaves out: the floor is the whole 2%.
    assert found["median_of_min_rounds"]["rounds"] == decision.MIN_ROUNDS
    assert found["noise_floor"] == pytest.approx(0.02)


def test_the_noise_floor_grows_with_the_noise():
    quiet = noise.report(aa_record([1 + (f - 1) / 4 for f in FACTORS]))["noise_floor"]
    loud = noise.report(aa_record([1 + (f - 1) * 4 for f in FACTORS]))["noise_floor"]
    assert quiet < noise.report(aa_record())["noise_floor"] < loud
    assert noise.report(aa_record([1.0] * 15))["noise_floor"] == 0


def test_one_noisy_shape_shows_in_its_own_row():
    record = aa_record([1.0] * 15)
    record["seconds"][noise.B] = [
        [s * (1.05 if i == 1 else 1) for i, s in enumerate(shapes)] for shapes in record["seconds"][noise.B]
    ]
    found = noise.report(record)
    assert [round(s["median"], 3) for s in found["shapes"]] == [1.0, 1.05, 1.0]
    assert 1.0 < found["whole_round"]["median"] < 1.05  # diluted by the other shapes' time


def test_the_text_states_the_noise_floor_in_words():
    record = with_states(aa_record(), {3: ["sw_power_cap"]})
    found = noise.report(record)
    text = noise.text(record, found)
    assert text.startswith("A/A noise check on NVIDIA H200: nf4kernel against itself, 15 interleaved rounds")
    assert "| whole round" in text and "| 1024x4096 bfloat16" in text and "2.00%" in text
    assert "per round: 0.9800 0.9900 1.0000* 1.0100" in text
    assert "1 of 15 rounds were taken while the GPU throttled: marked *" in text
    assert "noise floor: 2.0%. A speed-up threshold needs a margin above 2.0% to be decided from noise" in text
    assert "a true 1.173x or passes a true 1.127x" in text  # at the default threshold, 1.15x +- 2%
    assert "A single round strayed up to 2.0% from 1." in text
    summary = noise.markdown(text)
    assert summary.startswith("### nf4kernel A/A noise check") and "marked \\*" in summary


def test_a_record_that_is_no_aa_record_is_refused_by_name():
    with pytest.raises(ValueError, match="the A/A record has no rounds timed for 'B'"):
        noise.report({**aa_record(), "seconds": {noise.A: [[0.1, 0.1, 0.1]]}})


def test_replaying_an_aa_record_reports_it(tmp_path, capsys):
    recorded, out, summary = tmp_path / "aa.json", tmp_path / "out.json", tmp_path / "summary.md"
    recorded.write_text(json.dumps(aa_record()))
    assert gate.main(["--replay", str(recorded), "--json", str(out), "--summary", str(summary)]) == 0
    assert "noise floor: 2.0%" in capsys.readouterr().out
    assert json.loads(out.read_text())["noise"]["noise_floor"] == pytest.approx(0.02)
    assert summary.read_text().startswith("### nf4kernel A/A noise check")


def test_the_aa_check_without_a_gpu_says_so(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)
    out = tmp_path / "aa.json"
    assert gate.main(["--aa", "--json", str(out)]) == decision.EXIT_NO_GPU
    assert "A/A noise check: torch is not importable" in capsys.readouterr().out
    written = json.loads(out.read_text())
    assert written["mode"] == noise.MODE and written["rounds"] == gate.AA_ROUNDS
