"""Compiles the kernel for GPUs this machine doesn't have: Triton's ahead-of-time path
(``triton.compile`` with a ``GPUTarget``, through ptxas to a cubin), no GPU needed. CI runs it for
every GPU a runner fleet has (``tests/test_targets.py``), so a change that breaks a T4 fails a PR on
a hosted runner instead of on the T4.

    python -m nf4kernel.targets          # the fleet and the newest target, every format: OK or the error
    python -m nf4kernel.targets 75 120   # some compute capabilities

It prints a table, a row per target and format as each is compiled: the target, the output dtype,
flat or nested, whole blocks (even) or not (odd), then OK and the cubin's size, or FAILED and the
error.

The arguments are typed and specialized by Triton's own launch binding for that target (pointer
dtypes and alignment, int32 or int64 counts, constexprs), so what is compiled is what a launch on
that GPU compiles.

Exit 0: every target compiled. 1: one or more failed. 4: no torch or Triton here, said in one
line. 2: bad arguments, said in one line before
anything is compiled: a compute capability that is no whole number, or one the ptxas Triton uses for
it doesn't assemble for (``sm_999``: LLVM, given a processor it doesn't know, can abort the process).
"""

from __future__ import annotations

import argparse
import functools
import re
import subprocess
import sys
from typing import NamedTuple

try:
    import torch
    import triton
except ImportError as missing:  # run as a program where torch or Triton isn't installed: say so, exit 4
    if __name__ != "__main__":
        raise
    print(
        f"python -m nf4kernel.targets: needs {missing.name}, which {sys.executable} can't import: run it where "
        "nf4kernel is installed with torch and Triton (in a checkout: .nox/torch/bin/python) (exit 4)",
        file=sys.stderr,
    )
    raise SystemExit(4) from None

from . import kernel as K
from .launch import arguments
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
def _ptxas_archs(path: str) -> frozenset[int]:
    """The compute capabilities a ptxas assembles for: its ``--gpu-name`` list."""
    usage = subprocess.run([path, "--help"], capture_output=True, text=True, check=True).stdout
    return frozenset(int(arch) for arch in re.findall(r"'sm_(\d+)[a-z]?'", usage))


def assembles(arch: int) -> bool:
    """Whether the ptxas Triton picks for ``arch`` (it picks by target) assembles for it: a target
    compiles, or fails with Triton's error, only then; another can abort the process in LLVM."""
    from triton.backends.nvidia.compiler import get_ptxas

    if not 0 < arch < 10_000:
        return False
    return arch in _ptxas_archs(get_ptxas(arch).path)


@functools.cache
def newest_arch() -> int:
    """The newest compute capability the ptxas shipped with this Triton assembles for (its
    ``--gpu-name`` list; Triton picks its ptxas by target, so ask the one for the newest ones)."""
    from triton.backends.nvidia.compiler import get_ptxas

    return max(_ptxas_archs(get_ptxas(1000).path))


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
    _, args, constexprs, options = arguments(tensors, layout, stand_in(layout.dtype), False, pdl)
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


STATUSES = ("OK", "FAILED")


def cells(arch: int, fmt: Format) -> tuple[str, str, str, str]:
    """A row's leading columns: the target, the output dtype, flat or nested, even or odd."""
    dtype = str(fmt.dtype).removeprefix("torch.")
    return f"sm_{arch}", dtype, "nested" if fmt.nested else "flat", "even" if fmt.even else "odd"


def aligner(rows: list[tuple[str, ...]]):
    """A function that joins a row's cells, each padded to the widest of its column in ``rows``, two
    spaces apart: the columns line up whatever the targets (sm_75 or sm_120) and formats."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return lambda row: "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))


def compile_row(arch: int, variant: int, fmt: Format) -> tuple[str, list[str]]:
    """(status, detail) of compiling one format for one target: the detail's first line ends the
    row; an error's further lines (ptxas's output, say) follow it, indented under the table."""
    try:
        compiled = compile_for(arch, layout_for(fmt, variant))
    except Exception as error:  # report every target, then fail
        first, *more = str(error).strip().splitlines() or [""]
        return "FAILED", [f"{type(error).__name__}: {first}", *(f"    {line}" for line in more)]
    return "OK", [f"({len(compiled.asm['cubin'])} bytes of cubin)"]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, before anything is compiled
        self.exit(2, f"{self.prog}: error: {' '.join(message.splitlines())}\n")


def main(argv=None) -> int:
    parser = _Parser(prog="python -m nf4kernel.targets", description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument(
        "archs",
        nargs="*",
        type=int,
        metavar="CC",
        help="compute capabilities, 75 for sm_75 (default: what CI compiles for)",
    )
    archs = parser.parse_args(argv).archs or list(targets())
    unknown = [arch for arch in archs if not assembles(arch)]
    if unknown:
        from triton.backends.nvidia.compiler import get_ptxas

        known = sorted(a for a in _ptxas_archs(get_ptxas(0).path) | _ptxas_archs(get_ptxas(1000).path) if assembles(a))
        parser.error(
            f"no target sm_{unknown[0]}: this Triton's ptxas assembles for {', '.join(map(str, known))} (75 for sm_75)"
        )
    rows = [(arch, variant, fmt) for arch in archs for variant, fmt in enumerate(FORMATS)]
    # Widths from every row's cells and either status, known before the first compile: rows print as they come.
    line = aligner([(*cells(arch, fmt), status) for arch, _, fmt in rows for status in STATUSES])
    failed = 0
    for arch, variant, fmt in rows:
        status, (detail, *more) = compile_row(arch, variant, fmt)
        failed += status == "FAILED"
        print("\n".join([f"{line((*cells(arch, fmt), status))}  {detail}", *more]), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
