"""Where a planned call's host time goes (4096x1024 bf16 nested NF4), on a GPU machine.

python scripts/host_breakdown.py

It runs on this tree and on the package before issue 9 (c0dfe69), so the two can be compared on
one machine: ``git archive c0dfe69 nf4kernel | tar -x -C .before`` in a checkout, then
``PYTHONPATH=.before python scripts/host_breakdown.py`` (before) and ``python scripts/host_breakdown.py``.
"""

import timeit

import torch

import nf4kernel
from harness.core import workload
from nf4kernel import launch_cache, quant_state

print(f"nf4kernel from {nf4kernel.__file__}")
layer = workload.build_mlp(1024, 4096, torch.bfloat16, seed=0).layers[0]
W, state = layer.weight, layer.weight.quant_state
nf4kernel.dequantize(layer)
plan = launch_cache._PLANS[id(state)]
key = launch_cache.key_of(W, state)
out = torch.empty(state.shape, dtype=state.dtype, device="cuda")
stream = torch._C._cuda_getCurrentRawStream(0)
# The direct launch's arguments: (stream, out's pointer) since issue 10; (key, out's pointer, stream)
# since issue 9; (key, out tensor, stream) before. Issue 18 renamed POINTERS to kernel_pointers.
takes_pointer = hasattr(launch_cache, "POINTERS") or hasattr(launch_cache, "kernel_pointers")
out_arg = out.data_ptr() if takes_pointer else out
try:
    plan.fast(stream, out_arg)
    fast_launch = lambda: plan.fast(stream, out_arg)  # noqa: E731
except TypeError:
    fast_launch = lambda: plan.fast(key, out_arg, stream)  # noqa: E731
N = 2000


def t(label, fn):
    fn()
    torch.cuda.synchronize()
    us = min(timeit.repeat(fn, number=N, repeat=5)) / N * 1e6
    torch.cuda.synchronize()
    print(f"{label:40s} {us:7.2f} us")


print(f"direct C launch: {launch_cache._C_LAUNCH_LAYOUT and plan.fast is not None}")
t("dequantize(layer)", lambda: nf4kernel.dequantize(layer))
t("dequantize(W) (Params4bit)", lambda: nf4kernel.dequantize(W))
t("dequantize(W, out=out)", lambda: nf4kernel.dequantize(W, out=out))
t("  unwrap", lambda: quant_state.unwrap(layer, None))
t("  key_of", lambda: launch_cache.key_of(W, state))
t("  key == plan.key", lambda: key == plan.key)
if hasattr(launch_cache, "unchanged"):
    print(f"  quick key: {plan.check is not None}")
    t("  unchanged (what a planned call checks)", lambda: launch_cache.unchanged(W, state, plan))
    if plan.check is not None:
        if hasattr(plan, "pointers"):  # since issue 18: the pointers are compared before the check
            t("    quick_key", lambda: launch_cache.quick_key(W, state, plan.check, plan.pointers))
            tensors = (W, state.absmax, state.state2.code, state.state2.absmax, state.offset)
        else:
            t("    quick_key", lambda: launch_cache.quick_key(W, state, plan.check))
            tensors = (W, state.absmax, state.code, state.state2.code, state.state2.absmax, state.offset)
        t("      the tensor check alone", lambda: plan.check(*tensors))
t("  allocate (empty_strided)", plan.allocate)
if hasattr(plan, "allocate_here"):
    t("  allocate_here (Inductor's)", plan.allocate_here)
t("  accepts(out)", lambda: plan.accepts(out))
if takes_pointer:
    t("  bump_version(out)", lambda: launch_cache.bump_version(out))
t("  launch", fast_launch)
