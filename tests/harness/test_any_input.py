"""Property-based: whatever a record or an argument holds, the harness answers with a verdict or a
refusal (the validation error, or exit 2 in one line), never a traceback, whose exit 1 the gate and
the regression check use for "slower".

Records: a valid recorded record of each kind (``recorded.py``, ``benchmarks/``), changed at random
places (a value replaced by arbitrary JSON, a field or element removed, one added), goes to its
checker, which must return or raise ``schema.RecordError`` and nothing else; and to the command
that decides on it (in this process, through the program: ``program.main([command, *argv])``),
which must exit with one of its documented codes. Arguments: every command of ``python -m harness``
(and the studies, the private entry point, the pins' check, the site's tools) given 100 argument
lists of its own words and arbitrary text, with stand-ins for what it would measure, start or fetch.

Bounded (``max_examples``, no deadline: a verdict's bootstrap takes tens of milliseconds) and
derandomized, so a CI run is the same run every time, with no examples database (hypothesis still
keeps a cache in .hypothesis/, which its own .gitignore keeps out of git status). The reviewers'
cases are ``@example``s, tried first on every run.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("hypothesis", reason="property-based tests need hypothesis (requirements/test.txt pins it)")

import recorded
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dev.rehearsal import __main__ as workshop
from dev.rehearsal.fake_github import FakeGitHub, Pull, Serving
from harness import __main__ as program
from harness.core import asv_files, gate_record, gpu_state, regression_record, schema
from harness.github import approval
from harness.regression import clocked
from tools import history as history_tools
from tools import pins

ROOT = Path(__file__).resolve().parents[2]
HISTORY = ROOT / "benchmarks" / "history" / "h200"

# The fixtures a test takes (its working directory, a stand-in) hold for every example alike.
BOUNDED = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
FEW = settings(BOUNDED, max_examples=25)
HUNDRED = settings(BOUNDED, max_examples=100)  # an argument list: 100 per command

GATE_EXITS = {0, 1, 2, 3, 4, 5}  # pass, too slow, refused, incorrect, no GPU, no Unsloth
REGRESSION_EXITS = {0, 1, 2, 4}  # nothing slower, slower, refused, no GPU


# --- Arbitrary JSON, and a record changed at random places -------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0, 1, -1, 1e-300, 1e300, 5e-324, 2**63, "", "0.1", "\udcff"])
    | st.text(max_size=12)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def paths(value, here=()) -> list[tuple]:
    """Every place in ``value``: () the whole, then each key or index down."""
    found = [here]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*here, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += paths(item, (*here, i))
    return found


def place(value, path: tuple):
    """The container holding ``path``'s last step, or None where an earlier change removed the way."""
    for step in path[:-1]:
        try:
            value = value[step]
        except (KeyError, IndexError, TypeError):
            return None
    return value if isinstance(value, dict | list) else None


def changed(original, changes) -> object:
    """A copy of ``original`` with each change applied where its place still exists."""
    value = copy.deepcopy(original)
    for kind, path, new in changes:
        if not path:
            value = new if kind == "replace" else value
            continue
        container, last = place(value, path), path[-1]
        if container is None or (isinstance(container, list) and not isinstance(last, int)):
            continue
        if isinstance(container, list) and not -len(container) <= last < len(container):
            continue
        if isinstance(container, dict) and last not in container:
            continue
        if kind == "replace":
            container[last] = new
        elif kind == "delete":
            del container[last]
        elif isinstance(container, dict):
            container[f"{last}_added"] = new
        else:
            container.insert(last, new)
    return value


def places(original):
    """A place of ``original``: a depth first, then a place at that depth, so that the few top-level
    fields are changed as often as the many timings deep down."""
    by_depth: dict[int, list[tuple]] = {}
    for path in paths(original):
        by_depth.setdefault(len(path), []).append(path)
    return st.sampled_from(sorted(by_depth)).flatmap(lambda depth: st.sampled_from(by_depth[depth]))


