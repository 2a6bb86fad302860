"""The launch cache: the first call for a weight checks it and launches through Triton; later calls
for the same, unchanged weight launch the compiled kernel directly.

Host cost is most of a call on small weights (Triton's own launch path binds and specializes every
argument, about as long as the kernel runs), so a plan keeps what the first call worked out:

* It is keyed on the QuantState object (by id, with a weak reference so a freed state drops its
  plan and an id reused by a new object never matches).
* It is valid only while the weight is unchanged: every call re-reads the *key* (the data
  pointers, shapes, dtypes and blocksizes of the weight and its state) and compares it with the
  one the plan was made for. A weight or state tensor that was replaced, moved to another device
  or re-quantized has another key, and the call takes the checked path and makes a new plan.
* It holds integers and the compiled kernel, never a tensor: it pins nothing in memory.
"""

from __future__ import annotations

import weakref
from functools import partial
from operator import itemgetter

import torch
import triton

from . import kernel as K
from .quant_state import Layout, Tensors4bit, check_out, read, tensors_of

_PLANS: dict[int, Plan] = {}
_plain_tensors = torch._C.DisableTorchFunctionSubclass

_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_current_device = getattr(torch._C, "_cuda_getDevice", None)
_runtime_knobs = getattr(getattr(triton, "knobs", None), "runtime", None)
# Turned off for good if this Triton's launcher ever refuses the direct call (see Plan.launch).
_direct_launch = _raw_stream is not None
# The C launcher's argument layout under Triton 3.6's Python wrapper, read from its source; other
# versions go through the wrapper (CompiledKernel.run), whose signature is stable from 3.3 to 3.9.
_C_LAUNCH_LAYOUT = triton.__version__.startswith("3.6.")


def key_of(packed: torch.Tensor, state) -> tuple:
    """Everything a plan depends on, cheap to read: pointers, shapes, dtypes, blocksizes."""
    # Params4bit overrides __torch_function__, which makes each of these reads cost a microsecond
    # or two; they are plain reads of the tensor, so skip the override.
    with _plain_tensors():
        key = (
            packed.data_ptr(),
            packed.get_device(),
            packed.dtype,
            packed.shape,
            state.absmax.data_ptr(),
            state.code.data_ptr(),
            state.shape,
            state.dtype,
            state.blocksize,
            state.quant_type,
        )
    if state.nested:
        state2 = state.state2
        key += (state2.absmax.data_ptr(), state2.code.data_ptr(), state2.blocksize, state.offset.data_ptr())
    return key


def _hooks_active() -> bool:
    # Profilers (e.g. proton) hook Triton's launches; those calls keep Triton's own launch path.
    if _runtime_knobs is None:
        return False
    enter, exit_ = _runtime_knobs.launch_enter_hook, _runtime_knobs.launch_exit_hook
    return bool(getattr(enter, "calls", enter)) or bool(getattr(exit_, "calls", exit_))


def kernel_arguments(tensors: Tensors4bit, layout: Layout, out: torch.Tensor, interpreted: bool, **tile):
    """(grid, positional args, constexprs, options) for one launch. ``tile`` overrides the tuned
    num_warps / iters / evict (the sweep uses it)."""
    t = K.tile_shape((layout.n_elements + 1) // 2, layout.blocksize, layout.dtype.itemsize, interpreted, **tile)
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
        "WIDE": grid[0] * 2 * t.bytes >= 2**31,
        "BF16_RNE": interpreted and layout.dtype == torch.bfloat16,
        "EVICT": t.evict,
    }
    return grid, args, constexprs, K.launch_options(t.num_warps)


def launch(tensors: Tensors4bit, layout: Layout, out: torch.Tensor):
    """Launch through Triton's own path. Returns (compiled kernel or None in the interpreter, grid,
    constexprs): what a plan needs to repeat the launch."""
    device = out.device
    interpreted = device.type == "cpu" or K.dequantize_4bit_kernel is K.interpreted_kernel
    kernel = K.interpreted_kernel if interpreted else K.dequantize_4bit_kernel
    grid, args, constexprs, options = kernel_arguments(tensors, layout, out, interpreted)
    compiled = None
    if device.type == "cuda":
        with torch.cuda.device(device):
            compiled = kernel[grid](*args, **constexprs, **options)
    else:
        kernel[grid](*args, **constexprs, **options)
    return (None if interpreted else compiled), grid, constexprs


