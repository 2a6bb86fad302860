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
* It holds integers and the compiled kernel, never a tensor: it pins nothing in memory. It is never
  changed once made: where a call learns something new (the tensor check re-made under another
  mode, a launcher that refuses the direct call), a new plan replaces it in the table.

Reading order: ``dequantize`` repeats a plan in its own frame, or hands its arguments to
``inputs.check``, which reads and checks them once into an immutable ``Checked``; ``_checked``
launches that (``launch.launch``) and plans it. Private handles: ``_triton_compat``.

Threads: calls from several threads at once are safe and give each its own exact result. Triton's
CPU interpreter keeps global state (it patches ``triton.language`` and holds the grid in a
module-level builder for the length of a launch), so interpreted launches, and every launch that
goes through Triton's JIT (which may compile, reading ``triton.language``), hold one lock,
``kernel.TRITON_LOCK`` (``launch.launch``). A user's own interpreted Triton kernel running at the
same time in another
thread reaches the same global state: it must hold that lock too (README, "threads"). A planned GPU
launch takes no lock: it reads the calling thread's current device and stream (both per thread in
torch) and calls the driver, which is thread-safe. The plan table is a dict whose reads and writes
are atomic; two threads planning (or re-planning) one weight at once both make a valid plan and one
of them is kept.
"""

from __future__ import annotations

import weakref
from functools import partial
from typing import NamedTuple

import torch

from . import _triton_compat as compat
from . import inputs
from .inputs import Checked, extents, overlaps
from .launch import direct_launcher, kernel_arguments, kernel_pointers, launch, state_pointers
from .quant_state import Layout, int_key, integer, module_weight, shape_key, tensors_of

__all__ = ["dequantize", "kernel_arguments"]  # the second: what studies.sweep and benchmarks call
_PLANS: dict[int, Plan] = {}
_Module = torch.nn.Module
_plain_tensors = compat.plain_tensors()

# Read once, at import (``_triton_compat``: a measurement turns a handle off before this import).
_raw_stream, _current_device = compat.stream_reader() or (None, None)
# What torch's in-place ops do to a tensor's version counter, so that autograd notices a saved
# tensor that was overwritten. The public wrapper: torch._C's own saved nothing measurable on an H200.
bump_version = torch.autograd.graph.increment_version
_hooks_active = compat.hooks_active


def key_of(packed: torch.Tensor, state) -> tuple:
    """Everything the checks accepted that a later call could have changed, cheap to read: for the
    weight and each state tensor its data pointer, dtype, element count (the weight: shape),
    contiguity and negative bit (a view at the same address with another dtype, length, layout or
    sign must not pass), and the state's shape and blocksizes as ints (``quant_state.shape_key``, ``int_key``),
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
            shape_key(state.shape),
            state.dtype,
            int_key(state.blocksize),
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
                int_key(state2.blocksize),
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
    guards = compat.tensor_guards()
    if guards is None:
        return None
    try:
        tensors = (packed, state.absmax)
        if state.nested:
            tensors += (state.state2.code, state.state2.absmax, state.offset)
        check = guards(*tensors, dynamic_dims_sizes=None, dynamic_dims_strides=None).check
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
        if type(blocksize) is not int:  # inline: a call costs as much as the read (``int_key``)
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
            return (shape_key(state.shape), state.dtype, blocksize, state.quant_type, blocksize2, state2.dtype)
        if (packed.data_ptr(), absmax.data_ptr()) != pointers or not check(packed, absmax):
            return None
        return (shape_key(state.shape), state.dtype, blocksize, state.quant_type)


def unchanged(packed: torch.Tensor, state, plan: Plan) -> bool:
    """Whether ``plan`` still holds for this weight: its quick key where it has one (about half the
    host time of the whole key), else, or where the quick key
    differs, the whole key. The check fails also where only the calling thread's modes changed the
    tensors' dispatch keys (a plan made outside autocast, called inside it), or a size-1 dimension's
    stride: where the whole key still matches, the check is made again for what the tensors are
    now (a new plan), so the next such call is quick again. Raises what reading the state raises."""
    check = plan.check
    if check is not None and quick_key(packed, state, check, plan.pointers) == plan.quick:
        return True
    if key_of(packed, state) != plan.key:
        return False
    if check is not None:  # None where refused now: whole keys from then on
        _PLANS[id(state)] = plan._replace(check=tensor_guard(packed, state))
    return True


