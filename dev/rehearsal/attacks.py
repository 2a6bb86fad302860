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

GPU work that outlives a frozen process: each does every call's work twice and leaves a one-warp
kernel spinning on the GPU's clock (until the candidate calls again, or 1 s) where it takes another
process's time slices, the candidate frozen (``torch.cuda.synchronize`` made its own stream's, so
the worker's sync does not wait for it):

* ``released``: a chain of spins, each behind a wait (``cuStreamWaitValue32``) for a slot's word
  to hold the reference's poison: every batch's poison releases one, and one that runs out its
  time clears the word for the next.
* ``second-process``: the same from a second process with a CUDA context of its own, which maps the
  slots the clock lent (their descriptor kept when the worker opened them).
* ``long-kernel``: the spin launched right before a call answers: the last call's runs on.
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
# device's, a call counter in pinned memory the GPU reads, and a one-warp kernel that spins on the
# GPU's clock until the counter moves (the candidate called again: its own batch goes on, so it
# stops) or SPIN_NS pass. A spin in the candidate's own context costs the candidate one warp; in
# another process's turn, it takes that context's time slices. A chain holds LINKS spins, each
# behind a wait (cuStreamWaitValue32, flag 0x1: equal) for a slot's word to hold the reference's
# poison, which every batch starts by writing: a spin that runs out its time (the candidate stayed
# frozen: another process's batch ran) clears that word, so the next batch's poison releases the
# next link. Loading a kernel may synchronize the context, so waits are armed only once the worker
# said it is ready, the spin's module loaded before (lazy loading off too, for the same reason).
QUEUED = """
_os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
import triton as _triton
import triton.language as _tl
from triton.language.extra.cuda import globaltimer as _globaltimer
SPIN_NS = 1_000_000_000
LINKS = 8  # the baseline's batches between two of the candidate's phases: six in the gate
NEW_BATCH_S = 0.005  # a call this long after the last opens a batch (checks, freezing, the probe between)
@_triton.jit
def _spin(calls, word, flag, ns):
    began = _globaltimer()
    seen = _tl.load(calls, volatile=True)
    now = began
    count = seen
    while (now - began < ns) & (count == seen):
        now = _globaltimer()
        count = _tl.load(calls, volatile=True)
    if count == seen:
        _tl.store(word, 0)
        _tl.store(flag, 1)
class _At:
    def __init__(self, address):
        import torch
        self.address, self.dtype = address, torch.int32
    def data_ptr(self):
        return self.address
def _waiter():
    import ctypes
    wait = ctypes.CDLL("libcuda.so.1").cuStreamWaitValue32_v2
    wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    return wait
def _chain(wait, word, calls, kept):
    import ctypes, torch
    handle = ctypes.c_void_p()  # a stream of its own, non-blocking: torch's Stream() cycles through 32
    ctypes.CDLL("libcuda.so.1").cuStreamCreate(ctypes.byref(handle), 1)
    stream = torch.cuda.ExternalStream(handle.value)
    flags = torch.zeros(LINKS, dtype=torch.int32, device="cuda")
    kept.setdefault("chains", []).append((stream, flags))  # one the candidate's batch stopped stays unreached
    with torch.cuda.stream(stream):
        for i in range(LINKS):
            if i:
                wait(stream.cuda_stream, flags.data_ptr() + 4 * (i - 1), 1, 1)
            wait(stream.cuda_stream, word, 0xFFFFFFFF, 1)
            _spin[(1,)](calls, _At(word), flags[i:], SPIN_NS, num_warps=1)
def _ready_hook(kept):
    # Armed waits only once the process said it is ready: loading a kernel may synchronize the
    # context, and a load behind an armed wait never ends (CUDA's lazy loading notes).
    try:
        from harness.clock import channel
    except ImportError:
        return
    send = channel.send
    def sent(sock, message, *args, **kwargs):
        if isinstance(message, dict) and message.get("ready"):
            kept["ready"] = True
        return send(sock, message, *args, **kwargs)
    channel.send = sent
def _preload(calls):
    import torch
    scratch = torch.zeros(2, dtype=torch.int32, device="cuda")
    _spin[(1,)](calls, scratch, scratch[1:], 0, num_warps=1)
    torch.cuda.current_stream().synchronize()
    return scratch
def _queued_twice():
    from . import api
    import torch
    once = api.dequantize
    torch.cuda.synchronize = lambda device=None: torch.cuda.current_stream().synchronize()
    kept = {}
    _ready_hook(kept)
    def twice(W, quant_state=None, *, out=None):
        once(W, quant_state, out=out)
        got = once(W, quant_state, out=out)
        if out is not None and out.is_cuda:
            torch.cuda.current_stream().synchronize()
            if "calls" not in kept:
                calls = torch.zeros(1, dtype=torch.int64, pin_memory=True)
                kept.update(calls=calls, side=torch.cuda.Stream(), event=None, last=0.0, wait=_waiter())
                kept["scratch"] = _preload(calls)  # the spin's module loaded before any wait is armed
            kept["calls"][0] += 1
            now = _time.monotonic()
            kept["new_batch"], kept["last"] = now - kept["last"] > NEW_BATCH_S, now
            _after_call(out, kept)
        return got
    api.dequantize = twice
"""

