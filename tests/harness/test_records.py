"""The record schemas (harness/core/gate_record.py, regression_record.py, asv_files.py): every
committed record of each kind passes its schema, and what breaks one is refused as one line naming
the file and the field (the property-based side: test_records_fuzz.py)."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path

import pytest
import recorded

from harness.core import asv_files, gate_record, regression_record, schema

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def committed_json(pattern: str) -> list[Path]:
    return sorted(p for p in ROOT.glob(pattern) if p.name.endswith((".json", ".json.gz")))


def load(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


@functools.cache
def loaded(path: Path):
    """A committed file's JSON, read once (the H100 regression records are large): never to be changed."""
    return load(path)


def is_gate_record(data) -> bool:
    """A gate run's record; an A/A record (``"mode"``) is none since the gate stopped reading them."""
    if not isinstance(data, dict) or "mode" in data:
        return False
    return "environment" in data and ("seconds" in data or "correctness" in data)


# The records on main: the committed history (benchmarks/history) and the test fixtures (tests/fixtures);
# every other measured file is in main's history or lost (benchmarks/results/README.md).
GATE_RECORDS = [p for p in committed_json("tests/fixtures/**/*.json*") if is_gate_record(loaded(p))]
REGRESSION_RECORDS = [p for p in committed_json("tests/fixtures/**/*.json*") if "passes" in loaded(p)]
ASV_FILES = committed_json("benchmarks/**/*.json") + committed_json("tests/fixtures/**/*.json")
ASV_RESULTS = [p for p in ASV_FILES if p.name.endswith(".json") and "result_columns" in loaded(p)]
MACHINES = [p for p in ASV_FILES if p.name == "machine.json"]


def test_there_are_committed_records_of_every_kind():
    """Without them the tests below would be parametrized over nothing and vanish without a word."""
    assert len(GATE_RECORDS) >= 60 and len(REGRESSION_RECORDS) >= 13
    assert len(ASV_RESULTS) >= 19 and len(MACHINES) >= 2


