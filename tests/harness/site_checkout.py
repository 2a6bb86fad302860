"""What the site's tests publish from: a clone on `main` (checkouts.clone_on_main) holding the
committed GPU history's commits, and a CPU machine's result beside that history, as a CPU machine's
own main job (``nox -s bench``) leaves one."""

from __future__ import annotations

import json
from pathlib import Path

from harness.history import store as history

CPU_MACHINE = "cpu-test"
MACHINES = sorted(p.name for p in history.STORE.iterdir() if p.is_dir())


def add_a_cpu_machines_result(results: Path) -> None:
    """A CPU smoke run's result beside the history, described as harness/history/asvrun.py describes a CPU
    machine (no GPU, another torch): the site must stay as it is without it."""
    machine_dir = results / CPU_MACHINE
    machine_dir.mkdir(parents=True)
    info = {"machine": CPU_MACHINE, "gpu": "none", "driver": "none", "cuda": "none", "torch": "2.13.0+cpu"}
    info.update(toolchain="torch 2.13.0+cpu, triton 3.9.0, bitsandbytes 0.50.2", version=1)
    (machine_dir / "machine.json").write_text(json.dumps(info))
    source = next((history.STORE / MACHINES[0]).glob("*-existing-*.json"))
    result = json.loads(source.read_text())
    result["params"] = {"machine": CPU_MACHINE, "toolchain": info["toolchain"], "python": "3.11"}
    (machine_dir / source.name.replace("py3.12", "py3.11")).write_text(json.dumps(result))


def benchmarks_with_results() -> set[str]:
    """The suite's benchmarks that the committed history holds a value of (a new one has none yet)."""
    found = set()
    for machine_dir in (p for p in history.STORE.iterdir() if p.is_dir()):
        for path in machine_dir.glob("*.json"):
            if path.name != "machine.json":
                found |= {name for name, row in json.loads(path.read_text())["results"].items() if row and row[0]}
    return found & set(json.loads((history.STORE / "benchmarks.json").read_text())) - {"version"}
