"""Every private torch and Triton handle the launch path uses, in one place, each with the versions it
was checked on and what a call does without it.

A handle is a speed-up only: without it every call still gives the same bits, by a public (slower)
way. Each is read through an accessor here, which takes that refusal path when

* this torch or Triton is a release no test has run the handles on (``SEEN``): every handle is off,
  the kernel launches through Triton's public path, and a warning says so once, at the first use, or
* this torch or Triton lacks the handle or refuses it (looked up once, at import), or
* its name is in ``DISABLED``: a measurement turns a handle off to see what it saves
  (``python -m studies.probes.host_ab --without NAME``; the names are ``HANDLES``' keys). ``disable`` and
  ``enable`` change the set. ``launch_cache`` reads some handles once, at import,
  and a plan keeps what it was made with: change the set before ``nf4kernel.api`` is imported, as
  host_ab's measuring processes do.

Launch hooks (``hooks_active``, public ``triton.knobs`` from Triton 3.4) are read here too but are no
speed-up to turn off: a call with hooks set keeps Triton's own launch path, which calls them.

Model: PyTorch Inductor's ``runtime/triton_compat.py`` (one module answers what this Triton has) and
``runtime/static_cuda_launcher.py`` (a compiled kernel launched past Triton's argument binding).
"""

from __future__ import annotations

import contextlib
import warnings

import torch
import triton

# The releases (major.minor) the handles below ran on in a test, each result torch.equal to the
# reference: the CPU CI legs (noxfile's kernel_tests; the README's support table lists every pair that
# ran) and the GPU runner's torch 2.11 + Triton 3.6. A release not listed here runs with every handle
# off: slower calls, the same bits. Add a release here when a CI leg runs it.
SEEN = {"torch": ("2.11", "2.13", "2.14", "2.15"), "triton": ("3.6", "3.7", "3.8", "3.9")}


def _release(version: str) -> str:
    """``2.14.1+cpu`` -> ``2.14``: a patch release or a local build tag changes no handle."""
    return ".".join(version.split("+", 1)[0].split(".")[:2])


def unseen_versions(versions: dict[str, str] | None = None) -> dict[str, str]:
    """{library: version} of this process's torch and Triton that ``SEEN`` does not list."""
    versions = versions or {"torch": str(torch.__version__), "triton": str(triton.__version__)}
    return {name: version for name, version in versions.items() if _release(version) not in SEEN[name]}


UNSEEN = unseen_versions()
if UNSEEN:  # read at the first use of the kernel (the package loads this module then): once a process
    warnings.warn(
        "nf4kernel: "
        + " and ".join(f"{name} {version}" for name, version in UNSEEN.items())
        + " not yet tested with nf4kernel: its private launch handles are off, and every call takes "
        "Triton's public launch path (the same bits, a few microseconds slower)",
        RuntimeWarning,
        stacklevel=1,
    )

# name: (the handle, the versions it was checked on, what a call does without it). Checked on: run
# with it on and off, every result torch.equal to the reference, on torch 2.11 + Triton 3.6.0
# (CUDA, an H200) and torch 2.13 + Triton 3.7.1 (CPU, where the CUDA-only ones are absent); the other
# releases in SEEN ran the CPU ones in CI, and the CUDA-only ones are read from their sources there.
HANDLES = {
    "plain_tensors": (
        "torch._C.DisableTorchFunctionSubclass",
        "torch 2.11 (CUDA); 2.11, 2.13, 2.14, 2.15 (CPU)",
        "the key's reads go through a Params4bit's __torch_function__ (a microsecond or two more)",
    ),
    "tensor_guards": (
        "torch._C._dynamo.guards.TensorGuards",
        "torch 2.11 (CUDA); 2.11, 2.13, 2.14, 2.15 (CPU)",
        "every planned call reads the whole key (launch_cache.key_of) instead of the quick one",
    ),
    "empty_strided_cuda": (
        "torch._C._dynamo.guards._empty_strided_cuda",
        "torch 2.11 (CUDA)",
        "a planned call allocates its output with torch.empty_strided",
    ),
    "raw_stream": (
        "torch._C._cuda_getCurrentRawStream, torch._C._cuda_getDevice",
        "torch 2.11 (CUDA; a CPU build has neither)",
        "no direct launch: every call launches through Triton's own path",
    ),
    "direct_launch": (
        "CompiledKernel.run / .function / .packed_metadata, called with the launcher's arguments",
        "Triton 3.6.0 (CUDA); the wrapper's signature read as stable from 3.3 to 3.9",
        "every call launches through Triton's own path (JITFunction.run)",
    ),
    "c_launch_layout": (
        "Triton 3.6's C launcher (CompiledKernel.run.launch) and its argument layout",
        "Triton 3.6.0 (CUDA) only: other versions never take it",
        "the direct launch goes through CompiledKernel.run, Triton's Python wrapper",
    ),
}
DISABLED: set[str] = set()
# Every handle off for good where a version is unseen; ``enable`` can't turn one back on.
_OFF = frozenset(HANDLES) if UNSEEN else frozenset()


def disable(*names: str) -> None:
    """Turn handles off (for a measurement). An unknown name is refused: a typo must not measure nothing."""
    unknown = set(names) - set(HANDLES)
    if unknown:
        raise ValueError(f"nf4kernel: no such handle {sorted(unknown)}; the handles are {sorted(HANDLES)}")
    DISABLED.update(names)


