"""The inputs the trusted side chooses and the slots the calls write into, as one manifest both sides
read: Challenge A's MLPs, the regression check's suite and the exactness matrix, each weight in a
slot group. The reference lays them out in a region it lends read-only; each call process rebuilds
``(W, quant_state)`` as views of it (docs/harness-code.md, "The trusted clock").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.clock.regions import Region, aligned

# (label, quant_type, nested, dtype, blocksize, shape, transposed)
MATRIX = (
    ("nf4 nested bf16 64", "nf4", True, "bfloat16", 64, (256, 512), False),
    ("nf4 nested fp16 64", "nf4", True, "float16", 64, (512, 256), False),
    ("nf4 nested fp32 64", "nf4", True, "float32", 64, (256, 256), False),
    ("nf4 plain bf16 64", "nf4", False, "bfloat16", 64, (256, 512), False),
    ("nf4 plain fp16 128", "nf4", False, "float16", 128, (384, 256), False),
    ("nf4 nested bf16 256", "nf4", True, "bfloat16", 256, (512, 512), False),
    ("nf4 plain fp32 512", "nf4", False, "float32", 512, (256, 1024), False),
    ("nf4 nested fp16 1024", "nf4", True, "float16", 1024, (512, 1024), False),
    ("nf4 nested bf16 2048", "nf4", True, "bfloat16", 2048, (1024, 512), False),
    ("nf4 plain bf16 4096", "nf4", False, "bfloat16", 4096, (512, 1024), False),
    ("fp4 nested bf16 64", "fp4", True, "bfloat16", 64, (256, 512), False),
    ("fp4 plain fp16 64", "fp4", False, "float16", 64, (512, 256), False),
    ("fp4 nested fp32 128", "fp4", True, "float32", 128, (256, 256), False),
    ("fp4 plain bf16 256", "fp4", False, "bfloat16", 256, (256, 512), False),
    ("nf4 nested bf16 64 odd 257x193", "nf4", True, "bfloat16", 64, (257, 193), False),
    ("nf4 plain fp16 128 odd 131x97", "nf4", False, "float16", 128, (131, 97), False),
    ("fp4 nested fp32 64 odd 33x1001", "fp4", True, "float32", 64, (33, 1001), False),
    ("nf4 nested bf16 64 transposed", "nf4", True, "bfloat16", 64, (256, 512), True),
    ("fp4 plain fp16 128 transposed", "fp4", False, "float16", 128, (128, 384), True),
)


@dataclass
class Weight:
    """One weight as built: the packed codes and its quant state, its group and what it is."""

    label: str
    group: int
    packed: object
    state: object
    transposed: bool = False


def challenge_a(mlps, variants: list[int], seeds: list[int], build) -> list[Weight]:
    """Challenge A's weights: for MLP ``i``, ``variants[i]`` copies of (up, gate, down), copy ``v``
    built by ``build(hd, m, dtype, seed + 1000 * v)`` (copy 0: the puzzle's own)."""
    weights = []
    for group, ((hd, m, dtype), copies, seed) in enumerate(zip(mlps, variants, seeds, strict=True)):
        for v in range(copies):
            layers = build(hd, m, dtype, seed + 1000 * v).layers
            for name, layer in zip(("up", "gate", "down"), layers, strict=True):
                label = f"{hd}x{m} {str(dtype).replace('torch.', '')} {name} #{v}"
                weights.append(Weight(label, group, layer.weight.data, layer.weight.quant_state))
    return weights


def suite(keys: list[str], copies: list[int], first_group: int, build) -> list[Weight]:
    """The regression check's weights: for key ``i`` (``"RxC dtype"``), ``copies[i]`` copies built
    by ``build(shape, dtype, seed)`` (``workload.suite_weight``; copy ``v``: seed ``v``), each key a
    group of its own."""
    weights = []
    for i, (key, count) in enumerate(zip(keys, copies, strict=True)):
        for v in range(count):
            layer = build(*key.split(), seed=v)
            weights.append(Weight(f"{key} #{v}", first_group + i, layer.weight.data, layer.weight.quant_state))
    return weights


def matrix(device: str, group: int, seed: int = 46) -> list[Weight]:
    """The exactness matrix's weights (``MATRIX``), quantized by bitsandbytes on ``device``."""
    import bitsandbytes.functional as F
    import torch

    generator = torch.Generator().manual_seed(seed)
    weights = []
    for label, quant_type, nested, dtype, blocksize, shape, transposed in MATRIX:
        data = torch.randn(shape, generator=generator).to(getattr(torch, dtype)).to(device)
        packed, state = F.quantize_4bit(data, blocksize=blocksize, compress_statistics=nested, quant_type=quant_type)
        weights.append(Weight(label, group, packed, state, transposed))
    return weights


def tensors_of(weight: Weight) -> dict:
    state = weight.state
    found = {"packed": weight.packed, "absmax": state.absmax, "code": state.code}
    if state.nested:
        found.update(offset=state.offset.reshape(1), absmax2=state.state2.absmax, code2=state.state2.code)
    return found


def output_bytes(weight: Weight) -> int:
    state = weight.state
    return math.prod(state.shape) * state.dtype.itemsize


def bytes_moved(weight: Weight) -> int:
    """What one call must read and write at least: every input tensor once, the output once."""
    return sum(t.numel() * t.element_size() for t in tensors_of(weight).values()) + output_bytes(weight)


def lay_out(weights: list[Weight], slots: list[int]) -> tuple[dict, int, int]:
    """The manifest, the inputs region's size and the slots region's size. ``slots[g]``: how many
    slots group ``g`` has, each as large as its largest output."""
    entries, at = [], 0
    for weight in weights:
        placed = {}
        for name, tensor in tensors_of(weight).items():
            placed[name] = [at, str(tensor.dtype).replace("torch.", ""), list(tensor.shape)]
            at += aligned(tensor.numel() * tensor.element_size())
        state = weight.state
        entries.append(
            {
                "label": weight.label,
                "group": weight.group,
                "quant_type": state.quant_type,
                "blocksize": state.blocksize,
                "blocksize2": state.state2.blocksize if state.nested else None,
                "dtype": str(state.dtype).replace("torch.", ""),
                "shape": list(state.shape),
                "transposed": weight.transposed,
                "bytes_moved": bytes_moved(weight),
                "tensors": placed,
            }
        )
    groups, slot_at = [], 0
    for g, count in enumerate(slots):
        size = aligned(max(output_bytes(w) for w in weights if w.group == g))
        groups.append({"offset": slot_at, "slot_bytes": size, "count": count})
        slot_at += size * count
    return {"weights": entries, "groups": groups}, at, slot_at


def fill(region: Region, weights: list[Weight], manifest: dict) -> None:
    for weight, entry in zip(weights, manifest["weights"], strict=True):
        for name, tensor in tensors_of(weight).items():
            offset, _, shape = entry["tensors"][name]
            region.view(offset, tensor.dtype, shape).copy_(tensor)


def quant_states(region: Region, manifest: dict) -> list[tuple]:
    """``(W, quant_state)`` for every weight, as views of ``region`` (the call process's side).
    A transposed weight's ``W`` is handed as bitsandbytes' ``[1, n/2]`` packing."""
    import torch
    from bitsandbytes.functional import QuantState

    pairs = []
    for entry in manifest["weights"]:
        t = {
            name: region.view(offset, getattr(torch, dtype), shape)
            for name, (offset, dtype, shape) in entry["tensors"].items()
        }
        inner = None
        if "absmax2" in t:
            inner = QuantState(absmax=t["absmax2"], code=t["code2"], blocksize=entry["blocksize2"], dtype=torch.float32)
        state = QuantState(
            absmax=t["absmax"],
            shape=torch.Size(entry["shape"]),
            code=t["code"],
            blocksize=entry["blocksize"],
            quant_type=entry["quant_type"],
            dtype=getattr(torch, entry["dtype"]),
            offset=t["offset"].reshape(()) if "offset" in t else None,
            state2=inner,
        )
        packed = t["packed"]
        pairs.append((packed.t() if entry["transposed"] else packed, state))
    return pairs


def slot_view(region: Region, manifest: dict, weight: int, slot: int):
    """Where weight ``weight``'s output goes in slot ``slot`` of its group: its shape and dtype."""
    import torch

    entry = manifest["weights"][weight]
    group = manifest["groups"][entry["group"]]
    if not 0 <= slot < group["count"]:
        raise ValueError(f"slot {slot} is not one of group {entry['group']}'s {group['count']}")
    return region.view(group["offset"] + slot * group["slot_bytes"], getattr(torch, entry["dtype"]), entry["shape"])
