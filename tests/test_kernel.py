"""The kernel's index arithmetic at sizes the CPU can't allocate (near and past 2**31 elements), run
through the kernel's own ``tile_indices`` in Triton's interpreter; the tile table and its tuning."""

from __future__ import annotations

import json

import pytest
import torch
import triton
import triton.language as tl

from nf4kernel import kernel as K
from nf4kernel import launch
from nf4kernel.kernel import packed_bytes, tile_indices
from nf4kernel.quant_state import Layout


@triton.jit
def _probe(
    program_ptr,
    n_elements,
    n_blocks,
    byte_out,
    byte_ok_out,
    elem_out,
    elem_ok_out,
    SEGMENTS: tl.constexpr,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
    ITERS: tl.constexpr,
    EVEN: tl.constexpr,
    WIDE: tl.constexpr,
):
    # The kernel's own start (program id, widened when WIDE) for a program id given as data, so that
    # one program near the end of a grid of millions can run alone; then its indices, as int64.
    program = tl.load(program_ptr)
    if WIDE:
        program = program.to(tl.int64)
    rows = tl.arange(0, ROWS)[:, None]
    for i in tl.static_range(ITERS):
        _, _, byte, byte_ok, elem, elem_ok = tile_indices(
            program, i, n_elements, n_blocks, SEGMENTS, ROWS, COLS, ITERS, EVEN
        )
        at = i * ROWS * COLS + rows * COLS + tl.arange(0, COLS)[None, :]
        tl.store(byte_out + at, byte.to(tl.int64))
        tl.store(byte_ok_out + at, byte_ok.to(tl.int8))
        at = i * ROWS * 2 * COLS + rows * 2 * COLS + tl.arange(0, 2 * COLS)[None, :]
        tl.store(elem_out + at, elem.to(tl.int64))
        tl.store(elem_ok_out + at, elem_ok.to(tl.int8))


_interpreted_probe = K.interpreted(_probe)

# Counts at the int32 edges: odd just below 2**31 (where (n + 1) // 2 wrapped), the largest even
# int32, past it (int64 arguments), and past 2**32; one not a multiple of the blocksize.
EDGE_COUNTS = [2**31 - 1, 2**31 - 2, 2**31 - 64 * 3, 2**31 + 1, 2**32 + 3, 2**31 - 1 - 4096]


def _expected(program, n_elements, n_blocks, t, constexprs):
    """The same indices in Python's unbounded ints."""
    segment = (program * t.iters + torch.arange(t.iters)[:, None]) * t.rows + torch.arange(t.rows)[None, :]
    segment = segment.reshape(t.iters, t.rows, 1).to(torch.int64)
    byte = segment * t.cols + torch.arange(t.cols)
    elem = segment * 2 * t.cols + torch.arange(2 * t.cols)
    if constexprs["EVEN"]:
        block_ok = segment // (constexprs["BLOCKSIZE"] // 2 // t.cols) < n_blocks
        return byte, block_ok.expand_as(byte), elem, block_ok.expand_as(elem)
    return byte, byte < (n_elements + 1) // 2, elem, elem < n_elements