def enable(*names: str) -> None:
    DISABLED.difference_update(names)


def public_path_only() -> bool:
    """Whether every handle is off because this torch or Triton is unseen (``UNSEEN``)."""
    return bool(_OFF)


def available() -> dict[str, bool]:
    """Per handle: whether this torch and Triton have it (whatever ``DISABLED`` says; an unseen
    version's handles are present and off, ``public_path_only``)."""
    present = {
        "plain_tensors": _DisableTorchFunctionSubclass is not None,
        "tensor_guards": _TensorGuards is not None,
        "empty_strided_cuda": _empty_strided_cuda is not None,
        "raw_stream": _raw_stream is not None and _get_device is not None,
        "direct_launch": _launcher_takes_our_arguments,
        "c_launch_layout": _C_LAUNCH_LAYOUT,
    }
    return {name: present[name] for name in HANDLES}


def _off(name: str) -> bool:
    return name in DISABLED or name in _OFF


def _lookup(owner, *path):
    for name in path:
        owner = getattr(owner, name, None)
    return owner


_DisableTorchFunctionSubclass = _lookup(torch._C, "DisableTorchFunctionSubclass")
_guards = _lookup(torch._C, "_dynamo", "guards")
_TensorGuards = _lookup(_guards, "TensorGuards")
_empty_strided_cuda = _lookup(_guards, "_empty_strided_cuda")
_raw_stream = _lookup(torch._C, "_cuda_getCurrentRawStream")
_get_device = _lookup(torch._C, "_cuda_getDevice")
_runtime_knobs = _lookup(triton, "knobs", "runtime")  # public from Triton 3.4; launch hooks
# The C launcher's argument layout under Triton 3.6's Python wrapper, read from its source; other
# versions go through the wrapper (CompiledKernel.run), whose signature is stable from 3.3 to 3.9.
_C_LAUNCH_LAYOUT = triton.__version__.startswith("3.6.")
# Set False for good when this Triton's launcher refuses a direct call (``refused``).
_launcher_takes_our_arguments = True


def plain_tensors():
    """``() -> context`` in which a tensor subclass's ``__torch_function__`` is skipped for plain reads
    (``data_ptr``, ``dtype``, ...): the same values, without Params4bit's override."""
    if _DisableTorchFunctionSubclass is None or _off("plain_tensors"):
        return contextlib.nullcontext
    return _DisableTorchFunctionSubclass


def tensor_guards():
    """dynamo's ``TensorGuards`` class (one C++ call checks several tensors' type, dtype, device,
    sizes, strides, requires_grad and dispatch keys), or None: whole keys only. It aborts the process
    on a nested tensor (``launch_cache.quick_key`` compares pointers first, for that reason)."""
    return None if _off("tensor_guards") else _TensorGuards


def empty_strided_here():
    """What Inductor's generated code allocates with: ``torch.empty_strided`` on the current CUDA
    device without the argument parser and the dispatcher (the same caching allocator and stream, the
    same tensor). None: ``torch.empty_strided``."""
    return None if _off("empty_strided_cuda") else _empty_strided_cuda


def stream_reader():
    """``(raw_stream(index), current_device())`` for the direct launch, or None: no direct launch
    (this torch has no CUDA, or the handle is off)."""
    if _raw_stream is None or _get_device is None or _off("raw_stream"):
        return None
    return _raw_stream, _get_device


def hooks_active() -> bool:
    """Whether launch hooks are set (profilers such as proton): those calls keep Triton's own launch
    path, which calls them. Public ``triton.knobs`` from Triton 3.4; none before."""
    if _runtime_knobs is None:
        return False
    enter, exit_ = _runtime_knobs.launch_enter_hook, _runtime_knobs.launch_exit_hook
    return bool(getattr(enter, "calls", enter)) or bool(getattr(exit_, "calls", exit_))


def refused() -> None:
    """This Triton's launcher took other arguments; it checks them before launching, so nothing ran.
    Triton's own path from now on, for every plan."""
    global _launcher_takes_our_arguments
    _launcher_takes_our_arguments = False


def direct_launches() -> bool:
    """Whether a compiled kernel may be launched past Triton's argument binding at all."""
    return _launcher_takes_our_arguments and not _off("direct_launch") and stream_reader() is not None


def direct_launcher(compiled, grid: int, tail: tuple, pointers: tuple):
    """``launch(stream, out_pointer)``: ``compiled`` launched past Triton's argument binding, with the
    kernel's six input ``pointers`` before ``out`` and ``tail`` (its integer arguments and constexprs,
    in order) after it; None where this Triton's launcher can't be called directly.

    Triton's launcher takes every kernel parameter in order, constexprs included. Pointers go as
    integers, which it passes through unchecked (a tensor would cost a driver query each). All but
    the stream and ``out`` is one tuple made here, so a call builds one argument tuple and nothing
    else (``python -m studies.probes.host_ab --each-handle`` measures what each handle saves). A
    launcher that takes other arguments raises TypeError before launching: the caller calls
    ``refused`` and launches through Triton."""
    if compiled is None or not direct_launches():
        return None
    run, function, metadata = compiled.run, compiled.function, compiled.packed_metadata
    c_launch = getattr(run, "launch", None)
    if (
        _C_LAUNCH_LAYOUT
        and not _off("c_launch_layout")
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
