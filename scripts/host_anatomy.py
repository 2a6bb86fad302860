"""Where a planned call's host microseconds go, down to the driver (4096x1024 bf16 nested NF4).

    python scripts/host_anatomy.py

``host_breakdown.py`` times the launch cache's own pieces; this times what they are made of and
what they could be replaced by, on the same machine in one process, so that each change to the
hot path is chosen from a measurement (issue 10: "find out where the remaining microseconds go
before you change anything"):

* the driver's share of a launch: Triton's C launcher with a zero grid (it parses and checks every
  argument, then skips ``cuLaunchKernelEx``) against the same call with the real grid, and the raw
  ``cuLaunchKernel`` through ctypes with prepacked parameters;
* what one tensor read costs (plain tensor, Params4bit with and without torch-function dispatch);
* allocation: ``torch.empty_strided`` and its alternatives;
* the fixed cost a synchronized call pays on top: launch latency and ``torch.cuda.synchronize``.
"""

from __future__ import annotations

import ctypes
import timeit

import torch

import nf4kernel
from harness.core import workload
from nf4kernel import launch_cache, quant_state

N = 2000


def t(label: str, fn, n: int = N) -> float:
    fn()
    torch.cuda.synchronize()
    us = min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6
    torch.cuda.synchronize()
    print(f"{label:58s} {us:7.3f} us", flush=True)
    return us


