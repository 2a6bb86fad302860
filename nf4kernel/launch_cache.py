"""The launch cache: the first call for a weight checks it and launches through Triton; later calls
for the same, unchanged weight launch the compiled kernel directly.

Host cost is most of a call on small weights (Triton's own launch path binds and specializes every
argument, about as long as the kernel runs), so a plan keeps what the first call worked out:

* It is keyed on the QuantState object (by id, with a weak reference so a freed state drops its
  plan and an id reused by a new object never matches).
  A state that can't be weakly referenced (a class with ``__slots__`` and no ``__weakref__``) gets
  no plan: each of its calls takes the checked path, correct and slower.
* It is valid only for exactly what the checks accepted: every call re-reads the *key* (see
  ``key_of``: for the weight and each state tensor its data pointer, dtype, element count and
  contiguity, and the state's shape as ints, dtype, blocksizes and quant type) and compares it
  with the one the plan was made for. A tensor replaced, moved, re-quantized or swapped for a view
  of the same memory with another dtype, length or layout, or a list ``shape`` changed in place,
  gives another key: the call takes the checked path, which raises what a fresh state would or
  makes a new plan. Where torch has dynamo's C++ tensor check, a call first tries the *quick key*
  (``unchanged``): one C++ call checks every tensor's metadata, at least what the key holds of it,
  and only the pointers and the state's fields are read in Python; it passes only where the key
  would.
* An ``out=`` buffer is checked on every call: the plan's launch takes only one of the planned
  dtype, shape and device, contiguous, 16-byte aligned, sharing no byte with the weight or its
  state, and writable under torch's autograd rules; anything else takes the checked path.
* It holds integers and the compiled kernel, never a tensor: it pins nothing in memory.

Threads: calls from several threads at once are safe and give each its own exact result. Triton's
CPU interpreter keeps global state (it patches ``triton.language`` and holds the grid in a
module-level builder for the length of a launch), so interpreted launches, and every launch that
goes through Triton's JIT (which may compile, reading ``triton.language``), hold one lock,
``kernel.TRITON_LOCK``. A user's own interpreted Triton kernel running at the same time in another
thread reaches the same global state: it must hold that lock too (README, "threads"). A planned GPU
launch takes no lock: it reads the calling thread's current device and stream (both per thread in
torch) and calls the driver, which is thread-safe. The plan table is a dict whose reads and writes
are atomic; two threads planning one weight at once both make a valid plan and one of them is kept.
"""

from __future__ import annotations

import functools
import weakref
from functools import partial

import torch
import triton

from . import kernel as K
from .quant_state import (
    Layout,
    Tensors4bit,
    check_out,
    check_out_memory,
    extents,
    in_memory,
    integer,
    module_weight,
    overlaps,
    read,
    tensors_of,
    unwrap,
)

_PLANS: dict[int, Plan] = {}
_Module = torch.nn.Module
_plain_tensors = torch._C.DisableTorchFunctionSubclass

_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_dynamo_guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
# What Inductor's generated code allocates with: ``torch.empty_strided`` on the current CUDA device
# without the argument parser and the dispatcher (half of ``empty_strided``'s host cost; the same
# caching allocator and stream, the same tensor). Where this torch lacks it, ``empty_strided``.
_empty_strided_here = getattr(_dynamo_guards, "_empty_strided_cuda", None)
# What torch.compile checks its input tensors with before it reuses compiled code: one C++ call for
# the Python type, dtype, device, sizes, strides, requires_grad and dispatch keys of several tensors
# (see ``tensor_guard``). Where this torch lacks it, every call reads the whole key.
_TensorGuards = getattr(_dynamo_guards, "TensorGuards", None)
_current_device = getattr(torch._C, "_cuda_getDevice", None)
_runtime_knobs = getattr(getattr(triton, "knobs", None), "runtime", None)
# Turned off for good if this Triton's launcher ever refuses the direct call (see Plan.launch).
_direct_launch = _raw_stream is not None
# The C launcher's argument layout under Triton 3.6's Python wrapper, read from its source; other
# versions go through the wrapper (CompiledKernel.run), whose signature is stable from 3.3 to 3.9.
_C_LAUNCH_LAYOUT = triton.__version__.startswith("3.6.")


