"""The gate's command line: its table, JSON, summary and exit codes, on recorded timings and on a
machine without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from recorded import committed, record, scaled, with_states

from harness.core import exits, gpu_state
from harness.gate import cli as gate
from harness.gate import decision, sandboxed
from harness.gate import table as gate_table


def full_record(ours_s, theirs_s, **kwargs):
    r = record(ours_s, theirs_s, **kwargs)
    r["seconds"]["bitsandbytes"] = [[s * 2 for s in shapes] for shapes in r["seconds"]["unsloth"]]
    return r


@pytest.mark.parametrize(
    "ours,theirs,code", [(0.30, 0.45, decision.EXIT_PASS), (0.45, 0.30, decision.EXIT_TOO_SLOW)], ids=["pass", "slow"]
)
def test_replay_prints_the_table_writes_json_and_summary(tmp_path, capsys, ours, theirs, code):
    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps(full_record(ours, theirs)))
    out_json, summary = tmp_path / "gate.json", tmp_path / "summary.md"
    assert gate.main(["--replay", str(recorded), "--json", str(out_json), "--summary", str(summary)]) == code
    text = capsys.readouterr().out
    for label in ("2048x8192 float16", "nf4kernel", "unsloth", "bitsandbytes", "us/call", "% copy", "median"):
        assert label in text
    assert text.strip().splitlines()[-1].startswith("PASS" if code == 0 else "FAIL")
    written = json.loads(out_json.read_text())
    assert written["verdict"]["exit_code"] == code and written["threshold"] == decision.DEFAULT_THRESHOLD
    assert "### nf4kernel speed gate" in summary.read_text() and "| shape" in summary.read_text()


def test_threshold_from_the_command_line_and_never_the_environment(tmp_path, monkeypatch):
    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps(full_record(0.30, 0.39)))  # a 1.3x speed-up
    assert gate.main(["--replay", str(recorded)]) == decision.EXIT_PASS
    assert gate.main(["--replay", str(recorded), "--threshold", "1.4"]) == decision.EXIT_TOO_SLOW
    monkeypatch.setenv("NF4KERNEL_GATE_THRESHOLD", "1.4")  # the variable it once read: no longer
    assert gate.main(["--replay", str(recorded)]) == decision.EXIT_PASS


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what the gate does on a machine without a GPU")
def test_without_a_gpu_the_gate_says_so_and_does_not_pass():
    done = subprocess.run([sys.executable, "-m", "harness", "gate"], capture_output=True, text=True, timeout=300)
    assert done.returncode == decision.EXIT_NO_GPU
    assert "no CUDA GPU" in done.stdout and "FAIL" in done.stdout


def test_the_gate_needs_no_torch_of_its_own_to_say_there_is_no_gpu(monkeypatch, capsys):
    """The gate's process times and decides; torch is its call processes' (the trusted clock)."""
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    monkeypatch.setattr(gpu_state, "gpu_here", lambda: False)
    assert gate.main([]) == decision.EXIT_NO_GPU
    assert "sees no CUDA GPU" in capsys.readouterr().out


def test_summary_is_markdown_with_a_chart_of_the_speed_up_per_shape(tmp_path):
    r = full_record(0.30, 0.45)
    # Shape 2 (of 3) made 2x slower for Unsloth in every round: its own bar must show it.
    r["seconds"]["unsloth"] = [[s * (2 if i == 1 else 1) for i, s in enumerate(rnd)] for rnd in r["seconds"]["unsloth"]]
    recorded, summary = tmp_path / "recorded.json", tmp_path / "summary.md"
    recorded.write_text(json.dumps(r))
    assert gate.main(["--replay", str(recorded), "--summary", str(summary)]) == decision.EXIT_PASS
    text = summary.read_text()
    assert text.startswith("### nf4kernel speed gate")
    assert "| 2048x8192 float16" in text and "|------" in text  # the table, as Markdown
    chart = text.split("```mermaid\n", 1)[1].split("```", 1)[0]
    assert chart.startswith("xychart-beta")
    assert 'x-axis ["2048x8192 float16", "1024x4096 bfloat16", "4096x14336 bfloat16"]' in chart
    assert "bar [1.500, 3.000, 1.500]" in chart
    assert "line [1.150, 1.150, 1.150]" in chart
    assert text.rstrip().endswith("**PASS**")


def test_summary_of_a_run_that_measured_nothing_has_no_chart(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_state, "gpu_here", lambda: False)
    summary = tmp_path / "summary.md"
    # --no-classic: accepted and ignored, as the GPU machine's session script still passes it.
    assert gate.main(["--no-classic", "--summary", str(summary)]) == decision.EXIT_NO_GPU
    text = summary.read_text()
    assert "mermaid" not in text and "**FAIL" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what nox -s gate does on a machine without a GPU")
def test_nox_passes_the_gates_exit_code_on(tmp_path):
    """nox itself would say 1 for any failure: the session hands the gate's own code (4, no GPU) to
    whoever called nox, with the true cause in the output."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    command = [sys.executable, "-m", "nox", "--no-venv", "-f", str(root / "noxfile.py"), "-s", "gate"]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == decision.EXIT_NO_GPU, done.stdout[-2000:] + done.stderr[-2000:]
    assert "sees no CUDA GPU" in done.stdout + done.stderr


