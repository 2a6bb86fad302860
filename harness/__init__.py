"""The CI harness: not part of the nf4kernel package (the wheel ships ``nf4kernel/`` alone).

It judges a kernel: the speed gate against Unsloth and its decision, the asv suite's driver, the
regression check, the performance history and its site, the approval of a commit for the GPU runner,
and the local runs of the workflows under nektos act. On a pull request the workflows run the
*base's* copy of this folder against the PR's ``nf4kernel/`` alone (``kernel_source.py``), so a PR
that edits the harness changes its own verdict only once it is merged. One program:
``python -m harness COMMAND`` (``__main__.py``), or the nox sessions that wrap it.
"""
