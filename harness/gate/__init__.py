"""The PR speed gate against Unsloth: ``python -m harness gate`` (``cli.py``), its measurement by the
trusted clock (``sandboxed.py``), its decision (``decision.py``) and the table it prints (``table.py``)."""