def changes_of(original, count: int = 3):
    """Up to ``count`` changes at places of ``original``: replaced by arbitrary JSON, deleted, or a
    sibling added."""
    where = places(original)
    change = st.tuples(st.sampled_from(["replace", "replace", "delete", "add"]), where, JSON)
    return st.lists(change, min_size=1, max_size=count)


def only_record_errors(check, record, file: str) -> None:
    """``check`` returns, or raises RecordError in one line naming ``file``: nothing else."""
    try:
        check(record, file)
    except schema.RecordError as error:
        assert str(error).startswith(f"{file}: ") and "\n" not in str(error)


# --- Running a command in this process, as its own process would run it ---------------------------------


def run(main, argv: list[str]) -> tuple[int, str, str]:
    """``main(argv)``'s exit code, stdout and stderr. The streams are strict UTF-8, as a terminal's
    may be: an unencodable character that reaches them is the traceback it would be there."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    said = [stream.buffer.getvalue().decode() for stream in (out, err)]
    return code, said[0], said[1]


@pytest.fixture(scope="module")
def workdir():
    """A folder of its own, the working directory of every command here: what they write lands there."""
    with tempfile.TemporaryDirectory(prefix="any-input-") as folder:
        previous = os.getcwd()
        os.chdir(folder)
        try:
            yield Path(folder)
        finally:
            os.chdir(previous)


def written(folder: Path, name: str, value) -> str:
    path = folder / name
    path.write_text(json.dumps(value))
    return str(path)


# --- Records ---------------------------------------------------------------------------------------------

GATE = recorded.with_states(recorded.committed(1), {2: ["sw_power_cap"]})
GATE["kernel"] = {"source": "../candidate", "commit": "a" * 40, "imported_from": "/tmp/x/nf4kernel/__init__.py"}
REGRESSION = recorded.regression_record(recorded.planted_2x())
REGRESSION["rule"] = {"min_change": 0.05, "min_group_change": 0.02}
ASV_RESULT = json.loads(next(HISTORY.glob("b543b026-*.json")).read_text())
MACHINE = json.loads((HISTORY / "machine.json").read_text())


@BOUNDED
@given(changes=changes_of(GATE))
def test_a_changed_gate_record_is_valid_or_refused_by_name(changes):
    only_record_errors(gate_record.check_gate, changed(GATE, changes), "gate.json")


@BOUNDED
@given(changes=changes_of(REGRESSION))
def test_a_changed_regression_record_is_valid_or_refused_by_name(changes):
    only_record_errors(regression_record.check_regression, changed(REGRESSION, changes), "regression.json")


@BOUNDED
@given(changes=changes_of(ASV_RESULT))
def test_a_changed_asv_result_is_valid_or_refused_by_name(changes):
    only_record_errors(asv_files.check_asv_result, changed(ASV_RESULT, changes), "b543b026-existing-py3.12.json")


@BOUNDED
@given(changes=changes_of(MACHINE))
def test_a_changed_machine_json_is_valid_or_refused_by_name(changes):
    only_record_errors(asv_files.check_machine, changed(MACHINE, changes), "machine.json")


@BOUNDED
@given(changes=changes_of(GATE))
def test_the_gate_on_a_changed_record_decides_or_refuses_in_one_line(workdir, changes):
    """As the record replayed, with the GPU type's threshold and with another."""
    path = written(workdir, "gate.json", changed(GATE, changes))
    for argv in (["--replay", path], ["--replay", path, "--threshold", "1.0"]):
        code, out, err = run(program.main, ["gate", *argv, "--json", "verdict.json", "--summary", "summary.md"])
        assert code in GATE_EXITS and "Traceback" not in out + err, (code, out, err)
        if code == 2:
            assert len(err.splitlines()) == 1 and err.startswith("python -m harness gate: error: "), err


@BOUNDED
@given(changes=changes_of(REGRESSION))
def test_the_regression_check_on_a_changed_record_decides_or_refuses_in_one_line(workdir, changes):
    path = written(workdir, "regression.json", changed(REGRESSION, changes))
    code, out, err = run(program.main, ["regression", "--replay", path, "--summary", "summary.md"])
    assert code in {0, 1, 2} and "Traceback" not in out + err, (code, out, err)
    if code == 2:
        assert out.endswith("; no verdict (exit 2)\n") and len(out.splitlines()) == 1, out


