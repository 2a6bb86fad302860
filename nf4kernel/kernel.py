"""The one Triton kernel: a bitsandbytes 4-bit weight (NF4 or FP4) to fp16/bf16/fp32 in one launch.

Both quantization levels happen in the same program, with bitsandbytes' roundings (one per line):

    absmax[b] = fp32(code2[absmax_u8[b]] * absmax2[b // blocksize2]) + offset   # nested only
    out[i]    = T(code[nibble(i)] * absmax[i // blocksize])                     # high nibble first

bitsandbytes rounds the nested product before adding the offset; a fused multiply-add would not,
so every launch passes ``enable_fp_fusion=False`` (see ``launch_options``).

A program handles ``ITERS`` tiles of ``[ROWS, COLS]`` packed bytes. A row (a *segment*) lies inside
one quantization block, so its scale is decoded once and broadcast along it.
"""

from __future__ import annotations

import functools
import json
import math
import os
import threading
import types
from typing import NamedTuple

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction


@triton.jit
def dequantize_4bit_kernel(
    packed_ptr,  # packed codes, two per byte, high nibble first; any storage dtype (it is bytes)
    absmax_ptr,  # fp32 [n_blocks], or uint8 [n_blocks] indices into code2 when NESTED
    code_ptr,  # fp32 [16]: the state's codebook (NF4 or FP4)
    code2_ptr,  # fp32 [256] (NESTED only; otherwise any valid pointer, never read)
    absmax2_ptr,  # fp32 [ceil(n_blocks / BLOCKSIZE2)] (NESTED only)
    offset_ptr,  # fp32 [1] (NESTED only)
    out_ptr,  # fp16 / bf16 / fp32 [n_elements]
    n_elements,
    n_blocks,
    BLOCKSIZE: tl.constexpr,  # elements per absmax (32 ... 4096, a power of two)
    BLOCKSIZE2: tl.constexpr,  # absmax values per absmax2 (NESTED only)
    NESTED: tl.constexpr,
    ROWS: tl.constexpr,  # segments per tile
    COLS: tl.constexpr,  # packed bytes per segment: a power of two dividing BLOCKSIZE // 2
    ITERS: tl.constexpr,  # tiles per program
    EVEN: tl.constexpr,  # n_elements % BLOCKSIZE == 0: whole blocks, so masks are per segment
    WIDE: tl.constexpr,  # offsets need 64 bits
    BF16_RNE: tl.constexpr,  # round fp32 -> bf16 by hand: the interpreter's cast truncates
    EVICT: tl.constexpr,  # eviction policy for the streamed weight and output ("" or "evict_first")
    PDL: tl.constexpr,  # programmatic dependent launch (sm_90 on): 0 off, 1 on
):
    if PDL:
        # Before any memory access: the kernel before this one on the stream may have written what
        # this one reads, or read what it writes; wait until it is done and its writes are visible.
        gdc_wait()
    SEGMENTS: tl.constexpr = BLOCKSIZE // 2 // COLS  # segments per quantization block
    packed_ptr = packed_ptr.to(tl.pointer_type(tl.uint8))
    # The codebook lives in registers/shared memory: a gather from it keeps every value in the
    # thread that loaded its byte (an L1 load would pick its own layout and shuffle through shared).
    codebook = tl.load(code_ptr + tl.arange(0, 16))
    program = tl.program_id(0)
    if WIDE:
        program = program.to(tl.int64)
    for i in tl.static_range(ITERS):
        block, block_ok, byte, byte_ok, elem, elem_ok = tile_indices(
            program, i, n_elements, n_blocks, SEGMENTS, ROWS, COLS, ITERS, EVEN
        )
        if NESTED:
            index = tl.load(absmax_ptr + block, mask=block_ok, other=0).to(tl.int32)
            scale = tl.load(code2_ptr + index, mask=block_ok, other=0.0) * tl.load(
                absmax2_ptr + block // BLOCKSIZE2, mask=block_ok, other=0.0
            )
            scale = scale + tl.load(offset_ptr)
        else:
            scale = tl.load(absmax_ptr + block, mask=block_ok, other=0.0)

        codes = tl.load(packed_ptr + byte, mask=byte_ok, other=0, eviction_policy=EVICT)
        # join keeps each byte's two codes side by side in its thread, so the reshapes move no data.
        nibbles = tl.reshape(tl.join(codes >> 4, codes & 15), (ROWS * 2 * COLS,)).to(tl.int32)
        vals = tl.reshape(tl.gather(codebook, nibbles, 0), (ROWS, 2 * COLS)) * scale[:, None]

        if BF16_RNE:
            # Round to nearest, ties to even, on the fp32 bits; NaN stays a quiet NaN.
            bits = vals.to(tl.uint32, bitcast=True)
            bits = tl.where(vals != vals, 0x7FC00000, bits + 0x7FFF + ((bits >> 16) & 1))
            result = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
        else:
            result = vals.to(out_ptr.dtype.element_ty)

        tl.store(out_ptr + elem, result, mask=elem_ok, eviction_policy=EVICT)


