"""Every command README.md, CONTRIBUTING.md and docs/ give, in the README's venv: it runs where the
page says it runs (test_docs.place reads that from the command and its paragraph), or, where the page
puts it elsewhere (.nox/torch/bin/python, the GPU runner, your own environment), run in the venv it
ends in one line naming where torch is, exit 4, never a traceback.

The README's venv is what README, "The two commands", makes: ``pip install -r requirements/dev.txt``
(nox, asv and what they pull in), no torch. This test makes it from this environment, without a
network: a venv whose site-packages holds the distributions requirements/dev.txt brings, linked from
here, and nothing else. The pages' commands that need a network, a GPU or GitHub are in
test_docs.NOT_RUN_IN_CI, and the page must say where each runs (test_docs.PLACES)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import test_commands_on_a_cpu as on_a_cpu
import test_docs as docs

ROOT = docs.ROOT
# What a venv made by `python3 -m venv` holds beside requirements/dev.txt's closure.
VENV_OWN = ("pip",)
# Modules the README's venv must lack: what measuring needs, and the test tools.
NOT_IN_THE_VENV = ("torch", "triton", "numpy", "bitsandbytes", "pytest")
REPOSITORY_PACKAGES = ("harness", "studies", "benchmarks", "dev", "nf4kernel", "tools", "tests")


# --- The README's venv ----------------------------------------------------------------------------------


def requirement_names(path: Path) -> list[str]:
    """The distributions a requirements file names, following its ``-r`` includes."""
    from packaging.requirements import Requirement

    names = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r"):
            names += requirement_names(path.parent / line[2:].strip())
        elif line:
            names.append(Requirement(line).name)
    return names


def closure(names: list[str]) -> tuple[list[importlib.metadata.Distribution], list[str]]:
    """The installed distributions ``names`` bring, with their dependencies (extras left out), and
    the names this environment lacks."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found, missing, todo = {}, [], list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found or name in missing:
            continue
        try:
            found[name] = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
            continue
        for requirement in map(Requirement, found[name].requires or []):
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(found.values()), missing


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """The README's venv: a venv of this Python whose site-packages links requirements/dev.txt's
    distributions from this environment, with their console scripts (nox, asv)."""
    wanted = requirement_names(ROOT / "requirements" / "dev.txt")
    dists, missing = closure(wanted)
    lacking = sorted(set(missing) & {name.lower() for name in wanted})
    if lacking:
        pytest.skip(f"this environment lacks {lacking}: the README's venv can't be made from it")
    dists += [dist for name in VENV_OWN for dist in closure([name])[0]]
    place = tmp_path_factory.mktemp("readme") / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(place)], check=True, capture_output=True)
    (site,) = place.glob("lib/python*/site-packages")
    for dist in dists:
        for top in {file.parts[0] for file in dist.files or [] if file.parts[0] != ".."}:
            link, target = site / top, Path(dist.locate_file(top))
            if not link.exists() and target.exists():
                link.symlink_to(target)
        for entry in dist.entry_points.select(group="console_scripts"):
            script = place / "bin" / entry.name
            script.write_text(
                f"#!{place / 'bin' / 'python'}\nimport sys\nimport {entry.module}\n"
                f"sys.exit({entry.module}.{entry.attr}())\n"
            )
            script.chmod(0o755)
    return place


def in_venv(venv: Path, command: str, cwd: Path, tmp: Path | None = None) -> subprocess.CompletedProcess:
    """``command`` as a shell in the activated venv runs it (its bin/ first on the PATH), GPU hidden;
    the checkout on the path as the checkout's root is where the pages' commands run from."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(CUDA_VISIBLE_DEVICES="", VIRTUAL_ENV=str(venv), PYTHONPATH=str(ROOT))
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    words = [word.format(root=ROOT, tmp=tmp) for word in shlex.split(command)]
    if (ROOT / words[0]).is_file():  # a repository script, as the page gives it from the root
        words[0] = str(ROOT / words[0])
    return subprocess.run(words, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def said(done: subprocess.CompletedProcess) -> str:
    return done.stdout + done.stderr


def test_the_venv_holds_nox_and_asv_and_no_torch(venv, tmp_path):
    """The stand-in is the README's venv: what requirements/dev.txt brings imports, what measures
    doesn't; so a command that passes here passes there."""
    probe = "import importlib.util as u, nox, asv; print(sorted(n for n in {names} if u.find_spec(n)))"
    done = in_venv(venv, f'python -c "{probe.format(names=NOT_IN_THE_VENV)}"', cwd=tmp_path)
    assert done.returncode == 0, said(done)
    assert done.stdout.strip() == "[]", f"the README's venv would lack these: {done.stdout}"