def key_of(packed: torch.Tensor, state) -> tuple:
    """Everything the checks accepted that a later call could have changed, cheap to read: for the
    weight and each state tensor its data pointer, dtype, element count (the weight: shape),
    contiguity and negative bit (a view at the same address with another dtype, length, layout or
    sign must not pass), and the state's shape and blocksizes as ints (``_shape_key``, ``_int``),
    dtype and quant type. The codebook is not the state's (``quant_state.codebook``): the quant type
    decides it. No tensor's device needs a read: CUDA's unified addressing gives the host and every
    device distinct addresses, so a pointer says where its tensor is.

    Cost: each read is one call into torch's C++, 50-100 ns. Where torch has dynamo's tensor check,
    a planned call reads this only when its quick key differs (``unchanged``)."""
    # Params4bit overrides __torch_function__, which makes each of these reads cost a microsecond
    # or two; they are plain reads of the tensor, so skip the override.
    with _plain_tensors():
        absmax = state.absmax
        key = (
            packed.data_ptr(),
            absmax.data_ptr(),
            packed.dtype,
            packed.shape,
            packed.is_contiguous(),
            packed.is_neg(),
            absmax.dtype,
            absmax.numel(),
            absmax.is_contiguous(),
            absmax.is_neg(),
            _shape_key(state.shape),
            state.dtype,
            _int(state.blocksize),
            state.quant_type,
        )
        if state.nested:
            state2, offset = state.state2, state.offset
            code2, absmax2 = state2.code, state2.absmax
            key += (
                code2.data_ptr(),
                absmax2.data_ptr(),
                offset.data_ptr(),
                code2.dtype,
                code2.numel(),
                code2.is_contiguous(),
                code2.is_neg(),
                absmax2.dtype,
                absmax2.numel(),
                absmax2.is_contiguous(),
                absmax2.is_neg(),
                offset.dtype,
                offset.numel(),  # one element is always contiguous
                offset.is_neg(),
                _int(state2.blocksize),
                getattr(state2, "dtype", torch.float32),
            )
    return key


def tensor_guard(packed: torch.Tensor, state):
    """``check(*tensors)``: True while the weight and the state's tensors (in the kernel's order: the
    weight, absmax, then code2, absmax2, offset where nested) each keep the Python type,
    dtype, device, sizes, strides and requires_grad they have now, and their dispatch keys under
    the calling thread's modes (inference mode and autocast change those, see ``unchanged``). That
    is at least what ``key_of`` reads of each tensor besides its pointer, in one call into C++
    instead of about 20 (dynamo's ``TensorGuards``, which holds no tensor). None where this torch
    lacks it or refuses these tensors: then the plan compares whole keys."""
    if _TensorGuards is None:
        return None
    try:
        tensors = (packed, state.absmax)
        if state.nested:
            tensors += (state.state2.code, state.state2.absmax, state.offset)
        check = _TensorGuards(*tensors, dynamic_dims_sizes=None, dynamic_dims_strides=None).check
        return check if check(*tensors) is True else None
    except Exception:  # a private API: any refusal means "no guard", never a failed call
        return None


def quick_key(packed: torch.Tensor, state, check, pointers: tuple) -> tuple | None:
    """With ``check`` (``tensor_guard``) passing: the state's fields that ``key_of`` holds; None where
    a pointer differs from ``pointers`` (the plan's) or the check fails. Equal quick keys (with the
    check passing and the pointers the plan's) mean equal keys: the check covers each tensor's
    dtype, element count, contiguity and negative bit (its sizes, strides and dispatch keys) and the
    weight's shape; the rest is read as ``key_of`` reads it.

    The pointers are compared first: the C++ check aborts the whole process on a nested tensor
    (torch raises where nothing can catch it), and a tensor at the plan's address is the planned one
    or a view of its memory, never a nested tensor made since."""
    with _plain_tensors():
        absmax = state.absmax
        blocksize = state.blocksize
        if type(blocksize) is not int:  # inline: a call costs as much as the read (``_int``)
            blocksize = integer(blocksize)
        if state.nested:
            state2, offset = state.state2, state.offset
            code2, absmax2 = state2.code, state2.absmax
            here = (
                packed.data_ptr(),
                absmax.data_ptr(),
                code2.data_ptr(),
                absmax2.data_ptr(),
                offset.data_ptr(),
            )
            if here != pointers or not check(packed, absmax, code2, absmax2, offset):
                return None
            blocksize2 = state2.blocksize
            if type(blocksize2) is not int:
                blocksize2 = integer(blocksize2)
            # state2.dtype read plainly: a state2 without one fails here, and the whole key decides.
            return (_shape_key(state.shape), state.dtype, blocksize, state.quant_type, blocksize2, state2.dtype)
        if (packed.data_ptr(), absmax.data_ptr()) != pointers or not check(packed, absmax):
            return None
        return (_shape_key(state.shape), state.dtype, blocksize, state.quant_type)


