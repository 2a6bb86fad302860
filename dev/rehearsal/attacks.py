"""The attack set: what a candidate's ``nf4kernel/__init__.py`` can do to the figures a verdict
rests on, each a few lines appended to the package's ``__init__.py`` (``plant``). The tests show each
one fooling a measurement taken in the process that imported it (the design before the trusted
clock) and failing against the clock; on a GPU, ``dev/gpu-machine/gpu-session.sh``'s ``clock:`` step
runs them through the gate, and the rehearsal's ``hostile-<attack>`` scenarios through gpu.yml.

* ``timers``: every call does its work twice, and the process's clocks lose 60% of the time spent
  in its calls (``time``'s counters), CUDA events and ``triton.testing.do_bench`` read 0.4x.
* ``report``: one element of every output wrong; pytest's reports rewritten to pass; ``torch.equal``
  and ``assert_close`` agreeing with everything in a process that imported the harness.
* ``exit``: ``os._exit(0)`` on import: a process that ends "successfully" before testing anything.
* ``record``: every call twice, and a synthetic passing gate record printed on import, where a parent
  reads one.
* ``slow-baseline``: Unsloth's ``fast_dequantize`` rebound to do its work three times, and a thread
  that keeps the GPU busy with copies, to slow whatever is timed beside the candidate.
* ``skip``: a call into a given ``out`` does nothing after its first for that shape (memoized work:
  the output already there from an earlier call is taken as done).
* ``unsynced``: ``torch.cuda.synchronize`` made a no-op, so a call answers before its work ends.

GPU work that outlives a frozen process: each does every call's work twice and leaves more queued,
to slow whatever is timed next (``torch.cuda.synchronize`` made its own stream's, so the worker's
sync does not wait for it):

* ``released``: each call queues sixteen more of itself on a stream of its own, behind a wait
  (``cuStreamWaitValue32``) for its output slot to hold the reference's poison again: the work
  starts when the next batch is poisoned and runs through the baseline's batches, and stalls in
  the candidate's own, which overwrite the slot.
* ``second-process``: the same, in a second process with a CUDA context of its own, which maps the
  slots the clock lent (their descriptor kept when the worker opened them) and waits on the slot
  its parent's last call wrote.
* ``long-kernel``: right before a call answers, a burst of 400 calls' work on a stream of its own
  (when the last has ended), so the last still runs once the process is frozen.
"""

from __future__ import annotations

from pathlib import Path

PREAMBLE = "\n# --- planted (dev/rehearsal/attacks.py) ---\nimport os as _os, sys as _sys, time as _time\n"

