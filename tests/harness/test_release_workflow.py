"""release.yml rehearsed under nektos act up to the publish job: on a version tag, the build job builds
the sdist and the wheel, twine checks them, the wheel holds nf4kernel/ (its modules and py.typed) and
its dist-info alone, and each is installed into a fresh venv where the public API's smoke test passes.
The publish job is checked as written (trusted publishing: OIDC, a pinned action, no token); it is the
one part that needs GitHub and PyPI, so act never runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

import nf4kernel
import noxfile
from dev.rehearsal import act, act_ci

ROOT = act_ci.ROOT
RELEASE = ROOT / ".github" / "workflows" / "release.yml"
STANDINS = ROOT / "dev" / "rehearsal" / "standins"
CHECK_DIST = ROOT / "tools" / "release" / "check_dist.py"
VERSION = nf4kernel.__version__
WORKFLOW = yaml.safe_load(RELEASE.read_text())


def uses(job: str, action: str) -> str:
    (ref,) = [s["uses"] for s in WORKFLOW["jobs"][job]["steps"] if s.get("uses", "").startswith(action + "@")]
    return ref


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """The build job under act on a push of the tag v<version>: (act's exit code, its log, the dist artifact)."""
    if (reason := act.why_not_here()) is not None:
        pytest.skip(reason)
    if not act.ci_tools_installed():  # the job installs build, twine and nox from the package index
        pytest.skip("needs the package index; `nox -s tests` runs it")
    artifacts = tmp_path_factory.mktemp("artifacts")
    # act's steps run with a HOME of their own: pip's cache is named, so that a rehearsal downloads
    # Triton and bitsandbytes once, not twice (once per fresh venv) every run.
    pip_cache = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
    env = {"REHEARSAL_ARTIFACTS": str(artifacts), "PIP_CACHE_DIR": pip_cache}
    # PyTorch's CPU index, where it doesn't answer: the way out the session names, at this machine's
    # copy of the CPU build (act's steps don't see this user's pip configuration).
    if not noxfile.index_answers(noxfile.torch_cpu_index()):
        version = noxfile.pin_of(str(ROOT / noxfile.TORCH_CPU_REQUIREMENTS), "torch")
        folders = [
            f for f in os.environ.get("PIP_FIND_LINKS", "").split() if list(Path(f).glob(f"torch-{version}+cpu-*"))
        ]
        if not folders:
            pytest.skip(f"PyTorch's CPU index doesn't answer and no local torch {version}+cpu wheel is found")
        env[noxfile.TORCH_OVERRIDE] = folders[0]
    local = {uses("build", "actions/setup-python"): STANDINS / "setup-python"}
    local[uses("build", "actions/upload-artifact")] = STANDINS / "upload-artifact"
    done = act.run(
        "push",
        repo=ROOT,
        workflows=RELEASE,
        labels=["ubuntu-latest"],
        payload={"ref": f"refs/tags/v{VERSION}", "ref_name": f"v{VERSION}"},
        env=env,
        local_actions=local,
        extra=["-j", "build"],
        timeout=840,
        env_remove=("PYTEST_", "NOX_"),
    )
    return done.returncode, done.stdout + done.stderr, artifacts / "dist"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_build_job_builds_checks_installs_and_smoke_tests_both_distributions(rehearsal):
    code, log, dist = rehearsal
    assert code == 0, log[-6000:]
    assert f"the tag v{VERSION} is nf4kernel {VERSION}" in log
    assert log.count("PASSED") >= 2, log[-3000:]  # twine check, each distribution
    assert log.count(f"checks passed on cpu, nf4kernel {VERSION}") == 2, log[-3000:]
    assert "FAIL " not in log
    assert sorted(p.name for p in dist.iterdir()) == [
        f"nf4kernel-{VERSION}-py3-none-any.whl",
        f"nf4kernel-{VERSION}.tar.gz",
    ]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_released_wheel_holds_the_package_and_py_typed_alone(rehearsal):
    code, log, dist = rehearsal
    assert code == 0, log[-3000:]
    names = zipfile.ZipFile(dist / f"nf4kernel-{VERSION}-py3-none-any.whl").namelist()
    package = {n for n in names if not n.startswith(f"nf4kernel-{VERSION}.dist-info/")}
    assert package == {f"nf4kernel/{p.name}" for p in (ROOT / "nf4kernel").glob("*.py")} | {"nf4kernel/py.typed"}
    with tarfile.open(dist / f"nf4kernel-{VERSION}.tar.gz") as sdist:
        members = sdist.getnames()
    assert f"nf4kernel-{VERSION}/nf4kernel/py.typed" in members and f"nf4kernel-{VERSION}/LICENSE" in members


def test_the_publish_job_is_trusted_publishing_with_a_pinned_action_and_no_token():
    publish = WORKFLOW["jobs"]["publish"]
    assert WORKFLOW[True] == {"push": {"tags": ["v*"]}}  # YAML reads the key `on` as true
    assert publish["needs"] == "build" and publish["environment"]["name"] == "pypi"
    assert publish["permissions"] == {"id-token": "write"}
    assert WORKFLOW["permissions"] == {"contents": "read"} and "permissions" not in WORKFLOW["jobs"]["build"]
    action = uses("publish", "pypa/gh-action-pypi-publish")
    assert len(action.split("@")[1]) == 40 and all(c in "0123456789abcdef" for c in action.split("@")[1])
    step = next(s for s in publish["steps"] if s.get("uses") == action)
    assert set(step.get("with", {})) == {"packages-dir"}  # no password, no token: OIDC
    assert "secrets." not in RELEASE.read_text()


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        ([f"--tag=v{VERSION}"], 0, f"the tag v{VERSION} is nf4kernel {VERSION}"),
        (["--tag=v0.0.0-not-it"], 1, f"is not v{VERSION}"),
        ([], 2, "name a --tag or a wheel"),
    ],
)
def test_the_tag_must_name_the_version(args, code, said):
    done = subprocess.run([sys.executable, str(CHECK_DIST), *args], capture_output=True, text=True)
    assert done.returncode == code and said in done.stdout + done.stderr


def test_a_wheel_with_anything_more_or_less_is_refused(tmp_path):
    wheel = tmp_path / f"nf4kernel-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for p in (ROOT / "nf4kernel").glob("*.py"):
            archive.writestr(f"nf4kernel/{p.name}", "")
        archive.writestr("harness/__init__.py", "")  # no py.typed, and something outside the package
    done = subprocess.run([sys.executable, str(CHECK_DIST), str(wheel)], capture_output=True, text=True)
    assert done.returncode == 1
    assert "harness/__init__.py: outside nf4kernel/" in done.stdout and "nf4kernel/py.typed: missing" in done.stdout
