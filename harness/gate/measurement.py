"""What the gate's measurement (``sandboxed.py``) shares with its log and its rule: the log line,
and the rounds it times until the speed-up's interval clears the threshold or the bound is reached.
Nothing here decides (``decision.py`` does)."""

from __future__ import annotations

from harness.gate import decision

ROUNDS_PER_BATCH = 2  # rounds added at a time while the interval straddles the threshold


def log(message: str) -> None:
    print(f"[gate] {message}", flush=True)


def time_until_decided(record: dict, add_rounds, threshold: float):
    """``record["rounds_first"]`` rounds, then ROUNDS_PER_BATCH more at a time while the speed-up's
    interval straddles the threshold, up to ``record["max_rounds"]``; ``add_rounds(count)``
    times them into the record. Leaves the number timed in ``record["rounds"]``."""
    add_rounds(record["rounds_first"])
    while (done := len(record["seconds"]["nf4kernel"])) < record["max_rounds"] and decision.more_rounds_would_help(
        record, threshold
    ):
        more = min(ROUNDS_PER_BATCH, record["max_rounds"] - done)
        bound = record["max_rounds"]
        log(f"the 95% interval straddles the threshold after {done} rounds: {more} more (at most {bound})")
        add_rounds(more)
    record["rounds"] = len(record["seconds"]["nf4kernel"])