ATTACKS = {
    "timers": """
def _slow_and_hide():
    from . import api
    once = api.dequantize
    inside = [0.0]
    real = _time.perf_counter
    def twice(W, quant_state=None, *, out=None):
        began = real()
        once(W, quant_state, out=out)
        got = once(W, quant_state, out=out)
        inside[0] += real() - began
        return got
    api.dequantize = twice
    # The process's clocks lose 60% of the time spent in this kernel's calls: a loop timing them
    # reads 0.4x, one timing anything else (Unsloth) reads true.
    for name in ("perf_counter", "monotonic", "time"):
        clock = getattr(_time, name)
        setattr(_time, name, lambda clock=clock: clock() - 0.6 * inside[0])
    try:
        import torch
        events = torch.cuda.Event
        elapsed = events.elapsed_time
        events.elapsed_time = lambda self, end: elapsed(self, end) * 0.4
        import triton.testing
        bench = triton.testing.do_bench
        def faster(*args, **kwargs):
            found = bench(*args, **kwargs)
            return [x * 0.4 for x in found] if isinstance(found, list) else found * 0.4
        triton.testing.do_bench = faster
    except Exception:
        pass
_slow_and_hide()
""",
    "report": """
def _wrong_and_agree():
    from . import api
    right = api.dequantize
    def wrong(W, quant_state=None, *, out=None):
        got = right(W, quant_state, out=out)
        (got.t() if W.shape[0] == 1 else got).view(-1)[7] += 1
        return got
    api.dequantize = wrong
    import torch
    if "harness" in _sys.modules or "_pytest" in _sys.modules or "pytest" in _sys.modules:
        torch.equal = lambda a, b: True
        torch.testing.assert_close = lambda *a, **k: None
    try:
        from _pytest import reports
        make = reports.TestReport.from_item_and_call
        def passed(item, call):
            report = make(item, call)
            report.outcome, report.longrepr = "passed", None
            return report
        reports.TestReport.from_item_and_call = staticmethod(passed)
    except Exception:
        pass
_wrong_and_agree()
""",
    "exit": """
_os._exit(0)
""",
    "record": """
def _twice():
    from . import api
    once = api.dequantize
    def twice(W, quant_state=None, *, out=None):
        once(W, quant_state, out=out)
        return once(W, quant_state, out=out)
    api.dequantize = twice
_twice()
import json as _json
print(_json.dumps({"environment": {"cuda": True, "device": "NVIDIA H200", "unsloth": "2026.10.9",
    "copy_bytes_per_s": 4e12}, "correctness": [{"shape": "all", "weight": "all", "check": "bitsandbytes",
    "ok": True, "exact": True}], "seconds": {"nf4kernel": [[0.01]] * 5, "unsloth": [[0.03]] * 5},
    "shapes": [{"label": "all", "bytes_per_call": 1.0}], "calls_per_timing": 1000, "rounds": 5}), flush=True)
""",
    "slow-baseline": """
def _slow_others():
    try:
        import unsloth.kernels.utils as utils
        fast = utils.fast_dequantize
        def slow(*args, **kwargs):
            fast(*args, **kwargs)
            fast(*args, **kwargs)
            return fast(*args, **kwargs)
        utils.fast_dequantize = slow
    except Exception:
        pass
    import threading
    import torch
    if not torch.cuda.is_available():
        return
    def busy():
        stream = torch.cuda.Stream()
        a = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
        b = torch.empty_like(a)
        with torch.cuda.stream(stream):
            while True:
                for _ in range(8):
                    b.copy_(a)
                _time.sleep(0.001)
    threading.Thread(target=busy, daemon=True).start()
_slow_others()
""",
    "skip": """
def _skip_repeats():
    from . import api
    right = api.dequantize
    seen = set()
    def memoized(W, quant_state=None, *, out=None):
        if out is None:
            return right(W, quant_state)
        key = (tuple(out.shape), out.dtype)
        if key in seen:
            return out.t() if W.shape[0] == 1 else out
        seen.add(key)
        return right(W, quant_state, out=out)
    api.dequantize = memoized
_skip_repeats()
""",
    "unsynced": """
def _no_sync():
    import torch
    torch.cuda.synchronize = lambda device=None: None
_no_sync()
""",
}


# What the GPU-work attacks share: twice the work per call, their own stream's sync in place of the
# device's, and the driver's wait on a 32-bit word (flag 0x1: CU_STREAM_WAIT_VALUE_EQ).
QUEUED = """
def _waiter():
    import ctypes
    wait = ctypes.CDLL("libcuda.so.1").cuStreamWaitValue32_v2
    wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    return wait
def _queued_twice():
    from . import api
    import torch
    once = api.dequantize
    torch.cuda.synchronize = lambda device=None: torch.cuda.current_stream().synchronize()
    kept = {}
    def twice(W, quant_state=None, *, out=None):
        once(W, quant_state, out=out)
        got = once(W, quant_state, out=out)
        if out is not None and out.is_cuda:
            torch.cuda.current_stream().synchronize()
            _after_call(W, quant_state, out, once, kept)
        return got
    api.dequantize = twice
"""

RELEASED = """
def _after_call(W, quant_state, out, once, kept):
    import torch
    if not kept:
        kept.update(wait=_waiter(), side=torch.cuda.Stream(), events=[], scratch={})
    events = kept["events"]
    while events and events[0].query():
        events.pop(0)
    if len(events) >= 32:  # a stream's queue holds about a thousand commands: a full one blocks the call
        return
    scratch = kept["scratch"].setdefault((tuple(out.shape), out.dtype), torch.empty_like(out))
    side = kept["side"]
    with torch.cuda.stream(side):
        kept["wait"](side.cuda_stream, out.data_ptr(), 0xFFFFFFFF, 1)
        for _ in range(16):
            once(W, quant_state, out=scratch)
        event = torch.cuda.Event()
        event.record(side)
        events.append(event)
_queued_twice()
"""

