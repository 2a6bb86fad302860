"""The PR speed gate: nf4kernel against the real Unsloth ``fast_dequantize`` on the Challenge A workload.

    python -m nf4kernel.harness.gate [--threshold 1.15] [--rounds 5] [--json gate.json] [--summary summary.md]
    python -m nf4kernel.harness.gate --replay gate.json [--threshold 1.3]   # re-decide recorded timings

1. Correctness first: every weight's output is bit-identical to bitsandbytes and to Unsloth, and
   ``F.linear(X, W)`` through it equals the ``Linear4bit`` module's own forward.
2. Timing: interleaved rounds in this process (nf4kernel, Unsloth, bitsandbytes), 1000 x (up, gate,
   down) per shape, ``torch.cuda.synchronize()`` after every call; Unsloth's classic path
   (``UNSLOTH_BNB_TRITON=0``) in a process of its own.
3. The verdict (``decision.py``): exit 0 pass, 1 too slow, 3 incorrect, 4 no CUDA GPU, 5 no Unsloth.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from nf4kernel.harness import decision

IMPLEMENTATIONS = ("nf4kernel", "unsloth", "bitsandbytes")


def log(message: str) -> None:
    print(f"[gate] {message}", flush=True)


def environment() -> dict:
    try:
        import torch
    except ImportError as error:
        return {"cuda": False, "torch": None, "cuda_error": f"torch is not importable ({error})"}

    env = {"cuda": torch.cuda.is_available(), "torch": torch.__version__}
    if not env["cuda"]:
        env["cuda_error"] = f"torch {torch.__version__} sees no CUDA GPU"
        return env
    import bitsandbytes
    import triton

    from nf4kernel.harness import workload

    env.update(device=workload.device_name(), triton=triton.__version__, bitsandbytes=bitsandbytes.__version__)
    try:
        workload.unsloth_impl()
        env["unsloth"] = workload.unsloth_version()
    except Exception as error:  # ImportError, or unsloth refusing this machine
        env["unsloth"] = None
        env["unsloth_error"] = f"{type(error).__name__}: {error}"
    return env


def check_correctness(mlps, impls) -> list[dict]:
    """Every weight bit-identical to bitsandbytes and to Unsloth; ``X @ W.t()`` through it matching the
    module's own forward: bit-identical where cuBLAS picks the same algorithm for both operand
    layouts, else within the puzzle's check (``torch.testing.assert_close`` defaults)."""
    import torch

    checks = []
    for mlp in mlps:
        for name, layer in zip(("up", "gate", "down"), mlp.layers, strict=True):
            ours = impls["nf4kernel"](layer)
            for other in ("bitsandbytes", "unsloth"):
                ok = torch.equal(ours, impls[other](layer))
                checks.append({"shape": mlp.label, "weight": name, "check": other, "ok": ok, "exact": ok})
            x = torch.randn(2, 64, layer.in_features, dtype=mlp.dtype, device="cuda")
            got, expected = x @ ours.t(), layer(x)
            exact = torch.equal(got, expected)
            try:
                torch.testing.assert_close(got, expected)
                ok = True
            except AssertionError:
                ok = False
            checks.append({"shape": mlp.label, "weight": name, "check": "Linear4bit forward", "ok": ok, "exact": exact})
    return checks