# --- Arguments -------------------------------------------------------------------------------------------

# Any text an argument can hold, a lone surrogate among it (a file name that is no UTF-8), but no "/":
# a path stays in the working directory, so nothing outside it is read (/dev/zero) or written.
TEXT = st.text(st.characters(exclude_characters="/\x00", exclude_categories=()), max_size=10)
ARGUMENT = TEXT | st.sampled_from(
    ["", ".", "-", "--", "nan", "inf", "-1", "0", "1e400", "1.15x", "@", "gate.json", "no-such-folder/out.json"]
)


def arguments(options: list[str], flags: list[str], positional: int = 0):
    """argv of up to four options, each with arbitrary text, flags among them, and up to
    ``positional`` arbitrary words."""
    option = st.tuples(st.sampled_from(options), ARGUMENT).map(list)
    flag = st.sampled_from(flags).map(lambda f: [f])
    words = st.lists(ARGUMENT, max_size=positional).map(list)
    picks = st.lists(option | flag, max_size=4)
    return st.tuples(words, picks).map(lambda both: both[0] + [word for pick in both[1] for word in pick])


GATE_OPTIONS = [
    "--threshold",
    "--rounds",
    "--max-rounds",
    "--json",
    "--summary",
    "--replay",
    "--kernel",
]
GATE_FLAGS = ["--no-classic", "--measure-only"]


@pytest.fixture
def no_gpu_to_measure(monkeypatch):
    """On a GPU machine arguments that measure (``--measure-only``, say) would time for minutes each
    example: here the gate sees no GPU, and answers as it does where there is none."""
    monkeypatch.setattr(gpu_state, "gpu_here", lambda: False)


@HUNDRED
@given(argv=arguments(GATE_OPTIONS, GATE_FLAGS))
@example(argv=["--replay", "gate.json", "--threshold", "nan"])
@example(argv=["--replay", "gate.json", "--json", "."])
@example(argv=["--replay", "gate.json", "--summary", "no-such-folder/out.json"])
@example(argv=["--no-classic", "--json", ""])
def test_the_gate_given_any_arguments_answers_with_an_exit_code(no_gpu_to_measure, workdir, argv):
    written(workdir, "gate.json", GATE)
    code, out, err = run(program.main, ["gate", *argv])
    assert code in GATE_EXITS and "Traceback" not in out + err, (argv, code, out, err)


REGRESSION_OPTIONS = [
    "--replay",
    "--record",
    "--summary",
    "--min-change",
    "--min-group-change",
    "--rounds",
    "--more-rounds",
    "--shapes",
    "--dtypes",
    "--device",
]


@pytest.fixture
def nothing_measured(monkeypatch):
    """Two refs that resolve ("@ @") would start minutes of measuring: the measurement says why not."""

    def measure(*args, **kwargs):
        raise clocked.MeasureError("not measured in this test", 2)

    monkeypatch.setattr(clocked, "measure", measure)


@HUNDRED
@given(argv=arguments(REGRESSION_OPTIONS, ["--measure-only"], positional=2))
@example(argv=["--replay", "regression.json", "--summary", "."])
@example(argv=["--replay", "regression.json", "--summary", "no-such-folder/out.json"])
@example(argv=["@", "@", "--record", "no-such-folder/out.json"])
def test_the_regression_check_given_any_arguments_answers_with_an_exit_code(workdir, nothing_measured, argv):
    written(workdir, "regression.json", REGRESSION)
    code, out, err = run(program.main, ["regression", *argv])
    assert code in REGRESSION_EXITS and "Traceback" not in out + err, (argv, code, out, err)


@pytest.fixture
def an_index_with_nothing(monkeypatch):
    """pins asks no index here: every project lists no files (so every pin is a problem: exit 1)."""

    def list_from_indexes(urls, timeout=20):
        def list_files(project):
            return []

        list_files.unreachable = set()
        return list_files

    monkeypatch.setattr(pins, "list_from_indexes", list_from_indexes)


