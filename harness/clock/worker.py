"""A call process: the one place an implementation under test runs.

    python -P -m harness._process worker IMPL SOCKET_FD CHANNEL_FD

It imports ``IMPL`` (``nf4kernel``, whichever the path puts first; ``unsloth``; ``bitsandbytes``),
rebuilds the weights as views of memory it does not own, warms up, says it is ready, then answers
``CALL w s``: weight ``w`` dequantized into slot ``s`` and synchronized (Unsloth, trusted, makes the
puzzle's own call into an output of its own). It times, checks and records nothing.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable
from functools import partial

from harness.clock import channel as ch
from harness.clock import inputs
from harness.clock.regions import Region
from harness.core import gpu_state, workload

WARM_CALLS = 2
IMPLEMENTATIONS = ("nf4kernel", "unsloth", "bitsandbytes")


def implementation(name: str) -> tuple[Callable, str]:
    """``fn(W, quant_state, out)`` and the file it came from."""
    if name == "nf4kernel":
        import nf4kernel

        return (lambda W, state, out: nf4kernel.fast_dequantize(W, state, out=out)), nf4kernel.__file__
    if name == "unsloth":
        import unsloth
        from unsloth.kernels.utils import fast_dequantize

        return (lambda W, state, out: fast_dequantize(W, state)), unsloth.__file__
    if name == "bitsandbytes":  # the oracle's path on each device, its answer copied in
        from harness.core import oracle

        def copied(W, state, out):
            answer = oracle.bnb_dequantize(W, state)
            out.copy_(answer.t() if W.shape[0] == 1 else answer)

        return copied, oracle.__file__
    raise ValueError(f"no implementation {name!r}: nf4kernel, unsloth or bitsandbytes")


def serve(impl: str, sock: socket.socket, line: ch.Channel) -> int:
    began = time.perf_counter()
    fn, source = implementation(impl)
    import torch

    took, last = {}, began

    def lap(name: str) -> None:  # where a start's seconds go, for the clock's log line
        nonlocal last
        now = time.perf_counter()
        took[name], last = now - last, now

    lap("import")
    setup, fds = ch.receive(sock)
    device = setup["device"]
    manifest = setup["manifest"]
    if device == "cuda":
        torch.cuda.init()
    lap("cuda")
    given = Region.open(fds[0], setup["inputs_bytes"], device, read_only=True)
    slots = Region.open(fds[1], setup["slots_bytes"], device)
    lap("regions")
    weights = inputs.quant_states(given, manifest)
    lap("states")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    views = {}

    def call(w: int, s: int) -> None:
        out = views.get((w, s))
        if out is None:
            out = views[(w, s)] = inputs.slot_view(slots, manifest, w, s)
        W, state = weights[w]
        fn(W, state, out)
        sync()

    firsts = {}  # each timed group's first weight (copy #0): the one whose peak the regression check compares
    for w, entry in enumerate(manifest["weights"]):
        if entry["group"] < len(manifest["copies"]):
            firsts.setdefault(entry["group"], w)
    # A name's later processes (``lean``) only time what their first compiled and measured: one
    # weight a group warms them (a batch's untimed warm-up repeats do the rest).
    warm = list(firsts.values()) if setup.get("lean") else range(len(weights))
    for w in warm:
        for _ in range(WARM_CALLS):
            call(w, 0)
    lap("warm")
    said = {"ready": True, "imported_from": os.path.realpath(source), "version": gpu_state.package_version(impl)}
    if not setup.get("lean"):  # the implementation's own word: the regression check compares it, as informational
        said["peak_bytes"] = {
            manifest["weights"][w]["label"]: workload.peak_bytes(call, w, 0) if device == "cuda" else 0
            for w in firsts.values()
        }
    said["setup_s"] = {k: round(v, 3) for k, v in took.items()}  # its own word: the costs' log line alone
    ch.send(sock, said | {"imported_nf4kernel": "nf4kernel" in sys.modules})
    while True:
        op, a, b = line.next()
        if op == ch.STOP:
            line.reply(ch.YES)
            return 0
        answer = ch.NO
        if op == ch.CALL:
            try:
                call(a, b)
                answer = ch.YES
            except Exception as error:  # a failed call is a wrong answer, said once in the log
                print(f"[worker {impl}] call {a} -> slot {b} failed: {type(error).__name__}: {error}", file=sys.stderr)
        line.reply(answer)


def main(argv=None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    impl = words[0] if words else ""
    usage = f"{{{','.join(IMPLEMENTATIONS)}}} SOCKET_FD CHANNEL_FD"
    serving = partial(serve, impl)
    return ch.serve_clock("harness._process worker", usage, words[1:], serving, ok=impl in IMPLEMENTATIONS)