@pytest.mark.parametrize("path", GATE_RECORDS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_committed_gate_record_passes(path):
    gate_record.check_gate(loaded(path), path.name)


@pytest.mark.parametrize("path", REGRESSION_RECORDS, ids=lambda p: p.name)
def test_every_committed_regression_record_passes(path):
    regression_record.check_regression(loaded(path), path.name)


@pytest.mark.parametrize("path", ASV_RESULTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_asv_result_passes(path):
    asv_files.read_asv_result(path)


@pytest.mark.parametrize("path", MACHINES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_machine_json_passes(path):
    asv_files.read_machine(path)


def test_records_made_to_order_pass():
    gate_record.check_gate(recorded.record(0.3, 0.4))
    gate_record.check_gate(recorded.with_states(recorded.committed(1), {2: ["sw_power_cap"]}))
    regression_record.check_regression(recorded.regression_record(recorded.planted_2x()))


# --- The one line: the file, the field, what is wrong --------------------------------------------------


def refusal(check, record, file="gate-base.json") -> str:
    with pytest.raises(schema.RecordError) as error:
        check(record, file)
    assert isinstance(error.value, ValueError)  # every command's `except ValueError` takes it
    assert "\n" not in str(error.value)
    return str(error.value)


def gate_with(change) -> dict:
    spoiled = recorded.committed(1)
    change(spoiled)
    return spoiled


@pytest.mark.parametrize(
    "change,said",
    [
        (
            lambda r: r["seconds"]["nf4kernel"][3].__setitem__(0, True),
            "gate-base.json: seconds.nf4kernel[3][0]: true is not a number",
        ),
        (
            lambda r: r["seconds"]["unsloth"][0].__setitem__(1, float("nan")),
            "unsloth[0][1]: NaN is not a finite number",
        ),
        (lambda r: r["seconds"]["unsloth"][0].__setitem__(1, 10**400), "unsloth[0][1]: 1000000000"),
        (lambda r: r["seconds"]["unsloth"][0].__setitem__(1, 0), "seconds.unsloth[0][1]: 0 is not positive"),
        (lambda r: r["seconds"]["unsloth"][0].__setitem__(1, 1e-12), "1e-12 s is outside 1e-09 to 100000 s"),
        (lambda r: r["seconds"]["unsloth"][0].__setitem__(1, None), "seconds.unsloth[0][1]: null is not a number"),
        (lambda r: r["seconds"].__setitem__("nf4kernel", []), "seconds.nf4kernel: is empty"),
        (lambda r: r.__setitem__("rounds", 4), "rounds: 4, but seconds holds 5 rounds"),
        (lambda r: r.__setitem__("rounds", True), "rounds: true is not a whole number"),
        (lambda r: r["environment"].__setitem__("cuda", "yes"), 'environment.cuda: "yes" is not true or false'),
        (lambda r: r["environment"].pop("device"), "environment.device: missing"),
        (lambda r: r["environment"].__setitem__("copy_bytes_per_s", -1.0), "copy_bytes_per_s: -1.0 is not positive"),
        (lambda r: r["correctness"][3].__setitem__("ok", 1), "correctness[3].ok: 1 is not true or false"),
        (lambda r: r.__setitem__("correctness", {}), "correctness: {} is not a list"),
        (lambda r: r["shapes"].__setitem__(0, ["2048x8192 float16"]), 'shapes[0]: ["2048x8192 float16"] is not an'),
        (lambda r: r.__setitem__("shapes", []), "shapes: is empty"),
        (lambda r: r.__setitem__("calls_per_timing", 1000.0), "calls_per_timing: 1000.0 is not a whole number"),
        (lambda r: r.__setitem__("mode", "fast"), 'mode: "fast": a gate record has no mode'),
        (lambda r: r.__setitem__("kernel", {"commit": "abc"}), "kernel.source: missing"),
        (lambda r: r["environment"].__setitem__("versions", {"torch": 2.11}), "versions.torch: 2.11 is not a string"),
        (lambda r: r["environment"].__setitem__("device", "\udcff"), r'device: "\udcff" is not text'),
    ],
)
def test_a_gate_record_that_breaks_its_schema_is_refused_by_file_and_field(change, said):
    assert said in refusal(gate_record.check_gate, gate_with(change))


def test_a_key_that_is_no_identifier_is_quoted_in_the_field():
    record = recorded.regression_record()
    record["passes"][0]["rounds"][1]["head"]["14336x4096 bfloat16"][0] = "slow"
    assert refusal(regression_record.check_regression, record, "r.json") == (
        'r.json: passes[0].rounds[1].head["14336x4096 bfloat16"][0]: "slow" is not a number'
    )


def test_what_a_record_requires_follows_how_far_its_run_got():
    """No GPU: nothing else. No Unsloth: no checks. A failed check: no timings. Every check passed:
    timings, and what the table reads beside them."""
    gate_record.check_gate({"environment": {"cuda": False, "cuda_error": "no GPU"}})
    gate_record.check_gate({"environment": {"cuda": True, "device": "NVIDIA H200", "unsloth": None}, "rounds": 5})
    failed = recorded.record(0.1, 0.2, ok=False)
    del failed["seconds"]
    gate_record.check_gate(failed)
    del failed["correctness"]
    assert "correctness: missing" in refusal(gate_record.check_gate, failed)
    passed = recorded.record(0.1, 0.2)
    del passed["seconds"]
    assert "seconds: missing" in refusal(gate_record.check_gate, passed)


def test_an_aa_record_is_no_gate_record():
    """The A/A noise check timed nf4kernel against itself in the gate's process; it is gone, and the
    gate refuses its records by name rather than deciding on slots it has no rule for."""
    aa = load(FIXTURES / "gate" / "issue10" / "planted-and-aa" / "aa.json")
    assert 'mode: "aa": a gate record has no mode' in refusal(gate_record.check_gate, aa)


# --- The regression record -----------------------------------------------------------------------------


def regression_with(change) -> dict:
    record = recorded.regression_record()
    change(record)
    return record


@pytest.mark.parametrize(
    "change,said",
    [
        (lambda r: r.__setitem__("base", 12), "r.json: base: 12 is not a string"),
        (lambda r: r["passes"][0].__setitem__("bytes", [1, 2]), "passes[0].bytes: [1, 2] is not an object"),
        (lambda r: r["passes"][0]["bytes"].__setitem__("4096x1024 float16", 2.5), "2.5 is not a whole number"),
        (lambda r: r["passes"][0]["rounds"][0]["base"]["4096x1024 float16"].__setitem__(0, True), "true is not a"),
        (lambda r: r.__setitem__("rule", {"min_change": float("nan")}), "rule.min_change: NaN is not a finite"),
        (lambda r: r.__setitem__("rule", {"min_change": 1.5}), "rule.min_change: 1.5 is not a fraction in (0, 1)"),
        (lambda r: r.__setitem__("passes", []), "r.json: passes: is empty"),
        (lambda r: r["passes"][0]["rounds"][1]["head"].pop("4096x1024 float16"), "passes[0].rounds[1].head: timed"),
        (lambda r: r["passes"][0]["rounds"][2]["base"].clear(), "rounds[2].base: timed nothing for base"),
        (lambda r: r["passes"][0]["rounds"][0].__setitem__("order", ["base", "base"]), 'order: ["base", "base"]'),
        (lambda r: r["passes"][0].__setitem__("peak_bytes", {"head": {"k": -1}}), "peak_bytes.head.k: -1 is below 0"),
        (lambda r: r["passes"][0].__setitem__("states", [{"base": {"k": {"before": 3}}}]), "before: 3 is not an"),
    ],
)
def test_a_regression_record_that_breaks_its_schema_is_refused_by_file_and_field(change, said):
    assert said in refusal(regression_record.check_regression, regression_with(change), "r.json")


def test_rounds_that_timed_other_results_are_refused():
    record = regression_with(lambda r: r["passes"][0]["rounds"][2]["base"].pop("4096x1024 float16"))
    record["passes"][0]["rounds"][2]["head"].pop("4096x1024 float16")
    assert "passes[0].rounds[2]: timed [" in refusal(regression_record.check_regression, record, "r.json")


# --- asv's files ---------------------------------------------------------------------------------------


def asv_result() -> dict:
    return load(next(p for p in ASV_RESULTS if "history" in p.parts))


@pytest.mark.parametrize(
    "change,said",
    [
        (lambda r: r.pop("commit_hash"), "commit_hash: missing"),
        (lambda r: r.__setitem__("commit_hash", "b543b026"), 'commit_hash: "b543b026" is not a full commit hash'),
        (lambda r: r.__setitem__("version", 1), "version: 1: this harness reads asv's result format 2"),
        (lambda r: r.__setitem__("results", []), "results: [] is not an object"),
        (lambda r: r["results"]["gpu.KernelTime.track_kernel_time"][0].__setitem__(0, "fast"), '[0][0]: "fast"'),
        (lambda r: r["results"]["gpu.KernelTime.track_kernel_time"][0].pop(), "11 results for 12 combinations"),
        (lambda r: r["params"].__setitem__("python", 3.12), "params.python: 3.12 is not a string"),
    ],
)
def test_an_asv_result_that_breaks_its_schema_is_refused(change, said):
    result = asv_result()
    change(result)
    assert said in refusal(asv_files.check_asv_result, result, "b543b026-existing-py3.12.json")


def test_a_machine_json_that_breaks_its_schema_is_refused():
    machine = load(MACHINES[0])
    assert "machine.json: gpu: null is not a string" in refusal(
        asv_files.check_machine, {**machine, "gpu": None}, "machine.json"
    )
    assert "machine: missing" in refusal(asv_files.check_machine, {"version": 1}, "machine.json")
    assert "version: 2: asv's machine.json is version 1" in refusal(asv_files.check_machine, {**machine, "version": 2})


# --- Reading a file ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content,said",
    [
        (b'{"version": 1, "machine": "h2', "not JSON (Unterminated string"),  # a truncated file
        (b"", "not JSON (Expecting value"),
        (b"\xff\xfe\x00{", "not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"1" * 5000, "not JSON this harness reads (Exceeds the limit"),
    ],
    ids=["truncated", "empty", "not-utf8", "deep", "long-integer"],
)
def test_a_file_that_is_no_json_is_refused_by_name(tmp_path, content, said):
    path = tmp_path / "machine.json"
    path.write_bytes(content)
    with pytest.raises(schema.RecordError) as error:
        asv_files.read_machine(path)
    assert str(error.value).startswith(f"{path}: ") and said in str(error.value)


def test_a_missing_file_or_a_folder_is_refused_by_name(tmp_path):
    with pytest.raises(schema.RecordError, match="No such file or directory"):
        gate_record.read_gate(tmp_path / "none.json", "--replay none.json")
    with pytest.raises(schema.RecordError, match="Is a directory"):
        regression_record.read_regression(tmp_path)
    with pytest.raises(schema.RecordError, match="not a path"):
        asv_files.read_asv_result("a\0b.json")
