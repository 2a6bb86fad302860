"""Memory the reference process owns and lends by file descriptor: the inputs and the output slots.
On the GPU a CUDA VMM allocation exported as a POSIX descriptor (it crosses bubblewrap's PID
namespace, as legacy CUDA IPC handles don't); on the CPU a ``memfd``. A ``Region`` hands out torch
views.
"""

from __future__ import annotations

import ctypes
import mmap
import os

ALIGN = 256  # every view starts on this: any dtype's alignment, and coalesced loads

_POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_PINNED = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
_ON_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
_READ_ONLY = 1  # CU_MEM_ACCESS_FLAGS_PROT_READ
_READ_WRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE


def aligned(n: int, to: int = ALIGN) -> int:
    return -(-n // to) * to


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [
        ("compression", ctypes.c_ubyte),
        ("rdma", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("pad", ctypes.c_ubyte * 4),
    ]


class _Prop(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("handle_types", ctypes.c_int),
        ("location", _Location),
        ("win32", ctypes.c_void_p),
        ("flags", _AllocFlags),
    ]


class _Access(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class _Driver:
    """The few driver calls VMM sharing needs, on the context torch made current."""

    def __init__(self, device: int):
        self.cuda = ctypes.CDLL("libcuda.so.1")
        self.device = device
        self.prop = _Prop(type=_PINNED, handle_types=_POSIX_FD, location=_Location(type=_ON_DEVICE, id=device))
        granularity = ctypes.c_size_t()
        self.check(
            self.cuda.cuMemGetAllocationGranularity(ctypes.byref(granularity), ctypes.byref(self.prop), 0),
            "granularity",
        )
        self.granularity = granularity.value

    def check(self, status: int, what: str) -> None:
        if status != 0:
            name = ctypes.c_char_p()
            self.cuda.cuGetErrorString(status, ctypes.byref(name))
            raise RuntimeError(f"CUDA {what} failed: {status} {(name.value or b'?').decode()}")

    def map(self, handle: ctypes.c_ulonglong, size: int, flags: int = _READ_WRITE) -> int:
        pointer = ctypes.c_ulonglong()
        c_size = ctypes.c_size_t(size)
        self.check(
            self.cuda.cuMemAddressReserve(
                ctypes.byref(pointer), c_size, ctypes.c_size_t(0), ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)
            ),
            "address reserve",
        )
        self.check(self.cuda.cuMemMap(pointer, c_size, ctypes.c_size_t(0), handle, ctypes.c_ulonglong(0)), "map")
        access = _Access(location=_Location(type=_ON_DEVICE, id=self.device), flags=flags)
        self.check(self.cuda.cuMemSetAccess(pointer, c_size, ctypes.byref(access), ctypes.c_size_t(1)), "set access")
        return pointer.value

    def create(self, size: int) -> tuple[int, int]:
        """(device pointer, exported descriptor) of a new allocation of ``size`` bytes."""
        handle = ctypes.c_ulonglong()
        self.check(
            self.cuda.cuMemCreate(
                ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(self.prop), ctypes.c_ulonglong(0)
            ),
            "create",
        )
        fd = ctypes.c_int(-1)
        self.check(
            self.cuda.cuMemExportToShareableHandle(ctypes.byref(fd), handle, _POSIX_FD, ctypes.c_ulonglong(0)), "export"
        )
        return self.map(handle, size), fd.value

    def open(self, fd: int, size: int, read_only: bool) -> int:
        handle = ctypes.c_ulonglong()
        self.check(
            self.cuda.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD), "import"
        )
        return self.map(handle, size, _READ_ONLY if read_only else _READ_WRITE)


class _DeviceBytes:
    """What ``torch.as_tensor`` reads a raw device pointer from (``__cuda_array_interface__``)."""

    def __init__(self, pointer: int, size: int):
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (pointer, False), "version": 3}


class Region:
    """``size`` bytes both sides see: ``bytes`` (a flat uint8 tensor) and ``view``. ``fd`` is what
    lends it (passed to another process, which opens it with ``Region.open``)."""

    def __init__(self, tensor, fd: int, size: int, keep=None):
        self.bytes, self.fd, self.size, self._keep = tensor, fd, size, keep

    @classmethod
    def create(cls, size: int, device: str) -> Region:
        import torch

        if device == "cpu":
            fd = os.memfd_create("nf4kernel-region")
            size = aligned(max(size, 1), mmap.PAGESIZE)
            os.ftruncate(fd, size)
            return cls._mapped(fd, size)
        driver = _Driver(torch.cuda.current_device())
        size = aligned(max(size, 1), driver.granularity)
        pointer, fd = driver.create(size)
        return cls(torch.as_tensor(_DeviceBytes(pointer, size), device="cuda"), fd, size)

    @classmethod
    def open(cls, fd: int, size: int, device: str, read_only: bool = False) -> Region:
        """Another process's region; ``read_only``: mapped so that a write faults (the inputs)."""
        import torch

        if device == "cpu":
            return cls._mapped(fd, size, read_only)
        pointer = _Driver(torch.cuda.current_device()).open(fd, size, read_only)
        return cls(torch.as_tensor(_DeviceBytes(pointer, size), device="cuda"), fd, size)

    @classmethod
    def _mapped(cls, fd: int, size: int, read_only: bool = False) -> Region:
        import warnings

        import torch

        memory = mmap.mmap(fd, size, prot=mmap.PROT_READ if read_only else mmap.PROT_READ | mmap.PROT_WRITE)
        with warnings.catch_warnings():  # torch warns of a buffer it can't write: that is the point
            warnings.simplefilter("ignore", UserWarning)
            return cls(torch.frombuffer(memory, dtype=torch.uint8), fd, size, keep=memory)

    def view(self, offset: int, dtype, shape):
        """The ``dtype`` tensor of ``shape`` at byte ``offset``; ValueError where it leaves the region."""
        import math

        nbytes = math.prod(shape) * dtype.itemsize
        if offset % ALIGN or offset < 0 or offset + nbytes > self.size:
            raise ValueError(f"a view of {nbytes} bytes at {offset} does not fit a region of {self.size} bytes")
        return self.bytes[offset : offset + nbytes].view(dtype).reshape(shape)
