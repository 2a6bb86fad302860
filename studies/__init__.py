"""Measurements for the people tuning the kernel and the harness, never part of a verdict: the tile
sweep, the performance report, the regression check's power."""