def unchanged(packed: torch.Tensor, state, plan: Plan) -> bool:
    """Whether ``plan`` still holds for this weight: its quick key where it has one (about half the
    host time of the whole key: ``scripts/host_breakdown.py``), else, or where the quick key
    differs, the whole key. The check fails also where only the calling thread's modes changed the
    tensors' dispatch keys (a plan made outside autocast, called inside it), or a size-1 dimension's
    stride: where the whole key still matches, the check is made again for what the tensors are
    now, so the next such call is quick again. Raises what reading the state raises."""
    check = plan.check
    if check is not None and quick_key(packed, state, check, plan.pointers) == plan.quick:
        return True
    if key_of(packed, state) != plan.key:
        return False
    if check is not None:
        plan.check = tensor_guard(packed, state)  # None where refused now: whole keys from then on
    return True


def _int(value):
    # A blocksize: an int as it is (one type check); anything else (a numpy or a 0-d torch integer,
    # which can change in place after a plan) read as an int each call. None: not an integer.
    return value if type(value) is int else integer(value)


def _shape_key(shape):
    # bitsandbytes' torch.Size is immutable: kept as it is (one type check). Anything else is copied
    # as ints each call: a list changed in place after the plan was made must not still match it.
    # A size that is no int becomes None, which no plan holds, so the checked path says what it is.
    if type(shape) is torch.Size:
        return shape
    return tuple(map(integer, shape))


def _version_bumper():
    """``bump(tensor)``: what torch's in-place ops do to a tensor's version counter, so that autograd
    notices a saved tensor that was overwritten. The C call takes one tensor in older torch and an
    iterable in newer; the public wrapper (``torch.autograd.graph.increment_version``) costs more."""
    increment = torch._C._increment_version
    try:
        increment((torch.empty(0),))
    except TypeError:
        return increment
    return lambda tensor: increment((tensor,))


bump_version = _version_bumper()


def _hooks_active() -> bool:
    # Profilers (e.g. proton) hook Triton's launches; those calls keep Triton's own launch path.
    if _runtime_knobs is None:
        return False
    enter, exit_ = _runtime_knobs.launch_enter_hook, _runtime_knobs.launch_exit_hook
    return bool(getattr(enter, "calls", enter)) or bool(getattr(exit_, "calls", exit_))


