"""The regression harness: the Challenge A workload, the speed gate against Unsloth, and the
performance reports. Run its entry points with ``python -m nf4kernel.harness.<name>``."""
