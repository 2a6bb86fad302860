"""Diagnostic: the checked launch, then planned launches, each compared with bitsandbytes."""

import sys

import torch

sys.path.insert(0, "tests")
from conftest import bnb_dequantize, make_weight

import nf4kernel
from nf4kernel import launch_cache

for nested in (True, False):
    for shape, dtype in [((64, 128), torch.bfloat16), ((1024, 4096), torch.float16)]:
        packed, state = make_weight(shape, dtype, nested=nested, device="cuda")
        expected = bnb_dequantize(packed, state)
        for call in range(3):
            plan = launch_cache._PLANS.get(id(state))
            got = nf4kernel.dequantize(packed, state)
            torch.cuda.synchronize()
            bad = (got != expected).flatten().nonzero().flatten()
            print(
                nested,
                shape,
                dtype,
                "call",
                call,
                "plan" if plan else "checked",
                "direct" if plan is not None and plan.launcher else "",
                "mismatches",
                bad.numel(),
                bad[:5].tolist(),
                flush=True,
            )