@HUNDRED
@given(argv=st.lists(ARGUMENT, max_size=3))
def test_pins_given_any_arguments_answers_with_an_exit_code(an_index_with_nothing, argv):
    code, out, err = run(pins.main, argv)
    assert code in {0, 1, 2} and "Traceback" not in out + err, (argv, code, out, err)


REQUIREMENT_LINE = st.sampled_from(
    ["torch==2.13.0", "-c other.txt", "--hash=sha256:00", "\\", "# note", "x==1; python_version < '3.12'", "-i"]
) | st.text(max_size=30)


@FEW
@given(lines=st.lists(REQUIREMENT_LINE, max_size=5))
def test_pins_reads_any_requirements_file_or_names_its_line(workdir, lines):
    path = workdir / "any.txt"
    path.write_text("\n".join(lines).replace("\udcff", "?"))
    try:
        pinned = pins.pins([path])
        pins.file_indexes(path, {})
        pins.missing_wheels(["3.12"], pinned, lambda project: [])
    except pins.BadInput as error:
        assert str(error).startswith("any.txt") and "\n" not in str(error)


CI_WORKFLOW = {
    "jobs": {
        "lint": {"steps": [{"uses": "actions/setup-python@abc", "with": {"python-version": "3.12"}}]},
        "tests": {
            "strategy": {"matrix": {"python": ["3.11", "3.12"], "include": [{"python": "3.13"}]}},
            "steps": [{"uses": "actions/setup-python@abc", "with": {"python-version": "${{ matrix.python }}"}}],
        },
    }
}


@BOUNDED
@given(changes=changes_of(CI_WORKFLOW))
def test_pins_reads_any_workflow_or_names_the_place(workdir, changes):
    path = workdir / "ci.yml"
    path.write_text(json.dumps(changed(CI_WORKFLOW, changes)))  # JSON is YAML
    try:
        for python in pins.ci_pythons(path):
            pins.target_tags(python)
    except pins.BadInput as error:
        assert str(error).startswith("ci.yml: ") and "\n" not in str(error)


@pytest.fixture(scope="module")
def github():
    fake = FakeGitHub("nf4kernel/nf4kernel", permissions={"maintainer": "write"})
    fake.pulls["8"] = Pull(head="a" * 40, base="b" * 40, head_repo="someone/nf4kernel")
    with Serving(fake) as url:
        yield url


APPROVAL_ARGUMENTS = st.one_of(
    st.lists(ARGUMENT, max_size=3),
    st.tuples(
        st.sampled_from(["report"]),
        st.lists(st.tuples(st.sampled_from(["--sha", "--tests", "--gate", "--regression"]), ARGUMENT), max_size=4),
    ).map(lambda both: [both[0], *[word for pair in both[1] for word in pair]]),
    st.tuples(ARGUMENT, ARGUMENT, ARGUMENT).map(
        lambda words: ["report", "--sha", "a" * 40, "--tests", words[0], "--gate", words[1], "--regression", words[2]]
    ),
)


@HUNDRED
@given(argv=APPROVAL_ARGUMENTS)
def test_approval_given_any_arguments_answers_with_an_exit_code(github, workdir, monkeypatch, argv):
    event = workdir / "event.json"
    event.write_text(json.dumps({"action": "created", "issue": {"number": 8, "pull_request": {}}}))
    for name, value in {
        "GITHUB_API_URL": github,
        "GITHUB_REPOSITORY": "nf4kernel/nf4kernel",
        "GITHUB_EVENT_NAME": "issue_comment",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_OUTPUT": str(workdir / "output"),
        "GITHUB_STEP_SUMMARY": str(workdir / "summary"),
    }.items():
        monkeypatch.setenv(name, value)
    code, out, err = run(program.main, ["approval", *argv])
    assert code in {0, 1, 2} and "Traceback" not in out + err, (argv, code, out, err)


class Answering(approval.GitHub):
    """A GitHub whose every answer is ``answer``: any JSON at all."""

    def __init__(self, answer):
        super().__init__("http://127.0.0.1:9", "token", "nf4kernel/nf4kernel")
        self.answer = answer

    def call(self, method, path, body=None):
        return self.answer