@triton.jit
def packed_bytes(n_elements):
    """ceil(n_elements / 2), without forming ``n_elements + 1``: an odd count just below 2**31 is an
    int32 argument, and ``(n_elements + 1) // 2`` would wrap to a negative count (every byte masked).
    (``//``, not ``>> 1``: the interpreter holds counts from 2**31 to 2**32 as uint32 data of an int64
    type and shifts them as int32; the GPU types them int64.)"""
    return n_elements - n_elements // 2


@triton.jit
def tile_indices(
    program,
    i: tl.constexpr,
    n_elements,
    n_blocks,
    SEGMENTS: tl.constexpr,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
    ITERS: tl.constexpr,
    EVEN: tl.constexpr,
):
    """Every index of tile ``i`` of ``program``: (block [ROWS], block_ok, byte [ROWS, COLS], byte_ok,
    elem [ROWS, 2 * COLS], elem_ok). A function of its own so that tests can run it at any size.

    Overflow: ``program`` is int64 when the launch is WIDE (the host sets WIDE when the last index of
    the grid reaches 2**31); otherwise the largest value formed here is that last index, below 2**31.
    ``n_elements`` is int64 from 2**31 on (Triton's argument typing) and only compared or halved."""
    segment = (program * ITERS + i) * ROWS + tl.arange(0, ROWS)
    block = segment // SEGMENTS
    block_ok = block < n_blocks
    byte = segment[:, None] * COLS + tl.arange(0, COLS)[None, :]
    elem = segment[:, None] * (2 * COLS) + tl.arange(0, 2 * COLS)[None, :]
    if EVEN:
        # Whole blocks: a segment is all in or all out, so the masks are per segment.
        byte_ok = block_ok[:, None]
        elem_ok = block_ok[:, None]
    else:
        byte_ok = byte < packed_bytes(n_elements)
        elem_ok = elem < n_elements
    return block, block_ok, byte, byte_ok, elem, elem_ok


def interpreted(jit_fn) -> InterpretedFunction:
    """``jit_fn`` for Triton's CPU interpreter, with the ``@triton.jit`` functions it calls by global
    name (at any depth) interpreted too: an interpreted kernel can't call a compiled-mode helper.

    Each module's globals are copied once, with its jit functions swapped for interpreted copies
    that run in that copy; the modules themselves are left as they are (the interpreter also adds
    names to the globals it runs in, so it gets the copies). Under ``TRITON_INTERPRET=1``
    ``triton.jit`` already made them interpreted."""
    if isinstance(jit_fn, InterpretedFunction):
        return jit_fn
    return _interpreted_in({}, jit_fn)


def _interpreted_in(scopes: dict, jit_fn) -> InterpretedFunction:
    fn = jit_fn.fn
    home = fn.__globals__
    scope = scopes.get(id(home))
    if scope is None:
        scope = scopes[id(home)] = dict(home)
        for name, value in home.items():
            if isinstance(value, JITFunction):
                scope[name] = _interpreted_in(scopes, value)
    copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    return InterpretedFunction(copy)


# The same source, run by Triton's CPU interpreter: CPU tensors go through the very kernel above.
interpreted_kernel = interpreted(dequantize_4bit_kernel)