def launch_geometry(layout: Layout, interpreted: bool, pdl: bool = False, **tile) -> tuple[tuple[int], K.Tile, dict]:
    """(grid, tile, constexprs) for a weight of this layout: no tensor needed, so tests can ask for
    any size. ``pdl``: launched as a programmatic dependent launch (``kernel.pdl_for``). ``tile``
    overrides the tuned num_warps / iters / evict / vector (the sweep uses it)."""
    t = K.tile_shape((layout.n_elements + 1) // 2, layout.blocksize, layout.dtype.itemsize, interpreted, **tile)
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


def kernel_arguments(
    tensors: Tensors4bit, layout: Layout, out: torch.Tensor, interpreted: bool, pdl: bool = False, **tile
):
    """(grid, positional args, constexprs, options) for one launch, with programmatic dependent
    launch where ``pdl``. ``tile`` overrides the tuned num_warps / iters / evict / vector (the sweep
    uses it)."""
    grid, t, constexprs = launch_geometry(layout, interpreted, pdl, **tile)
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


@functools.cache
def _pdl_on(index: int) -> bool:
    """Whether launches on CUDA device ``index`` use programmatic dependent launch (read once)."""
    major, minor = torch.cuda.get_device_capability(index)
    return K.pdl_for(10 * major + minor)


def launch(tensors: Tensors4bit, layout: Layout, out: torch.Tensor):
    """Launch through Triton's own path. Returns (compiled kernel or None in the interpreter, grid,
    constexprs): what a plan needs to repeat the launch."""
    device = out.device
    interpreted = device.type == "cpu" or K.dequantize_4bit_kernel is K.interpreted_kernel
    kernel = K.interpreted_kernel if interpreted else K.dequantize_4bit_kernel
    pdl = not interpreted and _pdl_on(device.index)
    grid, args, constexprs, options = kernel_arguments(tensors, layout, out, interpreted, pdl)
    compiled = None
    # The interpreter's global state, and Triton's JIT (it may compile, reading triton.language while
    # an interpreted launch has it patched): one launch at a time (module docstring, "Threads").
    with K.TRITON_LOCK:
        if device.type == "cuda":
            with torch.cuda.device(device):
                compiled = kernel[grid](*args, **constexprs, **options)
        else:
            kernel[grid](*args, **constexprs, **options)
    return (None if interpreted else compiled), grid, constexprs


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
    launch path every call, a compiled QLoRA step on an H200 ran at 0.86x stock's.)"""
    global _direct_launch
    device = out.device
    if device.type != "cuda" or not _direct_launch or _hooks_active():
        launch(tensors, layout, out)
        return
    pointers = kernel_pointers(tensors)
    key = op_key(tensors, layout, out, pointers)
    known = _BY_LAYOUT.get(key)
    if known is None:
        _BY_LAYOUT[key] = launch(tensors, layout, out)
        return
    compiled, grid, constexprs = known
    fast = direct_launcher(compiled, grid[0], layout, constexprs, pointers)
    if fast is None:
        launch(tensors, layout, out)
        return
    try:
        with torch.cuda.device(device.index):
            fast(_raw_stream(device.index), out.data_ptr())
    except TypeError:  # this Triton's launcher takes other arguments: it checked before launching
        _direct_launch = False
        launch(tensors, layout, out)


def state_pointers(tensors: Tensors4bit) -> tuple[int, ...]:
    """The data pointers of the caller's tensors a plan reads: the weight and absmax, and where nested
    code2, absmax2 and the offset (a planned call compares them first: ``quick_key``)."""
    return tuple(t.data_ptr() for t in tensors if t is not None and t is not tensors.code)


def kernel_pointers(tensors: Tensors4bit) -> tuple[int, ...]:
    """The kernel's six pointer arguments, in its order; a flat state passes absmax for the last three
    (never read), as ``kernel_arguments`` does."""
    fill = tensors.absmax.data_ptr()
    return tuple(fill if t is None else t.data_ptr() for t in tensors)


def direct_launcher(compiled, grid: int, layout: Layout, constexprs: dict, pointers: tuple):
    """``launch(stream, out_pointer)``: the compiled kernel launched past Triton's argument binding,
    with the six ``pointers`` (``kernel_pointers``: a later call's tensors are at them, or the plan
    isn't used); None where this Triton's launcher can't be called directly.

    Triton's launcher takes every kernel parameter in order, constexprs included. Pointers go as
    integers, which it passes through unchecked (a tensor would cost a driver query each). All but
    the stream and ``out`` is one tuple made here, so a call builds one argument tuple and nothing
    else (``scripts/host_anatomy.py`` times each layer of this)."""
    if compiled is None or not _direct_launch:
        return None
    run, function, metadata = compiled.run, compiled.function, compiled.packed_metadata
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
        #  launch metadata, enter hook, exit hook, the six input pointers): fixed for the plan.
        head = (function, run.launch_cooperative_grid, run.launch_pdl, None, None, metadata, None, None, None)
        head += pointers

        def launch(stream, out_pointer):
            c_launch(grid, 1, 1, stream, *head, out_pointer, *tail)

        return launch

    head = (function, metadata, None, None, None, *pointers)

    def launch(stream, out_pointer):
        run(grid, 1, 1, stream, *head, out_pointer, *tail)

    return launch


class Plan:
    """One weight's launch, ready to repeat while its key is unchanged. Holds no tensor."""

    __slots__ = (
        "allocate",
        "allocate_here",
        "check",
        "device",
        "device_index",
        "ends",
        "fast",
        "key",
        "layout",
        "out_bytes",
        "pointers",
        "quick",
        "starts",
        "state_ref",
        "transposed",
    )

    def __init__(
        self, state_ref, key, layout: Layout, device: torch.device, fast, reads, pointers, check=None, quick=None
    ):
        self.key = key
        self.pointers = pointers  # the caller's tensors' addresses (``state_pointers``), compared first
        # The quick key and the tensor check it passed with (``unchanged``); None: whole keys only.
        self.check = check if quick is not None else None
        self.quick = quick
        self.layout = layout
        self.device = device
        self.device_index = device.index
        self.transposed = layout.transposed
        strides = torch.empty(layout.shape, device="meta").stride()
        # empty_strided costs half of empty here (no layout inference).
        self.allocate = partial(torch.empty_strided, layout.shape, strides, dtype=layout.dtype, device=device)
        # The same, where the calling thread's current device is the plan's (the direct launch).
        self.allocate_here = self.allocate
        if device.type == "cuda" and _empty_strided_here is not None:
            self.allocate_here = partial(_empty_strided_here, tuple(layout.shape), tuple(strides), layout.dtype)
        self.fast = fast
        self.state_ref = state_ref
        # What the kernel reads (quant_state.extents), for the overlap check on out=.
        self.starts = tuple(start for start, _ in reads)
        self.ends = tuple(end for _, end in reads)
        self.out_bytes = layout.n_elements * layout.dtype.itemsize

    def accepts(self, out) -> int:
        """``out``'s data pointer where the planned launch may write it; 0 sends the call to the
        checked path, which says what is wrong (or, for an ``out`` that is not 16-byte aligned,
        launches through Triton). Cost: about 8 tensor reads and one bisection."""
        layout = self.layout
        if not (
            out.dtype == layout.dtype
            and out.shape == layout.shape
            and out.is_contiguous()
            and out.device == self.device
        ):
            return 0
        if out.requires_grad and torch.is_grad_enabled():  # second read only when it requires grad
            return 0
        if out.is_inference() and not torch.is_inference_mode_enabled():
            return 0
        if out.is_neg():  # the kernel writes memory; torch's out= ops write a negative view's values
            return 0
        pointer = out.data_ptr()
        if pointer % 16 or overlaps(pointer, pointer + self.out_bytes, self.starts, self.ends):
            return 0  # the compiled kernel assumes the alignment it was built for
        return pointer

    def launch(self, out_pointer: int) -> bool:
        """The direct launch from any thread, whatever its current device (``dequantize`` launches
        the common case itself); False where it can't be made: then Triton's own path launches."""
        fast = self.fast
        if fast is None or _hooks_active():
            return False
        index = self.device_index
        try:
            with torch.cuda.device(index):
                fast(_raw_stream(index), out_pointer)
        except TypeError:
            self.refused()
            return False
        return True

    def refused(self) -> None:
        """This Triton's launcher takes other arguments; it checks them before launching, so nothing
        ran. Use Triton's own path from now on."""
        global _direct_launch
        _direct_launch = False
        self.fast = None


def _forgetter(state_id: int):
    """Weak-reference callback: drops the plan of a state that is being freed."""

    def forget(ref, plans=_PLANS) -> None:  # bound now: module globals may be gone at exit
        plan = plans.get(state_id)
        if plan is not None and plan.state_ref is ref:
            del plans[state_id]

    return forget


def _weak_ref(state):
    """A weak reference that drops the state's plan when it is freed; None where the state can't be
    weakly referenced (then it gets no plan: a strong one would keep it alive)."""
    try:
        return weakref.ref(state, _forgetter(id(state)))
    except TypeError:
        return None


def dequantize(W, quant_state, out):
    """The eager entry, from what the caller passed (``api.dequantize``'s arguments): a planned launch
    when the weight is unchanged, else the checked path.

    A planned call is all host work, and every Python call in it costs 0.1 to 0.2 us (a tenth of a
    small weight's call), so the planned path is this one frame: the weight read from a module
    (``module_weight``), the plan, the key, the output and the launch on the calling thread's
    device and stream. What it can't serve that way goes to ``Plan.launch`` (another device, launch
    hooks set) or to the checked path (no plan, a changed key, an ``out`` it refuses, bad input)."""
    packed = module_weight(W) if isinstance(W, _Module) else W
    plan = state = None
    if isinstance(packed, torch.Tensor):  # anything else: the checked path says what it is
        state = getattr(packed, "quant_state", None) if quant_state is None else quant_state
        plan = _PLANS.get(id(state))
    if plan is not None and plan.state_ref() is state:
        try:
            same = unchanged(packed, state, plan)
        except Exception:  # something the plan read is gone or is not what it was: the checked path says what
            same = False
        if same:
            fast, index = plan.fast, plan.device_index
            direct = fast is not None and _current_device() == index and not _hooks_active()
            if out is None:
                out = plan.allocate_here() if direct else plan.allocate()
                pointer = out.data_ptr()
            else:
                try:
                    pointer = plan.accepts(out)
                except (AttributeError, RuntimeError):  # not a tensor, or one torch won't read as
                    pointer = 0  # strided (sparse, MKL-DNN, nested): the checked path says what it is
                if not pointer:
                    return _checked(packed, state, out)
                bump_version(out)
            if direct:
                try:
                    fast(_raw_stream(index), pointer)
                except TypeError:
                    plan.refused()
                    launch(tensors_of(packed, state), plan.layout, out)
            elif not plan.launch(pointer):
                launch(tensors_of(packed, state), plan.layout, out)
            return out.t() if plan.transposed else out
    packed, state = unwrap(W, quant_state)
    return _checked(packed, state, out)


def _checked(packed: torch.Tensor, state, out):
    """Every check, then Triton's launch and a plan for the next call. Whatever is wrong raises before
    anything is written."""
    tensors, layout = read(packed, state)
    device = packed.device
    if out is not None:
        check_out(out, layout, device)
    if not all(in_memory(t) for t in tensors if t is not None):
        # A wrapper subclass, vmap's batched tensors: torch's own ops compute it, exactly.
        return _by_torch(tensors, layout, out)
    if out is None:
        out = torch.empty(layout.shape, dtype=layout.dtype, device=device)
    else:
        check_out_memory(out, tensors)
        bump_version(out)
        if out.is_neg():  # write the values, as torch's out= ops do, through a buffer of our own
            buffer = torch.empty_like(out, memory_format=torch.contiguous_format).resolve_neg()
            _launch_or_empty(tensors, layout, buffer)
            with torch.no_grad():
                out.copy_(buffer)
            return out.t() if layout.transposed else out
    if layout.n_elements == 0:
        return out.t() if layout.transposed else out
    compiled, grid, constexprs = launch(tensors, layout, out)
    state_ref = _weak_ref(state) if layout.plannable else None
    # A plan's launches assume the alignment this one was compiled for.
    if state_ref is not None and out.data_ptr() % 16 == 0:
        key = key_of(packed, state)
        fast = direct_launcher(compiled, grid[0], layout, constexprs, kernel_pointers(tensors))
        check = tensor_guard(packed, state)
        pointers = state_pointers(tensors)
        quick = None if check is None else quick_key(packed, state, check, pointers)
        _PLANS[id(state)] = Plan(state_ref, key, layout, device, fast, extents(tensors), pointers, check, quick)
    return out.t() if layout.transposed else out


def _launch_or_empty(tensors: Tensors4bit, layout: Layout, out: torch.Tensor) -> None:
    if layout.n_elements:
        launch(tensors, layout, out)


def _by_torch(tensors: Tensors4bit, layout: Layout, out):
    """The result through torch's ops (``reference.compute``), into ``out`` where given."""
    from .reference import compute

    result = compute(tensors, layout)
    if out is None:
        return result.t() if layout.transposed else result
    bump_version(out)
    with torch.no_grad():
        out.copy_(result)
    return out.t() if layout.transposed else out