def direct_launcher(compiled, grid: int, layout: Layout, constexprs: dict):
    """``launch(key, out, stream)``: the compiled kernel launched with the raw pointers from ``key``,
    past Triton's argument binding; None where this Triton's launcher can't be called directly.

    Triton's launcher takes every kernel parameter in order, constexprs included. Pointers go as
    integers, which it passes through unchecked (a tensor would cost a driver query each)."""
    if compiled is None or not _direct_launch:
        return None
    run, function, metadata = compiled.run, compiled.function, compiled.packed_metadata
    # The kernel's pointers in its argument order, from their places in key_of's tuple: packed 0,
    # absmax 4, code 5, code2 11, absmax2 10, offset 13 (a flat state passes absmax for the last three).
    pick = itemgetter(0, 4, 5, 11, 10, 13) if layout.nested else itemgetter(0, 4, 5, 4, 4, 4)
    tail = (layout.n_elements, layout.n_blocks, *constexprs.values())
    c_launch = getattr(run, "launch", None)
    if (
        _C_LAUNCH_LAYOUT
        and c_launch is not None
        and getattr(run, "global_scratch_size", 1) == 0
        and getattr(run, "profile_scratch_size", 1) == 0
    ):
        # Triton 3.6's C entry under its Python CudaLauncher: no scratch to allocate, so call it.
        # (function, cooperative grid, PDL, global scratch, profile scratch, kernel metadata,
        #  launch metadata, enter hook, exit hook): fixed for the plan.
        fixed = (function, run.launch_cooperative_grid, run.launch_pdl, None, None, metadata, None, None, None)

        def launch(key, out, stream):
            c_launch(grid, 1, 1, stream, *fixed, *pick(key), out.data_ptr(), *tail)

        return launch

    def launch(key, out, stream):
        run(grid, 1, 1, stream, function, metadata, None, None, None, *pick(key), out.data_ptr(), *tail)

    return launch


class Plan:
    """One weight's launch, ready to repeat while its key is unchanged. Holds no tensor."""

    __slots__ = ("allocate", "device", "device_index", "fast", "key", "layout", "state_ref", "transposed")

    def __init__(self, state, key, layout: Layout, device: torch.device, fast):
        self.key = key
        self.layout = layout
        self.device = device
        self.device_index = device.index
        self.transposed = layout.transposed
        strides = torch.empty(layout.shape, device="meta").stride()
        # empty_strided costs half of empty here (no layout inference).
        self.allocate = partial(torch.empty_strided, layout.shape, strides, dtype=layout.dtype, device=device)
        self.fast = fast
        self.state_ref = weakref.ref(state, _forgetter(id(state)))

    def accepts(self, out) -> bool:
        layout = self.layout
        return (
            out.dtype == layout.dtype
            and out.shape == layout.shape
            and out.is_contiguous()
            and out.device == self.device
            and out.data_ptr() % 16 == 0  # the compiled kernel assumes the alignment it was built for
        )

    def launch(self, key, out) -> bool:
        """The direct launch; False where it can't be made (then Triton's own path launches)."""
        global _direct_launch
        fast = self.fast
        if fast is None or _hooks_active():
            return False
        index = self.device_index
        try:
            if _current_device() == index:
                fast(key, out, _raw_stream(index))
            else:
                with torch.cuda.device(index):
                    fast(key, out, _raw_stream(index))
        except TypeError:
            # This Triton's launcher takes other arguments; it checks them before launching, so
            # nothing ran. Use Triton's own path from now on.
            _direct_launch = False
            self.fast = None
            return False
        return True


def _forgetter(state_id: int):
    """Weak-reference callback: drops the plan of a state that is being freed."""

    def forget(ref, plans=_PLANS) -> None:  # bound now: module globals may be gone at exit
        plan = plans.get(state_id)
        if plan is not None and plan.state_ref is ref:
            del plans[state_id]

    return forget


def dequantize(packed: torch.Tensor, state, out):
    """The eager entry: a planned launch when the weight is unchanged, else the checked path."""
    plan = _PLANS.get(id(state))
    if plan is not None and plan.state_ref() is state:
        try:
            key = key_of(packed, state)
        except AttributeError:  # a field the plan read is gone: the checked path will say so
            key = None
        if key == plan.key:
            if out is None:
                out = plan.allocate()
            elif not plan.accepts(out):
                return _checked(packed, state, out)
            if not plan.launch(key, out):
                launch(tensors_of(packed, state), plan.layout, out)
            return out.t() if plan.transposed else out
    return _checked(packed, state, out)


def _checked(packed: torch.Tensor, state, out):
    tensors, layout = read(packed, state)
    device = packed.device
    if out is None:
        out = torch.empty(layout.shape, dtype=layout.dtype, device=device)
    else:
        check_out(out, layout, device)
    if layout.n_elements == 0:
        return out.t() if layout.transposed else out
    compiled, grid, constexprs = launch(tensors, layout, out)
    if out.data_ptr() % 16 == 0:  # a plan's launches assume the alignment this one was compiled for
        fast = direct_launcher(compiled, grid[0], layout, constexprs)
        _PLANS[id(state)] = Plan(state, key_of(packed, state), layout, device, fast)
    return out.t() if layout.transposed else out
