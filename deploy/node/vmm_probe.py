"""Can the trusted side share GPU memory with a sandboxed process here? A CUDA VMM allocation
exported as a POSIX file descriptor (cuMemExportToShareableHandle), passed over a Unix socket to a
child, imported, mapped and written there, read back by the parent: the route the trusted clock takes
between the trusted clock and the sandboxed candidate (legacy CUDA IPC handles do not cross a PID
namespace). libcuda alone, no torch.

  python3 deploy/node/vmm_probe.py parent                         # child as a plain process
  python3 deploy/node/vmm_probe.py parent bwrap --unshare-all ... --   # child inside that sandbox

Prints `VMM-FD-ACROSS plain|sandbox OK` or `FAILED`. Seen OK both ways on an H200 (driver 580.159.04,
a Firecracker VM, bubblewrap 0.8.0 with --disable-userns; deploy/README.md, "What still needs a
cluster"); not yet in a gVisor pod.
"""

import ctypes
import os
import socket
import subprocess
import sys

cuda = ctypes.CDLL("libcuda.so.1")
U64 = ctypes.c_ulonglong


def ck(r, what):
    if r != 0:
        s = ctypes.c_char_p()
        cuda.cuGetErrorString(r, ctypes.byref(s))
        raise SystemExit(f"{what} failed: {r} {s.value}")


class Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class Flags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class Prop(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", Loc),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", Flags),
    ]


class Access(ctypes.Structure):
    _fields_ = [("location", Loc), ("flags", ctypes.c_int)]


def setup():
    ck(cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    ck(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    ck(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    ck(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    prop = Prop(type=1, requestedHandleTypes=1, location=Loc(type=1, id=0))
    gran = ctypes.c_size_t()
    ck(cuda.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0), "granularity")
    return prop, gran.value


def map_handle(handle, size):
    ptr = U64()
    ck(
        cuda.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0), U64(0), U64(0)),
        "reserve",
    )
    ck(cuda.cuMemMap(ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), handle, U64(0)), "map")
    desc = Access(location=Loc(type=1, id=0), flags=3)
    ck(cuda.cuMemSetAccess(ptr, ctypes.c_size_t(size), ctypes.byref(desc), ctypes.c_size_t(1)), "setaccess")
    return ptr


def child(sock_fd):
    sock = socket.socket(fileno=sock_fd)
    _, size = setup()
    msg, fds, _, _ = socket.recv_fds(sock, 64, 1)
    size = int(msg)
    handle = U64()
    ck(cuda.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fds[0]), 1), "import")
    ptr = map_handle(handle, size)
    ck(cuda.cuMemsetD32_v2(ptr, ctypes.c_uint(0xC0FFEE), ctypes.c_size_t(size // 4)), "memset")
    ck(cuda.cuCtxSynchronize(), "sync")
    print("child: pid", os.getpid(), "uid", os.getuid(), "wrote", hex(0xC0FFEE), flush=True)
    sock.send(b"done")


def parent(wrap):
    prop, gran = setup()
    size = gran
    handle = U64()
    ck(cuda.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop), U64(0)), "create")
    fd = ctypes.c_int(-1)
    ck(cuda.cuMemExportToShareableHandle(ctypes.byref(fd), handle, 1, U64(0)), "export")
    ptr = map_handle(handle, size)
    ck(cuda.cuMemsetD32_v2(ptr, ctypes.c_uint(0), ctypes.c_size_t(size // 4)), "zero")
    ck(cuda.cuCtxSynchronize(), "sync")
    a, b = socket.socketpair()
    cmd = [*wrap, sys.executable, os.path.abspath(__file__), "child", str(b.fileno())]
    proc = subprocess.Popen(cmd, pass_fds=[b.fileno()])
    socket.send_fds(a, [str(size).encode()], [fd.value])
    a.settimeout(120)
    try:
        got = a.recv(16)
    except Exception as e:
        got = repr(e).encode()
    proc.wait(timeout=120)
    out = (ctypes.c_uint * 4)()
    ck(cuda.cuMemcpyDtoH_v2(out, ptr, ctypes.c_size_t(16)), "dtoh")
    print("parent: child said", got, "exit", proc.returncode, "first words", [hex(x) for x in out], flush=True)
    return list(out) == [0xC0FFEE] * 4


if __name__ == "__main__":
    if sys.argv[1] == "child":
        child(int(sys.argv[2]))
    else:
        wrap = sys.argv[2:]
        ok = parent(wrap)
        print("VMM-FD-ACROSS", "sandbox" if wrap else "plain", "OK" if ok else "FAILED")
