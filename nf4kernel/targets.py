"""Compiles the kernel for GPUs this machine doesn't have: Triton's ahead-of-time path
(``triton.compile`` with a ``GPUTarget``, through ptxas to a cubin), no GPU needed. CI runs it for
every GPU a runner fleet has (``tests/test_targets.py``), so a change that breaks a T4 fails a PR on
a hosted runner instead of on the T4.

    python -m nf4kernel.targets          # the fleet and the newest target, every format: OK or the error
    python -m nf4kernel.targets 75 120   # some compute capabilities

The arguments are typed and specialized by Triton's own launch binding for that target (pointer
dtypes and alignment, int32 or int64 counts, constexprs), so what is compiled is what a launch on
that GPU compiles.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from typing import NamedTuple

import torch
import triton

from . import kernel as K
from .launch_cache import kernel_arguments
from .quant_state import Layout, Tensors4bit

# The GPUs runners have: the seeds' Tesla T4s, A100s, A10s, L4s, and ours (H100 / H200).
FLEET = {75: "T4 (sm_75)", 80: "A100 (sm_80)", 86: "A10 (sm_86)", 89: "L4 (sm_89)", 90: "H100/H200 (sm_90)"}


class Format(NamedTuple):
    dtype: torch.dtype  # the output
    nested: bool
    even: bool  # whole blocks (masks per segment) or not (masks per byte and element)


FORMATS = tuple(
    Format(dtype, nested, even)
    for dtype in (torch.float16, torch.bfloat16, torch.float32)
    for nested in (False, True)
    for even in (True, False)
)


@functools.cache
def newest_arch() -> int:
    """The newest compute capability the ptxas shipped with this Triton assembles for (its
    ``--gpu-name`` list; Triton picks its ptxas by target, so ask the one for the newest ones)."""
    from triton.backends.nvidia.compiler import get_ptxas

    usage = subprocess.run([get_ptxas(1000).path, "--help"], capture_output=True, text=True, check=True).stdout
    return max(int(arch) for arch in re.findall(r"'sm_(\d+)[a-z]?'", usage))


def targets() -> dict[int, str]:
    """What CI compiles for: the fleet, and the newest target this Triton knows."""
    newest = newest_arch()
    return {**FLEET, newest: FLEET.get(newest, f"the newest this Triton knows (sm_{newest})")}


def layout_for(fmt: Format, variant: int) -> Layout:
    """A weight of format ``fmt``; ``variant`` cycles the size through the tile table's rows and past
    2**31 elements (64-bit offsets), and the blocksize from 32 to 4096. Only numbers: compiling
    needs no weight of that size."""
    blocksize = (32, 64, 256, 4096)[variant % 4]
    # small (the last row), 20 MB packed (row 0), 12 MB packed (row 1), WIDE; paired with every blocksize.
    sizes = (96 * blocksize, 40 << 20, 24 << 20, 2**31 + (1 << 20))
    blocks = sizes[(variant + variant // 4) % 4] // blocksize
    n_elements = blocks * blocksize - (0 if fmt.even else 3)  # odd: the last byte holds one code
    n_blocks = -(-n_elements // blocksize)
    return Layout(torch.Size([n_elements]), fmt.dtype, blocksize, 256 if fmt.nested else 0, n_elements, n_blocks, False)


def compile_for(arch: int, layout: Layout, packed_dtype: torch.dtype = torch.uint8):
    """The kernel for ``layout``, compiled for compute capability ``arch`` (75 for sm_75, ...)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    # Stand-ins for the weight's tensors: the binding reads only their dtypes and alignment.
    def stand_in(dtype):
        return torch.empty(64, dtype=dtype)

    tensors = Tensors4bit(
        stand_in(packed_dtype),
        stand_in(torch.uint8 if layout.nested else torch.float32),
        stand_in(torch.float32),
        stand_in(torch.float32) if layout.nested else None,
        stand_in(torch.float32) if layout.nested else None,
        stand_in(torch.float32) if layout.nested else None,
    )
    # As a launch on that GPU would: programmatic dependent launch from sm_90 on.
    pdl = arch >= K.PDL_MIN_ARCH
    _, args, constexprs, options = kernel_arguments(tensors, layout, stand_in(layout.dtype), False, pdl)
    fn = K.dequantize_4bit_kernel
    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    kwargs = {**constexprs, **options}
    # Triton's launch path, JITFunction.run, as far as the compile: bind, specialize, pack, compile.
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, parsed = binder(*args, **kwargs)
    parsed, signature, constants, attrs = fn._pack_args(backend, kwargs, bound, specialization, parsed)
    with K.TRITON_LOCK:  # code generation reads triton.language, which an interpreted launch patches
        return triton.compile(ASTSource(fn, signature, constants, attrs), target=target, options=parsed.__dict__)


def main(argv=None) -> int:
    archs = [int(a) for a in (sys.argv[1:] if argv is None else argv)] or list(targets())
    failed = 0
    for arch in archs:
        for variant, fmt in enumerate(FORMATS):
            name = f"sm_{arch} {str(fmt.dtype)[6:]:8s} {'nested' if fmt.nested else 'flat':6s} "
            name += "even" if fmt.even else "odd"
            try:
                compiled = compile_for(arch, layout_for(fmt, variant))
                print(f"{name}  OK  ({len(compiled.asm['cubin'])} bytes of cubin)")
            except Exception as error:  # report every target, then fail
                failed += 1
                print(f"{name}  FAILED: {type(error).__name__}: {error}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
