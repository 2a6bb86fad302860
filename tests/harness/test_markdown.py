"""The one Markdown table renderer: both layouts, blank and empty cells, and what it refuses."""

import pytest

from harness.core import markdown


def test_the_compact_layout_marks_right_aligned_columns_in_its_rule():
    lines = markdown.table(["name", "ms"], [["a", "1.50"], ["bb", "12.00"]], align="lr")
    assert lines == ["| name | ms |", "| --- | ---: |", "| a | 1.50 |", "| bb | 12.00 |"]


def test_every_column_is_left_aligned_unless_told():
    assert markdown.table(["x", "y"], [])[1] == "| --- | --- |"


def test_a_blank_cell_is_one_space_and_an_empty_value_two():
    lines = markdown.table(["a", "b", "c"], [["x", None, ""]])
    assert lines[-1] == "| x | |  |"


def test_fixed_widths_pad_each_cell_on_its_side_under_a_plain_rule():
    lines = markdown.table(["shape", "us"], [["4096x4096", "12.5"], ["1x1", "7.0"]], align="lr", widths=(10, 6))
    assert lines == [
        "| shape      |     us |",
        "|------------|--------|",
        "| 4096x4096  |   12.5 |",
        "| 1x1        |    7.0 |",
    ]


def test_a_heading_wider_than_its_column_widens_the_rule_not_the_cells():
    lines = markdown.table(["deviation"], [["2.00%"]], align="r", widths=(6,))
    assert lines == ["| deviation |", "|-----------|", "|  2.00% |"]


def test_a_cell_wider_than_its_column_is_never_cut():
    assert markdown.table(["a"], [["abcdef"]], widths=(3,))[-1] == "| abcdef |"


def test_blank_and_empty_cells_are_padded_alike_with_widths():
    assert markdown.table(["a", "b"], [[None, ""]], widths=(2, 3))[-1] == "|    |     |"


@pytest.mark.parametrize(
    ("align", "widths", "why"),
    [
        ("l", None, "align 'l': one of 'l' or 'r' per column"),
        ("lc", None, "align 'lc': one of 'l' or 'r' per column"),
        ("lr", (3,), r"widths \[3\]: one per column"),
    ],
)
def test_alignment_and_widths_must_name_every_column(align, widths, why):
    with pytest.raises(ValueError, match=why):
        markdown.table(["a", "b"], [], align=align, widths=widths)


def test_a_row_of_another_length_is_refused_with_widths():
    with pytest.raises(ValueError):
        markdown.table(["a", "b"], [["x"]], widths=(1, 1))


def test_the_gate_and_the_aa_check_keep_their_printed_layout():
    """The widths the gate's timing table and the A/A table use, rendered as they always printed."""
    timing = markdown.table(
        ("shape", "implementation", "us/call", "GB/s", "% copy"),
        [["4096x14336 bfloat16", "nf4kernel", "123.4", "2345", "78.9"]],
        align="llrrr",
        widths=(22, 16, 8, 6, 6),
    )
    assert timing == [
        f"| {'shape':22s} | {'implementation':16s} | {'us/call':>8s} | {'GB/s':>6s} | {'% copy':>6s} |",
        f"|{'-' * 24}|{'-' * 18}|{'-' * 10}|{'-' * 8}|{'-' * 8}|",
        f"| {'4096x14336 bfloat16':22s} | {'nf4kernel':16s} | {123.4:8.1f} | {2345:6.0f} | {78.9:6.1f} |",
    ]
    aa = markdown.table(
        ("", "median", "min", "max", "largest deviation"),
        [["whole round", "1.0000", "0.9800", "1.0200", "2.00%"]],
        align="lrrrr",
        widths=(22, 7, 7, 7, 16),
    )
    assert aa == [
        f"| {'':22s} | {'median':>7s} | {'min':>7s} | {'max':>7s} | {'largest deviation':>17s} |",
        f"|{'-' * 24}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 19}|",
        f"| {'whole round':22s} | {1.0:7.4f} | {0.98:7.4f} | {1.02:7.4f} | {0.02:16.2%} |",
    ]


# --- A record's strings: inert in a summary and in the log -------------------------------------------


@pytest.mark.parametrize(
    "plain",
    [
        "NVIDIA H100 80GB HBM3",
        "2.11.0+cu130",
        "580.159.04",
        "4096x14336 bfloat16",
        "nvidia-ml-py (pynvml) is not installed; nvidia-smi is not on PATH",
        "no CUDA GPU here: torch 2.5 (cpu)",
    ],
)
def test_the_strings_a_record_holds_read_as_they_always_did(plain):
    assert markdown.text(plain) == markdown.line(plain) == plain


def test_every_character_markdown_acts_on_is_escaped():
    assert markdown.text("a\\b `c` *d* _e_ {f} [g](h) <i> j|k ~l~ !m @n #o $p$ &q;") == (
        "a\\\\b \\`c\\` \\*d\\* \\_e\\_ \\{f\\} \\[g\\](h) \\<i\\> j\\|k \\~l\\~ \\!m \\@n \\#o \\$p\\$ \\&q;"
    )


def test_a_bare_url_is_no_link_and_a_colon_elsewhere_is_left():
    assert markdown.text("see https://evil.example or www.evil.example, at 10:30") == (
        "see https\\://evil.example or www\\.evil.example, at 10:30"
    )


def test_a_line_break_is_a_space_and_a_control_character_a_replacement():
    said = markdown.line("2.11\n::add-mask::x\r\n::error::y\u2028z\x85w\tv\x1b[31m\u202eu")
    assert said == "2.11 ::add-mask::x  ::error::y z w v\ufffd[31m\ufffdu"
    assert len(said.splitlines()) == 1


def test_the_runners_legacy_command_is_broken_wherever_it_is():
    assert "##[" not in markdown.line("a ##[add-mask]x ###[error]y")
    assert "##[" not in markdown.text("a ##[add-mask]x")


def test_a_long_string_is_cut_with_an_ellipsis_unless_told():
    assert markdown.line("x" * 1000) == "x" * 199 + "\u2026"
    assert markdown.line("x" * 1000, limit=None) == "x" * 1000
    assert markdown.text("<" * 300).count("\\<") == 199  # cut before it is escaped


def test_a_code_span_or_a_charts_label_has_nothing_to_end_it():
    assert markdown.code('a`b"c|d\ne') == "a'b'c\u00a6d e"


def test_an_escaped_cell_keeps_its_tables_columns():
    lines = markdown.table(["a", "b"], [[markdown.text("x | forged | PASS"), "1"]], widths=(4, 2))
    assert lines[-1] == "| x \\| forged \\| PASS | 1  |"