EVENT = {
    "action": "created",
    "issue": {"number": 8, "pull_request": {"url": "…"}},
    "comment": {"body": f"/gpu-approve {'a' * 40}", "user": {"login": "maintainer"}},
    "repository": {"full_name": "nf4kernel/nf4kernel", "default_branch": "main"},
}
PULL = {"state": "open", "permission": "write", "base": {"ref": "main", "sha": "b" * 40}, "head": {"sha": "a" * 40}}


@BOUNDED
@given(
    event_changes=changes_of(EVENT, 2),
    answer_changes=changes_of(PULL, 2),
    name=st.sampled_from(["issue_comment", "push"]),
)
def test_approval_on_any_event_and_any_answer_approves_or_refuses(event_changes, answer_changes, name):
    event, answer = changed(EVENT, event_changes), changed(PULL, answer_changes)
    try:
        decided = approval.approve(name, event, "c" * 40, "refs/heads/main", Answering(answer))
    except approval.Refused:
        return
    assert approval.FULL_HASH.fullmatch(decided.candidate) and approval.FULL_HASH.fullmatch(decided.trusted)


# --- The commands once found ending in a traceback, an abort or a wrong answer ---------------------


@pytest.fixture
def nothing_served_published_or_fetched(monkeypatch):
    """The site's and the history's commands with valid arguments would serve until stopped, run asv
    publish for minutes, fetch from npm or write the committed history: here each is a stand-in, and
    what is tried is the arguments' checking."""
    from harness.history import site

    monkeypatch.setattr(history_tools, "serve", lambda command, **kwargs: 0)
    monkeypatch.setattr(site, "publish", lambda config="asv.conf.json": Path(config).parent)
    monkeypatch.setattr(history_tools, "vendor", lambda update=False: None)
    monkeypatch.setattr(history_tools.store, "store", lambda results, machine, history: 0)  # never into the repo
    return site


SITE_ARGUMENTS = st.tuples(
    st.sampled_from(["publish", "preview", "vendor", "store", "list"]) | ARGUMENT,
    st.lists(
        st.tuples(st.sampled_from(["--config", "--port", "--update", "--machine", "--history"]), ARGUMENT), max_size=3
    ),
).map(lambda both: [both[0], *[word for pair in both[1] for word in pair]])


@HUNDRED
@given(argv=SITE_ARGUMENTS)
@example(argv=["publish", "--config", "README.md"])
@example(argv=["publish", "--config", "\udcff"])
def test_the_site_given_any_arguments_answers_with_an_exit_code(nothing_served_published_or_fetched, workdir, argv):
    code, out, err = run(program.main, ["site", *argv])
    assert code in {0, 1, 2} and "Traceback" not in out + err, (argv, code, out, err)
    if code == 2:
        assert len(err.splitlines()) == 1, err


@HUNDRED
@given(argv=SITE_ARGUMENTS)
@example(argv=["preview", "--port", "99999"])
@example(argv=["preview", "--port", "1e400"])
@example(argv=["preview", "--config", "."])
@example(argv=["preview", "--config", "\udcff"])
@example(argv=["list", "--history", "/nonexistent/x"])
@example(argv=["store", "--config", "README.md"])
def test_the_sites_tools_given_any_arguments_answer_with_an_exit_code(
    nothing_served_published_or_fetched, workdir, argv
):
    code, out, err = run(history_tools.main, argv)
    assert code in {0, 1, 2} and "Traceback" not in out + err, (argv, code, out, err)
    if code == 2:
        assert len(err.splitlines()) == 1, err


@pytest.fixture
def nothing_compiled(monkeypatch):
    """A target the check lets through is compiled by Triton for seconds: here it is not compiled at
    all. What is tried is the check, which must stop every target LLVM could abort on."""
    from nf4kernel import targets

    monkeypatch.setattr(targets, "compile_row", lambda arch, variant, fmt: ("OK", ["(not compiled in this test)"]))
    return targets


