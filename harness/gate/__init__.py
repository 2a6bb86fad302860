"""The PR speed gate against Unsloth: ``python -m harness gate`` (``cli.py``), its measurement in this
process (``measurement.py``), its decision (``decision.py``), the A/A noise check, the table it
prints, the sandboxed measurement of another tree's kernel, Unsloth's classic path."""
