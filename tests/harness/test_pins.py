"""tools/pins/ (python -m tools.pins): which Pythons ci.yml installs on, which listed wheels serve which Python, and the
real pins against the real index; and the promised Python versions agree everywhere."""

from __future__ import annotations

import json
import re
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from dev.rehearsal import act
from tools import pins
from tools.pins import inputs, package_index
from tools.pins.package_index import IndexFile

ROOT = pins.ROOT


def lister(files: dict[str, list[str]]):
    def list_files(project):
        return [f if isinstance(f, IndexFile) else IndexFile(f) for f in files.get(project, [])]

    return list_files


def pinned(*lines):
    return [("test.txt", Requirement(line)) for line in lines]


def test_the_pythons_come_from_every_setup_python_step_matrix_expanded(tmp_path):
    workflow = {
        "jobs": {
            "lint": {"steps": [{"uses": "actions/setup-python@abc", "with": {"python-version": "3.12"}}]},
            "tests": {
                "strategy": {"matrix": {"python": ["3.13", "3.11"]}},
                "steps": [{"uses": "actions/setup-python@abc", "with": {"python-version": "${{ matrix.python }}"}}],
            },
            "other": {"steps": [{"run": "true"}]},
        }
    }
    path = tmp_path / "ci.yml"
    path.write_text(yaml.safe_dump(workflow))
    assert inputs.ci_pythons(path) == ["3.11", "3.12", "3.13"]


@pytest.mark.parametrize(
    "filename,python,serves",
    [
        ("triton-3.9.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", "3.11", True),
        ("triton-3.9.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", "3.10", False),
        ("triton-3.9.0-cp312-abi3-manylinux_2_27_x86_64.whl", "3.13", True),
        ("triton-3.9.0-cp312-abi3-manylinux_2_27_x86_64.whl", "3.11", False),
        ("triton-3.9.0-cp314-cp314t-manylinux_2_28_x86_64.whl", "3.14", False),  # free-threaded only
        ("triton-3.9.0-py3-none-any.whl", "3.13", True),
        ("triton-3.9.0-cp313-cp313-macosx_14_0_arm64.whl", "3.13", False),
        ("triton-3.9.0-cp313-cp313-manylinux_2_40_x86_64.whl", "3.13", False),  # newer glibc than the runner
        ("triton-3.9.0.tar.gz", "3.13", False),
        ("triton-3.9.1-cp313-cp313-manylinux_2_28_x86_64.whl", "3.13", False),  # another version
    ],
)
def test_which_wheel_serves_which_python(filename, python, serves):
    problems = pins.missing_wheels([python], pinned("triton==3.9.0"), lister({"triton": [filename]}))
    assert (problems == []) == serves, problems


def test_a_local_version_matches_its_pin_as_pip_matches_it():
    files = {"torch": ["torch-2.13.0+cpu-cp313-cp313-manylinux_2_28_x86_64.whl"]}
    assert pins.missing_wheels(["3.13"], pinned("torch==2.13.0"), lister(files)) == []


def test_requires_python_and_yanked_files_are_honoured():
    wheel = "asv-0.6.6-py3-none-any.whl"
    too_new = IndexFile(wheel, requires_python=">=3.12")
    assert pins.missing_wheels(["3.11"], pinned("asv==0.6.6"), lister({"asv": [too_new]})) != []
    assert pins.missing_wheels(["3.12"], pinned("asv==0.6.6"), lister({"asv": [too_new]})) == []
    assert pins.missing_wheels(["3.12"], pinned("asv==0.6.6"), lister({"asv": [IndexFile(wheel, yanked=True)]})) != []


def test_every_pin_must_be_exact_and_pinned_once():
    assert pins.missing_wheels(["3.12"], pinned("nox>=2026"), lister({})) == [
        "test.txt: nox>=2026 is not an exact pin (name==version)"
    ]
    both = [("a.txt", Requirement("PyYAML==6.0.3")), ("b.txt", Requirement("pyyaml==6.0.2"))]
    assert pins.conflicting_pins(both) == ["pyyaml pinned differently: ==6.0.3 in a.txt; ==6.0.2 in b.txt"]
    assert pins.conflicting_pins(both[:1] * 2) == []


def test_only_reachable_http_indexes_are_asked():
    environ = {"PIP_EXTRA_INDEX_URL": "file:///opt/pypi/simple https://download.example/whl/cpu/"}
    assert package_index.index_urls(environ) == [package_index.PYPI, "https://download.example/whl/cpu"]


def test_a_files_own_index_options_name_where_its_pins_are_looked_up(tmp_path):
    requirements = tmp_path / "torch-cpu.txt"
    requirements.write_text(
        "# torch alone\n--index-url https://download.example/whl/cpu/\n--extra-index-url=https://more.example/simple\n"
        "-r other.txt\ntorch==2.13.0  # the CPU build\n"
    )
    assert [str(r) for _, r in inputs.pins([requirements])] == ["torch==2.13.0"]
    environ = {"PIP_EXTRA_INDEX_URL": "https://env.example/simple"}
    assert inputs.file_indexes(requirements, environ) == [
        "https://download.example/whl/cpu",
        "https://more.example/simple",
        "https://env.example/simple",
    ]
    plain = tmp_path / "plain.txt"
    plain.write_text("nox==2026.10.20\n")
    assert inputs.file_indexes(plain, {}) == [package_index.PYPI]


