"""What every feature of the harness shares: the records and their schemas, the sandbox, the kernel
under test staged alone, the GPU's state and versions, the Challenge A workload, the statistics
(one bootstrap), the checkout's root."""
