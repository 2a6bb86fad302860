"""The kernel's launch through Triton's own path, from a checked weight's tensors and layout: its grid,
arguments and options (``arguments``), the launch (``launch``), and the compiled op's launch, which
repeats a compiled kernel directly (``launch_for_op``). The eager entry and its plans are in
``launch_cache``; the private handles a direct launch uses are in ``_triton_compat``.
"""

from __future__ import annotations

import functools

import torch

from . import _triton_compat as compat
from . import kernel as K
from .quant_state import Layout, Tensors4bit


def geometry(layout: Layout, interpreted: bool, pdl: bool = False, tile: K.Tile | None = None):
    """(grid, tile, constexprs) for a weight of this layout: no tensor needed, so tests can ask for
    any size. ``pdl``: launched as a programmatic dependent launch (``kernel.pdl_for``). ``tile``:
    the tile table's (``kernel.tile_shape``) unless given (the sweep's variants, ``kernel.tile_of``)."""
    t = tile or K.tile_shape((layout.n_elements + 1) // 2, layout.blocksize, layout.dtype.itemsize, interpreted)
    n_segments = -(-layout.n_elements // (2 * t.cols))
    grid = (-(-n_segments // (t.rows * t.iters)),)
    constexprs = {
        "BLOCKSIZE": layout.blocksize,
        "BLOCKSIZE2": max(layout.blocksize2, 1),
        "NESTED": layout.nested,
        "ROWS": t.rows,
        "COLS": t.cols,
        "ITERS": t.iters,
        "EVEN": layout.n_elements % layout.blocksize == 0,
        # 64-bit offsets once the grid's last element index (grid * 2 * bytes - 1) reaches 2**31 - 1;
        # below that, no index the kernel forms can wrap in int32 (see kernel.tile_indices).
        "WIDE": grid[0] * 2 * t.bytes >= 2**31,
        "BF16_RNE": interpreted and layout.dtype == torch.bfloat16,
        "EVICT": t.evict,
        "PDL": K.PDL_MODE if pdl else 0,
    }
    return grid, t, constexprs


def arguments(
    tensors: Tensors4bit,
    layout: Layout,
    out: torch.Tensor,
    interpreted: bool,
    pdl: bool = False,
    tile: K.Tile | None = None,
):
    """(grid, positional args, constexprs, options) for one launch, with programmatic dependent
    launch where ``pdl``; ``tile`` as for ``geometry``."""
    grid, t, constexprs = geometry(layout, interpreted, pdl, tile)
    absmax = tensors.absmax
    # A flat state has no second level: its slots get a valid pointer that the kernel never reads.
    args = (
        tensors.packed,
        absmax,
        tensors.code,
        absmax if tensors.code2 is None else tensors.code2,
        absmax if tensors.absmax2 is None else tensors.absmax2,
        absmax if tensors.offset is None else tensors.offset,
        out,
        layout.n_elements,
        layout.n_blocks,
    )
    return grid, args, constexprs, K.launch_options(t.num_warps, pdl)


def kernel_arguments(
    tensors: Tensors4bit, layout: Layout, out: torch.Tensor, interpreted: bool, pdl: bool = False, **tile
):
    """``arguments`` with the tile's choices as keywords (num_warps, iters, evict, vector; the table's
    for any not given; the interpreter's tile ignores them): the entry ``studies.sweep`` and
    ``benchmarks/_triton_op.py`` call."""
    chosen = None
    if tile and not interpreted:
        table = K.tile_shape((layout.n_elements + 1) // 2, layout.blocksize, layout.dtype.itemsize, interpreted)
        choices = {"num_warps": table.num_warps, "iters": table.iters, "evict": table.evict, "vector": table.vector}
        unknown = set(tile) - set(choices)
        if unknown:
            raise TypeError(f"kernel_arguments: no tile choice {sorted(unknown)}")
        chosen = K.tile_of(layout.blocksize, layout.dtype.itemsize, **{**choices, **tile})
    return arguments(tensors, layout, out, interpreted, pdl, chosen)


@functools.cache
def pdl_on(index: int) -> bool:
    """Whether launches on CUDA device ``index`` use programmatic dependent launch (read once)."""
    major, minor = torch.cuda.get_device_capability(index)
    return K.pdl_for(10 * major + minor)


def launch(tensors: Tensors4bit, layout: Layout, out: torch.Tensor):
    """Launch through Triton's own path. Returns (compiled kernel or None in the interpreter, grid,
    constexprs): what a plan needs to repeat the launch."""
    device = out.device
    interpreted = device.type == "cpu" or K.dequantize_4bit_kernel is K.interpreted_kernel
    kernel = K.interpreted_kernel if interpreted else K.dequantize_4bit_kernel
    pdl = not interpreted and pdl_on(device.index)
    grid, args, constexprs, options = arguments(tensors, layout, out, interpreted, pdl)
    compiled = None
    # The interpreter's global state, and Triton's JIT (it may compile, reading triton.language while
    # an interpreted launch has it patched): one launch at a time (launch_cache's docstring, "Threads").
    with K.TRITON_LOCK:
        if device.type == "cuda":
            with torch.cuda.device(device):
                compiled = kernel[grid](*args, **constexprs, **options)
        else:
            kernel[grid](*args, **constexprs, **options)
    return (None if interpreted else compiled), grid, constexprs


def kernel_pointers(tensors: Tensors4bit) -> tuple[int, ...]:
    """The kernel's six pointer arguments, in its order; a flat state passes absmax for the last three
    (never read), as ``arguments`` does."""
    fill = tensors.absmax.data_ptr()
    return tuple(fill if t is None else t.data_ptr() for t in tensors)


def state_pointers(tensors: Tensors4bit) -> tuple[int, ...]:
    """The data pointers of the caller's tensors a plan reads: the weight and absmax, and where nested
    code2, absmax2 and the offset (a planned call compares them first: ``launch_cache.quick_key``)."""
    return tuple(t.data_ptr() for t in tensors if t is not None and t is not tensors.code)


def direct_launcher(compiled, grid: tuple, layout: Layout, constexprs: dict, pointers: tuple):
    """``launch(stream, out_pointer)`` repeating ``compiled`` on ``pointers`` (``kernel_pointers``),
    or None where it can't be launched directly (``_triton_compat.direct_launcher``)."""
    return compat.direct_launcher(
        compiled, grid[0], (layout.n_elements, layout.n_blocks, *constexprs.values()), pointers
    )


_BY_LAYOUT: dict[tuple, tuple] = {}  # launch_for_op's compiled kernels: key -> (compiled, grid, constexprs)


def op_key(tensors: Tensors4bit, layout: Layout, out: torch.Tensor, pointers: tuple) -> tuple:
    """What one compiled kernel serves (``launch_for_op``): the layout (the integer arguments and
    constexprs), the device, each tensor's dtype (a pointer's type) and each pointer's 16-byte
    alignment, ``out``'s included. Calls that differ only in their tensors' addresses share it."""
    return (
        layout,
        out.device.index,
        tuple(None if t is None else t.dtype for t in tensors),
        tuple(p % 16 == 0 for p in pointers),
        out.data_ptr() % 16 == 0,
    )


def launch_for_op(tensors: Tensors4bit, layout: Layout, out: torch.Tensor) -> None:
    """The launch of ``torch.ops.nf4kernel.dequantize_4bit`` (what ``torch.compile`` and CUDA graphs
    run, the inputs checked while tracing): Triton's own launch the first time for a kernel, then that
    compiled kernel, found by ``op_key``, launched directly, as a plan launches. (Through Triton's
    launch path every call, a compiled QLoRA step on an H200 ran slower than stock bitsandbytes'.)"""
    device = out.device
    streams = compat.stream_reader()
    if device.type != "cuda" or streams is None or not compat.direct_launches() or compat.hooks_active():
        launch(tensors, layout, out)
        return
    pointers = kernel_pointers(tensors)
    key = op_key(tensors, layout, out, pointers)
    known = _BY_LAYOUT.get(key)
    if known is None:
        _BY_LAYOUT[key] = launch(tensors, layout, out)
        return
    compiled, grid, constexprs = known
    fast = direct_launcher(compiled, grid, layout, constexprs, pointers)
    if fast is None:
        launch(tensors, layout, out)
        return
    try:
        with torch.cuda.device(device.index):
            fast(streams[0](device.index), out.data_ptr())
    except TypeError:  # this Triton's launcher takes other arguments: it checked before launching
        compat.refused()
        launch(tensors, layout, out)