def test_the_promised_pythons_agree_with_the_ci_legs():
    legs = inputs.ci_pythons()
    oldest = legs[0]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    requires = SpecifierSet(project["project"]["requires-python"])
    assert all(requires.contains(leg) for leg in legs)
    previous = f"3.{int(oldest.split('.')[1]) - 1}"
    assert not requires.contains(previous), f"pyproject still admits {previous}, which no CI leg installs"
    assert project["tool"]["ruff"]["target-version"] == "py" + oldest.replace(".", "")
    for promised in re.findall(r"Python (3\.\d+)\+", (ROOT / "README.md").read_text()):
        assert promised == oldest, f"README promises Python {promised}+; the oldest CI leg is {oldest}"


@pytest.mark.skipif(not act.ci_tools_installed(), reason="needs the package index; `nox -s tests` or `nox -s pins`")
def test_every_pin_has_a_wheel_for_every_ci_leg_on_the_index(capsys):
    """The real check, against the real index pages (network: the package index only). Where an
    index can't be reached (this machine's network reaches PyPI but not PyTorch's, say), the check
    decides nothing (exit 3) and neither can this test: it skips, naming what went unchecked."""
    code = pins.main([])
    out = capsys.readouterr().out
    if code == pins.EXIT_UNDECIDED:
        pytest.skip(f"an index did not answer here: {out.strip().splitlines()[-1]}")
    assert code == 0, out


# --- Input as pip reads it, and answers as pip takes them: a problem line or exit 2, never a traceback -----


def test_a_marker_is_checked_on_the_pythons_it_admits_only():
    """A pin for Pythons before 3.12 was checked on 3.12 and 3.13 too: a wrong FAIL."""
    wheel = "tomli-2.4.0-cp311-cp311-manylinux_2_17_x86_64.whl"
    pinned_ = pinned('tomli==2.4.0; python_version < "3.12"')
    assert pins.missing_wheels(["3.11", "3.12", "3.13"], pinned_, lister({"tomli": [wheel]})) == []
    assert pins.missing_wheels(["3.11"], pinned_, lister({})) == [
        'test.txt: tomli==2.4.0; python_version < "3.12" has no wheel for CPython 3.11 on x86-64 Linux'
    ]
    assert pins.missing_wheels(["3.12"], pinned('x==1; sys_platform == "win32"'), lister({})) == []


def test_a_listed_file_with_an_invalid_wheel_name_is_no_candidate():
    files = {"asv": ["asv-0.6.6-py3-none-any-extra-parts.whl", "asv-not.a.version-py3-none-any.whl"]}
    assert pins.missing_wheels(["3.12"], pinned("asv==0.6.6"), lister(files)) != []
    files["asv"].append("asv-0.6.6-py3-none-any.whl")
    assert pins.missing_wheels(["3.12"], pinned("asv==0.6.6"), lister(files)) == []


def test_an_invalid_requires_python_is_ignored_as_pip_ignores_it():
    wheel = IndexFile("asv-0.6.6-py3-none-any.whl", requires_python=">=3.x, not a specifier")
    assert pins.missing_wheels(["3.12"], pinned("asv==0.6.6"), lister({"asv": [wheel]})) == []


def test_option_lines_continuations_and_hashes_are_read_as_pip_reads_them(tmp_path):
    requirements = tmp_path / "locked.txt"
    requirements.write_text(
        "-c constraints.txt\n"
        "-i https://first.example/simple\n"
        "--extra-index-url https://more.example/simple  # a mirror\n"
        "torch==2.13.0 \\\n"
        "    --hash=sha256:0123 \\\n"
        "    --hash=sha256:4567\n"
        "pyyaml==6.0.3 --hash=sha256:89ab\n"
        "nox==2026.10.20  # the tool\n"
    )
    assert [str(r) for _, r in inputs.pins([requirements])] == [
        "torch==2.13.0",
        "pyyaml==6.0.3",
        "nox==2026.10.20",
    ]
    assert inputs.file_indexes(requirements, {}) == ["https://first.example/simple", "https://more.example/simple"]


def test_a_line_that_is_no_requirement_names_its_file_and_line(tmp_path):
    requirements = tmp_path / "broken.txt"
    requirements.write_text("# pins\nnox==2026.10.20\ntorch=2.13.0\n")
    with pytest.raises(inputs.BadInput, match=r"broken.txt:3: 'torch=2.13.0' is not a requirement"):
        inputs.pins([requirements])


def workflow_file(tmp_path, jobs) -> object:
    path = tmp_path / "ci.yml"
    path.write_text(yaml.safe_dump({"jobs": jobs}))
    return path


