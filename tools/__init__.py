"""The workshop's tools beside the harness: the pins' check (``python -m tools.pins``), the release's
scripts, the GPU runner's setup. Each may import ``harness.core``; the harness imports none of them."""