@HUNDRED
@given(argv=st.lists(ARGUMENT | st.integers(min_value=-(10**6), max_value=10**6).map(str), max_size=3))
@example(argv=["999"])
@example(argv=["75", "999"])
@example(argv=["76"])
@example(argv=[str(2**64)])
def test_targets_given_any_arguments_answers_with_an_exit_code(nothing_compiled, argv):
    code, out, err = run(nothing_compiled.main, argv)
    assert code in {0, 1, 2} and "Traceback" not in out + err, (argv, code, out, err)
    if code == 2:
        assert len(err.splitlines()) == 1 and not out, err
    else:  # everything asked for got through the check: each a target its ptxas assembles for
        assert all(nothing_compiled.assembles(int(word)) for word in argv if word.lstrip("-").isdigit())


@pytest.fixture
def no_job_run(monkeypatch):
    from dev.rehearsal import act_ci

    monkeypatch.setattr(act_ci, "run_job", lambda job, workflow, **kwargs: True)
    return act_ci


@HUNDRED
@given(argv=st.lists(ARGUMENT | st.sampled_from(["lint", "tests", "harness", "--help", "-h"]), max_size=3))
@example(argv=["--help"])
@example(argv=["\udcff"])
def test_act_ci_given_any_arguments_answers_with_an_exit_code(no_job_run, argv):
    code, out, err = run(workshop.main, ["act-ci", *argv])
    assert code in {0, 1, 2} and "Traceback" not in out + err, (argv, code, out, err)
    if "--help" in argv or "-h" in argv:
        assert code in {0, 2}  # 0 for the help itself; 2 where a bad word came first


@pytest.fixture
def no_gpu_here(monkeypatch):
    """sweep and perf measure for minutes on a GPU: here they see none, after checking their
    arguments, and exit 4 as on a machine without one."""
    from studies import utils

    def exit_without_gpu(what):
        raise SystemExit(4)

    monkeypatch.setattr(utils, "exit_without_gpu", exit_without_gpu)


@HUNDRED
@given(
    which=st.sampled_from(["sweep", "perf"]),
    argv=arguments(["--json", "--warps", "--iters", "--vectors", "--rounds"], ["--help"]),
)
@example(which="perf", argv=["--rounds", "0"])
@example(which="sweep", argv=["--warps", "3"])
@example(which="sweep", argv=["--iters", "-1"])
def test_sweep_and_perf_given_any_arguments_answer_with_an_exit_code(no_gpu_here, workdir, which, argv):
    import importlib

    code, out, err = run(importlib.import_module(f"studies.{which}").main, argv)
    assert code in {0, 2, 4} and "Traceback" not in out + err, (argv, code, out, err)


# The program for people, with a first word no command has: one line and exit 2, whatever follows.
@HUNDRED
@given(argv=st.lists(ARGUMENT, min_size=1, max_size=4))
@example(argv=["gate\udcff"])
@example(argv=["--json", "x"])
def test_the_harness_program_given_no_command_of_its_own_refuses_in_one_line(argv):
    from harness import __main__ as program

    if argv[0] in program.COMMANDS or argv[0] in ("-h", "--help"):
        return  # a command's own arguments are its own tests'
    code, out, err = run(program.main, argv)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, (argv, code, out, err)


# The private entry point, in a process of its own (the descriptors it is given are that process's:
# only 0 to 2 are open there, none of them the clock's socket and channel).
WORDS = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=10)


@HUNDRED
@given(
    argv=st.lists(WORDS, max_size=4)
    | st.tuples(st.sampled_from(["reference", "worker"]), st.lists(WORDS | st.integers(0, 9).map(str), max_size=4)).map(
        lambda both: [both[0], *both[1]]
    )
)
@example(argv=["worker", "nf4kernel", "0", "1"])
@example(argv=["reference", "1", "2"])
def test_the_private_entry_point_given_any_arguments_refuses_in_one_line(argv):
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-P", "-m", "harness._process", *argv],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, (argv, done.stderr)


# --- Every other command of the program ------------------------------------------------------------------

# The commands above have tests of their own, with stand-ins for their measuring; these get one test:
# up to five words from their own --help (options, sub-commands, choices) and ARGUMENT's text.
COVERED_ABOVE = {"gate", "regression", "approval", "site", "act-ci"}
PROGRAMS = {"harness": program, "dev.rehearsal": workshop}  # the workshop's program is held alike
EVERY_OTHER = sorted((name, c) for name, p in PROGRAMS.items() for c in p.COMMANDS if c not in COVERED_ABOVE)


