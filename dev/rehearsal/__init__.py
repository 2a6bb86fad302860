"""The workshop's rehearsal of the workflows: gpu.yml and history.yml run for real under nektos act
on a GPU machine (``rehearse``), ci.yml's jobs on this one (``act_ci``), with the stand-in actions,
the fake GitHub API, the scenarios, the planted slowdowns and the attacks on the clock. Nothing a
runner runs to judge a pull request imports it; ``docs/rehearsal.md`` says what each proves."""
