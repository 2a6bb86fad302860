"""A planned call's host time, this tree's nf4kernel against an older one, judged against the
process-to-process effect (issue 18: "a fix must not cost the planned call's host time").

    git archive f73259b nf4kernel | tar -x -C /tmp/before
    python scripts/host_ab.py /tmp/before --pairs 20 [--cpu 5] [--json FILE]

One H100's `scripts/host_breakdown.py` runs, before and after, moved by up to 2x between processes
of the *same* package, in rows whose code is torch's alone (benchmarks/results/bnb-semantics). So
each process here times two things, interleaved: the planned call (``nf4kernel.dequantize(layer)``,
4096x1024 bf16 nested NF4) and an unchanged torch call (``torch.empty_strided`` of its output), and
the comparison is of their ratio. Processes alternate before/after in ABBA order, each pinned to one
core if asked. The verdict: per pair, after's ratio over before's; their median, with a 95%
bootstrap interval over pairs. Exit 0 (a measurement, whatever it says), 2 bad arguments, 4 no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CALLS, REPEATS = 2000, 7


def child() -> dict:
    """This process's figures (its nf4kernel is whichever PYTHONPATH put first)."""
    import torch

    import nf4kernel
    from harness import workload

    layer = workload.build_mlp(1024, 4096, torch.bfloat16, seed=0).layers[0]
    state = layer.weight.quant_state
    shape, dtype = tuple(state.shape), state.dtype
    strides = torch.empty(shape, dtype=dtype, device="meta").stride()

    def planned():
        nf4kernel.dequantize(layer)

    def unchanged():
        torch.empty_strided(shape, strides, dtype=dtype, device="cuda")

    for fn in (planned, unchanged):
        for _ in range(100):
            fn()
    torch.cuda.synchronize()
    figures = {"planned": [], "torch": []}
    for _ in range(REPEATS):  # interleaved: a burst hits both rows alike
        for name, fn in (("planned", planned), ("torch", unchanged)):
            figures[name].append(timeit.timeit(fn, number=CALLS) / CALLS * 1e6)
            torch.cuda.synchronize()
    return {
        "nf4kernel": nf4kernel.__file__,
        "planned_us": min(figures["planned"]),
        "torch_us": min(figures["torch"]),
    }


def verdict(pairs: list[dict]) -> dict:
    """``pairs``: [{"before": child(), "after": child()}, ...]. After's planned/torch ratio over
    before's, per pair: the median and its 95% bootstrap interval over pairs (the gate's bootstrap,
    ``harness.decision.bootstrap_interval``)."""
    from harness import decision

    change = [
        (p["after"]["planned_us"] / p["after"]["torch_us"]) / (p["before"]["planned_us"] / p["before"]["torch_us"])
        for p in pairs
    ]
    low, high = decision.bootstrap_interval(change)
    sides = ("before", "after")
    return {
        "pairs": len(pairs),
        "change": statistics.median(change),
        "ci_low": low,
        "ci_high": high,
        "planned_us_median": {side: statistics.median(p[side]["planned_us"] for p in pairs) for side in sides},
        "torch_us_median": {side: statistics.median(p[side]["torch_us"] for p in pairs) for side in sides},
    }


def run_child(before: Path | None, cpu: int | None) -> dict:
    path = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    if before is not None:
        path.insert(0, str(before))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    command = [sys.executable, __file__, "--child"]
    if cpu is not None:
        command = ["taskset", "-c", str(cpu), *command]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"a measuring process failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    expected = Path(before or ROOT).resolve()
    if not Path(found["nf4kernel"]).resolve().is_relative_to(expected):
        raise RuntimeError(f"the process imported nf4kernel from {found['nf4kernel']}, not from {expected}")
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", nargs="?", type=Path, help="a folder holding the older nf4kernel/")
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--cpu", type=int, help="pin every process to this core (taskset)")
    parser.add_argument("--json", type=Path, help="write every process's figures and the verdict here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child()))
        return 0
    if args.before is None or not (args.before / "nf4kernel" / "__init__.py").is_file():
        print(
            "host_ab: BEFORE must be a folder holding nf4kernel/ (git archive REV nf4kernel | tar -x -C BEFORE)",
            file=sys.stderr,
        )
        return 2
    if args.pairs < 2:
        print("host_ab: --pairs must be 2 or more", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("host_ab: needs a CUDA GPU (a planned call's host time is the GPU path's)", file=sys.stderr)
        return 4
    pairs = []
    for i in range(args.pairs):
        order = ("before", "after") if i % 2 == 0 else ("after", "before")  # ABBA: linear drift cancels
        pair = {side: run_child(args.before if side == "before" else None, args.cpu) for side in order}
        pairs.append(pair)
        print(
            f"pair {i + 1}: before {pair['before']['planned_us']:.2f} us ({pair['before']['torch_us']:.2f}), "
            f"after {pair['after']['planned_us']:.2f} us ({pair['after']['torch_us']:.2f})",
            flush=True,
        )
    found = verdict(pairs)
    print(
        f"host_ab: after/before, the planned call in units of an unchanged torch call: {found['change']:.3f}x "
        f"(95% interval {found['ci_low']:.3f} to {found['ci_high']:.3f}, {found['pairs']} pairs); raw medians "
        f"{found['planned_us_median']['before']:.2f} -> {found['planned_us_median']['after']:.2f} us"
    )
    if args.json:
        args.json.write_text(json.dumps({"pairs": pairs, "verdict": found}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
