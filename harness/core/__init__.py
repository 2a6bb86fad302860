"""What every feature of the harness shares: the records and their schemas, the sandbox, the kernel
under test staged alone, the GPU's state, the weights timed, the statistics, the policy, git, the exit
codes, the Markdown tables, the checkout's root."""