# In the candidate's process: at each batch's first call, a chain on the word of the slot it wrote.
RELEASED = """
def _after_call(out, kept):
    if kept["new_batch"] and kept.get("ready"):
        _chain(kept["wait"], out.data_ptr(), kept["calls"], kept)
_queued_twice()
"""

# The same from a second process with a CUDA context of its own: it maps the slots the clock lent the
# worker (the descriptor kept when the worker opened them) and the page holding its parent's counter
# and its last call's slot, and arms a chain two calls into each of its parent's batches (a slot
# written then was written after the batch's poison).
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
_CHILD = r'''
import mmap, sys, time, torch
from harness.clock.regions import Region
from nf4kernel import _chain, _preload, _waiter, NEW_BATCH_S
fd, size, shared = (int(x) for x in sys.argv[1:4])
slots = Region.open(fd, size, "cuda")
base = slots.view(0, torch.uint8, [size]).data_ptr()
page = mmap.mmap(shared, 4096)
words = torch.frombuffer(page, dtype=torch.int64)
torch.cuda.cudart().cudaHostRegister(words.data_ptr(), 4096, 0)
calls, wait, kept = words[1:2], _waiter(), {}
_preload(calls)
seen, changed, opened = 0, 0.0, None
while True:
    count, now = int(words[1]), time.monotonic()
    if count != seen:
        if now - changed > NEW_BATCH_S:
            opened = count
        seen, changed = count, now
    if opened is not None and count >= opened + 2:
        _chain(wait, base + int(words[0]), calls, kept)
        opened = None
    time.sleep(0.0005)
'''
def _after_call(out, kept):
    import mmap, struct, subprocess, sys
    if not _slots:
        return
    if "page" not in kept:
        fd, size, base = _slots
        shared = _os.memfd_create("beside")
        _os.ftruncate(shared, 4096)
        kept["page"] = mmap.mmap(shared, 4096)
        argv = [sys.executable, "-c", _CHILD, str(fd), str(size), str(shared)]
        kept["child"] = subprocess.Popen(argv, pass_fds=(fd, shared))
    kept["page"][:16] = struct.pack("qq", out.data_ptr() - _slots[2], int(kept["calls"][0]))
_keep_the_slots()
_queued_twice()
"""

# Right before a call answers, a spin on a stream of its own (none while one runs): the next call
# stops it, so in the candidate's batch it costs a warp; after the last call it runs on into
# whatever comes next, the candidate frozen.
LONG_KERNEL = """
def _after_call(out, kept):
    import torch
    if kept["event"] is not None and not kept["event"].query():
        return
    with torch.cuda.stream(kept["side"]):  # scratch: the word and flag a spin that runs out clears
        _spin[(1,)](kept["calls"], kept["scratch"], kept["scratch"][1:], SPIN_NS, num_warps=1)
        kept["event"] = torch.cuda.Event()
        kept["event"].record(kept["side"])
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
