"""What separates the trusted clock's Challenge A figure from the in-process one: each
implementation's time per call in one process, step by step from the puzzle's loop towards the
clock's conditions, and the clock's channel round trip alone.

    python -m studies.probes.clock_gap [--rounds 3] [--json FILE]

Per call, synchronized, Challenge A's 1000 x (up, gate, down) per MLP, medians over rounds whose
order of implementations reverses every other round:

  puzzle  fast_dequantize(W, state): the in-process gate's loop, a new output every call
  out     fast_dequantize(W, state, out=buf): one output buffer per weight, the same every call
  cold    out= into the clock's slots, reading the clock's copies (plan.pool and plan.batch, twice
          L2 each): no input or output warm
  region  cold, but the weights, states and slots are the call process's own objects: views of a
          VMM region laid out by the clock's ``inputs`` module, as ``worker.py`` rebuilds them

and the channel's (``harness/clock/channel.py``) round trip to a process that answers at once,
each side on a core of its own (``processes.cores``) and not. The clock's own figure, the rest, is
the gate's record of the same commit. Exit 0 (a measurement), 4 no GPU.

Run it under ``taskset -c N`` to see one core's cost (the clock pins each call process to one), and
with ``--spin`` to make CUDA spin while it waits (``harness/clock/spin.py``, as the clock's processes
do) instead of the driver's choice.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness.clock import channel as ch
from harness.clock import plan, processes, spin
from harness.core import workload
from harness.core.command_output import Parser
from harness.core.paths import ROOT

MODES = ("puzzle", "out", "cold", "region")
ANSWER = """import sys
from harness.clock import channel as ch
line = ch.Channel(int(sys.argv[1]))
while line.next()[0] != ch.STOP:
    line.reply(ch.YES)
