"""The trusted clock: the batches it draws, and on the CPU the whole protocol (reference,
call processes, regions lent by descriptor, the channel), honest and under the attack set
(``dev/rehearsal/attacks.py``). Each attack is shown fooling a figure taken in the process that
imported it (the design before the clock) and failing, or changing nothing, against the clock."""

from __future__ import annotations

import itertools
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dev.rehearsal import attacks
from harness.clock import channel as ch
from harness.clock import judge, plan, processes
from harness.core import sandbox
from harness.core.paths import ROOT
from harness.gate import decision, sandboxed

SETUP = {"device": "cpu", "challenge": [[64, 128, "bfloat16", 1]], "matrix": True, "working_set": 100_000}


# --- the batches -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_a_batch_never_writes_a_slot_that_holds_its_answer_nor_the_one_just_written(seed):
    rng = random.Random(seed)
    batch = plan.batch(rng, first=3, copies=4, layers=plan.LAYERS, slots=3, repeats=50, checks=8)
    holds, last, copies = {}, None, []
    for i, (weight, slot) in enumerate(batch.calls):
        assert holds.get(slot) != weight and slot != last  # three slots: there is always another
        holds[slot], last = weight, slot
        if i % plan.LAYERS == 0:
            copies.append((weight - 3) // plan.LAYERS)
        assert weight == 3 + plan.LAYERS * copies[-1] + i % plan.LAYERS  # up, gate, down of one copy
    assert all(a != b for a, b in itertools.pairwise(copies))  # never the copy just read
    assert len(batch.checks) == 8 and dict(batch.final) == holds


def test_a_warm_up_opens_the_batch_drawn_like_the_rest_and_is_not_timed():
    batch = plan.batch(random.Random(2), first=0, copies=4, layers=plan.LAYERS, slots=3, repeats=10, checks=5, warmup=2)
    assert len(batch.calls) == 12 * plan.LAYERS and batch.timed_from == 2 * plan.LAYERS
    plain = plan.batch(random.Random(2), first=0, copies=4, layers=plan.LAYERS, slots=3, repeats=10, checks=5)
    assert plain.timed_from == 0 and len(plain.calls) == 10 * plan.LAYERS


def test_two_slots_and_two_alternating_weights_still_never_find_a_slot_holding_the_answer():
    batch = plan.batch(random.Random(1), first=0, copies=2, layers=1, slots=2, repeats=40, checks=0)
    holds = {}
    for weight, slot in batch.calls:
        assert holds.get(slot) != weight
        holds[slot] = weight
    with pytest.raises(ValueError, match="2 weights"):
        plan.batch(random.Random(1), first=0, copies=1, layers=1, slots=2, repeats=4, checks=0)


def test_the_pool_outgrows_the_working_set_within_its_bounds():
    assert plan.pool(10, 100, 1000) == (100 if plan.MAX_COPIES >= 100 else plan.MAX_COPIES, 10)
    assert plan.pool(10**9, 10**9, 1) == (1, plan.MIN_SLOTS)
    assert plan.pool(10**9, 10**9, 1, layers=1) == (plan.MIN_WEIGHTS, plan.MIN_SLOTS)  # a lone weight: two copies
    with pytest.raises(ValueError):
        plan.batch(random.Random(0), 0, 1, plan.LAYERS, 1, 2, 1)


def test_a_command_word_packs_and_refuses_what_does_not_fit():
    assert ch.unpack(ch.pack(7, ch.CALL, 4095, 3)) == (7, ch.CALL, 4095, 3)
    with pytest.raises(ValueError):
        ch.pack(1, ch.CALL, 4096, 0)


# --- the protocol on the CPU -----------------------------------------------------------------------


def planted_tree(tmp: Path, attack: str | None) -> Path:
    tree = tmp / (attack or "honest")
    shutil.copytree(ROOT / "nf4kernel", tree / "nf4kernel")
    if attack:
        attacks.plant(tree, attack)
    return tree


@pytest.fixture(scope="module")
def clocked(tmp_path_factory):
    """One reference, bitsandbytes as the baseline, and a call process per candidate: main's kernel
    and each attack that runs on the CPU."""
    tmp = tmp_path_factory.mktemp("clock")
    trusted = judge.trusted_env({"PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"})
    launchers = {"bitsandbytes": ("bitsandbytes", processes.plain(trusted))}
    for attack in (None, "timers", "report", "skip", "record", "exit"):
        env = {**trusted, "PYTHONPATH": f"{planted_tree(tmp, attack)}{os.pathsep}{ROOT}"}
        launchers[attack or "honest"] = ("nf4kernel", processes.plain(env))
    with judge.session(launchers, SETUP, trusted) as (session, ready):
        session.repeats, session.warmup = 4, 1  # the warm-up's path, at the interpreter's cost of one repeat
        session.checks = 100  # every call checked: on the CPU the draw is no part of what is shown
        session.quiet = False  # a CPU copy's time says nothing of a GPU's queue (the probe is tested below)
        yield session, ready


def test_each_process_runs_on_the_core_it_was_given_and_the_clock_gets_its_own_back(monkeypatch):
    """Where there are cores enough, the clock, the reference and each call process get one each
    (on this machine, maybe fewer than four, they are handed out in turn)."""
    mine = sorted(os.sched_getaffinity(0))
    given = [mine[i % len(mine)] for i in range(4)]
    monkeypatch.setattr(processes, "cores", lambda count: given[:count])
    trusted = judge.trusted_env({"PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"})
    launchers = {name: (name, processes.plain(trusted)) for name in ("bitsandbytes", "nf4kernel")}
    with judge.session(launchers, SETUP, trusted) as (session, _):
        assert os.sched_getaffinity(0) == {given[0]}
        assert os.sched_getaffinity(session.reference.popen.pid) == {given[1]}
        assert os.sched_getaffinity(session.impls["bitsandbytes"].popen.pid) == {given[2]}
        session.repeats, session.warmup, session.quiet = 2, 0, False
        assert session.timed_batch("nf4kernel", 0) > 0  # the candidate's process starts at its first batch
        assert os.sched_getaffinity(session.impls["nf4kernel"].popen.pid) == {given[3]}
    assert sorted(os.sched_getaffinity(0)) == mine


# (package, core) of each CPU: cores 0..3 with CPU n and n + 4 its two threads, as Linux numbers
# most hosts, and a host that numbers each core's threads side by side.
SPLIT = {cpu: (0, cpu % 4) for cpu in range(8)}
SIDE_BY_SIDE = {cpu: (0, cpu // 2) for cpu in range(8)}


@pytest.mark.parametrize(
    ("allowed", "topology", "expected"),
    [
        (range(8), SPLIT, [0, 1, 2, 3]),
        (range(8), SIDE_BY_SIDE, [0, 2, 4, 6]),
        ([2, 3, 6, 7], SPLIT, [2, 6, 3, 7]),  # two cores: the clock beside the reference, the calls beside each other
        ([2, 3, 4, 5], SIDE_BY_SIDE, [2, 3, 4, 5]),
        ([1, 2, 3], SPLIT, None),
    ],
)
def test_each_process_gets_a_physical_core_of_its_own_where_there_are_cores_enough(allowed, topology, expected):
    assert processes.cores(4, allowed, topology.__getitem__) == expected


def test_a_cpu_sysfs_does_not_describe_is_a_core_of_its_own(tmp_path):
    (tmp_path / "cpu3" / "topology").mkdir(parents=True)
    (tmp_path / "cpu3" / "topology" / "core_id").write_text("1\n")
    (tmp_path / "cpu3" / "topology" / "physical_package_id").write_text("0\n")
    assert processes.core_of(3, tmp_path) == (0, 1)
    assert processes.core_of(5, tmp_path) == (-1, 5)


def test_every_process_said_ready_but_the_one_that_exits_on_import(clocked):
    session, ready = clocked
    assert set(ready) == {"bitsandbytes"}  # set up with the session: the trusted baseline alone
    assert ready["bitsandbytes"]["imported_nf4kernel"] is False  # the baseline never sees a candidate
    with pytest.raises(judge.NotStarted, match="ended before saying it is ready"):
        session.timed_batch("exit", 0)
    assert "ended before saying it is ready" in ready["exit"]["error"]
    session.timed_batch("honest", 0)
    assert ready["honest"]["imported_from"].endswith("honest/nf4kernel/__init__.py")


def test_a_candidate_s_process_is_ended_before_anything_else_runs_and_a_new_one_started_after(clocked):
    """Freezing stops a process's CPU, not the work its CUDA context queued: so a batch of another
    process ends every candidate's process first (the baseline, trusted, stays); consecutive
    batches of one candidate share its process."""
    session, ready = clocked
    session.timed_batch("honest", 0)
    first = session.impls["honest"]
    pids = processes.descendants(first.popen.pid)
    session.timed_batch("honest", 0)
    assert session.impls["honest"] is first and first.alive()  # the same phase: the same process
    baseline = session.impls["bitsandbytes"]
    session.timed_batch("bitsandbytes", 0)
    assert not first.alive() and not any(Path(f"/proc/{pid}").exists() for pid in pids)
    assert session.impls["bitsandbytes"] is baseline and baseline.alive()
    session.timed_batch("timers", 0)  # another candidate: the baseline stays, frozen
    assert baseline.alive() and baseline.frozen
    session.timed_batch("honest", 0)
    assert session.impls["honest"] is not first and session.impls["honest"].alive()
    assert not session.impls["timers"].alive()
    # a name's later process warms only what it times and measures no peak: its first's stands
    assert "peak_bytes" in ready["honest"] and "peak_bytes" not in session.impls["honest"].said
    assert set(session.stats["last_start"]) == {"wall", "import", "cuda", "regions", "states", "warm"}


def test_main_s_kernel_is_exact_on_the_matrix_and_times_every_batch(clocked):
    session, _ = clocked
    entries = session.exactness("honest")
    assert entries and all(e["ok"] and e["exact"] for e in entries)
    assert {e["shape"] for e in entries} == {"64x128 bfloat16", "exactness matrix"}
    checked_all = session.impls["honest"]
    assert session.timed_batch("honest", 0) > 0
    assert not checked_all.alive() and session.impls["honest"].alive()  # the timed process is another
    timed, checked = len(session.last_calls), session.last_checked
    assert timed == session.repeats * plan.LAYERS  # the warm-up's calls made, not timed
    # The checked calls among the timed ones, by their index there (here every call is checked;
    # the warm-up's are not among them).
    assert checked == list(range(timed))
    assert session.timed_batch("bitsandbytes", 0) > 0


def test_a_wrong_element_fails_however_the_candidate_rewrites_its_own_checks(clocked):
    session, _ = clocked
    entries = session.exactness("report")
    assert not entries[-1]["ok"] and "differs from bitsandbytes'" in entries[-1]["reason"]
    with pytest.raises(judge.Failed, match="differs"):
        session.timed_batch("report", 0)


def test_skipped_work_leaves_a_slot_the_reference_finds_wrong(clocked):
    session, _ = clocked
    with pytest.raises(judge.Failed, match="differs"):
        session.timed_batch("skip", 0)


def test_only_the_baseline_s_outputs_go_unchecked_and_a_candidate_s_always_are(clocked, monkeypatch):
    """The baseline (``judge.OWN_OUTPUT``: Unsloth, trusted, timed on the puzzle's call into an
    output of its own) writes no slot: its batches check nothing. The same skipped work under a
    candidate's name fails."""
    session, _ = clocked
    assert session.unchecked == frozenset()  # no launcher here runs the baseline's implementation
    monkeypatch.setattr(session, "unchecked", frozenset({"skip"}))
    before = session.stats["checks"]
    assert session.timed_batch("skip", 0) > 0
    assert session.stats["checks"] == before
    monkeypatch.setattr(session, "unchecked", frozenset({"bitsandbytes"}))
    with pytest.raises(judge.Failed, match="differs"):
        session.timed_batch("skip", 0)


def test_the_gate_s_measurement_on_the_clock_writes_rounds_a_decision_reads(monkeypatch):
    """The gate's measurement (exactness, then paired rounds on ``harness/ab.py``) on the CPU, with
    bitsandbytes standing in the baseline's place: every weight checked, each round both sides' batch
    of every group, the order alternating, and a record the gate's schema and decision accept."""
    trusted = judge.trusted_env({"PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"})
    launchers = {
        "nf4kernel": ("nf4kernel", processes.plain(trusted)),
        "unsloth": ("bitsandbytes", processes.plain(trusted)),
    }
    with judge.session(launchers, SETUP, trusted) as (session, _):
        session.repeats, session.warmup, session.checks, session.quiet = 2, 0, 2, False
        record = {"rounds": 2, "rounds_first": 2, "max_rounds": 2, "clock": {}}
        sandboxed.measure_in(session, record, threshold=1.0)
    assert record["correctness"] and all(entry["ok"] for entry in record["correctness"])
    assert [len(record["seconds"][name]) for name in sandboxed.NAMES] == [2, 2] and record["rounds"] == 2
    assert all(len(times) == len(SETUP["challenge"]) and min(times) > 0 for times in record["seconds"]["nf4kernel"])
    assert len(record["round_states"]) == 2 and record["clock"]["checks"] > 0
    assert len(decision.round_ratios(record)) == 2 and min(decision.round_ratios(record)) > 0


def test_a_session_leaves_unchecked_exactly_the_processes_of_the_baseline_s_implementation(monkeypatch):
    monkeypatch.setattr(judge, "OWN_OUTPUT", ("bitsandbytes",))
    trusted = judge.trusted_env({"PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"})
    launchers = {
        name: (impl, processes.plain(trusted)) for name, impl in (("base", "bitsandbytes"), ("kernel", "nf4kernel"))
    }
    with judge.session(launchers, SETUP, trusted) as (session, ready):
        assert session.unchecked == frozenset({"base"})
        assert all(not r.get("error") for r in ready.values())


def test_forged_timers_change_nothing_the_clock_reads(clocked):
    """Twice the work reads about 2x on the clock (quiet, this machine: 0.87 to 1.06 s against 0.42
    to 0.74 s). The batches alternate and each side's fastest is compared: a busy CPU (pytest's
    other workers) only adds time, so it can hide the attack only by slowing every honest batch."""
    session, _ = clocked
    honest, planted = [], []
    for _ in range(5):
        honest.append(session.timed_batch("honest", 0))
        planted.append(session.timed_batch("timers", 0))
    assert min(planted) > 1.3 * min(honest)  # its clocks are its own; the clock's are not


def test_a_record_printed_by_the_candidate_is_log_and_nothing_else(clocked, capfd):
    session, _ = clocked
    assert session.timed_batch("record", 0) > 0.001  # the clock's figure, not the planted 0.01 s per 1000 calls
    assert all(e["ok"] for e in session.exactness("record"))


def in_process_timing(tree: Path) -> tuple[float, float]:
    """The design before the clock: a loop timed by ``time.perf_counter`` in a process that imported
    the candidate (as the gate's child did), on the CPU under Triton's interpreter; beside it the
    same loop on ``perf_counter_ns``, which the attack leaves alone. (what it read, what it took)"""
    code = (
        "import time, torch, bitsandbytes.functional as F, nf4kernel\n"
        "w = torch.randn(64, 128).to(torch.bfloat16)\n"
        "p, s = F.quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type='nf4')\n"
        "nf4kernel.fast_dequantize(p, s)\n"
        "start, start_ns = time.perf_counter(), time.perf_counter_ns()\n"
        "for _ in range(6): nf4kernel.fast_dequantize(p, s)\n"
        "print(time.perf_counter() - start, (time.perf_counter_ns() - start_ns) / 1e9)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{ROOT}", "TRITON_INTERPRET": "1"}
    command = [sys.executable, "-P", "-c", code]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=True)
    read, took = map(float, done.stdout.split()[-2:])
    return read, took


def test_forged_timers_fool_a_figure_taken_where_the_candidate_was_imported(tmp_path):
    read, took = in_process_timing(planted_tree(tmp_path, None))
    assert read == pytest.approx(took, rel=0.05)  # the honest kernel's clock tells the truth
    read, took = in_process_timing(planted_tree(tmp_path, "timers"))
    assert read < 0.6 * took  # twice the work, and its clock reads about 0.4x of what the loop took


def test_rewritten_checks_fool_a_check_made_where_the_candidate_was_imported(tmp_path):
    tree = planted_tree(tmp_path, "report")
    code = "import harness, torch, nf4kernel\nprint(torch.equal(torch.zeros(2), torch.ones(2)))\n"
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{ROOT}"}
    done = subprocess.run(
        [sys.executable, "-P", "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split()[-1] == "True"


@pytest.mark.parametrize("attack", ["released", "second-process", "long-kernel"])
def test_a_gpu_work_attack_plants_a_package_that_imports_and_answers_right_off_the_gpu(tmp_path, attack):
    """Their GPU part runs only on a GPU (``dev/gpu-machine``'s ``judged-at:`` step): here the planted
    package must still import, its spin kernel among its globals, and answer bit for bit, so a GPU
    run is not spent finding a slip in the attack."""
    tree = planted_tree(tmp_path, attack)
    code = (
        "import torch, nf4kernel\nfrom harness.core import oracle\n"
        "from bitsandbytes.functional import quantize_4bit\n"
        "W, state = quantize_4bit(torch.randn(64, 128, dtype=torch.float16), quant_type='nf4')\n"
        "assert callable(nf4kernel._spin)\n"
        "from harness.clock import channel\nassert channel.send.__name__ == 'sent'\n"  # arms once ready
        "print(torch.equal(nf4kernel.fast_dequantize(W, state), oracle.bnb_dequantize(W, state)))\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{ROOT}", "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-P", "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "True"


# --- physics, a quiet GPU, freezing ------------------------------------------------------------------


class FakeReference:
    def __init__(self, answers):
        self.answers = list(answers)

    def ask(self, op, a=0, b=0, timeout=None):
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def bare_session(reference=None) -> judge.Session:
    manifest = {"weights": [{"label": "w", "bytes_moved": 4_000_000, "group": 0}], "copies": [1], "groups": []}
    facts = {"copy_bytes_per_s": 4e12, "probe_s": 20e-6}
    return judge.Session(reference or FakeReference([1]), {}, manifest, facts)


def test_a_call_faster_than_its_bytes_allow_is_refused():
    session = bare_session()
    batch = plan.Batch(((0, 0), (0, 1)), frozenset(), ())
    session.physics("x", batch, [2e-6, 1.1e-6], "s")  # 4 MB at 4 TB/s: 1 us
    with pytest.raises(judge.Failed, match=r"at least 1\.0 us"):
        session.physics("x", batch, [2e-6, 0.9e-6], "s")


def test_the_clock_waits_for_a_quiet_gpu_and_fails_one_that_stays_busy(monkeypatch):
    monkeypatch.setattr(judge, "QUIET_WAIT_S", 0.05)
    bare_session(FakeReference([500, 400, 25])).wait_quiet("x", "s")  # busy, busy, then alone again
    with pytest.raises(judge.Failed, match="stayed busy"):
        bare_session(FakeReference([500])).wait_quiet("x", "s")


ESCAPER = """
def _escape():
    import os, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            while True:
                with open(os.path.join(os.environ["BEATS"], str(os.getpid())), "a") as beats:
                    beats.write(".")
                time.sleep(0.01)
        os._exit(0)
_escape()
"""


@pytest.mark.timeout(300)
@pytest.mark.skipif(
    sandbox.why_not() is not None and not os.environ.get("NF4KERNEL_REQUIRE_SANDBOX"),
    reason=f"a candidate's process runs in bubblewrap's sandbox, and there is none here: {sandbox.why_not()}",
)
def test_a_sandboxed_candidate_s_escaped_grandchild_is_ended_before_another_batch(tmp_path):
    """A grandchild the candidate double-forks into a session of its own is no descendant the clock
    can find, but it lives in the sandbox's PID namespace: ending the process ends it too, before
    another process's batch runs (here the baseline's)."""
    tree = planted_tree(tmp_path, None)
    init = tree / "nf4kernel" / "__init__.py"
    init.write_text(init.read_text() + ESCAPER)
    beats = tmp_path / "beats"
    beats.mkdir()
    trusted = judge.trusted_env({"PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"})
    inside = {**trusted, "PYTHONPATH": f"{tree}{os.pathsep}{ROOT}", "BEATS": str(beats)}

    def sandboxed(argv, fds, held):
        return held.enter_context(sandbox.started(argv, pass_fds=fds, read=[tree, ROOT], write=[beats], env=inside))

    launchers = {"bitsandbytes": ("bitsandbytes", processes.plain(trusted)), "escaper": ("nf4kernel", sandboxed)}
    with judge.session(launchers, SETUP, trusted) as (session, _):
        session.repeats, session.warmup, session.quiet = 2, 0, False
        session.timed_batch("escaper", 0)
        deadline = time.monotonic() + 30
        while not list(beats.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(beats.iterdir()), "the grandchild never wrote"
        session.timed_batch("bitsandbytes", 0)  # the candidate's processes ended first
        sizes = {path: path.stat().st_size for path in beats.iterdir()}
        time.sleep(0.3)
        assert {path: path.stat().st_size for path in beats.iterdir()} == sizes


def test_the_gpu_must_hold_no_context_but_the_trusted_ones_before_the_next_process_runs(monkeypatch):
    """What NVML lists before any candidate started is allowed; an ended candidate's context may
    take a moment to go, and one that stays fails the batch, naming it."""
    monkeypatch.setattr(judge, "GONE_TIMEOUT_S", 0.2)
    session = bare_session()
    session.allowed = frozenset({11, 12})
    listed = iter([{11, 12, 99}, {11, 12, 99}, {11}])
    session.holders = lambda: frozenset(next(listed))
    session.clear()  # 99 left after the third look
    assert session.stats["clearing_s"] > 0
    session.holders = lambda: frozenset({11, 12, 99, 100})
    with pytest.raises(judge.Failed, match=r"kept a CUDA context on the GPU \(NVML: 99, 100\)"):
        session.clear()


class FakeNvml:
    """pynvml's process listing, as a GPU with these processes would answer it."""

    class NVMLError_NotSupported(Exception):
        pass

    def __init__(self, compute, graphics=None, mps=None):
        self.lists = {"compute": compute, "graphics": graphics, "mps": mps}
        self.opened = 0

    def nvmlInit(self):
        self.opened += 1

    def nvmlShutdown(self):
        self.opened -= 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def _listing(self, kind):
        found = self.lists[kind]
        if found is None:
            raise self.NVMLError_NotSupported()
        return [type("Process", (), {"pid": pid})() for pid in found]

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self._listing("compute")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        return self._listing("graphics")

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle):
        return self._listing("mps")


def test_nvml_s_lists_are_read_together_and_a_gpu_it_cannot_list_is_refused():
    from harness.clock import contexts

    nvml = FakeNvml([5, 6], graphics=[7], mps=None)
    assert contexts.holders(0, nvml) == frozenset({5, 6, 7}) and nvml.opened == 0
    with pytest.raises(contexts.Unavailable, match="no reader is supported"):
        contexts.holders(0, FakeNvml(None))


def test_a_frozen_process_tree_runs_nothing_until_thawed(tmp_path):
    """A child that starts a grandchild in a session of its own, which keeps writing: frozen, the
    file stops growing (what a candidate's thread or helper would do to the next batch's GPU)."""
    out = tmp_path / "beats"
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    while True:\n"
        f"        open({str(out)!r}, 'a').write('.'); time.sleep(0.01)\n"
        "time.sleep(600)\n"
    )
    popen = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    process = processes.Process("t", popen, None, None)
    try:
        time.sleep(0.5)
        process.freeze()
        size = out.stat().st_size
        time.sleep(0.3)
        assert out.stat().st_size == size and len(process.frozen) == 2
        process.thaw()
        time.sleep(0.3)
        assert out.stat().st_size > size
    finally:
        for pid in processes.descendants(popen.pid):
            os.kill(pid, signal.SIGKILL)
        popen.wait()


@pytest.mark.parametrize(
    "module,words",
    [
        ("harness._process", []),
        ("harness._process", ["no-such-process"]),
        ("harness._process", ["worker"]),
        ("harness._process", ["worker", "cuda", "1", "2"]),
        ("harness._process", ["worker", "nf4kernel", "97", "98"]),
        ("harness._process", ["reference", "x"]),
        ("harness._process", ["reference", "97", "98"]),
    ],
)
def test_a_process_started_wrongly_says_so_in_one_line_and_exits_2(module, words):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-P", "-m", module, *words], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_the_processes_the_clock_started_end_with_it():
    """A clock that dies (killed, a crash) leaves no reference or call process behind, frozen or not."""
    code = (
        "import os, sys\n"
        "from harness.clock import processes\n"
        "env = {**os.environ}\n"
        "ref = processes.start('r', ['harness._process', 'reference'], processes.plain(env))\n"
        "ref.freeze()\n"
        "print(ref.popen.pid, flush=True)\n"
        "os._exit(0)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-P", "-c", code], env=env, capture_output=True, text=True, timeout=60)
    pid = int(done.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]


def test_a_failure_the_clock_found_is_the_gate_s_reason_as_said():
    from harness.gate import decision

    record = {"environment": {"cuda": True, "device": "NVIDIA H200", "unsloth": "2026.10.9"}}
    record["correctness"] = [judge.failed("4096x14336 bfloat16", "down #1", "nf4kernel answered in 3.0 us").entry]
    verdict = decision.decide(record)
    assert verdict.exit_code == decision.EXIT_INCORRECT
    assert verdict.reasons == ["4096x14336 bfloat16 down #1: nf4kernel answered in 3.0 us"]
