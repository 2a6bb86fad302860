"""Issue 46's attack set: what a candidate's ``nf4kernel/__init__.py`` can do to the figures a verdict
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
"""

from __future__ import annotations

from pathlib import Path

PREAMBLE = "\n# --- planted (harness/github/attacks.py) ---\nimport os as _os, sys as _sys, time as _time\n"

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


def plant(tree: Path, name: str) -> str:
    """Appends attack ``name`` to ``tree``'s ``nf4kernel/__init__.py``; the commit message for it."""
    if name not in ATTACKS:
        raise ValueError(f"no attack {name!r}: {', '.join(ATTACKS)}")
    init = tree / "nf4kernel" / "__init__.py"
    init.write_text(init.read_text() + PREAMBLE + ATTACKS[name])
    return f"scratch: the {name} attack (harness/github/attacks.py)"
