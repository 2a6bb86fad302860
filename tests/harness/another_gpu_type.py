"""A second GPU type's history beside the committed one (which holds one type): the committed
machine's folder copied under another machine name, its ``machine.json`` and every result's
``params`` renamed, as history.yml's benchmark job on that type would have stored them."""

from __future__ import annotations

import json
from pathlib import Path

from site_checkout import MACHINES

from harness.history import store as history


def add_another_gpu_type(results: Path, machine: str = "h100", gpu: str = "NVIDIA H100 80GB HBM3") -> Path:
    """results/MACHINE: the committed type's figures, stored as MACHINE's (GPU ``gpu``)."""
    source, target = history.STORE / MACHINES[0], results / machine
    target.mkdir(parents=True)
    info = json.loads((source / "machine.json").read_text())
    (target / "machine.json").write_text(json.dumps({**info, "machine": machine, "gpu": gpu}))
    for path in source.glob("*-*.json"):
        result = json.loads(path.read_text())
        result["params"] = {**result["params"], "machine": machine}
        (target / path.name).write_text(json.dumps(result))
    return target
