"""The torch/Triton legs: what CI runs (.ci/run here, ci.yml's kernel-versions matrix on GitHub), the
records those runs wrote (docs/support/), the README's support table made from them, and the releases
_triton_compat.py counts as seen, all agree."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml

import noxfile
from harness.core.paths import ROOT
from nf4kernel import _triton_compat

sys.path.insert(0, str(ROOT / "tools" / "release"))
import support_table

RECORDS = support_table.read_records(support_table.RECORDS)
CI_RUN_LEG = re.compile(r"^(?:NF4KERNEL_TORCH=\S+ )?nox -s kernel_tests -- torch==(\S+) triton==(\S+)", re.MULTILINE)


def release(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def recorded_pairs() -> set[tuple[str, str]]:
    return {(r["torch"].split("+")[0], r["triton"]) for r in RECORDS if r["exit_code"] == 0}


def test_the_readme_table_is_the_records():
    assert RECORDS, "no records in docs/support"
    readme = (ROOT / "README.md").read_text()
    assert support_table.readme_section(readme) == support_table.section(RECORDS), (
        "python tools/release/support_table.py --write"
    )


def test_every_leg_ci_runs_is_a_recorded_pair():
    here = set(CI_RUN_LEG.findall((ROOT / ".ci" / "run").read_text()))
    matrix = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())["jobs"]["kernel-versions"]
    on_github = {(leg["torch"], leg["triton"]) for leg in matrix["strategy"]["matrix"]["include"]}
    assert len(here) >= 2 and len(on_github) >= 2
    assert here | on_github <= recorded_pairs(), sorted((here | on_github) - recorded_pairs())


def test_the_oldest_leg_is_pyprojects_lower_bounds():
    """The bounds state what works: the oldest pair CI runs is the lowest pyproject admits."""
    text = (ROOT / "pyproject.toml").read_text()
    lower = {name: re.search(rf'"{name}>=([\d.]+)"', text).group(1) for name in ("torch", "triton")}
    assert not re.search(r'"(torch|triton)[^"]*<', text), "an upper bound needs a reason beside it"
    oldest = min(CI_RUN_LEG.findall((ROOT / ".ci" / "run").read_text()), key=lambda p: support_table._version(p[0]))
    assert (release(oldest[0]), release(oldest[1])) == (lower["torch"], lower["triton"])


def test_every_recorded_release_is_seen_by_the_launch_path():
    for record in RECORDS:
        assert release(record["torch"]) in _triton_compat.SEEN["torch"], record
        assert release(record["triton"]) in _triton_compat.SEEN["triton"], record
    seen = {(lib, r) for lib, releases in _triton_compat.SEEN.items() for r in releases}
    ran = {("torch", release(r["torch"])) for r in RECORDS} | {("triton", release(r["triton"])) for r in RECORDS}
    assert seen <= ran, f"SEEN lists releases no record ran: {sorted(seen - ran)}"


def write_record(folder, **fields):
    base = {key: "x" for key in support_table.FIELDS} | {"exit_code": 0, "python": "3.11.7", "commit": "0" * 40}
    record = base | {"device": "cpu (Triton's interpreter)"} | fields
    (folder / f"{record['torch']}-{record['triton']}.json").write_text(json.dumps(record))


@pytest.mark.parametrize(
    ("ran", "code"),
    [
        ([{}], 0),  # a pair the table claims, passed
        ([{"exit_code": 1}], 1),  # it failed here
        ([{"torch": "9.9.9"}], 1),  # passed, but the table doesn't claim it
        ([], 1),  # nothing ran
    ],
)
def test_the_run_must_pass_on_pairs_the_table_claims(ran, code, tmp_path):
    claimed = RECORDS[0]
    for fields in ran:
        write_record(tmp_path, **({k: claimed[k] for k in ("torch", "triton", "python", "device")} | fields))
    script = ROOT / "tools" / "release" / "support_table.py"
    done = subprocess.run([sys.executable, str(script), "--ran", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == code, done.stdout + done.stderr


def test_a_bad_record_is_said_in_one_line(tmp_path):
    (tmp_path / "bad.json").write_text("{")
    script = ROOT / "tools" / "release" / "support_table.py"
    done = subprocess.run([sys.executable, str(script), "--ran", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "bad.json" in done.stderr


@pytest.mark.parametrize(
    ("args", "versions", "rest"),
    [
        (["torch==2.11.0", "triton==3.6.0"], {"torch": "2.11.0", "triton": "3.6.0"}, []),
        (["triton==3.9.0", "-k", "x", "torch==2.15.0"], {"torch": "2.15.0", "triton": "3.9.0"}, ["-k", "x"]),
    ],
)
def test_the_session_reads_the_pair(args, versions, rest):
    assert noxfile.leg_versions(args) == (versions, rest)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["torch==2.11.0"], "missing triton"),
        ([], "missing torch, triton"),
        (["torch==2.11.0", "torch==2.12.0", "triton==3.6.0"], "torch given twice"),
        (["torch>=2.11", "triton==3.6.0"], "missing torch"),
    ],
)
def test_the_session_refuses_what_is_no_pair(args, said):
    with pytest.raises(ValueError, match=said):
        noxfile.leg_versions(args)