class Started(BaseException):
    """A command took its arguments and went on to start a process or reach the network: what it does
    there is its own tests' (a BaseException, so that no ``except Exception`` of the command hides it)."""


READ_ONLY_GIT = {"rev-parse", "rev-list", "show", "log", "cat-file", "merge-base"}
# Beside ARGUMENT: revisions, a GPU type, a config, a broken JSON file, a path outside.
MORE_WORDS = ["HEAD", "HEAD~99999", "main..HEAD", "h200", "asv.conf.json", "garbage.json", "/nonexistent/x"]
QUERIES = {"uname", "nvidia-smi"}  # what a machine's description asks (platform.processor(), gpu_here)


@pytest.fixture
def nothing_started(monkeypatch, workdir):
    """No process starts but a read-only git or a query of the machine, nothing reaches the network,
    and ~ is the working directory's (asv stores a machine's description in ~/.asv-machine.json)."""
    import subprocess
    import urllib.request

    real_popen = subprocess.Popen

    def popen(command, *args, **kwargs):  # subprocess.run and check_output start theirs through it
        words = [str(word) for word in command] if isinstance(command, list | tuple) else [str(command)]
        name, first = Path(words[0]).name, next((w for w in words[1:] if not w.startswith("-")), "")
        if name in QUERIES or (name == "git" and first in READ_ONLY_GIT):
            return real_popen(command, *args, **kwargs)
        raise Started(words)

    def started(*args, **kwargs):
        raise Started(args)

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(urllib.request, "urlopen", started)
    (workdir / "home").mkdir(exist_ok=True)
    (workdir / "garbage.json").write_text("{not json")
    from harness.history import store

    monkeypatch.setattr(store, "seed", started)  # copies the committed history into the results
    monkeypatch.setattr(store, "store", started)  # writes into benchmarks/history
    monkeypatch.setenv("HOME", str(workdir / "home"))
    for name in ("GITHUB_TOKEN", "GITHUB_REPOSITORY", "GITHUB_SERVER_URL", "GITHUB_STEP_SUMMARY", "GITHUB_ENV"):
        monkeypatch.delenv(name, raising=False)


@functools.cache
def own_words(name: str, command: str) -> tuple[list[str], list[str]]:
    """The sub-commands and choices a command's --help names, and the options of it and of each."""

    def help_of(argv):
        _, out, err = run(PROGRAMS[name].main, argv)
        return out + err

    text = help_of([command, "--help"])
    choices = list(dict.fromkeys(word for group in re.findall(r"\{([\w,-]+)\}", text) for word in group.split(",")))
    for choice in choices:
        text += help_of([command, choice, "--help"])
    options = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", text)) - {"-h", "--help"}
    return choices, sorted(options)


@HUNDRED
@pytest.mark.parametrize(("name", "command"), EVERY_OTHER)
@given(data=st.data())
def test_every_other_command_given_any_arguments_answers_with_an_exit_code(nothing_started, name, command, data):
    choices, options = own_words(name, command)
    value = ARGUMENT | st.sampled_from(MORE_WORDS)
    first = st.sampled_from(choices).map(lambda word: [word]) if choices else st.just([])
    with_value = st.tuples(st.sampled_from(options), value).map(list)
    pick = with_value | st.sampled_from(options).map(lambda o: [o]) | value.map(lambda word: [word])
    picks = data.draw(st.tuples(first | st.just([]), st.lists(pick, max_size=4)))
    argv = [*picks[0], *(word for each in picks[1] for word in each)]
    try:
        code, out, err = run(PROGRAMS[name].main, [command, *argv])
    except Started:
        return
    assert code in {0, 1, 2, 3, 4} and "Traceback" not in out + err, (argv, code, out, err)
    if code == 2:  # one line: on stderr, or on stdout where that is the command's whole log (results-branch)
        assert len((err or out).strip().splitlines()) == 1, (argv, out, err)
