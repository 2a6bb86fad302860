"""What every feature of the harness shares: the records and their schemas, the sandbox, the kernel
under test staged alone, the GPU's state and versions, the one measuring stack (the workload and its
timings), the statistics (one bootstrap), git, the exit codes, the Markdown tables, the checkout's root."""