def setup_python(version):
    return {"uses": "actions/setup-python@abc", "with": {"python-version": version}}


def test_a_matrix_with_include_and_exclude_expands_as_github_expands_it(tmp_path):
    matrix = {
        "python": ["3.11", "3.12"],
        "os": ["ubuntu", "arm"],
        "exclude": [{"python": "3.11", "os": "arm"}],
        "include": [{"python": "3.14", "os": "ubuntu"}, {"os": "arm", "extra": True}],
    }
    jobs = {"tests": {"strategy": {"matrix": matrix}, "steps": [setup_python("${{matrix.python}}")]}}
    assert inputs.ci_pythons(workflow_file(tmp_path, jobs)) == ["3.11", "3.12", "3.14"]
    only_include = {"include": [{"python": "3.13"}, {"python": "3.11"}]}
    jobs = {"tests": {"strategy": {"matrix": only_include}, "steps": [setup_python("${{ matrix.python }}")]}}
    assert inputs.ci_pythons(workflow_file(tmp_path, jobs)) == ["3.11", "3.13"]


@pytest.mark.parametrize(
    "jobs,said",
    [
        ({"lint": {"steps": [setup_python(3.10)]}}, "3.1 is not a string: quote it"),
        ({"lint": {"steps": [setup_python("3.13t")]}}, "'3.13t' is no CPython version pins can check"),
        ({"lint": {"steps": [setup_python("${{ env.PY }}")]}}, "pins expands ${{ matrix.<key> }} only"),
        ({"lint": {"steps": [{"uses": "actions/setup-python@abc"}]}}, "steps[0].with is not a mapping"),
        ({"t": {"strategy": {"matrix": "${{ fromJSON(x) }}"}, "steps": [setup_python("${{ matrix.py }}")]}}, "matrix"),
        ({"t": {"strategy": {"matrix": {"os": ["a"]}}, "steps": [setup_python("${{ matrix.py }}")]}}, "has no 'py'"),
        ({"t": {"strategy": {"matrix": {"py": "3.12"}}, "steps": [setup_python("${{ matrix.py }}")]}}, "matrix.py"),
        ({"lint": {"steps": "run: true"}}, "jobs.lint.steps is not a list"),
        ({"lint": ["a"]}, "jobs.lint is not a mapping"),
    ],
)
def test_a_workflow_pins_cannot_read_its_pythons_from_is_refused_by_place(tmp_path, jobs, said):
    with pytest.raises(inputs.BadInput) as error:
        inputs.ci_pythons(workflow_file(tmp_path, jobs))
    assert said in str(error.value) and str(error.value).startswith("ci.yml: ")


class Index:
    """A package index on 127.0.0.1 answering every project page with ``status``, ``body``, ``kind``."""

    def __init__(self, status: int, body: bytes, kind: str = "application/vnd.pypi.simple.v1+json"):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    def __enter__(self) -> str:
        import threading

        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/simple"

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize(
    "status,body,kind",
    [
        (500, b"Internal Server Error", "text/plain"),
        (503, b"", "text/html"),
        (200, b"<not json", "application/vnd.pypi.simple.v1+json"),
        (200, b'{"files": 3}', "application/vnd.pypi.simple.v1+json"),
        (200, b"[1]", "application/json"),
    ],
    ids=["500", "503", "not-json", "files-a-number", "a-list"],
)
def test_an_index_answering_with_an_error_or_no_index_page_is_skipped_with_a_warning(capsys, status, body, kind):
    with Index(status, body, kind) as url:
        list_files = package_index.list_from_indexes([url], timeout=5)
        assert list_files("asv") == [] and list_files.unreachable == {url}
    assert f"WARNING: skipping index {url}" in capsys.readouterr().err


def test_a_json_page_lists_only_entries_with_a_filename():
    page = json.dumps(
        {
            "files": [
                {"filename": "asv-0.6.6-py3-none-any.whl", "requires-python": 3, "yanked": "a reason"},
                {"filename": 7},
                "asv-0.6.5.tar.gz",
                {"filename": "asv-0.6.6.tar.gz", "requires-python": ">=3.8"},
            ]
        }
    ).encode()
    with Index(200, page) as url:
        files = package_index.list_from_indexes([url], timeout=5)("asv")
    assert files == [
        IndexFile("asv-0.6.6-py3-none-any.whl", None, True),
        IndexFile("asv-0.6.6.tar.gz", ">=3.8", False),
    ]


def test_main_takes_no_arguments_and_refuses_bad_input_in_one_line(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as stopped:
        pins.main(["--verbose"])
    assert stopped.value.code == 2
    capsys.readouterr()
    broken = tmp_path / "broken.txt"
    broken.write_text("torch=2.13.0\n")
    monkeypatch.setattr(pins, "REQUIREMENT_FILES", [broken])
    assert pins.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pins: broken.txt:1: 'torch=2.13.0' is not a requirement") and len(err.splitlines()) == 1