# --- The pages' commands --------------------------------------------------------------------------------


def given() -> list[tuple[str, str, str]]:
    """(where on a page, command, place) of every command the pages give."""
    return [
        (f"{page.relative_to(ROOT)}:{line}", command, docs.place(command, context))
        for page in docs.pages()
        for line, command, context in docs.commands_in_context(page)
    ]


def repository_python(command: str) -> bool:
    """A python command of the repository's own: ``python -m harness ...``, ``python tools/x.py``."""
    words = command.split()
    if words[0] not in ("python", docs.TORCH_PYTHON) or len(words) < 2:
        return False
    target = words[2] if words[1] == "-m" and len(words) > 2 else words[1]
    return target.split(".")[0] in REPOSITORY_PACKAGES or (ROOT / target).is_file()


def documented(command: str) -> on_a_cpu.Documented | None:
    return next(
        (
            doc
            for doc in on_a_cpu.DOCUMENTED
            if command in {c for form in (doc.command, *doc.also) for c in docs.normalized(form)}
        ),
        None,
    )


PYTHON = [entry for entry in given() if repository_python(entry[1])]
NEEDS = re.compile(r"needs (?:torch|numpy)|torch is not importable")
WHERE_TORCH_IS = re.compile(r"\.nox/torch/bin/python|`nox -s \w+`|GPU machine|GPU image")


@pytest.mark.parametrize(("at", "command", "where"), PYTHON, ids=[f"{at} {command}" for at, command, _ in PYTHON])
def test_a_python_command_runs_where_its_page_says_or_says_where_in_one_line(venv, tmp_path, at, command, where):
    """In the README's venv, the command as its page gives it (``python`` the venv's): run there
    where the page puts it there, with the documented outcome; where the page puts it elsewhere, the
    documented outcome (it needs no torch after all) or one line naming where torch is, exit 4.
    A command no test can run here (test_docs.NOT_RUN_IN_CI) shows its --help instead."""
    doc = documented(command)
    words = command.split()
    form = (doc.run_as or doc.command) if doc else " ".join([*words[: 3 if words[1] == "-m" else 2], "--help"])
    form = re.sub(r"^\.nox/torch/bin/python\b", "python", form)  # the venv's python, the page's form
    done = in_venv(venv, form, cwd=on_a_cpu.place_to_run(tmp_path, form) if doc else ROOT, tmp=tmp_path)
    code, says = (doc.code, doc.says) if doc else (0, "usage:")
    assert "Traceback" not in said(done), f"{at}: `{form}` in the README's venv:\n{said(done)[-3000:]}"
    lines = said(done).strip().splitlines()
    if NEEDS.search(said(done)):
        assert where != docs.VENV, (
            f"{at}: the page gives `{command}` to run in the README's venv, which lacks what it needs; "
            f"write it as {docs.TORCH_PYTHON} ... or say where it runs ({list(docs.PLACES)}):\n{lines[-1]}"
        )
        assert done.returncode == 4 and NEEDS.search(lines[-1]) and WHERE_TORCH_IS.search(lines[-1]), (
            f"{at}: without torch `{form}` must end in one line naming where it is, exit 4; "
            f"it exited {done.returncode}:\n{said(done)[-2000:]}"
        )
    else:
        assert done.returncode == code and says in said(done), (
            f"{at}: `{form}` in the README's venv exited {done.returncode}, not {code} with {says!r}:\n"
            + said(done)[-3000:]
        )


NOX = [entry for entry in given() if entry[1].startswith("nox ")]


def test_every_nox_session_a_page_gives_is_one_the_venv_s_nox_lists(venv):
    """nox is the venv's; the sessions' own runs are test_commands_on_a_cpu.py's (in the environment
    they build, through --no-venv)."""
    done = in_venv(venv, "nox -l", cwd=ROOT)
    assert done.returncode == 0, said(done)
    listed = set(re.findall(r"^[*-] (\w+)", done.stdout, re.M))
    assert {"tests", "bench", "gate"} <= listed, done.stdout
    unknown = [
        f"{at}: `{command}`"
        for at, command, _ in NOX
        if (session := re.search(r"-s (\S+)", command)) and session.group(1) != "<session>"
        if session.group(1) not in listed
    ]
    assert not unknown, f"sessions nox -l doesn't list ({sorted(listed)}):\n" + "\n".join(unknown)


