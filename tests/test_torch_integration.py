"""torch.compile(fullgraph=True), CUDA-graph capture, non-default streams and other devices."""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch
from conftest import HAS_CUDA, bnb_dequantize, make_weight

import nf4kernel

requires_two_gpus = pytest.mark.skipif(
    not HAS_CUDA or torch.cuda.device_count() < 2,
    reason="needs two CUDA GPUs (a weight on cuda:1 while cuda:0 is current)",
)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_torch_compile_fullgraph(device, dtype):
    import bitsandbytes as bnb

    torch._dynamo.reset()
    layer = bnb.nn.Linear4bit(128, 64, bias=False, compute_dtype=dtype, compress_statistics=True, quant_type="nf4")
    layer = layer.to(device)
    layer.weight.quant_state.dtype = dtype
    expected = bnb_dequantize(layer.weight, layer.weight.quant_state)
    x = torch.randn(8, 128, dtype=dtype, device=device)

    def forward(x):
        return x @ nf4kernel.dequantize(layer.weight).t()

    def into_buffer(out):
        return nf4kernel.dequantize(layer.weight, layer.weight.quant_state, out=out)

    compiled = torch.compile(forward, fullgraph=True)
    assert torch.equal(compiled(x), x @ expected.t())
    buffer = torch.empty_like(expected)
    assert torch.equal(torch.compile(into_buffer, fullgraph=True)(buffer), expected)
    assert torch.equal(buffer, expected)
    # The transposed packing (Unsloth's backward) also traces.
    transposed = torch.compile(lambda: nf4kernel.dequantize(layer.weight.t(), layer.weight.quant_state), fullgraph=True)
    assert torch.equal(transposed(), expected.t())


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU for CUDA-graph capture")
def test_cuda_graph_capture_and_replay():
    packed, state = make_weight((1024, 4096), device="cuda", seed=1)
    state = copy.deepcopy(state)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (compile, plan) off the capture, as for any kernel
        nf4kernel.dequantize(packed, state)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = nf4kernel.dequantize(packed, state)
    # New weights in the captured buffers: a replay must dequantize them.
    new_packed, new_state = make_weight((1024, 4096), device="cuda", seed=2)
    packed.copy_(new_packed)
    state.absmax.copy_(new_state.absmax)
    state.state2.absmax.copy_(new_state.state2.absmax)
    state.offset.copy_(new_state.offset)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, bnb_dequantize(new_packed, new_state))


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU for torch.compile's CUDA graphs")
def test_torch_compile_reduce_overhead():
    torch._dynamo.reset()
    packed, state = make_weight((1024, 4096), device="cuda")
    expected = bnb_dequantize(packed, state)
    compiled = torch.compile(lambda: nf4kernel.dequantize(packed, state) * 1, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):
        assert torch.equal(compiled(), expected)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU for the op's direct launch")
@pytest.mark.parametrize("nested", [False, True], ids=["flat", "nested"])
def test_the_compiled_op_reads_each_calls_own_tensors(nested):
    """What torch.compile runs (the op ``api._traced`` records, run here as it runs in a graph):
    after its first launch for a kernel it launches that kernel directly, so each later call of the
    same layout must read its own weight, write its own buffer, and a buffer of another alignment
    must not reuse a kernel compiled for 16-byte aligned ones."""
    from nf4kernel import api

    weights = [make_weight((512, 1024), nested=nested, device="cuda", seed=seed) for seed in range(3)]
    for packed, state in weights:
        assert torch.equal(api._traced(packed, state, None), bnb_dequantize(packed, state))
    packed, state = weights[1]
    expected = bnb_dequantize(packed, state)
    for offset in (0, 4):  # bf16 elements: a buffer at 0 and at 8 bytes past a 16-byte boundary
        buffer = torch.zeros(expected.numel() + offset, dtype=expected.dtype, device="cuda")[offset:]
        out = buffer.view(expected.shape)
        api._traced(packed, state, out)
        assert torch.equal(out, expected), offset


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU for streams")
def test_runs_on_the_current_non_default_stream():
    packed, state = make_weight((2048, 4096), device="cuda", seed=1)
    state = copy.deepcopy(state)
    nf4kernel.dequantize(packed, state)  # plan it
    new_packed, new_state = make_weight((2048, 4096), device="cuda", seed=2)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        # The new weight lands on `stream` late: a launch on any other stream would read the old one.
        torch.cuda._sleep(100_000_000)
        packed.copy_(new_packed)
        state.absmax.copy_(new_state.absmax)
        state.state2.absmax.copy_(new_state.state2.absmax)
        state.offset.copy_(new_state.offset)
        got = nf4kernel.dequantize(packed, state)
    stream.synchronize()
    assert torch.equal(got, bnb_dequantize(new_packed, new_state))


@pytest.mark.gpu
@requires_two_gpus
def test_weight_on_another_gpu_than_the_current_one():
    packed, state = make_weight((1024, 4096), device="cuda:1")
    expected = bnb_dequantize(packed, state)
    with torch.cuda.device(0):
        for _ in range(2):  # the checked launch, then the planned one
            got = nf4kernel.dequantize(packed, state)
            assert got.device == torch.device("cuda:1")
            assert torch.equal(got, expected)
        state.to("cuda:0")
        got = nf4kernel.dequantize(packed.to("cuda:0"), state)
        assert got.device == torch.device("cuda:0") and torch.equal(got.cpu(), expected.cpu())


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU to launch on it while CPU calls interpret")
def test_threads_mixing_gpu_and_cpu_calls(fresh_triton_cache, fast_thread_switching):
    # With an empty Triton cache the GPU threads compile while the CPU threads interpret: Triton's
    # interpreter patches triton.language module-wide, which a compile at the same time would read.
    import threading

    weights = [
        make_weight((256, 512), torch.bfloat16, device=device, nested=nested, seed=i)
        for i, (device, nested) in enumerate([("cuda", True), ("cpu", True), ("cuda", False), ("cpu", False)])
    ]
    expected = [bnb_dequantize(p, s) for p, s in weights]
    barrier = threading.Barrier(len(weights))
    outcome = [None] * len(weights)

    def work(i):
        packed, state = weights[i]
        try:
            barrier.wait()
            stream = torch.cuda.Stream() if packed.is_cuda else None
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                got = [nf4kernel.dequantize(packed, state) for _ in range(5)]
            if stream is not None:
                stream.synchronize()
            outcome[i] = all(torch.equal(g, expected[i]) for g in got)
        except Exception as error:  # reported below
            outcome[i] = error

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(weights))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcome == [True] * len(weights)
