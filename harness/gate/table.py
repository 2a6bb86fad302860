"""What the gate prints and writes to the job summary, from a record and its verdict: the timing
table, the speed-up with its interval and rounds, each round's ratio with the throttled ones marked,
the GPU's state and versions, the kernel under test, and the verdict line. Pure: tested on
recorded data."""

from __future__ import annotations

import itertools

from harness.core import markdown as md
from harness.gate import decision

IMPLEMENTATIONS = ("nf4kernel", "unsloth", "bitsandbytes")
MARK = "*"  # beside a round taken while the GPU throttled


TIMING_HEADER = ("shape", "implementation", "us/call", "GB/s", "% copy")
TIMING_WIDTHS = (22, 16, 8, 6, 6)  # padded: the gate prints this table as well


def _row(shape: dict, name: str, us: float, copy: float) -> list[str]:
    gbs = shape["bytes_per_call"] / us / 1e3
    return [md.text(shape["label"]), name, f"{us:.1f}", f"{gbs:.0f}", f"{100 * gbs * 1e9 / copy:.1f}"]


def timing_table(record: dict) -> list[str]:
    """Per shape and implementation: us per call (median round), bandwidth, its share of the device's copy."""
    env = record["environment"]
    copy = env["copy_bytes_per_s"]
    timed = [name for name in IMPLEMENTATIONS if name in record["seconds"]]  # bitsandbytes is shown where timed
    seconds, calls = record["seconds"], record["calls_per_timing"]
    rows = [
        _row(shape, name, decision.per_call_us(seconds[name], i, calls), copy)
        for i, shape in enumerate(record["shapes"])
        for name in timed
    ]
    return [
        f"Challenge A on {md.line(env['device'])} (copy {copy / 1e9:.0f} GB/s), {record['rounds']} interleaved rounds, "
        "median round:",
        "",
        *md.table(TIMING_HEADER, rows, align="llrrr", widths=TIMING_WIDTHS),
        "",
    ]


def speed_up(record: dict, verdict: decision.Verdict, threshold: float) -> list[str]:
    """The median ratio with its interval and how many rounds it took, then every round's ratio."""
    rounds = verdict.rounds
    first = record.get("rounds_first")
    how_many = f"{rounds} rounds"
    if first and rounds > first:
        how_many += f" ({first}, then {rounds - first} more while the interval straddled the threshold)"
    throttled = dict(decision.throttled_rounds(record))
    ratios = decision.round_ratios(record)
    return [
        f"nf4kernel vs Unsloth: median {verdict.ratio_median:.3f}x, {decision.CI_LEVEL:.0%} interval "
        f"{verdict.ci_low:.3f}x to {verdict.ci_high:.3f}x (min {verdict.ratio_min:.3f}x, max {verdict.ratio_max:.3f}x) "
        f"over {how_many}; threshold {threshold:.2f}x",
        "per round: " + " ".join(f"{r:.3f}x{MARK if i + 1 in throttled else ''}" for i, r in enumerate(ratios)),
        *throttle_lines(record),
    ]


def throttle_lines(record: dict) -> list[str]:
    """Which rounds ran while the GPU throttled, or that none did, or why nobody knows."""
    states = record.get("round_states")
    if not states:
        return ["the GPU's state was not recorded (the record predates round states)"]
    unavailable = next((s["state_after"]["unavailable"] for s in states if "unavailable" in s["state_after"]), None)
    if unavailable:
        return [f"the GPU's state could not be read: {md.line(unavailable)}"]
    throttled = decision.throttled_rounds(record)
    if not throttled:
        return [f"none of the {len(states)} rounds was taken while the GPU throttled"]
    reasons = sorted({md.line(r) for _, rs in throttled for r in rs})
    return [
        f"{len(throttled)} of {len(states)} rounds were taken while the GPU throttled ({', '.join(reasons)}): "
        f"marked {MARK}; they count, as both implementations ran in each"
    ]


def _span(states: list[dict], key: str, unit: str) -> str:
    values = [s[key] for s in states if s.get(key) is not None]
    if not values:
        return "?"
    low, high = min(values), max(values)
    return f"{low:.0f} {unit}" if low == high else f"{low:.0f} to {high:.0f} {unit}"


