"""harness/core/git.py: git's answer, or one line saying why not."""

from __future__ import annotations

import pytest

from harness.core import git
from harness.core.paths import ROOT


def test_the_answer_is_gits_output_stripped():
    assert git.output("rev-parse", "--show-toplevel", cwd=ROOT) == str(ROOT)
    assert git.output("rev-parse", "--show-toplevel", cwd=ROOT, binary=True).endswith(b"\n")


def test_a_failure_names_the_command_the_folder_and_gits_reason(tmp_path):
    with pytest.raises(git.GitError) as failed:
        git.output("rev-parse", "--verify", "no-such-ref^{commit}", cwd=ROOT)
    assert str(failed.value).startswith(f"git rev-parse --verify no-such-ref^{{commit}} (in {ROOT}): ")
    assert failed.value.stderr and failed.value.stderr in str(failed.value)


def test_a_callers_own_error_kind_and_an_unchecked_call():
    with pytest.raises(ValueError, match="no-such-ref"):
        git.output("rev-parse", "--verify", "no-such-ref", cwd=ROOT, error=ValueError)
    assert git.output("rev-parse", "--verify", "-q", "no-such-ref", cwd=ROOT, check=False) == ""


def test_config_pairs_reach_git():
    assert git.output("config", "user.name", cwd=ROOT, config=("user.name=someone",)) == "someone"