# The second process: it maps the slots the clock lent the worker (the descriptor kept when the
# worker opened them) and queues, behind a wait on the slot its parent's last call wrote, copies of
# its own; the parent tells it that slot's offset through a shared word.
SECOND_PROCESS = """
_slots = []
def _keep_the_slots():
    from harness.clock import regions
    opened = regions.Region.open.__func__
    def open_kept(cls, fd, size, device, read_only=False):
        region = opened(cls, fd, size, device, read_only)
        if not read_only and device == "cuda":
            import torch
            _slots[:] = [_os.dup(fd), size, region.view(0, torch.uint8, [size]).data_ptr()]
        return region
    regions.Region.open = classmethod(open_kept)
_CHILD = '''
import mmap, struct, sys, time, ctypes, torch
from harness.clock.regions import Region
fd, size, shared = (int(x) for x in sys.argv[1:4])
slots = Region.open(fd, size, "cuda")
base = slots.view(0, torch.uint8, [size]).data_ptr()
word = mmap.mmap(shared, 8)
wait = ctypes.CDLL("libcuda.so.1").cuStreamWaitValue32_v2
wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
side = torch.cuda.Stream()
a = torch.empty(1 << 27, dtype=torch.uint8, device="cuda")
b = torch.empty_like(a)
events = []
while True:
    while events and events[0].query():
        events.pop(0)
    while len(events) < 32:
        with torch.cuda.stream(side):
            wait(side.cuda_stream, base + struct.unpack("Q", word[:8])[0], 0xFFFFFFFF, 1)
            for _ in range(16):
                b.copy_(a)
            event = torch.cuda.Event()
            event.record(side)
            events.append(event)
    time.sleep(0.002)
'''
def _after_call(W, quant_state, out, once, kept):
    import mmap, struct, subprocess, sys
    if not _slots:
        return
    if not kept:
        fd, size, base = _slots
        shared = _os.memfd_create("beside")
        _os.ftruncate(shared, 8)
        word = mmap.mmap(shared, 8)
        word[:8] = struct.pack("Q", out.data_ptr() - base)
        argv = [sys.executable, "-c", _CHILD, str(fd), str(size), str(shared)]
        kept.update(word=word, child=subprocess.Popen(argv, pass_fds=(fd, shared)))
    kept["word"][:8] = struct.pack("Q", out.data_ptr() - _slots[2])
_keep_the_slots()
_queued_twice()
"""

LONG_KERNEL = """
def _after_call(W, quant_state, out, once, kept):
    import torch
    if not kept:
        kept.update(side=torch.cuda.Stream(), event=None, scratch={})
    if kept["event"] is not None and not kept["event"].query():
        return  # the last burst still runs
    scratch = kept["scratch"].setdefault((tuple(out.shape), out.dtype), torch.empty_like(out))
    side = kept["side"]
    with torch.cuda.stream(side):
        for _ in range(400):
            once(W, quant_state, out=scratch)
        kept["event"] = torch.cuda.Event()
        kept["event"].record(side)
_queued_twice()
"""

ATTACKS.update(
    {"released": QUEUED + RELEASED, "second-process": QUEUED + SECOND_PROCESS, "long-kernel": QUEUED + LONG_KERNEL}
)


def plant(tree: Path, name: str) -> str:
    """Appends attack ``name`` to ``tree``'s ``nf4kernel/__init__.py``; the commit message for it."""
    if name not in ATTACKS:
        raise ValueError(f"no attack {name!r}: {', '.join(ATTACKS)}")
    init = tree / "nf4kernel" / "__init__.py"
    init.write_text(init.read_text() + PREAMBLE + ATTACKS[name])
    return f"scratch: the {name} attack (dev/rehearsal/attacks.py)"