def test_every_nox_session_says_what_it_does_in_one_line():
    """`nox -l` shows the first line of each session's docstring: it must be a whole sentence."""
    import ast

    tree = ast.parse((Path(__file__).resolve().parents[2] / "noxfile.py").read_text())
    sessions = [f for f in tree.body if isinstance(f, ast.FunctionDef) and "nox.session" in ast.unparse(f)]
    assert len(sessions) >= 8
    for function in sessions:
        first = ast.get_docstring(function).splitlines()[0]
        assert first.endswith((".", ".``")) and len(first) <= 110, f"{function.name}: {first!r}"


# --- The interval, the rounds, the GPU's state in the table ----------------------------------------


def replay(tmp_path, recorded: dict, *args: str) -> tuple[int, str]:
    path = tmp_path / "recorded.json"
    path.write_text(json.dumps(recorded))
    return gate.main(["--replay", str(path), *args]), str(path)


def test_an_old_record_replays_with_its_interval_and_says_its_states_are_missing(tmp_path, capsys):
    code, _ = replay(tmp_path, committed(1))
    assert code == decision.EXIT_PASS
    text = capsys.readouterr().out
    assert (
        "nf4kernel vs Unsloth: median 1.425x, 95% interval 1.406x to 1.441x (min 1.406x, max 1.441x) over 5 rounds;"
        in text
    )
    assert "per round: 1.423x 1.406x 1.441x 1.425x 1.427x" in text
    assert "the GPU's state was not recorded (the record predates round states)" in text


def test_throttled_rounds_are_marked_in_the_table_and_named_in_the_verdict(tmp_path, capsys):
    recorded = with_states(committed(2), {2: ["sw_power_cap"], 5: ["sw_power_cap"]})
    summary = tmp_path / "summary.md"
    code, _ = replay(tmp_path, recorded, "--summary", str(summary))
    assert code == decision.EXIT_PASS
    text = capsys.readouterr().out
    assert "per round: 1.337x 1.329x* 1.341x 1.383x 1.383x*" in text
    assert "2 of 5 rounds were taken while the GPU throttled (sw_power_cap): marked *; they count" in text
    assert (
        "GPU after each round (nvml): SM 1755 to 1980 MHz (max 1980 MHz), memory 3201 MHz, 41 °C, 412 to 699 W of 700 W"
        in text
    )
    last = text.strip().splitlines()[-1]
    assert last.startswith("PASS: rounds 2, 5 of 5 taken while the GPU throttled (sw_power_cap)")
    markdown = summary.read_text()
    assert "1.329x\\* 1.341x" in markdown and "marked \\*;" in markdown  # escaped: no stray emphasis
    assert markdown.rstrip().endswith("counted, as both implementations ran in each**")


