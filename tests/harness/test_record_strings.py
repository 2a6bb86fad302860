"""A record's strings reach the job summary inert and the job's log one line each.

A pull request's kernel runs in the measuring process, so every string a gate, A/A or regression
record carries (the GPU's name, the versions, where nf4kernel was imported from, a shape's label,
an error, a throttle reason) is its to choose, and so are the strings of an asv result (a
benchmark's name and parameters, the machine). Each record here carries an attack in every string
it prints: HTML, a link, an @-mention, a forged table row, a workflow command after a newline, a
carriage return or a line separator, and the runner's legacy ``##[command]``, which it acts on
anywhere in a line. Each is rendered by the command or function the workflows use (the gate's and
the regression check's ``--replay --summary``, the change-point issue), and the output is read as
GitHub would: no line of the log or summary starts a workflow command, no table gains a cell, and
nothing outside a backslash escape opens HTML, a link, a code span or a mention.
"""

from __future__ import annotations

import json
import re

import pytest
import recorded
from recorded import STATE_CAPPED, STATE_FULL, committed, with_states

from harness.gate import cli as gate
from harness.history import changepoints
from harness.regression import cli as regression

HTML = "H100</td><img src=x onerror=alert(1)>"
COMMAND = "2.11\n::add-mask::ghp_x\n| forged | PASS |"
LINK = "/tmp/k/nf4kernel/__init__.py [click](https://evil)"
MENTION = "@maintainer"
LEGACY = "3.6 ##[add-mask]ghp_y"  # the runner acts on ##[ anywhere in a line
RETURN = "0.50\r::error::forged"  # the runner reads a carriage return as a line's end
SEPARATOR = "13.0\u2028::error::x\x85::warning::y"  # line ends to Python's splitlines
MARKUP = "`x` ~~y~~ $z$ **b** _i_ # h > q <!-- c --> &lt;"
EVERY = (HTML, COMMAND, LINK, MENTION, LEGACY, RETURN, SEPARATOR, MARKUP)
LABEL = '2048x8192 | PASS |\n::error::label `x` "q" <b>'


def log_lines(text: str) -> list[str]:
    # Python's splitlines ends a line at every character any reader might (\r, \x85, \u2028, ...).
    return text.splitlines()


def active(line: str) -> str:
    """The line without its backslash escapes: what is left is what Markdown acts on."""
    return re.sub(r"\\.", "", line)


def check_log(text: str) -> None:
    for line in log_lines(text):
        assert not line.strip().startswith("::"), line
        assert "##[" not in line, line
    check_tables(log_lines(text))


def check_tables(lines: list[str]) -> None:
    """Each table's rows have as many cells as its heading (a pipe of a record's is escaped)."""
    width = None
    for line in lines:
        if not line.startswith("|"):
            width = None
            continue
        cells = active(line).count("|")
        width = width or cells
        assert cells == width, line


def check_summary(text: str, harness_code: bool = False) -> None:
    """Markdown with no active HTML, link, image, mention or (``harness_code`` aside) code span
    from a record, no table row of one, and no line a log could take for a command."""
    lines = log_lines(text)
    for line in lines:
        assert not line.strip().startswith("::"), line
        assert "##[" not in line, line
        left = active(line)
        if harness_code:  # the harness's own code spans, each whole: none of a record's opens or ends one
            assert left.count("`") % 2 == 0, line
            left = re.sub(r"`[^`]*`", "", left)
        assert "`" not in left, line
        for opening in ("<", "[", "@", "&"):
            assert opening not in left, line
    check_tables(lines)
    check_rendered(text)


HARNESS_ELEMENTS = {"h3", "p", "strong", "ul", "li", "table", "thead", "tbody", "tr", "th", "td", "pre", "code"}