# Triton's interpreter is not thread-safe: for the length of a launch it patches triton.language
# module-wide and keeps the grid in one module-level builder, so two interpreted launches at once
# run each other's programs or call unpatched functions, and a compile at the same time (which
# reads triton.language) sees the patched one. Every interpreted launch and every launch or compile
# of this kernel through Triton's JIT holds this lock. Planned GPU launches (launch_cache) don't
# touch Triton's Python side and take no lock. Reentrant: a launch hook may dequantize.
TRITON_LOCK = threading.RLock()


# --- Tile shape -----------------------------------------------------------------------------------
# Speed only: every choice is bit-exact, on every GPU. A tile gives each thread 16 output bytes (one
# 128-bit store) times ``vector``, from the packed bytes it loaded itself, so no value crosses threads
# between load and store. Picked by studies.sweep on an H200: large weights stream best
# through small programs that store 64 bytes per thread and evict early; smaller ones with 4 warps.
#
# On GPUs it was not tuned on (a T4, an A10, an L4, ...) the same table applies: the results are the
# same bits, and the speed is whatever these choices give there (CI compiles every row for sm_75 to
# the newest target Triton knows: tests/test_targets.py). A runner's owner tunes it for their GPU with
# one command, the sweep, and points NF4KERNEL_TILES at what it wrote:
#
#     python -m studies.sweep --json tiles.json && export NF4KERNEL_TILES=$PWD/tiles.json   # from a checkout
#
# (read once per process, at the first GPU launch; see gpu_tiles).
GPU_TILES = (
    # (packed bytes at least, num_warps, tiles per program, eviction policy, 16-byte stores per thread)
    # Measured per row (kernel only, graph-replayed; benchmarks/results/issue10/sweep-h200.json, and
    # the run before it, whose log is in issue10/README.md): the two H200s differed by up to 6%.
    (16 << 20, 2, 1, "evict_first", 4),  # 14336x4096 bf16: 38.05 us, 92.9% of copy (37.77 us, 94.0%)
    (8 << 20, 4, 1, "", 4),  # 8192x2048 fp16: 11.19 us, 90.2% of copy (10.56 us, 96.1%)
    (0, 4, 2, "", 1),  # 4096x1024 bf16: 3.86 us (3.37 us): too small to fill the GPU, any tile does
)
TILES_ENV = "NF4KERNEL_TILES"
EVICTS = ("", "evict_first", "evict_last")
INTERPRETER_TILE_BYTES = 1 << 16  # the interpreter wants few, large programs


class Tile(NamedTuple):
    rows: int
    cols: int
    iters: int
    num_warps: int
    evict: str
    vector: int  # 16-byte output stores per thread

    @property
    def bytes(self) -> int:  # packed bytes per program
        return self.rows * self.cols * self.iters


def tile_shape(n_bytes: int, blocksize: int, out_size: int, interpreted: bool) -> Tile:
    """The tile for ``n_bytes`` packed bytes in ``blocksize`` blocks, dequantized to ``out_size``-byte
    values: the interpreter's, or the tile table's row for that size."""
    if interpreted:
        return tile_of(blocksize, out_size, 1, 1, "", 1, tile_bytes=INTERPRETER_TILE_BYTES)
    num_warps, iters, evict, vector = next(t[1:] for t in gpu_tiles() if n_bytes >= t[0])
    return tile_of(blocksize, out_size, num_warps, iters, evict, vector)


