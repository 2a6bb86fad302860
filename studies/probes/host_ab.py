"""A planned call's host time: this tree's nf4kernel against an older one, or against itself with private handles off.

    git archive f73259b nf4kernel | tar -x -C /tmp/before
    python -m studies.probes.host_ab /tmp/before --pairs 20 [--cpu 5] [--json FILE]
    python -m studies.probes.host_ab --without tensor_guards [--without raw_stream ...] --pairs 20
    python -m studies.probes.host_ab --each-handle --pairs 10 [--cpu 5] [--json FILE]

Judged against the process-to-process effect ("a fix must not cost the planned call's host time").
``--without NAME`` (repeatable) compares this tree with every handle on ("before") against this
tree with those handles off ("after"): above 1, what they save. ``--each-handle`` measures every
handle of ``nf4kernel._triton_compat.HANDLES`` off in turn against all on, in rounds: each round
runs one process per variant, in an order that reverses every other round, and each variant's ratio
is judged against the all-on process of its own round. It prints a table (per handle: the planned
call with it off over all on, median and 95% interval over rounds) and writes it with every
process's figures to ``--json``. A handle this torch or Triton lacks is off in every process alike
(``available`` false in the table): its row measures nothing.

One H100's earlier host-time runs (a breakdown script, before and after) moved by up to 2x between processes
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

from harness.core.command_output import Parser
from harness.core.paths import ROOT

CALLS, REPEATS = 2000, 7


def child(without: tuple[str, ...] = ()) -> dict:
    """This process's figures (its nf4kernel is whichever PYTHONPATH put first), with the handles in
    ``without`` off: set before ``nf4kernel.api`` is imported, which reads some of them then."""
    import torch

    handles = {}
    if without:
        from nf4kernel import _triton_compat

        _triton_compat.disable(*without)
        handles = _triton_compat.available()
    import nf4kernel
    from harness.core import workload

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
        "without": sorted(without),
        "available": handles,
        "planned_us": min(figures["planned"]),
        "torch_us": min(figures["torch"]),
    }


def _ratio(figures: dict) -> float:
    return figures["planned_us"] / figures["torch_us"]


def verdict(pairs: list[dict]) -> dict:
    """``pairs``: [{"before": child(), "after": child()}, ...]. After's planned/torch ratio over
    before's, per pair: the median and its 95% bootstrap interval over pairs (the gate's bootstrap,
    ``harness.gate.decision.bootstrap_interval``)."""
    from harness.gate import decision

    change = [_ratio(p["after"]) / _ratio(p["before"]) for p in pairs]
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


def handle_table(rounds: list[dict]) -> list[dict]:
    """``rounds``: [{"all on": child(), NAME: child(without=(NAME,)), ...}, ...]. Per handle, the
    planned call's ratio to the torch call with it off over all on's in the same round: the median
    and its 95% bootstrap interval over rounds (above 1: the handle saves that much)."""
    from harness.gate import decision

    table = []
    for name in (n for n in rounds[0] if n != "all on"):
        change = [_ratio(r[name]) / _ratio(r["all on"]) for r in rounds]
        low, high = decision.bootstrap_interval(change)
        table.append(
            {
                "handle": name,
                "available": rounds[0][name].get("available", {}).get(name),
                "change": statistics.median(change),
                "ci_low": low,
                "ci_high": high,
                "planned_us_median": statistics.median(r[name]["planned_us"] for r in rounds),
                "all_on_planned_us_median": statistics.median(r["all on"]["planned_us"] for r in rounds),
            }
        )
    return table


def each_handle(rounds: int, cpu: int | None, names: list[str]) -> dict:
    """Every handle in ``names`` off in turn against all on (``handle_table``): printed and returned."""
    variants = ["all on", *names]
    found = []
    for i in range(rounds):
        order = variants if i % 2 == 0 else variants[::-1]  # every other round reversed: linear drift cancels
        found.append({v: run_child(None, cpu, () if v == "all on" else (v,)) for v in order})
        print(f"round {i + 1}: " + ", ".join(f"{v} {found[-1][v]['planned_us']:.2f} us" for v in variants), flush=True)
    table = handle_table(found)
    print(f"{'handle off':20s} {'available':9s} {'off/on':>7s}  95% interval    planned us (all on)")
    for row in table:
        print(
            f"{row['handle']:20s} {row['available']!s:9s} {row['change']:7.3f}  "
            f"{row['ci_low']:.3f} to {row['ci_high']:.3f}  {row['planned_us_median']:.2f} "
            f"({row['all_on_planned_us_median']:.2f})"
        )
    return {"rounds": found, "table": table}


def run_child(before: Path | None, cpu: int | None, without: tuple[str, ...] = ()) -> dict:
    path = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    if before is not None:
        path.insert(0, str(before))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    command = [sys.executable, __file__, "--child", *(f"--without={name}" for name in without)]
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
    parser = Parser(prog="python -m studies.probes.host_ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("before", nargs="?", type=Path, help="a folder holding the older nf4kernel/")
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--cpu", type=int, help="pin every process to this core (taskset)")
    parser.add_argument("--json", type=Path, help="write every process's figures and the verdict here")
    parser.add_argument(
        "--without",
        action="append",
        default=[],
        metavar="HANDLE",
        help="compare this tree against itself with this private handle off (repeatable; the names: "
        "nf4kernel._triton_compat.HANDLES)",
    )
    parser.add_argument(
        "--each-handle", action="store_true", help="each handle off in turn against all on: a table (--pairs rounds)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(tuple(args.without))))
        return 0
    against_itself = bool(args.without) or args.each_handle
    if against_itself and (args.before is not None or (args.without and args.each_handle)):
        print("host_ab: BEFORE, --without and --each-handle are different comparisons: give one", file=sys.stderr)
        return 2
    if against_itself:
        from nf4kernel import _triton_compat

        names = args.without or list(_triton_compat.HANDLES)
        unknown = sorted(set(names) - set(_triton_compat.HANDLES))
        if unknown:
            print(f"host_ab: no such handle {unknown}; the handles: {sorted(_triton_compat.HANDLES)}", file=sys.stderr)
            return 2
    elif args.before is None or not (args.before / "nf4kernel" / "__init__.py").is_file():
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
    if args.each_handle:
        found = each_handle(args.pairs, args.cpu, names)
        if args.json:
            args.json.write_text(json.dumps(found, indent=1))
        return 0
    # Before: the older tree, or this one with every handle on; after: this tree, less args.without.
    sides = {"before": (args.before, ()), "after": (None, tuple(args.without))}
    pairs = []
    for i in range(args.pairs):
        order = ("before", "after") if i % 2 == 0 else ("after", "before")  # ABBA: linear drift cancels
        pair = {side: run_child(sides[side][0], args.cpu, sides[side][1]) for side in order}
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