def check_rendered(text: str) -> None:
    """As CommonMark with GFM's tables renders it (markdown-it-py, rich's, where installed): only
    the elements the harness writes, and every table row as wide as its heading."""
    try:
        import markdown_it
    except ImportError:  # the checks on the text above still hold
        return
    html = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(text)
    assert set(re.findall(r"<([a-z][a-z0-9]*)", html)) <= HARNESS_ELEMENTS, html
    for table in re.findall(r"<table>.*?</table>", html, flags=re.S):
        heading, body = table.split("</thead>")
        for row in body.split("</tr>")[:-1]:
            assert len(re.findall(r"<td[ >]", row)) == len(re.findall(r"<th[ >]", heading)), row


def gate_summary(tmp_path, capsys, record: dict, *options: str) -> tuple[str, str, int]:
    """The gate on ``record`` as the workflow replays it: its log (stdout and stderr), its summary
    and its exit code."""
    path, summary = tmp_path / "record.json", tmp_path / "summary.md"
    path.write_text(json.dumps(record))
    summary.unlink(missing_ok=True)
    try:
        code = gate.main(["--replay", str(path), "--summary", str(summary), *options])
    except SystemExit as done:  # a record refused: one line on stderr
        code = done.code
    out = capsys.readouterr()
    return out.out + out.err, summary.read_text() if summary.exists() else "", code


def check_gate(log: str, summary: str, shapes: int) -> None:
    """The log and the summary, its chart apart: inside the fence a label is a quoted string, with
    no quote, backtick or new line of a record's."""
    check_log(log)
    fence = re.compile(r"```mermaid\n(.*?)```\n", flags=re.S)
    check_summary(fence.sub("", summary))
    for chart in fence.findall(summary):
        lines = chart.splitlines()
        assert len(lines) == 6 and "`" not in chart, chart
        axis = next(line for line in lines if line.strip().startswith("x-axis"))
        assert axis.count('"') == 2 * shapes, axis


def hostile_versions() -> dict:
    keys = ("driver", "cuda", "cuda_driver", "torch", "triton", "bitsandbytes", "unsloth")
    return dict(zip(keys, (MARKUP, RETURN, SEPARATOR, COMMAND, LEGACY, HTML, MENTION), strict=True))


def hostile_gate_record() -> dict:
    """The committed H200 run with every string it prints made an attack."""
    record = with_states(committed(1), {2: ["sw_power_cap\n::stop-commands::t"], 3: [LEGACY]})
    for state in record["round_states"]:  # a new snapshot: with_states shares recorded's
        state["state_after"] = {**state["state_after"], "source": MENTION + HTML}
    env = record["environment"]
    env.update(device=HTML, torch=COMMAND, triton=LEGACY, bitsandbytes=HTML, unsloth=MENTION)
    env["versions"] = hostile_versions()
    record["shapes"][0]["label"] = LABEL
    record["shapes"][1]["label"] = MARKUP
    record["kernel"] = {"source": MARKUP, "commit": LEGACY, "imported_from": LINK}
    return record


def test_a_hostile_gate_record_is_inert_in_the_log_and_the_summary(tmp_path, capsys):
    log, summary, code = gate_summary(tmp_path, capsys, hostile_gate_record())
    assert code == 0  # the verdict is the numbers'; the strings change only how they are shown
    check_gate(log, summary, 3)
    assert "[click](https://evil)" not in summary and "\n::" not in log
    assert "\\@maintainer" in summary and "\\<img src=x onerror=alert(1)\\>" in summary


@pytest.mark.parametrize("attack", EVERY)
def test_every_string_a_failed_gate_names_is_inert(tmp_path, capsys, attack):
    """What a verdict's reasons carry: a failed check's names, the GPU's or Unsloth's error, the
    GPU's unreadable state, a base record's own reasons."""
    wrong = hostile_gate_record()
    wrong["correctness"][0].update(shape=attack, weight=attack, check=attack, ok=False)
    unreadable = hostile_gate_record()
    for state in unreadable["round_states"]:
        state["state_after"] = {"unavailable": attack}
    no_gpu = {"environment": {"cuda": False, "cuda_error": attack}}
    no_unsloth = {"environment": {"cuda": True, "device": attack, "unsloth": None, "unsloth_error": attack}}
    for record in (wrong, unreadable, no_gpu, no_unsloth):
        check_gate(*gate_summary(tmp_path, capsys, record)[:2], len(record.get("shapes", [])))


