"""The one Triton kernel: a bitsandbytes 4-bit weight (NF4 or FP4) to fp16/bf16/fp32 in one launch.

Both quantization levels happen in the same program, with bitsandbytes' roundings (one per line):

    absmax[b] = fp32(code2[absmax_u8[b]] * absmax2[b // blocksize2]) + offset   # nested only
    out[i]    = T(code[nibble(i)] * absmax[i // blocksize])                     # high nibble first

bitsandbytes rounds the nested product before adding the offset; a fused multiply-add would not,
so every launch passes ``enable_fp_fusion=False`` (see ``launch_options``).

Each program owns ``ROWS`` whole quantization blocks: a ``[ROWS, BLOCKSIZE // 2]`` tile of packed
bytes whose row ``r`` shares one scale, decoded once per row and broadcast.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction


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
    ROWS: tl.constexpr,  # quantization blocks per program (a power of two)
    BF16_RNE: tl.constexpr,  # round fp32 -> bf16 by hand: the interpreter's cast truncates
    EVICT: tl.constexpr,  # eviction policy for the streamed weight and output ("" or "evict_first")
):
    HALF: tl.constexpr = BLOCKSIZE // 2
    packed_ptr = packed_ptr.to(tl.pointer_type(tl.uint8))
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_blocks

    if NESTED:
        index = tl.load(absmax_ptr + rows, mask=row_ok, other=0).to(tl.int32)
        scale = tl.load(code2_ptr + index, mask=row_ok, other=0.0) * tl.load(
            absmax2_ptr + rows // BLOCKSIZE2, mask=row_ok, other=0.0
        )
        scale = scale + tl.load(offset_ptr)
    else:
        scale = tl.load(absmax_ptr + rows, mask=row_ok, other=0.0)
    scale = scale[:, None]

    byte = rows[:, None] * HALF + tl.arange(0, HALF)[None, :]
    codes = tl.load(packed_ptr + byte, mask=byte < (n_elements + 1) // 2, other=0, eviction_policy=EVICT)
    # The 16-entry codebook stays in L1; masked-off bytes read entry 0, which is never stored.
    high = tl.load(code_ptr + (codes >> 4).to(tl.int32)) * scale
    low = tl.load(code_ptr + (codes & 15).to(tl.int32)) * scale
    # join puts each byte's pair side by side in one thread, so the reshape moves no data.
    vals = tl.reshape(tl.join(high, low), (ROWS, BLOCKSIZE))

    if BF16_RNE:
        # Round to nearest, ties to even, on the fp32 bits; NaN stays a quiet NaN.
        bits = vals.to(tl.uint32, bitcast=True)
        bits = tl.where(vals != vals, 0x7FC00000, bits + 0x7FFF + ((bits >> 16) & 1))
        result = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        result = vals.to(out_ptr.dtype.element_ty)

    elem = rows[:, None] * BLOCKSIZE + tl.arange(0, BLOCKSIZE)[None, :]
    tl.store(out_ptr + elem, result, mask=elem < n_elements, eviction_policy=EVICT)


# The same source, run by Triton's CPU interpreter: CPU tensors go through the very kernel above.
interpreted_kernel = (
    dequantize_4bit_kernel
    if isinstance(dequantize_4bit_kernel, InterpretedFunction)
    else InterpretedFunction(dequantize_4bit_kernel.fn)
)


# --- Tile shape -----------------------------------------------------------------------------------
# Speed only: every choice below is bit-exact. Picked by benchmarks/sweep_tiles.py on an H100
# (results in benchmarks/results/); the interpreter wants few, large programs instead.
GPU_TILES = (
    # (largest packed size in bytes, packed bytes per program, num_warps)
    (1 << 20, 1024, 4),
    (None, 2048, 4),
)
INTERPRETER_TILE_BYTES = 1 << 16
EVICT_POLICY = ""


def tile_shape(n_bytes: int, blocksize: int, interpreted: bool) -> tuple[int, int]:
    """(ROWS, num_warps) for a weight of ``n_bytes`` packed bytes quantized in ``blocksize`` blocks."""
    if interpreted:
        target, num_warps = INTERPRETER_TILE_BYTES, 1
    else:
        target, num_warps = next((t, w) for limit, t, w in GPU_TILES if limit is None or n_bytes <= limit)
    return max(1, target // (blocksize // 2)), num_warps


def launch_options(num_warps: int) -> dict:
    # fp fusion off: the nested absmax must round the product before adding the offset.
    return {"num_warps": num_warps, "enable_fp_fusion": False}
