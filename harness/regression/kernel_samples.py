"""One side of one round of the regression check: every call's kernel time, for each weight asked
for, from the nf4kernel first on this process's path (a commit's, staged by the harness). Prints one
JSON line; the harness pairs BASE's and HEAD's processes into rounds (``paired_rounds.py``).

    python -m harness.regression.kernel_samples --keys "14336x4096 bfloat16" "4096x1024 float16"
    python -m harness.regression.kernel_samples --device cpu --keys "1024x512 bfloat16"   # the CPU smoke run

On a GPU each call is timed as ``KernelTime`` times it (cold L2, CUDA events: ``workload.kernel_samples``)
and kept, not only their median. On the CPU (Triton's interpreter, any ``RxC`` shape) each call is
timed by the host clock: that proves the pipeline, and says nothing about the kernel's speed.

Exit 0: measured. Exit 3: nf4kernel's output differs from the oracle (no figures for a wrong
kernel). Exit 4: ``--device cuda`` and no CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from harness.core import exits, workload

CPU_CALLS = 5  # interpreted calls timed per weight on the CPU


def _cpu_weight(shape: str, dtype: str):
    """``(call, packed bytes)``: nf4kernel on a nested NF4 CPU weight of ``RxC`` (Triton's interpreter)."""
    import bitsandbytes.functional as F
    import torch

    import nf4kernel

    rows, cols = (int(n) for n in shape.split("x"))
    generator = torch.Generator().manual_seed(0)
    w = torch.randn(rows, cols, generator=generator).to(getattr(torch, dtype))
    packed, state = F.quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type="nf4")
    if not torch.equal(nf4kernel.dequantize(packed, state), nf4kernel.dequantize_reference(packed, state)):
        raise AssertionError(f"{shape} {dtype}: nf4kernel's output differs from its reference")
    return (lambda: nf4kernel.dequantize(packed, state)), packed.numel() * packed.element_size()


def _cpu_samples(call) -> list[float]:
    call()  # compile, plan
    samples = []
    for _ in range(CPU_CALLS):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return samples


def _state_reader():
    """``read() -> snapshot``: the GPU's clocks, throttle reasons, temperature and power around each
    weight's timing (evidence for an outlier)."""
    from harness.core import gpu_state

    device = gpu_state.current_device()
    return lambda: gpu_state.snapshot(device)


def warm_up(ours, key: str) -> None:
    """One discarded timing of the first weight. Without it, the first weight a process times is
    timed on a GPU left idle through the imports: ``do_bench`` sizes its loop from five calls made
    then, so on an H100 that weight got 30-104 calls (median 74) where every later one got 161-1066
    (median 764), the first of them 2-5x slow (benchmarks/results/regression-power/h100/README.md)."""
    layer = workload.suite_weight(*key.split())
    workload.kernel_samples(lambda: ours(layer))


def measure(keys: list[str], device: str) -> dict:
    import nf4kernel

    found = {"nf4kernel": nf4kernel.__file__, "device": device, "samples": {}, "bytes": {}, "peak_bytes": {}}
    if device == "cpu":
        import logging

        logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)  # an optional kernel's warning
        for key in keys:
            call, found["bytes"][key] = _cpu_weight(*key.split())
            found["samples"][key] = _cpu_samples(call)
        return found
    import torch

    workload.require_gpu("kernel samples")
    found["device"] = torch.cuda.get_device_name()
    ours, oracle = workload.implementation("nf4kernel"), workload.implementation("bitsandbytes")
    state = _state_reader()
    found["states"] = {}
    warm_up(ours, keys[0])
    for key in keys:
        layer = workload.suite_weight(*key.split())
        if not torch.equal(ours(layer), oracle(layer)):
            raise AssertionError(f"{key}: nf4kernel's output differs from bitsandbytes'")
        found["bytes"][key] = layer.weight.numel() * layer.weight.element_size()
        found["peak_bytes"][key] = workload.peak_bytes(ours, layer)
        before = state()
        found["samples"][key] = workload.kernel_samples(lambda layer=layer: ours(layer))
        found["states"][key] = {"before": before, "after": state()}
        del layer
        torch.cuda.empty_cache()
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.regression.kernel_samples", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--keys", nargs="+", required=True, help='weights, each "OUTxIN dtype"')
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args(argv)
    for key in args.keys:
        parts = key.split()
        if len(parts) != 2 or parts[1] not in workload.DTYPES or not all(n.isdigit() for n in parts[0].split("x")):
            parser.error(f"not a weight: {key!r} (say 'OUTxIN dtype', dtype one of {', '.join(workload.DTYPES)})")
        if args.device == "cuda" and parts[0] not in workload.SHAPES:
            parser.error(f"{parts[0]} is not one of the suite's shapes: {', '.join(workload.SHAPES)}")
    try:
        found = measure(args.keys, args.device)
    except workload.NoGpu as error:
        print(error, file=sys.stderr)
        return exits.NO_GPU
    except AssertionError as error:
        print(f"kernel samples: {error}", file=sys.stderr)
        return 3
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
