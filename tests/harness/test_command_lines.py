"""What a person can type at the commands once found answering with a traceback, an abort, a
wrong name or a verdict they could not support: each now answers in one line with its documented
exit code (random and hostile argument lists for the same programs: test_any_input.py).

* ``python -m tools.history preview --port 99999``: exit 2, one line (was a 27-line
  OverflowError traceback); a --config that is no asv configuration likewise, there and in
  ``python -m harness site publish``.
* ``python -m nf4kernel.targets 999``: exit 2, one line, before anything is compiled (was an LLVM
  abort, exit 134).
* ``python -m tools.pins`` with no index answering: exit 3, "no verdict" (was "every pin
  has a wheel for every leg", exit 0).
* A regression record with a pass of one round: refused, exit 2 (was PASS).
* ``python -m studies.sweep``/``perf``: their usage names them as they are typed (was
  ``sweep.py``); ``python -m dev.rehearsal act-ci --help`` exits 0 (was 2).
* asv's last line before the site plugin's own ("Writing index") ends before the plugin prints.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import recorded

from dev.rehearsal import act_ci
from harness.history import site
from harness.regression import cli as regression
from tools import history as history_tools
from tools import pins

ROOT = Path(__file__).resolve().parents[2]


def run(main, argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def one_line(text: str) -> str:
    assert len(text.splitlines()) == 1 and "Traceback" not in text, text
    return text.strip()


# --- harness.history.site, tools.history -----------------------------------------------------------


@pytest.mark.parametrize("port", ["99999", "65536", "0", "-1", "80x", "1e400"])
def test_site_preview_refuses_a_port_no_server_can_listen_on_in_one_line(port):
    code, out, err = run(history_tools.main, ["preview", "--port", port])
    assert code == 2 and not out
    assert one_line(err).startswith("python -m tools.history preview: error: argument --port: ")


@pytest.mark.parametrize("config", ["no-such.json", "README.md", ".", "tests/fixtures"])
def test_site_refuses_a_config_that_is_no_asv_configuration_in_one_line(config):
    for main, prog, command in (
        (site.main, "python -m harness site", "publish"),
        (history_tools.main, "python -m tools.history", "preview"),
    ):
        code, out, err = run(main, [command, "--config", config])
        assert code == 2 and not out
        assert one_line(err).startswith(f"{prog}: error: --config {config}: ")


def test_site_preview_serves_on_a_valid_port(monkeypatch, tmp_path):
    """The check refuses only what can't be a port: 65535 reaches the server (here a stand-in)."""
    html = tmp_path / "html"
    html.mkdir()
    (html / "index.html").write_text("<html></html>")
    monkeypatch.setattr(site, "html_dir_of", lambda config, conf: html)
    served = []
    monkeypatch.setattr(history_tools, "serve", lambda command, **kwargs: served.append(command) or 0)
    code, out, _ = run(history_tools.main, ["preview", "--port", "65535"])
    assert code == 0 and "http://127.0.0.1:65535" in out
    assert served and served[0][served[0].index("--port") + 1] == "65535"


# --- nf4kernel.targets ----------------------------------------------------------------------------------


@pytest.mark.parametrize("archs", [["999"], ["0"], ["-5"], ["76"], ["75", "999"], [str(10**30)]])
def test_targets_refuses_a_target_its_ptxas_does_not_know_before_compiling(monkeypatch, archs):
    from nf4kernel import targets

    def never(*args):
        raise AssertionError("compiled a target the check should have refused")

    monkeypatch.setattr(targets, "compile_row", never)
    code, out, err = run(targets.main, archs)
    assert code == 2 and not out
    assert one_line(err).startswith("python -m nf4kernel.targets: error: no target sm_")