ASV = sorted({command for _, command, _ in given() if command.startswith("asv ")})


@pytest.mark.parametrize("command", ASV)
def test_an_asv_command_a_page_gives_is_the_venv_s(venv, command):
    """asv is the venv's, and takes the command (its real runs: test_site_publish.py and
    test_site_preview.py)."""
    done = in_venv(venv, f"{command} --help", cwd=ROOT)
    assert done.returncode == 0 and "usage:" in done.stdout and "Traceback" not in said(done), said(done)[-2000:]


# What the page must say for a command CI can't run: where it runs, in words test_docs.PLACES reads.
PLACES_FOR = {
    docs.GPU_RUNNER: {docs.RUNNER},
    docs.GITHUB: {docs.OWN_MACHINE},
    docs.HOST: {docs.OWN_MACHINE, docs.RUNNER},
    docs.PACKAGES: {docs.RUNNER, docs.YOURS, docs.NETWORK},
}


def test_a_command_ci_cant_run_says_where_it_runs():
    unsaid = [
        f"{at}: `{command}` ({why.kind}): the page puts it in {where}; say one of {sorted(PLACES_FOR[why.kind])}"
        for at, command, where in given()
        if (why := docs.NOT_RUN_IN_CI.get(command)) and why.kind in PLACES_FOR
        if where not in PLACES_FOR[why.kind]
    ]
    assert not unsaid, "\n".join(unsaid)


# --- --help ---------------------------------------------------------------------------------------------


def harness_commands(venv) -> list[str]:
    done = in_venv(venv, "python -m harness --help", cwd=ROOT)
    return [line.split()[0] for line in done.stdout.splitlines()[2:] if line.strip()]


def description(help_text: str) -> str:
    """argparse's description: the paragraph between the usage lines and the first section."""
    paragraphs = [" ".join(p.split()) for p in help_text.split("\n\n")]
    body = [p for p in paragraphs[1:] if p and not re.match(r"(?:positional arguments|options|optional arguments):", p)]
    return body[0] if body and not paragraphs[1].startswith(("positional", "options")) else ""


@pytest.mark.parametrize(
    "target",
    [f"-m harness {name}" for name in ("gate", "gpu-types", "regression", "site")]
    + ["tools/release/support_table.py", "-m studies.aa_noise", "-m studies.changepoint_power"],
)
def test_help_says_a_whole_first_paragraph(venv, target):
    """--help in the README's venv: exit 0, and the description is whole sentences (argparse's
    description was the docstring's first line, which stopped mid-sentence)."""
    done = in_venv(venv, f"python {target} --help", cwd=ROOT)
    assert done.returncode == 0 and "Traceback" not in said(done), said(done)[-2000:]
    about = description(done.stdout)
    assert about and re.search(r"[.!?][)\"'`]?$", about), f"`python {target} --help` stops mid-sentence: {about!r}"


def test_every_harness_command_s_help_says_a_whole_first_paragraph(venv):
    """Every command `python -m harness` lists, in the README's venv."""
    names = harness_commands(venv)
    assert {"gate", "gpu-types", "bench"} <= set(names), names
    cut = {}
    for name in names:
        done = in_venv(venv, f"python -m harness {name} --help", cwd=ROOT)
        about = description(done.stdout)
        if done.returncode != 0 or "Traceback" in said(done) or not re.search(r"[.!?][)\"'`]?$", about):
            cut[name] = (done.returncode, about or said(done)[-500:])
    assert not cut, cut


def test_the_description_reader_sees_a_cut_sentence():
    cut = "usage: x [-h]\n\nThe GPU types the GPU checks run on:\n``.github/gpu-types.toml``,\n\noptions:\n  -h\n"
    whole = "usage: x [-h]\n\nThe GPU types, in ``.github/gpu-types.toml``.\n\npositional arguments:\n  t\n"
    assert description(cut) == "The GPU types the GPU checks run on: ``.github/gpu-types.toml``,"
    assert description(whole) == "The GPU types, in ``.github/gpu-types.toml``."
    assert description("usage: x [-h]\n\noptions:\n  -h\n") == ""