@pytest.mark.parametrize("interpreted", [False, True], ids=["gpu-tiles", "interpreter-tiles"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("blocksize", [64, 4096])
@pytest.mark.parametrize("n_elements", EDGE_COUNTS)
def test_index_arithmetic_at_the_int32_edges(n_elements, blocksize, dtype, interpreted):
    n_blocks = -(-n_elements // blocksize)
    layout = Layout(torch.Size([n_elements]), dtype, blocksize, 0, n_elements, n_blocks, False)
    grid, t, constexprs = launch.geometry(layout, interpreted)
    # The grid covers the weight, and 64-bit offsets are used where an int32 one could wrap.
    assert grid[0] * 2 * t.bytes >= n_elements
    assert constexprs["WIDE"] == (grid[0] * 2 * t.bytes - 1 >= 2**31 - 1)
    # The program holding the last element, and the last of the grid: where masks and offsets end.
    last_byte = (n_elements + 1) // 2 - 1
    for program in sorted({last_byte // t.bytes, grid[0] - 1}):
        byte = torch.empty((t.iters, t.rows, t.cols), dtype=torch.int64)
        byte_ok = torch.empty_like(byte, dtype=torch.int8)
        elem = torch.empty((t.iters, t.rows, 2 * t.cols), dtype=torch.int64)
        elem_ok = torch.empty_like(elem, dtype=torch.int8)
        with K.TRITON_LOCK:
            _interpreted_probe[(1,)](
                torch.tensor([program], dtype=torch.int32),
                n_elements,
                n_blocks,
                byte,
                byte_ok,
                elem,
                elem_ok,
                SEGMENTS=blocksize // 2 // t.cols,
                ROWS=t.rows,
                COLS=t.cols,
                ITERS=t.iters,
                EVEN=constexprs["EVEN"],
                WIDE=constexprs["WIDE"],
            )
        want_byte, want_byte_ok, want_elem, want_elem_ok = _expected(program, n_elements, n_blocks, t, constexprs)
        assert torch.equal(byte, want_byte), f"a byte offset wrapped in program {program}"
        assert torch.equal(elem, want_elem), f"an element offset wrapped in program {program}"
        assert torch.equal(byte_ok.bool(), want_byte_ok), f"wrong byte mask in program {program}"
        assert torch.equal(elem_ok.bool(), want_elem_ok), f"wrong element mask in program {program}"
        if program == last_byte // t.bytes:  # the last byte is read, and the last element written
            assert want_byte_ok.reshape(-1)[last_byte % t.bytes]
            assert want_elem_ok.any()


@triton.jit
def _halve(n, out_ptr):
    tl.store(out_ptr, packed_bytes(n).to(tl.int64))


@pytest.mark.parametrize("n_elements", [2**31 - 1, 2**31 - 2, 2**31 + 1, 2**32 + 3, 1, 5])
def test_packed_bytes_is_ceil_half_without_overflow(n_elements):
    out = torch.empty(1, dtype=torch.int64)
    with K.TRITON_LOCK:
        K.interpreted(_halve)[(1,)](n_elements, out)
    assert out.item() == (n_elements + 1) // 2


# --- The tile table -------------------------------------------------------------------------------


def _sweep_json(path, rows):
    results = [
        {"shape": list(shape), "dtype": "torch.bfloat16", "num_warps": w, "iters": i, "evict": e, "us": us}
        for shape, w, i, e, us in rows
    ]
    path.write_text(json.dumps({"device": "NVIDIA T4", "copy_bandwidth": 3e11, "results": results}))
    return path


@pytest.fixture
def tiles_env(monkeypatch):
    """Sets NF4KERNEL_TILES for one test and forgets the table it loaded afterwards."""
    K.gpu_tiles.cache_clear()
    yield lambda path: monkeypatch.setenv(K.TILES_ENV, str(path))
    K.gpu_tiles.cache_clear()


def test_untuned_gpus_use_the_default_table(tiles_env, monkeypatch):
    monkeypatch.delenv(K.TILES_ENV, raising=False)
    assert K.gpu_tiles() == K.GPU_TILES
    assert K.tile_shape(64 << 20, 64, 2, interpreted=False).num_warps == K.GPU_TILES[0][1]


def test_a_sweep_tunes_the_table(tiles_env, tmp_path):
    # The fastest configuration of each swept weight applies from that weight's packed size up; the
    # smallest swept weight's applies to everything below it too.
    path = _sweep_json(
        tmp_path / "tiles.json",
        [
            ((14336, 4096), 8, 1, "", 50.0),
            ((14336, 4096), 2, 4, "evict_first", 40.0),
            ((4096, 1024), 4, 2, "", 9.0),
            ((4096, 1024), 1, 1, "", 12.0),
        ],
    )
    tiles_env(path)
    assert K.gpu_tiles() == ((14336 * 4096 // 2, 2, 4, "evict_first", 1), (0, 4, 2, "", 1))
    big = K.tile_shape(14336 * 4096 // 2, 64, 2, interpreted=False)
    assert (big.num_warps, big.iters, big.evict) == (2, 4, "evict_first")
    small = K.tile_shape(1024, 64, 2, interpreted=False)
    assert (small.num_warps, small.iters, small.evict) == (4, 2, "")
    assert K.tile_shape(1024, 64, 2, interpreted=True).num_warps == 1  # the interpreter's own


def test_a_sweep_with_stores_per_thread_sets_the_tile(tiles_env, tmp_path):
    # A sweep that tried several 16-byte stores per thread ("vector"): the fastest one's count is used,
    # and the tile holds that many times the packed bytes of one store per thread.
    path = tmp_path / "tiles.json"
    results = [
        {"shape": [14336, 4096], "num_warps": 2, "iters": 1, "evict": "evict_first", "vector": 4, "us": 38.0},
        {"shape": [14336, 4096], "num_warps": 2, "iters": 1, "evict": "evict_first", "vector": 1, "us": 39.0},
    ]
    path.write_text(json.dumps({"results": results}))
    tiles_env(path)
    assert K.gpu_tiles() == ((0, 2, 1, "evict_first", 4),)
    tile = K.tile_shape(14336 * 4096 // 2, 64, 2, interpreted=False)
    assert (tile.vector, tile.rows * tile.cols) == (4, 4 * 4 * 32 * 2)  # bf16: 4 packed bytes per store


@pytest.mark.parametrize(
    "content,problem",
    [
        ("not json", "not a JSON"),
        ('{"results": []}', "no results"),
        ('{"results": [{"shape": [64, 64], "num_warps": 3, "iters": 1, "evict": "", "us": 1}]}', "num_warps"),
        ('{"results": [{"shape": [64, 64], "num_warps": 4, "iters": 0, "evict": "", "us": 1}]}', "iters"),
        ('{"results": [{"shape": [64, 64], "num_warps": 4, "iters": 1, "evict": "never", "us": 1}]}', "evict"),
        ('{"results": [{"shape": [64, 64], "num_warps": 4, "iters": 1, "evict": "", "vector": 3, "us": 1}]}', "vector"),
    ],
)
def test_a_bad_tile_file_is_named(tiles_env, tmp_path, content, problem):
    path = tmp_path / "tiles.json"
    path.write_text(content)
    tiles_env(path)
    with pytest.raises(ValueError, match=f"{K.TILES_ENV}.*{problem}"):
        K.gpu_tiles()