def test_rounds_without_throttling_and_unreadable_states_are_said(tmp_path, capsys):
    replay(tmp_path, with_states(committed(3)))
    assert "none of the 5 rounds was taken while the GPU throttled" in capsys.readouterr().out
    unreadable = with_states(committed(3))
    why = {"unavailable": "nvidia-ml-py (pynvml) is not installed; nvidia-smi is not on PATH"}
    for state in unreadable["round_states"]:
        state["state_before"] = state["state_after"] = why
    replay(tmp_path, unreadable)
    text = capsys.readouterr().out
    assert (
        "the GPU's state could not be read: nvidia-ml-py (pynvml) is not installed; nvidia-smi is not on PATH" in text
    )
    assert "GPU after each round" not in text


def test_the_table_says_how_many_rounds_it_took_and_the_versions(tmp_path, capsys):
    recorded = full_record(0.30, 0.345, noise=0.05, rounds=9, seed=3)  # true 1.15x: straddles
    recorded.update(rounds_first=5, max_rounds=9)
    recorded["environment"]["versions"] = {
        "driver": "580.159.04",
        "cuda": "13.0",
        "cuda_driver": "13.0",
        "torch": "2.11.0+cu130",
        "triton": "3.6.0",
        "bitsandbytes": "0.50.2",
        "unsloth": None,
    }
    verdict = decision.decide(recorded)
    text = gate_table.table(recorded, verdict, 1.15)
    assert "over 9 rounds (5, then 4 more while the interval straddled the threshold)" in text
    assert (
        "versions: driver 580.159.04, CUDA 13.0 (driver's 13.0), torch 2.11.0+cu130, triton 3.6.0, "
        "bitsandbytes 0.50.2, unsloth absent"
    ) in text
    assert "Challenge A on NVIDIA H100 80GB HBM3 (copy 3000 GB/s), 9 interleaved rounds" in text
    assert text.splitlines()[-1] == (
        f"FAIL: median speed-up {verdict.ratio_median:.3f}x over Unsloth is below the threshold 1.15x; the 95% "
        f"interval {verdict.ci_low:.3f}x to {verdict.ci_high:.3f}x straddles the threshold: inconclusive at the "
        "bound of 9 rounds; decided on the median"
    )


# --- Adding rounds while the interval straddles the threshold ----------------------------------------


def adaptive(pool: dict, first: int, bound: int, threshold: float = 1.15) -> list[int]:
    """Runs time_until_decided with rounds taken from a recorded pool; returns the batches asked for."""
    asked = []
    target = {"rounds_first": first, "max_rounds": bound, "seconds": {"nf4kernel": [], "unsloth": []}}

    def add_rounds(count):
        asked.append(count)
        for name, rounds in target["seconds"].items():
            done = len(rounds)
            rounds.extend(pool["seconds"][name][done : done + count])

    target.update({key: pool[key] for key in ("environment", "shapes", "calls_per_timing") if key in pool})
    sandboxed.time_until_decided(target, add_rounds, threshold)
    assert target["rounds"] == sum(asked)
    return asked


def test_a_clear_verdict_takes_the_first_rounds_only():
    assert adaptive(record(0.30, 0.39, noise=0.05, rounds=15), 5, 15) == [5]  # 1.3x: clear pass
    assert adaptive(record(0.30, 0.30, noise=0.05, rounds=15), 5, 15) == [5]  # 1.0x: clear fail


def test_a_straddling_interval_adds_two_rounds_at_a_time_up_to_the_bound():
    near = record(ours_s=0.30, theirs_s=0.345, noise=0.05, rounds=15, seed=2)  # true 1.15x
    assert adaptive(near, 5, 15) == [5, 2, 2, 2, 2, 2]
    assert adaptive(near, 5, 6) == [5, 1]
    assert adaptive(near, 5, 5) == [5]