def main() -> None:
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, nf4kernel from {nf4kernel.__file__}")
    layer = workload.build_mlp(1024, 4096, torch.bfloat16, seed=0).layers[0]
    W, state = layer.weight, layer.weight.quant_state
    plain = W.as_subclass(torch.Tensor)
    nf4kernel.dequantize(layer)
    plan = launch_cache._PLANS[id(state)]
    key = launch_cache.key_of(W, state)
    out = torch.empty(state.shape, dtype=state.dtype, device="cuda")
    stream = torch._C._cuda_getCurrentRawStream(0)

    print("--- the whole call")
    t("dequantize(layer)", lambda: nf4kernel.dequantize(layer))
    t("dequantize(W, out=out)", lambda: nf4kernel.dequantize(W, out=out))
    t("launch_cache.dequantize(W, state, None)", lambda: launch_cache.dequantize(W, state, None))
    # The floor under any of it: allocate and launch the planned kernel, with no check at all.
    allocate, fast = plan.allocate_here, plan.fast
    t("floor: allocate_here() + fast(stream, pointer), no checks", lambda: fast(stream, allocate().data_ptr()))

    print("--- the launch")
    tensors, layout = quant_state.read(W, state)
    compiled, grid, constexprs = launch_cache.launch(tensors, layout, out)
    run = compiled.run
    c_launch = run.launch
    fixed = (compiled.function, run.launch_cooperative_grid, run.launch_pdl, None, None, compiled.packed_metadata)
    hooks = (None, None, None)
    pointers = launch_cache.kernel_pointers(tensors)
    tail = (layout.n_elements, layout.n_blocks, *constexprs.values())
    o = out.data_ptr()
    t("plan.launch(out) (hooks, device, stream, closure)", lambda: plan.launch(o))
    t("plan.fast(stream, out) (closure + C launcher)", lambda: plan.fast(stream, o))
    args = (grid[0], 1, 1, stream, *fixed, *hooks, *pointers, o, *tail)
    zero = (0, 1, 1, stream, *fixed, *hooks, *pointers, o, *tail)
    t(f"C launcher, prebuilt args ({len(args)} of them)", lambda: c_launch(*args))
    t("C launcher, zero grid: parsing only, no cuLaunchKernelEx", lambda: c_launch(*zero))
    t("_hooks_active()", launch_cache._hooks_active)
    t("torch._C._cuda_getDevice()", torch._C._cuda_getDevice)
    t("torch._C._cuda_getCurrentRawStream(0)", lambda: torch._C._cuda_getCurrentRawStream(0))

    # The raw driver call: cuLaunchKernel with the parameters packed once (Triton 3.6's order: the
    # non-constexpr arguments, then the global and profile scratch pointers).
    cuda = ctypes.CDLL("libcuda.so.1")
    launch_kernel = cuda.cuLaunchKernel
    launch_kernel.restype = ctypes.c_int
    signature = compiled.src.signature
    print("signature:", signature)
    values = [*pointers, o, layout.n_elements, layout.n_blocks]
    slots = []
    for (_name, ty), value in zip(((n, ty) for n, ty in signature.items() if ty != "constexpr"), values, strict=False):
        slot = ctypes.c_uint64(value) if ty.startswith("*") or ty == "i64" else ctypes.c_int32(value)
        slots.append(slot)
    slots += [ctypes.c_uint64(0), ctypes.c_uint64(0)]
    params = (ctypes.c_void_p * len(slots))(*[ctypes.addressof(s) for s in slots])
    meta = compiled.metadata
    block = 32 * meta.num_warps
    fn, shared = ctypes.c_void_p(compiled.function), meta.shared
    cu_stream = ctypes.c_void_p(stream)
    raw = (fn, grid[0], 1, 1, block, 1, 1, shared, cu_stream, params, None)
    check = torch.full_like(out, float("nan"))
    slots[6].value = check.data_ptr()
    assert launch_kernel(*raw) == 0
    torch.cuda.synchronize()
    print("raw cuLaunchKernel output bit-identical:", torch.equal(check, nf4kernel.dequantize(layer)))
    slots[6].value = o
    t("ctypes cuLaunchKernel, prepacked params", lambda: launch_kernel(*raw))
    t(
        "ctypes: set one slot + cuLaunchKernel",
        lambda: (slots.__getitem__(6).__setattr__("value", o), launch_kernel(*raw)),
    )

    # Does the stream matter? torch's default is the legacy default stream (raw 0), which the driver
    # orders against every other blocking stream of the context.
    side = torch.cuda.Stream()
    side_args = (grid[0], 1, 1, side.cuda_stream, *args[4:])
    t("C launcher on a side stream (not the legacy default)", lambda: c_launch(*side_args))
    empty = torch.empty(1, device="cuda")
    t("empty.zero_() (a torch kernel launch), back to back", empty.zero_)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        c_launch(grid[0], 1, 1, torch.cuda.current_stream().cuda_stream, *args[4:])
    t("CUDAGraph.replay() of one kernel (fixed out)", graph.replay)

    print("--- reading the key")
    t("key_of(W, state)", lambda: launch_cache.key_of(W, state))
    t("key == plan.key", lambda: key == plan.key)
    t("unwrap(layer)", lambda: quant_state.unwrap(layer, None))
    t("with DisableTorchFunctionSubclass(): pass", _enter_exit)
    t("plain.data_ptr()", plain.data_ptr)
    t("W.data_ptr() (Params4bit, torch function)", W.data_ptr)
    absmax = state.absmax
    t("absmax.dtype", lambda: absmax.dtype)
    t("absmax.numel()", absmax.numel)
    t("absmax.is_contiguous()", absmax.is_contiguous)
    t("absmax.shape", lambda: absmax.shape)
    t("absmax._version", lambda: absmax._version)
    t("state.absmax (attribute)", lambda: state.absmax)
    t("state.nested", lambda: state.nested)
    t("layer.weight (Module __getattr__)", lambda: layer.weight)
    t("layer._parameters['weight']", lambda: layer._parameters["weight"])
    t("W.quant_state", lambda: W.quant_state)
    _quick_key(W, state, plan)

    print("--- allocation")
    shape, stride = tuple(state.shape), torch.empty(state.shape, device="meta").stride()
    t("plan.allocate()  (partial(torch.empty_strided))", plan.allocate)
    t("plan.allocate_here()  (partial(Inductor's _empty_strided_cuda))", plan.allocate_here)
    t(
        "torch.empty_strided(shape, stride, dtype, device)",
        lambda: torch.empty_strided(shape, stride, dtype=torch.bfloat16, device="cuda"),
    )
    dev = torch.device("cuda", 0)
    t("torch.empty(shape, dtype, device obj)", lambda: torch.empty(shape, dtype=torch.bfloat16, device=dev))
    t("out.new_empty(shape)", lambda: out.new_empty(shape))
    t("torch.empty_like(out)", lambda: torch.empty_like(out))
    t("out.data_ptr()", out.data_ptr)

    print("--- fixed cost of a synchronized call")
    t("torch.cuda.synchronize() (idle GPU)", torch.cuda.synchronize)
    t("dequantize(layer) + synchronize", lambda: (nf4kernel.dequantize(layer), torch.cuda.synchronize()), n=500)
    t("raw cuLaunchKernel + synchronize", lambda: (launch_kernel(*raw), torch.cuda.synchronize()), n=500)
    t("empty.zero_() (a torch kernel) + synchronize", lambda: (empty.zero_(), torch.cuda.synchronize()), n=500)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(200):
        launch_kernel(*raw)
    end.record()
    end.synchronize()
    print(f"{'kernel, back to back (events)':58s} {start.elapsed_time(end) / 200 * 1e3:7.3f} us")


def _enter_exit() -> None:
    with torch._C.DisableTorchFunctionSubclass():
        pass


def _quick_key(W, state, plan) -> None:
    """The check a planned call makes (``launch_cache.unchanged``): the quick key where torch has
    dynamo's C++ tensor check (TensorGuards; an earlier version of this script passed it lists for
    ``dynamic_dims_*``, which it refuses: None is what it takes), else the whole key."""
    print(f"quick key: {getattr(plan, 'check', None) is not None}")
    if not hasattr(launch_cache, "unchanged"):
        return
    t("unchanged(W, state, plan)", lambda: launch_cache.unchanged(W, state, plan))
    if plan.check is not None:
        # Since issue 18 the plan's pointers are compared first and the codebook is not checked.
        t("quick_key(W, state, check, pointers)", lambda: launch_cache.quick_key(W, state, plan.check, plan.pointers))
        tensors = (W, state.absmax, state.state2.code, state.state2.absmax, state.offset)
        t("the tensor check alone (5 tensors)", lambda: plan.check(*tensors))
        t("quick_key == plan.quick", lambda: plan.quick == plan.quick)


if __name__ == "__main__":
    main()
