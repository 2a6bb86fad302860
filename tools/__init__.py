"""CI tooling that runs on the CPU: the pin check and the local runs of the GitHub workflows (act)."""
