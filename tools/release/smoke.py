"""The public API's smoke test for a release: run in a fresh venv that holds an installed nf4kernel
(the wheel or the sdist) beside torch, Triton and bitsandbytes, from a folder outside the checkout, so
that the import is the installed copy's.

    python tools/release/smoke.py [EXPECTED_VERSION]     # exit 0: every check passed; 1: one failed

Checks: the installed copy is imported (not a source tree), its version is the distribution's (and
EXPECTED_VERSION's, where given), py.typed ships, and every public function answers exactly: the
kernel's result torch.equal to bitsandbytes' and to the reference, into a buffer too, and under
``patch()``. On a CPU the kernel runs in Triton's interpreter.
"""

from __future__ import annotations

import sys
from importlib import metadata, resources
from pathlib import Path


def main(argv: list[str]) -> int:
    import bitsandbytes.functional as F
    import torch

    import nf4kernel

    where = Path(nf4kernel.__file__).resolve()
    version = metadata.version("nf4kernel")
    checks = {
        f"imported from site-packages ({where.parent})": "site-packages" in where.parts,
        f"__version__ {nf4kernel.__version__} is the distribution's {version}": nf4kernel.__version__ == version,
        "py.typed ships": resources.files("nf4kernel").joinpath("py.typed").is_file(),
    }
    if argv:
        checks[f"the version is {argv[0]}"] = version == argv[0]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # Rows a whole number of blocks long: bitsandbytes' own CPU kernel (0.50.2) restarts the blocks at
    # every row, so only there is its CPU result the oracle (tests/conftest.py, bnb_dequantize).
    weight = torch.randn(64, 256, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16).to(device)
    for quant_type in ("nf4", "fp4"):
        packed, state = F.quantize_4bit(weight, blocksize=64, compress_statistics=True, quant_type=quant_type)
        oracle = F.dequantize_4bit(packed, state)
        got = nf4kernel.dequantize(packed, state)
        buffer = torch.empty_like(oracle)
        nf4kernel.dequantize(packed, state, out=buffer)
        checks[f"{quant_type}: dequantize == bitsandbytes"] = torch.equal(got, oracle)
        checks[f"{quant_type}: dequantize_reference == bitsandbytes"] = torch.equal(
            nf4kernel.dequantize_reference(packed, state), oracle
        )
        checks[f"{quant_type}: out= == bitsandbytes"] = torch.equal(buffer, oracle)
        checks[f"{quant_type}: fast_dequantize == bitsandbytes"] = torch.equal(
            nf4kernel.fast_dequantize(packed, state), oracle
        )
        with nf4kernel.patch():
            checks[f"{quant_type}: bitsandbytes under patch() =="] = torch.equal(
                F.dequantize_4bit(packed, state), oracle
            )
    nf4kernel.unpatch()
    for name, passed in checks.items():
        print(f"{'ok  ' if passed else 'FAIL'} {name}")
    failed = [name for name, passed in checks.items() if not passed]
    print(f"smoke: {len(checks) - len(failed)} of {len(checks)} checks passed on {device}, nf4kernel {version}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
