"""What a batch asks for, drawn by the clock when the batch starts and shown to the call process one
call at a time: which copy each repeat reads, which slot each call writes, which calls are checked
and which open it untimed. Pure, so it is tested without a GPU (docs/harness-code.md, "The trusted
clock").
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

MAX_COPIES = 32
MIN_SLOTS, MAX_SLOTS = 2, 32
MIN_WEIGHTS = 2  # a batch alternates at least two weights: a slot can then always take one not its own
LAYERS = 3  # Challenge A's weights per MLP: up, gate, down


@dataclass(frozen=True)
class Batch:
    calls: tuple  # (weight, slot) in order
    checks: frozenset  # indices of calls checked right after they answer
    final: tuple  # (slot, weight) the reference checks at the end: each written slot's last weight
    timed_from: int = 0  # calls before this index are the warm-up: made and checked, not timed


def pool(copy_bytes: int, output_bytes: int, working_set: int, layers: int = LAYERS) -> tuple[int, int]:
    """(copies of a group's ``layers`` weights, output slots) so that each side alone moves
    ``working_set`` bytes (twice L2 on the GPU) before any of it comes round again, and a batch has
    the MIN_WEIGHTS it needs (a lone weight gets a second copy)."""
    copies = min(MAX_COPIES, max(math.ceil(MIN_WEIGHTS / layers), math.ceil(working_set / copy_bytes)))
    slots = min(MAX_SLOTS, max(MIN_SLOTS, math.ceil(working_set / output_bytes)))
    return copies, slots


def batch(
    rng: random.Random, first: int, copies: int, layers: int, slots: int, repeats: int, checks: int, warmup: int = 0
) -> Batch:
    """``warmup`` + ``repeats`` x (each of ``layers`` weights in turn: Challenge A's up, gate, down;
    one for a suite weight) over weights ``first``... (copy ``v``'s layer ``l`` is weight ``first +
    layers * v + l``) into ``slots`` slots, the first ``warmup`` repeats not timed."""
    if slots < MIN_SLOTS or copies * layers < MIN_WEIGHTS:
        raise ValueError(
            f"a batch needs {MIN_SLOTS} slots and {MIN_WEIGHTS} weights, not {slots} and {copies * layers}"
        )
    holds = [None] * slots
    calls, copy, last = [], None, None
    for _ in range(warmup + repeats):
        others = [v for v in range(copies) if v != copy] or [0]
        copy = rng.choice(others)
        for layer in range(layers):
            weight = first + layers * copy + layer
            free = [s for s in range(slots) if holds[s] != weight]
            slot = rng.choice([s for s in free if s != last] or free)  # two slots, two weights: the last
            holds[slot], last = weight, slot
            calls.append((weight, slot))
    checked = frozenset(rng.sample(range(len(calls)), min(checks, len(calls))))
    final = tuple((s, w) for s, w in enumerate(holds) if w is not None)
    return Batch(tuple(calls), checked, final, warmup * layers)


def each_once(weights: list[int], slots: int) -> Batch:
    """Every weight once, into slots in turn, each checked right after (the exactness matrix)."""
    calls = tuple((w, i % slots) for i, w in enumerate(weights))
    return Batch(calls, frozenset(range(len(calls))), ())
