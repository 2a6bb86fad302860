"""The system-call filter the sandbox's process runs under (bubblewrap's ``--seccomp FD``): no new
user namespace, whatever the kernel under it allows, as classic BPF for x86-64. Why a filter beside
``--disable-userns``, and what it refuses: docs/harness-code.md.
"""

from __future__ import annotations

import os
import platform
import struct

# <linux/filter.h>, <linux/seccomp.h>, <linux/audit.h>
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
ALLOW, ERRNO = 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38
AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
CLONE_NEWUSER = 0x10000000
# struct seccomp_data: nr, arch, instruction_pointer, args[6] (args[0]'s low half at 16, little-endian)
NR, ARCH, ARG0_LOW = 0, 4, 16
# x86-64 system call numbers (<asm/unistd_64.h>)
CLONE, UNSHARE, SETNS, CLONE3 = 56, 272, 308, 435


def supported() -> bool:
    """Whether this machine's ABI is the one the filter is written for."""
    return platform.machine() in ("x86_64", "AMD64")


def program() -> bytes:
    """The filter, as ``struct sock_filter`` entries (what ``--seccomp FD`` reads)."""
    # (code, true target, false target, k); a target is a label, the jump's offset counted from it.
    code = [
        ("arch", LD_W_ABS, None, None, ARCH),
        (None, JEQ_K, "nr", "eperm", AUDIT_ARCH_X86_64),
        ("nr", LD_W_ABS, None, None, NR),
        (None, JGE_K, "eperm", "next", X32_SYSCALL_BIT),
        ("next", JEQ_K, "enosys", "n2", CLONE3),
        ("n2", JEQ_K, "eperm", "n3", SETNS),
        ("n3", JEQ_K, "flags", "n4", UNSHARE),
        ("n4", JEQ_K, "flags", "allow", CLONE),
        ("flags", LD_W_ABS, None, None, ARG0_LOW),
        (None, JSET_K, "eperm", "allow", CLONE_NEWUSER),
        ("allow", RET_K, None, None, ALLOW),
        ("eperm", RET_K, None, None, ERRNO | EPERM),
        ("enosys", RET_K, None, None, ERRNO | ENOSYS),
    ]
    at = {label: i for i, (label, *_rest) in enumerate(code) if label}
    out = b""
    for i, (_, op, true, false, k) in enumerate(code):
        jt = at[true] - i - 1 if true else 0
        jf = at[false] - i - 1 if false else 0
        out += struct.pack("<HBBI", op, jt, jf, k)
    return out


def memfd() -> int:
    """A file descriptor holding ``program()``, at its start, for bubblewrap to read (the caller
    passes it to the child and closes it)."""
    fd = os.memfd_create("nf4kernel-seccomp", 0)
    os.write(fd, program())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
