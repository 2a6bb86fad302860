"""The one way every command writes its record and appends its summary
(``harness/core/command_output.py``): what was asked for is written, nothing is written where
nothing was asked for, and a file that can't be written is named with its option, never a traceback."""

from __future__ import annotations

import argparse

import pytest

from harness.core import command_output


def test_a_record_is_written_and_a_summary_appended(tmp_path):
    record, summary = tmp_path / "r.json", tmp_path / "s.md"
    summary.write_text("before\n")
    assert command_output.written("--json", str(record), "{}")
    assert command_output.written("--summary", str(summary), "after\n", append=True)
    assert record.read_text() == "{}" and summary.read_text() == "before\nafter\n"
    assert not command_output.written("--json", None, "{}")


@pytest.mark.parametrize("where", ["folder", "no-folder/x.json", "nul\0.json"])
def test_what_cannot_be_written_names_the_option_and_the_path(tmp_path, where):
    path = str(tmp_path / where) if where != "folder" else str(tmp_path)
    with pytest.raises(command_output.Unwritten, match=r"^--record .*: "):
        command_output.written("--record", path, "{}")


def test_the_shared_options_read_as_every_command_gives_them():
    parser = argparse.ArgumentParser()
    command_output.add_record(parser, "--json", "the record")
    command_output.add_summary(parser, "the table")
    args = parser.parse_args(["--json", "r.json", "--summary", "s.md"])
    assert (args.json, args.summary) == ("r.json", "s.md")
    assert "append the table as Markdown" in parser.format_help()