def test_a_refused_record_names_its_hostile_field_on_one_inert_line(tmp_path, capsys):
    log, _, code = gate_summary(tmp_path, capsys, hostile_gate_record(), "--expect-kernel", "a" * 40)
    assert code == 2 and "kernel.commit" in log
    check_log(log)


def hostile_regression_record() -> dict:
    """The recorded 2x plant with its device, commits, one result's name and the GPU's throttle
    reasons made attacks, and that result's peak memory grown."""
    record = recorded.regression_record(recorded.planted_2x())
    key = sorted(record["passes"][0]["rounds"][0]["base"])[0]
    name = LABEL + LEGACY + MENTION
    for found in record["passes"]:  # every result is re-measured (the plant): the key is in both passes
        for paired in found["rounds"]:
            for side in ("base", "head"):
                paired[side][name] = paired[side].pop(key)
        found["bytes"][name] = found["bytes"].pop(key)
    first = record["passes"][0]
    first["peak_bytes"] = {"base": {name: 100}, "head": {name: 200}}
    capped = {**STATE_CAPPED, "throttle_reasons": [COMMAND, LEGACY, HTML], "source": MENTION}
    first["states"] = [{"head": {name: {"before": STATE_FULL, "after": capped}}, HTML: {name: {MENTION: capped}}}]
    record.update(device=HTML + COMMAND, base=LEGACY + "\n::error::b", head=MENTION + RETURN)
    return record


def test_a_hostile_regression_record_is_inert_in_the_log_and_the_summary(tmp_path, capsys):
    path, summary = tmp_path / "regression.json", tmp_path / "summary.md"
    path.write_text(json.dumps(hostile_regression_record()))
    assert regression.main(["--replay", str(path), "--summary", str(summary)]) == 1  # the plant: slower
    check_log(capsys.readouterr().out)
    check_summary(summary.read_text())


def test_a_regression_record_of_another_commit_is_refused_on_one_inert_line(tmp_path, capsys):
    path = tmp_path / "regression.json"
    path.write_text(json.dumps(hostile_regression_record()))
    assert regression.main(["--replay", str(path), "--expect", "a" * 40, "b" * 40]) == 2
    check_log(capsys.readouterr().out)


class Issues:
    """GitHub's issues API as sync uses it: one open issue of the machine's, every request kept."""

    def __init__(self, machine: str):
        self.open = [{"number": 7, "title": changepoints.TITLE.format(machine=machine), "body": "old"}]
        self.sent: list = []

    def call(self, method: str, path: str, payload: dict | None = None):
        self.sent.append((method, path, payload))
        return self.open if method == "GET" else {}


def test_a_hostile_asv_series_is_inert_in_the_change_point_issue():
    machine = "h200" + HTML + MENTION + MARKUP
    params = (f"'{LABEL}'", f"'{MARKUP}'")
    series = changepoints.Series(machine, "gpu.Bandwidth." + LINK, params, "GB/s")
    series.commits = [f"{i:040x}" for i in range(12)]
    series.values = [100.0, 100.2, 99.9, 100.1, 100.0, 99.8, 100.1, 100.0, 92.0, 92.1, 91.9, 92.0]
    series.weights = [None] * 12
    found = changepoints.judge(series)
    marker, *body = changepoints.body(machine, [found], "f" * 40).splitlines()
    assert marker.startswith("<!-- ") and marker.endswith(" -->") and marker.count("-->") == 1
    check_summary("\n".join(body), harness_code=True)
    github = Issues(machine)
    changepoints.sync(github, machine, [found], "f" * 40)
    comments = [payload["body"] for method, path, payload in github.sent if path.endswith("/comments")]
    assert comments
    for comment in comments:
        check_summary(comment)
