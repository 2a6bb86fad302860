"""Builds nf4kernel-bwrap.json, the seccomp profile of the GPU runner pods, from moby's default profile
(the RuntimeDefault that containerd and CRI-O derive theirs from), vendored beside this file:
moby/profiles, tag seccomp/v0.2.3, seccomp/default.json.

  python3 deploy/arc/seccomp/build.py          # rewrites nf4kernel-bwrap.json
  python3 deploy/arc/seccomp/build.py --check  # exit 1 if the committed file is not what this builds

The default profile is written for any capability set and architecture (its rules carry
"includes"/"excludes" conditions that Docker resolves at run time). A Localhost profile is read by the
runtime as plain OCI seccomp, so the conditions are resolved here once, for what the runner pod is:
x86-64 (with its 32-bit and x32 sub-architectures) and no capabilities at all (the pod drops ALL).
Then one rule is added: what bubblewrap needs to build the sandbox a PR's kernel runs in
(harness/core/sandbox.py), which RuntimeDefault grants only with CAP_SYS_ADMIN:

  clone, unshare   create the new user, mount, pid, net, ipc and uts namespaces (the default allows
                   clone only without namespace flags)
  mount, umount2, pivot_root
                   build and enter the sandbox's root; the kernel allows them only to a process that
                   holds CAP_SYS_ADMIN in the user namespace that owns the mount namespace, that is,
                   only inside the sandbox's own new namespaces, never on the pod's own mounts

A filter can't tell bubblewrap's calls from those of the code it sandboxes (one container, one
filter), so these are allowed to both: the sandbox itself refuses its code a nested user namespace
(bubblewrap's --disable-userns, harness/core/sandbox.py), where it would hold every capability again.

Everything else the default denies stays denied (bpf, perf_event_open, setns, the new mount API,
module loading, ...). The default's rules for kernels of at least a version (minKernel) are kept as
they are: the GPU nodes' kernels are newer than any of them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "moby-profiles-seccomp-v0.2.3-default.json"
OUT = HERE / "nf4kernel-bwrap.json"
ARCH = "SCMP_ARCH_X86_64"
ARCH_NAMES = {"amd64", "x86", "x32"}  # the names moby's "arches" conditions use for those
CAPS: set[str] = set()  # the runner pod's capabilities: none
BUBBLEWRAP = ["clone", "mount", "pivot_root", "umount2", "unshare"]


def applies(rule: dict) -> bool:
    includes, excludes = rule.get("includes") or {}, rule.get("excludes") or {}
    if includes.get("arches") and not ARCH_NAMES & set(includes["arches"]):
        return False
    if includes.get("caps") and not CAPS >= set(includes["caps"]):
        return False
    if excludes.get("arches") and ARCH_NAMES & set(excludes["arches"]):
        return False
    if excludes.get("caps") and CAPS & set(excludes["caps"]):
        return False
    return True


def build() -> dict:
    default = json.loads(SOURCE.read_text())
    (arch,) = [a for a in default["archMap"] if a["architecture"] == ARCH]
    rules = []
    for rule in default["syscalls"]:
        if not applies(rule):
            continue
        kept = {"names": sorted(rule["names"]), "action": rule["action"]}
        for key in ("args", "errnoRet"):
            if rule.get(key) is not None:
                kept[key] = rule[key]
        rules.append(kept)
    rules.append({"names": BUBBLEWRAP, "action": "SCMP_ACT_ALLOW"})
    return {
        "defaultAction": default["defaultAction"],
        "defaultErrnoRet": default["defaultErrnoRet"],
        "architectures": [arch["architecture"], *arch["subArchitectures"]],
        "syscalls": rules,
    }


def render() -> str:
    return json.dumps(build(), indent=1) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(0 if OUT.read_text() == render() else "nf4kernel-bwrap.json is stale: run build.py")
    OUT.write_text(render())
    print(OUT)
