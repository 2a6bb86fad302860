"""The verdicts' policy (``harness/core/policy.py``): every threshold, limit, round count, resample
count and seed in ``.github/gpu-types.toml``, read by one module, refused by name where it is wrong."""

from __future__ import annotations

import pytest

from dev.rehearsal import rehearsal_world
from harness.clock import judge
from harness.core import policy
from harness.gate import decision
from harness.history import changepoints
from harness.regression import clocked
from harness.regression import rule as regression_rule


def test_the_rules_decide_by_the_committed_policy():
    gate, regression = policy.gate(), policy.regression()
    assert (decision.DEFAULT_THRESHOLD, decision.MIN_ROUNDS, decision.RESAMPLES, decision.SEED) == (
        gate.threshold,
        gate.rounds,
        gate.resamples,
        gate.seed,
    )
    assert (regression_rule.DEFAULT_MIN_CHANGE, regression_rule.DEFAULT_MIN_GROUP_CHANGE) == (
        regression.min_change,
        regression.min_group_change,
    )
    assert (clocked.FIRST_ROUNDS, clocked.SECOND_ROUNDS) == (regression.first_rounds, regression.second_rounds)
    clock = policy.clock()
    assert (judge.CHECKS_PER_BATCH, judge.QUIET_FACTOR, judge.QUIET_SLACK_S, judge.QUIET_WAIT_S) == (
        clock.checks_per_batch,
        clock.quiet_factor,
        clock.quiet_slack_us * 1e-6,
        clock.quiet_wait_s,
    )
    assert judge.CALL_TIMEOUT_S == clock.call_timeout_s
    found = policy.changepoints()
    assert (changepoints.FLOOR, changepoints.NOISE_FACTOR, changepoints.PERSIST) == (
        found.floor,
        found.noise_factor,
        found.persist,
    )


@pytest.mark.parametrize(
    "edit,problem",
    [
        (lambda t: t.replace("[policy.gate]", "[policy.gates]"), r"\[policy.gate\]: missing"),
        (lambda t: t.replace("seed = 10", "seed = 10\nseeds = 3"), r"\[policy.gate\]: unknown \['seeds'\]"),
        (lambda t: t.replace("rounds = 5", "rounds = 5.5"), "rounds = 5.5 is not a whole number"),
        (lambda t: t.replace("threshold = 1.15", 'threshold = "1.15"'), "threshold = '1.15' is not a finite number"),
        (lambda t: t.replace("[policy.gate]", "[policy.gate"), "gpu-types.toml: "),
    ],
    ids=["no-section", "unknown-field", "a-fraction-of-a-round", "a-string", "not-toml"],
)
def test_a_wrong_policy_is_refused_naming_the_field(tmp_path, edit, problem):
    path = tmp_path / "gpu-types.toml"
    path.write_text(edit(policy.FILE.read_text()))
    with pytest.raises(ValueError, match=problem):
        policy.gate(path)


def test_a_rehearsal_worlds_file_keeps_the_policy(tmp_path):
    path = tmp_path / "gpu-types.toml"
    path.write_text(rehearsal_world.dump_types(policy.gpu_types(), policy.read().get("policy")))
    assert policy.gate(path) == policy.gate() and policy.regression(path) == policy.regression()
    assert policy.changepoints(path) == policy.changepoints() and policy.clock(path) == policy.clock()
    assert policy.gpu_types(path) == policy.gpu_types()