def test_targets_999_ends_in_one_line_not_an_llvm_abort():
    """As a person runs it: its own process, which LLVM aborted (exit 134) before the check."""
    done = subprocess.run(
        [sys.executable, "-m", "nf4kernel.targets", "999"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2 and not done.stdout, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert one_line(done.stderr).startswith("python -m nf4kernel.targets: error: no target sm_999: ")


def test_targets_takes_every_target_ci_compiles_for():
    from nf4kernel import targets

    assert all(targets.assembles(arch) for arch in targets.targets())


# --- tools.pins -----------------------------------------------------------------------------------------------


def test_pins_with_no_index_answering_decides_nothing_and_exits_3(monkeypatch, capsys):
    def list_from_indexes(urls, timeout=20):
        def list_files(project):
            return []

        list_files.unreachable = set(urls)
        return list_files

    monkeypatch.setattr(pins, "list_from_indexes", list_from_indexes)
    assert pins.main([]) == pins.EXIT_UNDECIDED == 3
    out = capsys.readouterr().out
    assert "every pin has a wheel" not in out
    last = out.splitlines()[-1]
    assert last.startswith("no pin found missing, but ") and last.endswith("no verdict (exit 3)")
    assert f"{out.count('UNCHECKED: ')} of {len(pins.REQUIREMENT_FILES)} requirements files unchecked" in last


def test_pins_with_a_missing_wheel_on_an_index_that_answered_exits_1_even_with_one_unchecked(monkeypatch, capsys):
    """PyPI answers with no files (every pin it is asked about is missing: 1), PyTorch's CPU index
    (torch-cpu.txt's own) answers nothing: that file is named unchecked on the last line too."""

    def list_from_indexes(urls, timeout=20):
        def list_files(project):
            return []

        list_files.unreachable = {url for url in urls if "pytorch.org" in url}
        return list_files

    monkeypatch.setattr(pins, "list_from_indexes", list_from_indexes)
    assert pins.main([]) == 1
    out = capsys.readouterr().out
    assert "PROBLEM: " in out and "UNCHECKED: torch-cpu.txt: " in out
    assert "requirements files unchecked (torch-cpu.txt)" in out.splitlines()[-1]


# --- harness.regression: a record that can't support a verdict ------------------------------------------


def one_round(record: dict) -> dict:
    record = json.loads(json.dumps(record))
    record["passes"] = record["passes"][:1]
    record["passes"][0]["rounds"] = record["passes"][0]["rounds"][:1]
    return record


@pytest.mark.parametrize("slower", [None, "planted"], ids=["same-kernel", "2x-plant"])
def test_a_record_of_one_round_is_refused_not_judged(tmp_path, slower):
    record = one_round(recorded.regression_record(recorded.planted_2x() if slower else None))
    path = tmp_path / "regression.json"
    path.write_text(json.dumps(record))
    code, out, _ = run(regression.main, ["--replay", str(path)])
    assert code == 2 and "PASS" not in out and "FAIL" not in out
    assert one_line(out).endswith(
        "a verdict needs at least 2, to judge each change against its round-to-round noise; no verdict (exit 2)"
    )


def test_a_second_pass_of_one_round_is_refused_too(tmp_path):
    record = recorded.regression_record(recorded.planted_2x())
    assert len(record["passes"]) == 2
    record["passes"][1]["rounds"] = record["passes"][1]["rounds"][:1]
    path = tmp_path / "regression.json"
    path.write_text(json.dumps(record))
    code, out, _ = run(regression.main, ["--replay", str(path)])
    assert code == 2 and "pass 2 has 1 round(s)" in one_line(out)


# --- Names and --help ------------------------------------------------------------------------------------


@pytest.mark.parametrize("module", ["sweep", "perf"])
def test_the_tuning_commands_name_themselves_as_typed(module):
    import importlib

    main = importlib.import_module(f"studies.{module}").main
    code, out, _ = run(main, ["--help"])
    assert code == 0 and out.startswith(f"usage: python -m studies.{module} ")


@pytest.mark.parametrize(
    "module,argv,said",
    [
        ("sweep", ["--warps", "3"], "argument --warps: invalid choice: 3"),
        ("sweep", ["--iters", "0"], "--iters: tiles per program are 1 to 64"),
        ("sweep", ["--vectors", "16"], "argument --vectors: invalid choice: 16"),
        ("sweep", ["--json", "no-such-folder/sweep.json"], "there is no folder no-such-folder"),
        ("perf", ["--rounds", "0"], "--rounds must be at least 1"),
        ("perf", ["--json", "no-such-folder/perf.json"], "there is no folder no-such-folder"),
    ],
)
def test_the_tuning_commands_refuse_what_the_kernel_cannot_run_before_looking_for_a_gpu(module, argv, said):
    import importlib

    code, _, err = run(importlib.import_module(f"studies.{module}").main, argv)
    assert code == 2 and said in err.splitlines()[-1] and "Traceback" not in err, err


def test_act_ci_help_exits_0_and_a_bad_option_2_in_one_line(monkeypatch):
    monkeypatch.setattr(act_ci, "run_job", lambda *args, **kwargs: pytest.fail("ran a job"))
    code, out, _ = run(act_ci.main, ["--help"])
    assert code == 0 and out.startswith("usage: python -m dev.rehearsal act-ci ")
    code, out, err = run(act_ci.main, ["--no-such-option"])
    assert code == 2 and not out and one_line(err).startswith("python -m dev.rehearsal act-ci: error: ")


# --- asv's last line, then the site plugin's ------------------------------------------------------------


def test_the_site_plugins_lines_start_on_a_line_of_their_own(monkeypatch, tmp_path, capsys):
    """asv's log leaves its last message open for progress dots; the plugin's line after asv's
    publish ("a CPU machine's results are not graphed") ran into "Writing index"."""
    from asv.console import log

    def asvs_run(cls, conf, range_spec=None, pull=True):
        log.info("Writing index")

    monkeypatch.setattr(site, "_check_assets", lambda: None)
    monkeypatch.setattr(site.store, "seed", lambda results_dir: 3)
    monkeypatch.setattr(site, "gpu_results", lambda results_dir, into: ["cpu-machine"])
    monkeypatch.setattr(site, "_finish", lambda html_dir: None)

    class Conf:
        results_dir = str(tmp_path / "results")
        html_dir = str(tmp_path / "html")

    # asv's console, as asv's main enables it (log.enable), for this test alone.
    root, handler = logging.getLogger(), logging.StreamHandler()
    handler.emit = log._stream_formatter
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        site._publishing_with(asvs_run)(None, Conf())
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        log.flush()
    lines = capsys.readouterr().out.splitlines()
    assert any(line.endswith("Writing index") for line in lines), lines
    assert "site: cpu-machine's results are not graphed: a CPU machine's times are the interpreter's" in lines
    assert "site: 3 files of the committed GPU history copied into " + Conf.results_dir in lines
