"""Probes a person runs by hand on a GPU machine, each a question about one cost (a call's host
time, launch gaps, bandwidth, Challenge A's ceiling, the clock's gap): ``python -m studies.probes.X``."""