# --- Arguments -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,problem",
    [
        (["--rounds", "3"], "--rounds must be at least 5"),
        (["--rounds", "9", "--max-rounds", "7"], "--max-rounds (7) is below --rounds (9)"),
        (["--baseline", "base.json"], "unrecognized arguments: --baseline"),  # no relative check: the regression's
        (["--max-drop", "0.1"], "unrecognized arguments: --max-drop"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_measured(args, problem, capsys):
    with pytest.raises(SystemExit) as exit_:
        gate.main(args)
    assert exit_.value.code == 2 and problem in capsys.readouterr().err


# --- What the gate refuses: one line, exit 2, never a traceback (whose exit 1 would read "too slow") -------


def refused(capsys, *argv: str) -> str:
    """The gate's one line on stderr for ``argv``, which it must refuse with exit 2."""
    with pytest.raises(SystemExit) as exit_:
        gate.main(list(argv))
    err = capsys.readouterr().err
    assert exit_.value.code == exits.BAD_INPUT, err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("threshold", ["nan", "NaN", "inf", "-inf", "0", "-1.2", "1.15x", ""])
def test_a_threshold_that_is_no_finite_speed_up_is_refused(tmp_path, capsys, threshold):
    """``--threshold nan`` passed a record three times slower than Unsloth (no median is below NaN)."""
    _, path = replay(tmp_path, scaled(committed(1), 3.0))
    capsys.readouterr()
    line = refused(capsys, "--replay", path, f"--threshold={threshold}")
    assert "argument --threshold" in line and repr(threshold) in line


@pytest.mark.parametrize(
    "spoil,where",
    [
        (lambda r: r["seconds"]["nf4kernel"][3].__setitem__(0, True), "seconds.nf4kernel[3][0]: true is not a number"),
        (lambda r: r["correctness"].__setitem__(2, "ok"), 'correctness[2]: "ok" is not an object'),
        (lambda r: r["correctness"][0].pop("shape"), "correctness[0].shape: missing"),
        (lambda r: r.pop("shapes"), "shapes: missing"),
        (lambda r: r.pop("calls_per_timing"), "calls_per_timing: missing"),
        (lambda r: r["environment"].pop("copy_bytes_per_s"), "environment.copy_bytes_per_s: missing"),
        (lambda r: r["shapes"][1].__setitem__("bytes_per_call", "42 MB"), 'shapes[1].bytes_per_call: "42 MB" is not'),
        (lambda r: r.__setitem__("round_states", [{}]), "round_states: 1 states for 5 rounds"),
        (lambda r: r.__setitem__("mode", "aa"), 'mode: "aa": a gate record has no mode (an A/A record had one)'),
    ],
    ids=["true", "check-a-string", "check-no-shape", "no-shapes", "no-calls", "no-copy", "bytes", "states", "aa"],
)
def test_a_replayed_record_that_breaks_its_schema_is_refused_naming_the_field(tmp_path, capsys, spoil, where):
    spoiled = committed(1)
    spoil(spoiled)
    path = tmp_path / "gate.json"
    path.write_text(json.dumps(spoiled))
    assert f"--replay {path}: {where}" in refused(capsys, "--replay", str(path))


@pytest.mark.parametrize("option", ["--json", "--summary"])
def test_an_output_with_no_folder_to_go_in_is_refused_before_anything_runs(tmp_path, capsys, option):
    _, path = replay(tmp_path, committed(1))
    capsys.readouterr()
    missing = tmp_path / "no-such-folder" / "out.json"
    assert f"{option} {missing}: there is no folder" in refused(capsys, "--replay", path, option, str(missing))
    assert f"{option} '{tmp_path}' is a folder" in refused(capsys, "--replay", path, option, str(tmp_path))


def test_an_output_that_fails_to_be_written_is_one_line(tmp_path, capsys, monkeypatch):
    """The folder was there when the gate started and went while it measured."""
    _, path = replay(tmp_path, committed(1))
    folder = tmp_path / "out"
    folder.mkdir()
    real_decide = decision.decide

    def decide_then_remove_the_folder(*args, **kwargs):
        folder.rmdir()
        return real_decide(*args, **kwargs)

    monkeypatch.setattr(decision, "decide", decide_then_remove_the_folder)
    line = refused(capsys, "--replay", path, "--json", str(folder / "gate.json"))
    assert line.endswith(f"--json {folder / 'gate.json'}: No such file or directory; the verdict above was not written")
