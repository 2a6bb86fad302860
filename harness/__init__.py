"""The CI harness, not part of the wheel: what a runner runs to judge a kernel (the trusted clock, the
speed gate, the regression check, the history and its site, the approval). On a pull request the
workflows run the *base's* copy against the PR's ``nf4kernel/`` alone (``core/kernel_source.py``), so
a PR that edits the harness changes its verdict only once merged. ``python -m harness COMMAND``.
"""
