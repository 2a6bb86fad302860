"""``python -m harness``: one program whose commands are the harness's modules."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from harness import __main__ as program

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(program.COMMANDS))
def test_each_command_is_its_modules_main_and_answers_help(name, capsys):
    module = importlib.import_module(program.COMMANDS[name][0])
    assert callable(module.main)
    with pytest.raises(SystemExit) as stopped:
        program.main([name, "--help"])
    assert stopped.value.code == 0 and "usage:" in capsys.readouterr().out


def test_without_a_command_it_lists_them_and_exits_2():
    done = subprocess.run([sys.executable, "-m", "harness"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and all(name in done.stdout for name in program.COMMANDS)


def test_an_unknown_command_is_one_line_and_exit_2(capsys):
    assert program.main(["gates"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_command_keeps_its_own_exit_code(tmp_path, capsys):
    missing = str(tmp_path / "no-record.json")
    assert program.main(["regression", "--replay", missing]) == 2  # no verdict: its documented exit
    assert "no verdict (exit 2)" in capsys.readouterr().out


def test_the_nox_sessions_run_the_program():
    noxfile = (ROOT / "noxfile.py").read_text()
    for name in ("gate", "regression", "bench", "backfill"):
        assert f'"python", "-m", "harness", "{name}"' in noxfile, name
    for name in ("rehearse", "act-ci"):  # the workshop's, beside the harness
        assert f'"python", "-m", "dev.rehearsal", "{name}"' in noxfile, name
    assert '"python", "-m", "tools.pins"' in noxfile  # CI's hygiene, no verdict: beside the harness too
    assert '"python", "-m", "tools.history", "preview"' in noxfile  # a person's look at the site


@pytest.mark.parametrize("name", sorted(program.COMMANDS))
def test_each_command_refuses_an_option_it_lacks_in_one_line(name, capsys):
    """One parser for every command (``command_output.Parser``): ``PROG: error: ...``, exit 2, not
    argparse's usage block."""
    with pytest.raises(SystemExit) as stopped:
        program.main([name, "--no-such-option"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.count("\n") == 1, err
    assert f"-m harness {name}" in err.split(": error: ")[0], err


def test_no_module_builds_a_parser_of_its_own():
    """harness/README.md: every parser is core/command_output.Parser, the studies' too."""
    own = [
        str(path.relative_to(ROOT))
        for folder in ("harness", "studies")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if "ArgumentParser(" in path.read_text() and path.name != "command_output.py"
    ]
    assert own == []


def test_the_only_scripts_are_the_programs_the_private_entry_point_and_the_lease_shims():
    """harness/README.md and dev/README.md: no module is a program of its own but these four."""
    scripts = [
        str(path.relative_to(ROOT))
        for folder in ("harness", "dev")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if 'if __name__ == "__main__":' in path.read_text()
    ]
    assert scripts == [
        "harness/__main__.py",
        "harness/_process.py",
        "dev/rehearsal/__main__.py",
        "dev/rehearsal/gpu_leases.py",
    ]
