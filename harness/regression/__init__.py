"""The regression check between two commits: ``python -m harness regression`` (``cli.py``), the
paired rounds that measure it, the rule that decides it."""
