"""The reference process: it never imports a kernel under test (checked before it answers).

    python -P -m harness._process reference SOCKET_FD CHANNEL_FD

It builds the inputs with bitsandbytes, keeps each weight's expected output (``oracle.py``), lends
the inputs (read-only) and the slots, measures the copy bandwidth and a fixed copy's time, then
answers ``CHECK w s`` (slot ``s`` bit for bit weight ``w``'s?), ``POISON`` (every slot to 0xFF) and
``PROBE`` (the fixed copy's microseconds now: slower means other work on the GPU).
"""

from __future__ import annotations

import socket
import sys
import time
from functools import partial

from harness.clock import channel as ch
from harness.clock import inputs, plan
from harness.clock.regions import Region

PROBE_BYTES = 64 << 20


def sizes(setup: dict) -> list[tuple[int, int, int]]:
    """(layers, elements, output dtype's bytes) of each timed group: Challenge A's MLPs, then the
    suite's weights."""
    import torch

    found = [(plan.LAYERS, hd * m, getattr(torch, dtype).itemsize) for hd, m, dtype, _ in setup.get("challenge", [])]
    for key in setup.get("suite", []):
        shape, dtype = key.split()
        rows, cols = (int(n) for n in shape.split("x"))
        found.append((1, rows * cols, getattr(torch, dtype).itemsize))
    return found


def pools(setup: dict, working_set: int) -> tuple[list[int], list[int], list[int]]:
    """(copies, layers and slots per timed group, then the matrix's slots): ``plan.pool`` on each
    group's sizes; the matrix's group (when asked for) has a slot per weight."""
    copies, layers, slots = [], [], []
    for count, n, itemsize in sizes(setup):
        one_copy = count * (n // 2 + n // 64)  # packed codes and first-level absmax
        c, s = plan.pool(one_copy, n * itemsize, working_set, count)
        copies.append(c)
        layers.append(count)
        slots.append(s)
    if setup.get("matrix"):
        slots.append(len(inputs.MATRIX))
    return copies, layers, slots


def build(setup: dict, copies: list[int]) -> list:
    import torch

    from harness.core import workload

    device = setup["device"]
    challenge = setup.get("challenge", [])
    mlps = [(hd, m, getattr(torch, dtype)) for hd, m, dtype, _ in challenge]
    seeds = [seed for *_, seed in challenge]
    weights = inputs.challenge_a(
        mlps, copies[: len(mlps)], seeds, lambda hd, m, dtype, seed: workload.build_mlp(hd, m, dtype, seed, device)
    )

    keys = setup.get("suite", [])
    weights += inputs.suite(keys, copies[len(mlps) :], len(mlps), partial(workload.suite_weight, device=device))
    if setup.get("matrix"):
        weights += inputs.matrix(device, group=len(mlps) + len(keys))
    return weights


def copy_time(src, dst, sync) -> float:
    sync()
    start = time.perf_counter()
    dst.copy_(src)
    sync()
    return time.perf_counter() - start


def serve(sock: socket.socket, line: ch.Channel) -> int:
    import torch

    from harness.core import oracle

    setup, _ = ch.receive(sock)
    device = setup["device"]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size if device == "cuda" else 0
    copies, layers, slot_counts = pools(setup, setup.get("working_set") or 2 * l2)
    weights = build(setup, copies)
    manifest, inputs_bytes, slots_bytes = inputs.lay_out(weights, slot_counts)
    manifest.update(copies=copies, layers=layers)
    given = Region.create(inputs_bytes, device)
    inputs.fill(given, weights, manifest)
    slots = Region.create(slots_bytes, device)
    expected = [oracle.bnb_dequantize(w.packed.t() if w.transposed else w.packed, w.state) for w in weights]
    expected = [e.t() if w.transposed else e for e, w in zip(expected, weights, strict=True)]
    del weights
    src = torch.empty(PROBE_BYTES // 2, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    probe_s = min(copy_time(src, dst, sync) for _ in range(20))
    sync()
    facts = {"device": device, "copy_bytes_per_s": PROBE_BYTES / probe_s, "probe_s": probe_s, "l2_bytes": l2}
    if device == "cuda":
        from harness.core import gpu_state, workload

        facts.update(
            copy_bytes_per_s=workload.copy_bandwidth(), name=workload.device_name(), nvml=gpu_state.current_device()
        )
    facts.update(versions())
    if "nf4kernel" in sys.modules:
        raise RuntimeError("the reference process imported nf4kernel: it must never run a kernel under test")
    reply = {"manifest": manifest, "inputs_bytes": given.size, "slots_bytes": slots.size, "facts": facts}
    ch.send(sock, reply, [given.fd, slots.fd])
    while True:
        op, a, b = line.next()
        if op == ch.STOP:
            line.reply(ch.YES)
            return 0
        if op == ch.CHECK:
            got = inputs.slot_view(slots, manifest, a, b)
            line.reply(ch.YES if torch.equal(got, expected[a]) else ch.NO)
        elif op == ch.POISON:
            slots.bytes.fill_(0xFF)
            sync()
            line.reply(ch.YES)
        elif op == ch.PROBE:
            line.reply(max(1, round(copy_time(src, dst, sync) * 1e6)))
        else:
            line.reply(ch.NO)


def versions() -> dict:
    import bitsandbytes
    import torch

    found = {"torch": torch.__version__, "bitsandbytes": bitsandbytes.__version__}
    try:
        import triton

        found["triton"] = triton.__version__
    except ImportError:
        found["triton"] = None
    return found


def main(argv=None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    return ch.serve_clock("harness._process reference", "SOCKET_FD CHANNEL_FD", words, serve)
