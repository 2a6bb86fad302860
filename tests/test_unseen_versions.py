"""A torch or Triton release no test has run the private launch handles on (a user's newer one, the
package having no upper bound) takes Triton's public launch path: the same bits, said once."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import triton
from conftest import child_env

from nf4kernel import _triton_compat

# In a child Python (the handles are read once, at import): ``library.__version__`` faked before the
# kernel loads, then three calls (one into a given buffer), every warning recorded ("always": a second warning
# would be seen, so a count of one is the module's own doing).
_CHILD = """
import json, sys, warnings
import torch, triton
library, fake = sys.argv[1], sys.argv[2]
if fake == "":
    pass
elif library == "torch":  # a TorchVersion, as torch's own: code compares it with tuples
    torch.__version__ = torch.torch_version.TorchVersion(fake)
else:
    triton.__version__ = fake
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import bitsandbytes.functional as F
    import nf4kernel
    from nf4kernel import _triton_compat
    weight = torch.randn(256, 192, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    packed, state = F.quantize_4bit(weight, blocksize=64, compress_statistics=True, quant_type="nf4")
    expected = nf4kernel.dequantize_reference(packed, state)
    results = [nf4kernel.dequantize(packed, state), nf4kernel.dequantize(packed, state)]
    results.append(nf4kernel.dequantize(packed, state, out=torch.empty_like(expected)))
ours = [str(w.message) for w in caught if str(w.message).startswith("nf4kernel:")]
print(json.dumps({
    "equal": [torch.equal(r, expected) for r in results],
    "oracle": torch.equal(expected, F.dequantize_4bit(packed, state)),
    "messages": ours,
    "public_path_only": _triton_compat.public_path_only(),
    "quick_key": _triton_compat.tensor_guards() is not None,
}))
"""


def run_child(library: str, fake: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, library, fake], env=child_env(), capture_output=True, text=True, timeout=170
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.interpreter
@pytest.mark.parametrize(("library", "fake"), [("triton", "3.99.0"), ("torch", "2.99.0+cpu")])
def test_an_unseen_release_takes_the_public_path_exactly_and_says_so_once(library, fake):
    seen = run_child(library, fake)
    assert seen["equal"] == [True, True, True] and seen["oracle"]
    assert seen["public_path_only"] and not seen["quick_key"]  # every handle off, the quick key's too
    assert len(seen["messages"]) == 1, seen["messages"]
    (message,) = seen["messages"]
    assert f"{library} {fake}" in message and "not yet tested with nf4kernel" in message
    assert "public launch path" in message


@pytest.mark.interpreter
def test_a_seen_release_keeps_its_handles_and_says_nothing():
    """The same child on this process's own torch and Triton (a CI leg's: SEEN lists them)."""
    assert _triton_compat.unseen_versions() == {}, "a CI leg runs a release SEEN does not list: add it"
    seen = run_child("triton", "")
    assert seen["equal"] == [True, True, True] and seen["messages"] == []
    assert not seen["public_path_only"] and seen["quick_key"] == (_triton_compat.available()["tensor_guards"])


@pytest.mark.parametrize(
    ("versions", "unseen"),
    [
        ({"torch": "2.14.1+cpu", "triton": "3.8.0"}, {}),  # a patch release or build tag changes nothing
        ({"torch": "2.11.0", "triton": "3.6.0"}, {}),
        ({"torch": "2.15.0+cu132", "triton": "3.9.0"}, {}),
        ({"torch": "2.16.0", "triton": "3.10.0"}, {"torch": "2.16.0", "triton": "3.10.0"}),
        ({"torch": "2.12.1", "triton": "3.7.1"}, {"torch": "2.12.1"}),  # 2.12: no test has run it
        ({"torch": "2.1.0", "triton": "3.60.0"}, {"torch": "2.1.0", "triton": "3.60.0"}),  # not a prefix match
    ],
)
def test_which_releases_are_unseen(versions, unseen):
    assert _triton_compat.unseen_versions(versions) == unseen


def test_this_process_versions_are_read_as_the_library_reports_them():
    assert _triton_compat.unseen_versions() == _triton_compat.unseen_versions(
        {"torch": str(torch.__version__), "triton": triton.__version__}
    )