class Plan(NamedTuple):
    """One weight's launch, ready to repeat while its key is unchanged (made by ``make_plan``, never
    changed after). Holds no tensor."""

    state_ref: object  # weak reference to the QuantState; the plan is its while it returns it
    key: tuple  # ``key_of`` when the plan was made
    pointers: tuple  # the caller's tensors' addresses (``state_pointers``), compared first
    check: object  # the tensor check the quick key passed with (``tensor_guard``); None: whole keys
    quick: tuple | None  # ``quick_key`` when the plan was made
    layout: Layout
    device: torch.device
    device_index: int | None
    transposed: bool
    allocate: partial  # the output, on the plan's device
    allocate_here: partial  # the same, where the calling thread's current device is the plan's
    fast: object  # the direct launch (``direct_launcher``), or None: Triton's own path
    starts: tuple  # what the kernel reads (``inputs.extents``), for the overlap check on out=
    ends: tuple
    out_bytes: int

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
        ran. Triton's own path from now on (``_triton_compat.refused``), this plan replaced by one
        without the direct launch."""
        compat.refused()
        state = self.state_ref()
        if state is not None and _PLANS.get(id(state)) is self:
            _PLANS[id(state)] = self._replace(fast=None)


def make_plan(
    state_ref, key, layout: Layout, device: torch.device, fast, reads, pointers, check=None, quick=None
) -> Plan:
    strides = torch.empty(layout.shape, device="meta").stride()
    # empty_strided costs half of empty here (no layout inference).
    allocate = partial(torch.empty_strided, layout.shape, strides, dtype=layout.dtype, device=device)
    allocate_here = allocate
    here = compat.empty_strided_here()
    if device.type == "cuda" and here is not None:
        allocate_here = partial(here, tuple(layout.shape), tuple(strides), layout.dtype)
    return Plan(
        state_ref,
        key,
        pointers,
        check if quick is not None else None,
        quick,
        layout,
        device,
        device.index,
        layout.transposed,
        allocate,
        allocate_here,
        fast,
        tuple(start for start, _ in reads),
        tuple(end for _, end in reads),
        layout.n_elements * layout.dtype.itemsize,
    )


def _weak_ref(state):
    """A weak reference that drops the state's plan when it is freed; None where the state can't be
    weakly referenced (then it gets no plan: a strong one would keep it alive)."""
    state_id = id(state)

    def forget(ref, plans=_PLANS) -> None:  # bound now: module globals may be gone at exit
        plan = plans.get(state_id)
        if plan is not None and plan.state_ref is ref:
            del plans[state_id]

    try:
        return weakref.ref(state, forget)
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
                    return _checked(inputs.check(packed, state, out), out)
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
    return _checked(inputs.check(W, quant_state, out), out)


def _checked(call: Checked, out):
    """A checked call (``inputs.check``): Triton's launch, and a plan for the next call."""
    packed, state, tensors, layout, memory = call
    if not memory:
        # A wrapper subclass, vmap's batched tensors: torch's own ops compute it, exactly.
        from .reference import compute_into

        if out is not None:
            bump_version(out)
        return compute_into(tensors, layout, out)
    if out is None:
        out = torch.empty(layout.shape, dtype=layout.dtype, device=packed.device)
    else:
        bump_version(out)
        if out.is_neg():  # write the values, as torch's out= ops do, through a buffer of our own
            buffer = torch.empty_like(out, memory_format=torch.contiguous_format).resolve_neg()
            if layout.n_elements:
                launch(tensors, layout, buffer)
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
        fast = direct_launcher(compiled, grid, layout, constexprs, kernel_pointers(tensors))
        guard = tensor_guard(packed, state)
        pointers = state_pointers(tensors)
        quick = None if guard is None else quick_key(packed, state, guard, pointers)
        plan = make_plan(state_ref, key, layout, packed.device, fast, extents(tensors), pointers, guard, quick)
        _PLANS[id(state)] = plan
    return out.t() if layout.transposed else out