def gpu_state_line(record: dict) -> list[str]:
    """The GPU's state just after each round (under load; the snapshot before a round is taken idle)."""
    after = [s["state_after"] for s in record.get("round_states") or [] if "unavailable" not in s["state_after"]]
    if not after:
        return []
    return [
        f"GPU after each round ({md.line(after[0]['source'])}): SM {_span(after, 'sm_clock_mhz', 'MHz')} "
        f"(max {_span(after, 'max_sm_clock_mhz', 'MHz')}), memory {_span(after, 'mem_clock_mhz', 'MHz')}, "
        f"{_span(after, 'temperature_c', '°C')}, {_span(after, 'power_w', 'W')} "
        f"of {_span(after, 'power_limit_w', 'W')}"
    ]


def versions_line(record: dict) -> list[str]:
    found = record.get("environment", {}).get("versions")
    if not found:
        return []
    cuda = md.line(found.get("cuda") or "?")
    if found.get("cuda_driver"):
        cuda += f" (driver's {md.line(found['cuda_driver'])})"
    packages = ", ".join(
        f"{p} {md.line(found.get(p) or 'absent')}" for p in ("torch", "triton", "bitsandbytes", "unsloth")
    )
    return [f"versions: driver {md.line(found.get('driver') or '?')}, CUDA {cuda}, {packages}"]


def kernel_line(record: dict) -> list[str]:
    """Which nf4kernel was measured: a commit's package alone (--kernel), or the one imported."""
    kernel = record.get("kernel") or {}
    if not kernel.get("imported_from"):
        return []
    what = "nf4kernel"
    if kernel.get("commit"):
        what += f" of {md.line(kernel['commit'][:12])} ({md.line(kernel['source'])}), alone on the path"
    return [f"kernel under test: {what}, imported from {md.line(kernel['imported_from'])}"]


def table(record: dict, verdict: decision.Verdict, threshold: float) -> str:
    """The whole text, the verdict line last: what the log shows, so a record's strings are each
    ``md.line`` (one line), and ``md.text`` in a table's cell (the summary takes the rows as they are)."""
    lines = timing_table(record) if "seconds" in record else []
    if verdict.ratio_median is not None:
        lines += speed_up(record, verdict, threshold) + gpu_state_line(record)
    lines += versions_line(record) + kernel_line(record)
    checks = record.get("correctness", [])
    if checks:
        exact = sum(c.get("exact", c["ok"]) for c in checks)
        lines.append(
            f"correctness: {sum(c['ok'] for c in checks)}/{len(checks)} checks pass, {exact} of them bit-exact"
        )
    lines.append(md.line(verdict.line(), limit=None))  # its reasons may quote a record's strings
    return "\n".join(lines)


def chart(record: dict, threshold: float) -> str:
    """A Mermaid bar chart (GitHub renders it in a job summary): the speed-up per shape, the
    threshold as a line."""
    labels = ", ".join(f'"{md.code(shape["label"])}"' for shape in record["shapes"])
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
    """The job summary: the table as printed (a Markdown table), each other line a paragraph of its
    own, the chart, the verdict in bold."""
    *body, verdict_line = text.rsplit("\n", 1)
    parts = ["### nf4kernel speed gate", *paragraphs(body[0] if body else "")]
    if "seconds" in record and record.get("shapes"):
        parts.append(chart(record, threshold))
    parts.append(f"**{md.escape(verdict_line)}**")
    return "\n\n".join(parts) + "\n"


def paragraphs(text: str) -> list[str]:
    """Markdown blocks: consecutive table rows stay one table; every other line is its own paragraph
    (GitHub would run single lines together), plain text escaped whole (the throttle marks, and
    whatever a record's strings hold: the text has no Markdown of its own outside its tables)."""
    blocks = []
    for rows, lines in itertools.groupby(text.splitlines(), key=lambda line: line.startswith("|")):
        if rows:
            blocks.append("\n".join(lines))
        else:
            blocks += [md.escape(line) for line in lines if line.strip()]
    return blocks
