"""Where a planned call's host time goes (4096x1024 bf16 nested NF4), on a GPU machine."""

import timeit

import torch

import nf4kernel
from nf4kernel import launch_cache, quant_state
from nf4kernel.harness import workload

layer = workload.build_mlp(1024, 4096, torch.bfloat16, seed=0).layers[0]
W, state = layer.weight, layer.weight.quant_state
nf4kernel.dequantize(layer)
plan = launch_cache._PLANS[id(state)]
key = launch_cache.key_of(W, state)
out = torch.empty(state.shape, dtype=state.dtype, device="cuda")
run, function, metadata = plan.launcher
launcher_c = getattr(run, "launch", None)
N = 2000


def t(label, fn):
    fn()
    torch.cuda.synchronize()
    us = min(timeit.repeat(fn, number=N, repeat=5)) / N * 1e6
    torch.cuda.synchronize()
    print(f"{label:40s} {us:7.2f} us")


t("dequantize(layer)", lambda: nf4kernel.dequantize(layer))
t("dequantize(W) (Params4bit)", lambda: nf4kernel.dequantize(W))
t("dequantize(W, out=out)", lambda: nf4kernel.dequantize(W, out=out))
t("unwrap", lambda: quant_state.unwrap(layer, None))
t("key_of", lambda: launch_cache.key_of(W, state))
t("torch.empty", lambda: torch.empty(state.shape, dtype=state.dtype, device=plan.device))
t("hooks_active", launch_cache._hooks_active)
t("plan.launch (CudaLauncher)", lambda: plan.launch(key, out))
t("current stream", lambda: torch._C._cuda_getCurrentRawStream(0))
dev = plan.device
shape, dtype = state.shape, state.dtype
t("torch.empty(device=0)", lambda: torch.empty(shape, dtype=dtype, device=0))
t("torch.empty_strided", lambda: torch.empty_strided(shape, (shape[1], 1), dtype=dtype, device=dev))
t("out.new_empty", lambda: out.new_empty(shape))
t("torch.empty(numel).view", lambda: torch.empty(shape.numel(), dtype=dtype, device=dev).view(shape))
if launcher_c is not None:
    args = (0, plan.grid, 1, 1, torch._C._cuda_getCurrentRawStream(0), function, run.launch_cooperative_grid,
            run.launch_pdl, None, None, metadata, None, None, None)
    ptrs = (key[0], key[4], key[5], key[11], key[10], key[13], out.data_ptr(), plan.layout.n_elements,
            plan.layout.n_blocks, *plan.tail)
    print("scratch sizes", run.global_scratch_size, run.profile_scratch_size)
    t("C launch direct", lambda: launcher_c(*args[1:], *ptrs))
    t("CudaLauncher.__call__", lambda: run(plan.grid, 1, 1, args[4], function, metadata, None, None, None, *ptrs))
