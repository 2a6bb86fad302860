"""The GitHub side: the approval and the verdict gpu.yml posts, the GPU test job, the pins' check,
the workflows run under nektos act (the CPU jobs, the GPU rehearsal) with the stand-in actions, the
fake GitHub API and the planted slowdowns."""
