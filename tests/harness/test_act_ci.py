"""ci.yml's real lint job (ruff, actionlint, zizmor, the pin check), run on this machine by nektos act
through dev/rehearsal/act_ci.py, with setup-python's labelled stand-in. The test legs take minutes each:
`nox -s act -- tests` runs the one of this machine's Python."""

from __future__ import annotations

import pytest

from dev.rehearsal import act, act_ci
from tools import pins

# Where nox installed requirements/ci-tools.txt, a missing act raises here: loud, not a skip.
if (reason := act.why_not_here()) is not None:
    pytest.skip(reason, allow_module_level=True)
if not act.ci_tools_installed():  # the job installs nox and the linters from the package index
    pytest.skip("needs the package index; `nox -s tests` or `nox -s act` runs it", allow_module_level=True)


def test_the_lint_job_of_ci_yml_passes_under_act(capsys):
    # The job's pin check asks the package indexes: where one can't be reached it decides nothing
    # (exit 3), the job fails, and this test could tell nothing else from that.
    if pins.main([]) == pins.EXIT_UNDECIDED:
        pytest.skip(f"the job's pin check can't decide here: {capsys.readouterr().out.strip().splitlines()[-1]}")
    assert act_ci.main(["lint"]) == 0  # act's log of the job is in this test's captured output


def test_a_job_ci_yml_does_not_have_is_refused():
    assert act_ci.main(["no-such-job"]) == 2
