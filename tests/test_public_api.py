"""The package's public API is visible (``dir()``, ``help()``, editors) though it loads on first use,
and ``import nf4kernel`` stays free of torch and Triton."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest
from conftest import ROOT, child_env

import nf4kernel


def _fresh(code: str) -> dict:
    """What ``code`` prints as JSON, run in a new process: there nothing has loaded the API yet (in
    this one, other tests have)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_dir_lists_the_api_before_it_loads_and_loads_nothing():
    found = _fresh(
        "import json, sys, nf4kernel\n"
        "names = dir(nf4kernel)\n"
        "print(json.dumps({'dir': names, 'all': nf4kernel.__all__, 'loaded': sorted(\n"
        "    m for m in ('torch', 'triton', 'nf4kernel.api') if m in sys.modules)}))"
    )
    assert set(found["all"]) <= set(found["dir"])
    assert found["dir"] == sorted(found["dir"])
    assert found["loaded"] == []


@pytest.mark.parametrize("name", nf4kernel.__all__)
def test_every_public_name_resolves_to_a_documented_function(name):
    value = getattr(nf4kernel, name)
    assert callable(value) and value.__doc__
    assert value.__module__.startswith("nf4kernel.")


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'nf4kernel' has no attribute 'dequantise'"):
        nf4kernel.dequantise  # noqa: B018


def test_help_shows_each_public_function_with_its_docstring():
    found = _fresh(
        "import json, pydoc, nf4kernel\n"
        "print(json.dumps({'text': pydoc.render_doc(nf4kernel, renderer=pydoc.plaintext)}))"
    )
    functions = found["text"].split("\nFUNCTIONS\n", 1)[1].split("\nDATA\n", 1)[0]
    for name in nf4kernel.__all__:
        assert f"\n    {name}(" in functions, name
        first_line = getattr(nf4kernel, name).__doc__.strip().splitlines()[0]
        assert first_line in functions, name
    for name in ("dequantize", "fast_dequantize", "patch"):
        assert f"{name}(" in found["text"]


def test_static_tools_see_every_public_name():
    """Editors and type checkers don't run ``__getattr__``: the ``if TYPE_CHECKING:`` imports give
    them each name of ``__all__``, from the module that defines it."""
    tree = ast.parse((ROOT / "nf4kernel" / "__init__.py").read_text())
    guarded = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    imported = {
        alias.name: f"nf4kernel.{node.module}"
        for node in guarded.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert sorted(imported) == sorted(nf4kernel.__all__)
    for name, module in imported.items():
        assert getattr(nf4kernel, name).__module__ == module, name