def run_classic(rounds: int) -> dict:
    """Unsloth's classic (bitsandbytes ctypes) path, which it picks at import: its own process."""
    env = {**os.environ, "UNSLOTH_BNB_TRITON": "0"}
    command = [sys.executable, "-m", "nf4kernel.harness.classic", "--rounds", str(rounds)]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or [f"exit {done.returncode}"]
        return {"error": lines[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(rounds: int, with_classic: bool) -> dict:
    record = {"command": " ".join(["python -m nf4kernel.harness.gate", *sys.argv[1:]]), "environment": environment()}
    record["rounds"] = rounds
    env = record["environment"]
    if not env["cuda"] or not env.get("unsloth"):
        return record
    import torch

    from nf4kernel.harness import workload

    log(f"{env['device']}: torch {env['torch']}, triton {env['triton']}, unsloth {env['unsloth']}")
    impls = {
        "nf4kernel": workload.nf4kernel_impl(),
        "unsloth": workload.unsloth_impl(),
        "bitsandbytes": workload.bitsandbytes_impl(),
    }
    record["calls_per_timing"] = workload.ROUNDS_PER_TIMING
    record["environment"]["copy_bytes_per_s"] = workload.copy_bandwidth()
    log("building the Challenge A weights")
    mlps = workload.challenge_a()
    record["shapes"] = [
        {"label": mlp.label, "bytes_per_call": statistics.mean(workload.bytes_moved(layer) for layer in mlp.layers)}
        for mlp in mlps
    ]
    log("checking correctness")
    record["correctness"] = check_correctness(mlps, impls)
    bad = [c for c in record["correctness"] if not c["ok"]]
    log(f"{len(record['correctness']) - len(bad)}/{len(record['correctness'])} checks exact")
    if bad:
        return record
    log(f"timing {rounds} interleaved rounds of {workload.ROUNDS_PER_TIMING} x (up, gate, down) per shape")
    record["seconds"] = workload.interleaved_rounds(impls, mlps, rounds, progress=log)
    del mlps
    torch.cuda.empty_cache()
    if with_classic:
        log("timing Unsloth's classic path in its own process (UNSLOTH_BNB_TRITON=0)")
        record["classic"] = run_classic(rounds)
    return record


def per_call_us(record: dict, name: str, shape: int) -> float:
    return decision.per_call_us(record["seconds"][name], shape, record["calls_per_timing"])


def _row(shape: dict, name: str, us: float, copy: float) -> str:
    gbs = shape["bytes_per_call"] / us / 1e3
    return f"| {shape['label']:22s} | {name:16s} | {us:8.1f} | {gbs:6.0f} | {100 * gbs * 1e9 / copy:6.1f} |"


def table(record: dict, verdict: decision.Verdict, threshold: float) -> str:
    """What a person reads: per shape and implementation, microseconds per call (median round), the
    achieved bandwidth and its share of this run's device copy, then the ratio and the verdict."""
    lines = []
    env = record["environment"]
    if "seconds" in record:
        copy = env["copy_bytes_per_s"]
        rounds = record["rounds"]
        lines += [
            f"Challenge A on {env['device']} (copy {copy / 1e9:.0f} GB/s), {rounds} interleaved rounds, median round:",
            "",
            f"| {'shape':22s} | {'implementation':16s} | {'us/call':>8s} | {'GB/s':>6s} | {'% copy':>6s} |",
            f"|{'-' * 24}|{'-' * 18}|{'-' * 10}|{'-' * 8}|{'-' * 8}|",
        ]
        classic = record.get("classic", {})
        for i, shape in enumerate(record["shapes"]):
            for name in IMPLEMENTATIONS:
                lines.append(_row(shape, name, per_call_us(record, name, i), copy))
            if "seconds" in classic:
                lines.append(_row(shape, "unsloth classic*", per_call_us(classic, "unsloth_classic", i), copy))
        lines.append("")
        if "seconds" in classic:
            ratio = statistics.median(decision.round_ratios(classic, baseline="unsloth_classic"))
            lines.append(f"* own process (UNSLOTH_BNB_TRITON=0), where nf4kernel was {ratio:.2f}x as fast")
        elif classic:
            lines.append(f"Unsloth's classic path was not measured: {classic.get('error')}")
    if verdict.ratio_median is not None:
        lines.append(
            f"nf4kernel vs Unsloth: median {verdict.ratio_median:.3f}x (min {verdict.ratio_min:.3f}x, "
            f"max {verdict.ratio_max:.3f}x) over {len(record['seconds']['nf4kernel'])} rounds; "
            f"threshold {threshold:.2f}x"
        )
    checks = record.get("correctness", [])
    if checks:
        exact = sum(c.get("exact", c["ok"]) for c in checks)
        lines.append(
            f"correctness: {sum(c['ok'] for c in checks)}/{len(checks)} checks pass, {exact} of them bit-exact"
        )
    lines.append(("PASS" if verdict.passed else "FAIL") + "".join(f": {r}" for r in verdict.reasons))
    return "\n".join(lines)


def chart(record: dict, threshold: float) -> str:
    """A Mermaid bar chart (GitHub renders it in a job summary): the speed-up per shape, the
    threshold as a line."""
    labels = ", ".join(f'"{shape["label"]}"' for shape in record["shapes"])
    ratios = decision.shape_ratios(record)
    top = max([*ratios, threshold]) * 1.25
    return "\n".join(
        [
            "```mermaid",
            "xychart-beta",
            '    title "nf4kernel speed-up over Unsloth fast_dequantize, per shape (median round)"',
            f"    x-axis [{labels}]",
            f'    y-axis "speed-up (x)" 0 --> {top:.2f}',
            f"    bar [{', '.join(f'{r:.3f}' for r in ratios)}]",
            f"    line [{', '.join(f'{threshold:.3f}' for _ in ratios)}]",
            "```",
        ]
    )


def markdown(record: dict, verdict: decision.Verdict, threshold: float, text: str) -> str:
    """The job summary: the table as printed (a Markdown table), the chart, the verdict in bold."""
    *body, verdict_line = text.rsplit("\n", 1)
    parts = ["### nf4kernel speed gate", *body]
    if "seconds" in record and record.get("shapes"):
        parts.append(chart(record, threshold))
    parts.append(f"**{verdict_line}**")
    return "\n\n".join(parts) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nf4kernel.harness.gate", description=__doc__.splitlines()[0])
    default_threshold = float(os.environ.get("NF4KERNEL_GATE_THRESHOLD", decision.DEFAULT_THRESHOLD))
    parser.add_argument(
        "--threshold", type=float, default=default_threshold, help="minimum median speed-up over Unsloth (%(default)s)"
    )
    parser.add_argument("--rounds", type=int, default=decision.MIN_ROUNDS, help="interleaved rounds (at least 5)")
    parser.add_argument("--json", help="write the record and the verdict here")
    parser.add_argument("--summary", help="append the table as Markdown here (e.g. $GITHUB_STEP_SUMMARY)")
    parser.add_argument("--replay", help="decide on a recorded JSON instead of measuring")
    parser.add_argument("--no-classic", action="store_true", help="skip Unsloth's classic path")
    args = parser.parse_args(argv)

    if args.replay:
        with open(args.replay) as f:
            record = json.load(f)
    else:
        record = measure(args.rounds, with_classic=not args.no_classic)
    verdict = decision.decide(record, args.threshold)
    record["threshold"] = args.threshold
    record["verdict"] = verdict.as_dict()
    text = table(record, verdict, args.threshold)
    print(text, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
    if args.summary:
        with open(args.summary, "a") as f:
            f.write(markdown(record, verdict, args.threshold, text))
    return verdict.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