def tile_of(
    blocksize: int, out_size: int, num_warps: int, iters: int, evict: str, vector: int, tile_bytes: int = 0
) -> Tile:
    """The tile of one row's choices (num_warps, tiles per program, eviction policy, 16-byte output
    stores per thread) for ``blocksize`` blocks of ``out_size``-byte values. The sweep builds its
    variants with it and launches them through ``launch.arguments``."""
    # 16 output bytes per thread (one 128-bit store), times ``vector``.
    tile_bytes = tile_bytes or (8 // out_size) * 32 * num_warps * vector
    cols = min(blocksize // 2, tile_bytes)
    return Tile(tile_bytes // cols, cols, iters, num_warps, evict, vector)


@functools.cache
def gpu_tiles() -> tuple[tuple[int, int, int, str, int], ...]:
    """The tile table in use: GPU_TILES, or the one a sweep's JSON (named by NF4KERNEL_TILES) gives."""
    path = os.environ.get(TILES_ENV)
    if not path:
        return GPU_TILES
    try:
        with open(path) as f:
            sweep = json.load(f)
    except (OSError, ValueError) as error:
        raise ValueError(f"nf4kernel: {TILES_ENV}={path} is not a JSON file the sweep wrote: {error}") from None
    return tiles_from_sweep(sweep, source=f"{TILES_ENV}={path}")


def tiles_from_sweep(sweep: dict, source: str = "the sweep") -> tuple[tuple[int, int, int, str, int], ...]:
    """A tile table from ``studies.sweep --json``'s output: for each swept weight, its
    fastest (num_warps, tiles per program, eviction, stores per thread; a sweep from before the
    last was swept gives 1) applies from its packed size up to the next
    larger swept weight; the smallest one's applies below it too."""
    best: dict[int, tuple[float, int, int, str]] = {}
    for result in sweep.get("results") or () if isinstance(sweep, dict) else ():
        n_bytes = (math.prod(result["shape"]) + 1) // 2
        row = (float(result["us"]), *_tile_row(result, source))
        best[n_bytes] = min(best.get(n_bytes, row), row)
    if not best:
        raise ValueError(f"nf4kernel: {source} has no results to tune the tile table from")
    sizes = sorted(best, reverse=True)
    return tuple((0 if size == sizes[-1] else size, *best[size][1:]) for size in sizes)


def _tile_row(result: dict, source: str) -> tuple[int, int, str, int]:
    num_warps, iters, evict = result.get("num_warps"), result.get("iters"), result.get("evict")
    vector = result.get("vector", 1)
    if num_warps not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"nf4kernel: {source}: num_warps must be a power of two up to 32, got {num_warps!r}")
    if isinstance(iters, bool) or not isinstance(iters, int) or not 1 <= iters <= 64:
        raise ValueError(f"nf4kernel: {source}: iters must be an int from 1 to 64, got {iters!r}")
    if evict not in EVICTS:
        raise ValueError(f"nf4kernel: {source}: evict must be one of {EVICTS}, got {evict!r}")
    if vector not in (1, 2, 4, 8):
        raise ValueError(f"nf4kernel: {source}: vector must be 1, 2, 4 or 8, got {vector!r}")
    return num_warps, iters, evict, vector


# --- Programmatic dependent launch ----------------------------------------------------------------
# Launched with PDL, the next kernel's programs are scheduled as this one's last ones exit, instead
# of after the launch gap: 14336x4096 bf16 back to back went from 39.29 to 38.00 us on an H200, as
# fast as the kernel replayed from a CUDA graph (37.91 us; benchmarks/results/issue10, the results
# branch holding its files). Every program waits (``gdc_wait``) for the kernel before it to finish
# before touching memory, whatever that kernel is, so the order of writes and reads is the stream's
# as without PDL. The kernel's ``PDL`` is 0 (off) or 1 (wait; the next kernel is scheduled as
# programs exit). Earlier triggers (studies/probes/pdl_probe.py builds them around this kernel) are
# probes, not shipped. Hopper (sm_90) on; ``NF4KERNEL_PDL=0`` turns it off.
PDL_MODE = 1
PDL_MIN_ARCH = 90
PDL_ENV = "NF4KERNEL_PDL"


def pdl_for(arch: int) -> bool:
    """Whether launches for compute capability ``arch`` (90 for sm_90) use PDL."""
    return arch >= PDL_MIN_ARCH and os.environ.get(PDL_ENV, "1") != "0"


def launch_options(num_warps: int, pdl: bool = False) -> dict:
    # fp fusion off: the nested absmax must round the product before adding the offset.
    options = {"num_warps": num_warps, "enable_fp_fusion": False}
    if pdl:
        options["launch_pdl"] = True
    return options
