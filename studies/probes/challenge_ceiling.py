"""How far Challenge A's ratio over Unsloth can go on this machine, whatever our host code does.

python -m studies.probes.challenge_ceiling [--rounds 7]

Challenge A synchronizes after every call, so each call costs host work + launch latency + kernel +
synchronize, and only the host work before the launch is ours to cut. This script times, in the
interleaved rounds of ``benchmarks/_timers.py``, beside ``nf4kernel.dequantize`` and
Unsloth's ``fast_dequantize``, three implementations that are *not* products, only floors:

* ``bare``: the planned kernel with no check at all: allocate the output and call Triton's C
  launcher with prebuilt arguments (what a plan does after its checks). The least host work any
  Python API that returns a fresh tensor from one kernel can do.
* ``bare+key``: ``bare`` after reading and comparing the launch cache's whole key
  (``launch_cache.key_of``, the checks that keep a plan valid): what those checks cost in this loop.
* ``bare+quick``: ``bare`` after the check a planned call makes now (``launch_cache.unchanged``:
  the quick key, where torch has dynamo's tensor check).
* ``graph``: one CUDA graph per weight, replayed into one fixed output: no allocation, and the
  cheapest launch CUDA offers. Unsafe as an API (every call returns the same buffer).

Each is checked bit-identical to ``nf4kernel.dequantize`` before timing. If ``bare``'s ratio is
below a target, no safe implementation with our kernel reaches that target on this host.
"""

from __future__ import annotations

import statistics

import torch

import nf4kernel
from benchmarks import _timers
from harness.core import workload
from harness.core.command_output import Parser
from nf4kernel import launch_cache


def bare_impl(layers) -> callable:
    stream = torch._C._cuda_getCurrentRawStream(torch.cuda.current_device())
    table = {}
    for layer in layers:
        nf4kernel.dequantize(layer)  # plans it
        plan = launch_cache._PLANS[id(layer.weight.quant_state)]
        if plan.fast is None:
            raise SystemExit("this Triton's launcher can't be called directly: no bare floor to time")
        table[id(layer)] = (plan.allocate_here, plan.fast)

    def bare(layer):
        allocate, fast = table[id(layer)]
        out = allocate()
        fast(stream, out.data_ptr())
        return out

    return bare


def keyed_impl(layers, bare) -> callable:
    keys = {id(layer): launch_cache.key_of(layer.weight, layer.weight.quant_state) for layer in layers}
    key_of = launch_cache.key_of

    def keyed(layer):
        weight = layer._parameters["weight"]
        if key_of(weight, weight.quant_state) != keys[id(layer)]:
            raise RuntimeError("the weight changed")
        return bare(layer)

    return keyed


def quick_impl(layers, bare) -> callable:
    plans = {id(layer): launch_cache._PLANS[id(layer.weight.quant_state)] for layer in layers}
    unchanged = launch_cache.unchanged

    def quick(layer):
        weight = layer._parameters["weight"]
        if not unchanged(weight, weight.quant_state, plans[id(layer)]):
            raise RuntimeError("the weight changed")
        return bare(layer)

    return quick


def graph_impl(layers) -> callable:
    table = {}
    side = torch.cuda.Stream()
    for layer in layers:
        out = nf4kernel.dequantize(layer)
        graph = torch.cuda.CUDAGraph()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            nf4kernel.dequantize(layer, out=out)  # planned: the capture records one kernel
            with torch.cuda.graph(graph, stream=side):
                nf4kernel.dequantize(layer, out=out)
        torch.cuda.current_stream().wait_stream(side)
        table[id(layer)] = (graph.replay, out)

    def replay(layer):
        run, out = table[id(layer)]
        run()
        return out

    return replay


def main(argv=None) -> int:
    parser = Parser(prog="python -m studies.probes.challenge_ceiling", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)

    mlps = workload.challenge_a()
    layers = [layer for mlp in mlps for layer in mlp.layers]
    bare = bare_impl(layers)
    impls = {
        "nf4kernel": workload.implementation("nf4kernel"),
        "bare+key": keyed_impl(layers, bare),
        "bare+quick": quick_impl(layers, bare),
        "bare": bare,
        "graph": graph_impl(layers),
        "unsloth": workload.implementation("unsloth"),
    }
    for layer in layers:
        expected = nf4kernel.dequantize(layer)
        for name in ("bare+key", "bare+quick", "bare", "graph", "unsloth"):
            got = impls[name](layer)
            torch.cuda.synchronize()
            if not torch.equal(got, expected):
                raise SystemExit(f"{name} is not bit-identical to nf4kernel on {tuple(expected.shape)}")
    print(f"device: {workload.device_name()}; all {len(impls)} implementations bit-identical on {len(layers)} weights")

    times = _timers.interleaved_rounds(
        impls, [mlp.layers for mlp in mlps], args.rounds, workload.ROUNDS_PER_TIMING, progress=print
    )
    calls = 3 * workload.ROUNDS_PER_TIMING
    print(f"\nmicroseconds per synchronized call, median of {args.rounds} rounds")
    print(f"{'':12s}" + "".join(f"{mlp.label:>22s}" for mlp in mlps) + f"{'ratio over unsloth':>26s}")
    for name in impls:
        per_mlp = [statistics.median(r[i] for r in times[name]) / calls * 1e6 for i in range(len(mlps))]
        ratios = [sum(u) / sum(o) for u, o in zip(times["unsloth"], times[name], strict=True)]
        ratio = f"{statistics.median(ratios):.3f}x ({min(ratios):.3f}-{max(ratios):.3f})"
        print(f"{name:12s}" + "".join(f"{us:22.2f}" for us in per_mlp) + f"{ratio:>26s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