line.reply(ch.YES)
"""


def round_trip_us(core_pair, asks: int = 20000) -> float:
    """Median microseconds of an empty command's round trip to another process."""
    line = ch.Channel.create()
    with processes.pinned(core_pair[1]):
        other = subprocess.Popen([sys.executable, "-c", ANSWER, str(line.fd)], pass_fds=(line.fd,), cwd=ROOT)
    took = []
    with processes.pinned(core_pair[0]):
        for _ in range(asks):
            began = time.perf_counter()
            line.ask(ch.CALL, timeout=10)
            took.append(time.perf_counter() - began)
        line.ask(ch.STOP, timeout=10)
    other.wait(10)
    return statistics.median(took[asks // 10 :]) * 1e6


def calls_of(mlp_copies, slots, rng) -> dict:
    """Each mode's list of (W, state, out) calls for one MLP (out None: a new output)."""
    import torch

    first = mlp_copies[0].layers
    states = [layer.weight.quant_state for layer in first]
    warm = [torch.empty(state.shape, dtype=state.dtype, device="cuda") for state in states]
    cold = plan.batch(rng, 0, len(mlp_copies), plan.LAYERS, len(slots), workload.ROUNDS_PER_TIMING, 0)
    layers = [layer for mlp in mlp_copies for layer in mlp.layers]
    return {
        "puzzle": [(layer.weight, layer.weight.quant_state, None) for layer in first] * workload.ROUNDS_PER_TIMING,
        "out": [(layer.weight, layer.weight.quant_state, out) for layer, out in zip(first, warm, strict=True)]
        * workload.ROUNDS_PER_TIMING,
        "cold": [
            (layers[w].weight, layers[w].weight.quant_state, slot_for(slots[s], layers[w])) for w, s in cold.calls
        ],
    }


def region_calls(rng, l2) -> dict:
    """Each MLP's ``region`` calls: the clock's reference's weights in a VMM region, rebuilt as a
    call process rebuilds them, in the order a batch of the clock draws."""
    from harness.clock import inputs, reference
    from harness.clock.regions import Region

    setup = {"device": "cuda", "challenge": [list(mlp) for mlp in workload.CHALLENGE_A]}
    copies, layers, slots = reference.pools(setup, 2 * l2)
    weights = reference.build(setup, copies)
    manifest, inputs_bytes, slots_bytes = inputs.lay_out(weights, slots)
    given, outs = Region.create(inputs_bytes, "cuda"), Region.create(slots_bytes, "cuda")
    inputs.fill(given, weights, manifest)
    pairs = inputs.quant_states(given, manifest)
    found, first = {}, 0
    for g, (hd, m, dtype, _) in enumerate(workload.CHALLENGE_A):
        batch = plan.batch(rng, first, copies[g], layers[g], slots[g], workload.ROUNDS_PER_TIMING, 0)
        found[f"{hd}x{m} {dtype}"] = [(*pairs[w], inputs.slot_view(outs, manifest, w, s)) for w, s in batch.calls]
        first += copies[g] * layers[g]
    return found


def slot_for(slot, layer):
    """Layer's output in ``slot`` (a uint8 buffer as large as the MLP's largest output)."""
    state = layer.weight.quant_state
    return slot[: state.shape.numel() * state.dtype.itemsize].view(state.dtype).view(state.shape)


def per_call_us(fn, calls) -> float:
    import torch

    sync = torch.cuda.synchronize
    sync()
    start = time.perf_counter()
    for W, state, out in calls:
        fn(W, state, out=out) if out is not None else fn(W, state)
        sync()
    return (time.perf_counter() - start) / len(calls) * 1e6


def main(argv=None) -> int:
    parser = Parser(prog="python -m studies.probes.clock_gap", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--spin", action="store_true", help="CUDA spins while it waits (CU_CTX_SCHED_SPIN)")
    args = parser.parse_args(argv)
    if args.spin:
        spin.spin_while_waiting()
    import torch

    if not torch.cuda.is_available():
        print("clock_gap: no CUDA GPU here (exit 4)", file=sys.stderr)
        return 4
    cores = processes.cores(2)  # none on one core: two spinning sides would take turns by the scheduler
    channel = {"own cores": round_trip_us(cores), "shared": round_trip_us((None, None))} if cores else {}
    import unsloth  # noqa: F401  (patches on import; its kernels need it first)
    from unsloth.kernels.utils import fast_dequantize

    import nf4kernel

    impls = {"nf4kernel": nf4kernel.fast_dequantize, "unsloth": fast_dequantize}
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    rng = random.Random(46)
    plans = []
    for hd, m, dtype, seed in workload.CHALLENGE_A:
        n, itemsize = hd * m, getattr(torch, dtype).itemsize
        copies, slots = plan.pool(plan.LAYERS * (n // 2 + n // 64), n * itemsize, 2 * l2)
        mlps = [workload.build_mlp(hd, m, getattr(torch, dtype), seed + 1000 * v) for v in range(copies)]
        buffers = [torch.empty(n * itemsize, dtype=torch.uint8, device="cuda") for _ in range(slots)]
        plans.append((f"{hd}x{m} {dtype}", calls_of(mlps, buffers, rng)))
    for label, calls in region_calls(rng, l2).items():
        dict(plans)[label]["region"] = calls
    for fn in impls.values():  # compile and plan outside the timed rounds
        for _, modes in plans:
            for mode in MODES:
                per_call_us(fn, modes[mode][:6])
    times = {name: {mode: {label: [] for label, _ in plans} for mode in MODES} for name in impls}
    for r in range(args.rounds):
        for name in list(impls) if r % 2 == 0 else list(impls)[::-1]:
            for mode in MODES:
                for label, modes in plans:
                    times[name][mode][label].append(per_call_us(impls[name], modes[mode]))
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    median = statistics.median
    table = {n: {mode: {k: median(v) for k, v in by.items()} for mode, by in m.items()} for n, m in times.items()}
    print(f"cores {sorted(os.sched_getaffinity(0))}, spin {args.spin}")
    if channel:
        own, shared = channel["own cores"], channel["shared"]
        print(f"channel round trip, median: {own:.2f} us on cores of their own, {shared:.2f} us not")
    for mode in MODES:
        row = "  ".join(
            f"{label}: nf4kernel {table['nf4kernel'][mode][label]:.1f} unsloth {table['unsloth'][mode][label]:.1f} "
            f"({table['unsloth'][mode][label] / table['nf4kernel'][mode][label]:.3f}x)"
            for label, _ in plans
        )
        total = {name: sum(table[name][mode].values()) for name in impls}
        print(f"{mode:6s} us per call  {row}  all: {total['unsloth'] / total['nf4kernel']:.3f}x")
    if args.json:
        args.json.write_text(json.dumps({"channel_us": channel, "per_call_us": table, "raw_us": times}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
