"""harness/core/kernel_source.py: the tree under test contributes its nf4kernel/ and nothing else, only
its .py files (any other file in it is refused), and the gate measures exactly that one
(``--kernel``), or refuses to."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from dev.rehearsal import rehearsal_world as scratch
from harness.core import kernel_source
from harness.gate import cli as gate

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def checkouts(tmp_path):
    """This tree (as it is) as the trusted checkout, and a PR's checkout beside it whose commit adds
    a harness/ that would pass anything, a sitecustomize.py, and a module of its own in nf4kernel/."""
    trusted = tmp_path / "trusted"
    head = scratch.snapshot(ROOT)
    scratch.git("clone", "-q", "--no-checkout", str(ROOT), str(trusted), cwd=tmp_path)
    scratch.git("fetch", "-q", str(ROOT), head, cwd=trusted)
    scratch.git("checkout", "-q", "--detach", head, cwd=trusted)
    candidate = tmp_path / "candidate"
    scratch.git("clone", "-q", str(trusted), str(candidate), cwd=tmp_path)
    (candidate / "harness" / "gate" / "decision.py").write_text("DEFAULT_THRESHOLD = 0.0\n")
    (candidate / "sitecustomize.py").write_text("raise SystemExit('the PR ran code outside nf4kernel/')\n")
    (candidate / "nf4kernel" / "marker.py").write_text("WHO = 'the candidate'\n")
    scratch.git("add", "-A", cwd=candidate)
    scratch.git("commit", "-q", "-m", "a candidate", cwd=candidate)
    return trusted, candidate


def test_a_checkout_beside_this_one_contributes_its_nf4kernel_alone(checkouts):
    trusted, candidate = checkouts
    sha = scratch.git("rev-parse", "HEAD", cwd=candidate)
    with kernel_source.staged(str(candidate), repo=trusted) as kernel:
        assert kernel.commit == sha
        assert [p.name for p in kernel.path.iterdir()] == ["nf4kernel"]
        assert (kernel.path / "nf4kernel" / "marker.py").is_file()
    assert scratch.git("cat-file", "-t", sha, cwd=trusted) == "commit"  # fetched: asv can record it


def test_a_commit_of_this_repository_is_a_source_too(checkouts):
    trusted, _ = checkouts
    with kernel_source.staged("HEAD", repo=trusted) as kernel:
        assert kernel.commit == scratch.git("rev-parse", "HEAD", cwd=trusted)
        assert not (kernel.path / "nf4kernel" / "marker.py").exists()


@pytest.mark.parametrize("source", ["no-such-ref", "/nonexistent/checkout"])
def test_a_source_that_names_no_commit_is_refused(checkouts, source):
    trusted, _ = checkouts
    with pytest.raises(kernel_source.SourceError, match="neither a commit"):
        kernel_source.resolve(source, repo=trusted)


def test_a_commit_without_the_package_is_refused(checkouts):
    trusted, candidate = checkouts
    scratch.git("rm", "-r", "-q", "nf4kernel", cwd=candidate)
    scratch.git("commit", "-q", "-m", "no kernel", cwd=candidate)
    with (
        pytest.raises(kernel_source.SourceError, match="has no nf4kernel/"),
        kernel_source.staged(str(candidate), repo=trusted),
    ):
        pass


def package_commit(repo: Path, files: dict[str, bytes | Path], message: str = "a package") -> str:
    """A throwaway repository at ``repo`` whose one commit holds ``files`` (a path under the
    repository: its bytes, or a Path for a symlink pointing there), with ``message``; the commit's hash."""
    scratch.git("init", "-q", str(repo), cwd=repo.parent)
    for name, content in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            path.symlink_to(content)
        else:
            path.write_bytes(content)
    scratch.git("add", "-A", cwd=repo)
    scratch.git("commit", "-q", "-m", message, cwd=repo)
    return scratch.git("rev-parse", "HEAD", cwd=repo)


def staged_files(into: Path) -> list[str]:
    return sorted(str(p.relative_to(into)) for p in into.rglob("*") if not p.is_dir())


def test_a_package_of_py_files_alone_is_staged_as_it_is(tmp_path):
    files = {"nf4kernel/__init__.py": b"", "nf4kernel/ops/__init__.py": b"", "nf4kernel/ops/fast.py": b"X = 1\n"}
    commit = package_commit(tmp_path / "repo", {**files, "README.md": b"outside the package\n"})
    into = tmp_path / "staged"
    assert kernel_source.extract(commit, into, repo=tmp_path / "repo") == into
    assert staged_files(into) == sorted(files)


@pytest.mark.parametrize(
    "name,content",
    [
        ("nf4kernel/_fast.so", b"\x7fELF\x02\x01\x01\x00 compiled, unreadable"),
        ("nf4kernel/table.bin", bytes(range(256))),
        ("nf4kernel/hook.pth", b"import os\n"),
        ("nf4kernel/sub/_impl.pyd", b"MZ"),
        ("nf4kernel/leak.py", Path("../outside.py")),  # a symlink, even one named .py
        ("nf4kernel/leak", Path("../harness")),
        ("nf4kernel/sub/py.typed", b""),  # the marker belongs at the package's root alone
        ("nf4kernel/py.typed", Path("../outside.py")),  # and is a file, never a link
    ],
)
def test_anything_but_a_py_file_in_the_package_is_refused(tmp_path, name, content):
    files = {"nf4kernel/__init__.py": b"", "outside.py": b"", "harness/x.py": b"", name: content}
    commit = package_commit(tmp_path / "repo", files)
    into = tmp_path / "staged"
    with pytest.raises(kernel_source.SourceError, match=r"only \.py files are staged") as refused:
        kernel_source.extract(commit, into, repo=tmp_path / "repo")
    assert f"not a .py file: {name};" in str(refused.value)
    assert not into.exists()  # refused before anything was written


def test_the_typed_marker_is_allowed_and_never_staged(tmp_path):
    """PEP 561's py.typed ships with the package; nothing imports it, so the staged kernel is still its
    .py files alone."""
    files = {"nf4kernel/__init__.py": b"X = 1\n", "nf4kernel/py.typed": b"partial\n"}
    commit = package_commit(tmp_path / "repo", files)
    into = kernel_source.extract(commit, tmp_path / "staged", repo=tmp_path / "repo")
    assert staged_files(into) == ["nf4kernel/__init__.py"]


def archived(commit: str, path: str, repo: Path) -> bytes | None:
    """``path`` as ``git archive`` writes it out (how the kernel was staged before), None if
    the archive leaves it out: the control that shows each case below would change the bytes."""
    tar = subprocess.run(["git", "archive", "--format=tar", commit], cwd=repo, capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as archive:
        return archive.extractfile(path).read() if path in archive.getnames() else None


CARRIED = "a harmless title\n\nPWNED = True\n"  # a commit message with code in it, for %B


@pytest.mark.parametrize(
    "path,attributes,content,changed",
    [
        # the commit message lands in the file: code no diff showed, run on import
        ("nf4kernel/__init__.py", "export-subst", b"# $Format:%B$\nSAFE = 1\n", b"PWNED = True"),
        ("nf4kernel/__init__.py", "ident", b"SAFE = 1  # $Id$\n", b"$Id: "),
        ("nf4kernel/__init__.py", "text eol=crlf", b"SAFE = 1\n", b"\r\n"),
        # a filter driver's smudge (Git LFS's, where the runner has git-lfs) rewrites the file
        ("nf4kernel/__init__.py", "filter=evil", b"SAFE = 1\n", b"EVIL"),
        ("nf4kernel/ops.py", "export-ignore", b"SAFE = 1\n", None),
    ],
    ids=["export-subst", "ident", "eol", "filter-driver", "export-ignore"],
)
def test_the_kernel_is_staged_as_its_blobs_whatever_the_commits_gitattributes_say(
    tmp_path, path, attributes, content, changed
):
    """The candidate's own .gitattributes (outside nf4kernel/, so not refused) must not change
    what is staged. The repository's config has the filter, as a runner's global config has LFS's."""
    repo = tmp_path / "repo"
    files = {"nf4kernel/__init__.py": b"SAFE = 1\n", path: content, ".gitattributes": f"{path} {attributes}\n".encode()}
    commit = package_commit(repo, files, message=CARRIED)
    scratch.git("config", "filter.evil.smudge", "sed -e s/SAFE/EVIL/", cwd=repo)
    blob = subprocess.run(["git", "cat-file", "blob", f"{commit}:{path}"], cwd=repo, capture_output=True, check=True)
    assert blob.stdout == content
    control = archived(commit, path, repo)
    assert control != content and (changed is None) == (control is None)
    assert changed is None or changed in control
    into = kernel_source.extract(commit, tmp_path / "staged", repo=repo)
    staged = (into / path).read_bytes()
    assert staged == blob.stdout
    assert changed is None or changed not in staged
    assert staged_files(into) == sorted({"nf4kernel/__init__.py", path})


def test_a_path_that_climbs_out_of_the_package_is_refused_before_anything_is_written(tmp_path):
    """git refuses to check out a tree entry named '..', but a crafted commit can hold one (a fetch
    does not fsck by default); its file must not land outside the staging folder."""
    repo = tmp_path / "repo"
    commit = package_commit(repo, {"nf4kernel/__init__.py": b""})

    def mktree(*entries: str) -> str:
        listing = "".join(f"{entry}\n" for entry in entries)
        made = subprocess.run(["git", "mktree"], cwd=repo, input=listing, capture_output=True, text=True, check=True)
        return made.stdout.strip()

    blob = scratch.git("rev-parse", f"{commit}:nf4kernel/__init__.py", cwd=repo)
    escaped = mktree(f"100644 blob {blob}\tescaped.py")
    climb = mktree(f"040000 tree {escaped}\t..")  # nf4kernel/../../escaped.py
    package = mktree(f"040000 tree {climb}\t..", f"100644 blob {blob}\t__init__.py")
    crafted = scratch.git("commit-tree", "-m", "crafted", mktree(f"040000 tree {package}\tnf4kernel"), cwd=repo)
    into = tmp_path / "stage" / "here"
    with pytest.raises(kernel_source.SourceError, match=r"nf4kernel/\.\./\.\./escaped\.py"):
        kernel_source.extract(crafted, into, repo=repo)
    assert not (tmp_path / "stage").exists()


def test_the_refusal_names_the_first_offending_paths_and_counts_the_rest(tmp_path):
    extras = {f"nf4kernel/data{i}.bin": b"x" for i in range(5)}
    commit = package_commit(tmp_path / "repo", {"nf4kernel/__init__.py": b"", **extras})
    with pytest.raises(kernel_source.SourceError) as refused:
        kernel_source.extract(commit, tmp_path / "staged", repo=tmp_path / "repo")
    assert "nf4kernel/data0.bin, nf4kernel/data1.bin, nf4kernel/data2.bin and 2 more;" in str(refused.value)


def test_an_nf4kernel_that_is_a_file_is_no_package_rather_than_not_python(tmp_path):
    commit = package_commit(tmp_path / "repo", {"nf4kernel": b"not a package\n"})
    with pytest.raises(kernel_source.SourceError, match=r"has no nf4kernel/__init__\.py"):
        kernel_source.extract(commit, tmp_path / "staged", repo=tmp_path / "repo")


def test_this_repositorys_own_kernel_is_py_files_alone(tmp_path):
    assert staged_files(kernel_source.extract("HEAD", tmp_path / "staged"))


def test_the_gate_refuses_a_kernel_with_a_compiled_file_in_one_line(checkouts):
    """Staging comes before the GPU check, so this exits 2 (not 4) on a machine without a GPU too.
    The gate runs in the trusted clone, so the candidate's commit is fetched there, not here."""
    trusted, candidate = checkouts
    (candidate / "nf4kernel" / "_fast.so").write_bytes(b"\x7fELF compiled")
    scratch.git("add", "-A", cwd=candidate)
    scratch.git("commit", "-q", "-m", "a compiled kernel", cwd=candidate)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    command = [sys.executable, "-m", "harness", "gate", "--measure-only", "--kernel", "../candidate"]
    done = subprocess.run(command, cwd=trusted, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "nf4kernel/_fast.so" in lines[0] and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["--replay", "x.json", "--kernel", "HEAD"], "--kernel and --measure-only are for measuring"),
        (["--kernel", "no-such-ref"], "neither a commit"),
    ],
)
def test_the_gate_refuses_a_kernel_it_cannot_measure(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        gate.main(args)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_measure_only_without_a_gpu_exits_4_and_records_why(tmp_path):
    record = tmp_path / "gate.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # on a GPU machine too: this is about having none
    command = [sys.executable, "-m", "harness", "gate", "--measure-only", "--json", str(record)]
    assert subprocess.run(command, cwd=ROOT, env=env, capture_output=True, check=False).returncode == 4
    written = json.loads(record.read_text())
    assert not written["environment"]["cuda"]
    # Staged all the same (so a source that can't be measured is refused here too): HEAD's commit.
    assert written["kernel"] == {"source": "HEAD", "commit": scratch.git("rev-parse", "HEAD", cwd=ROOT)}


def test_a_childs_path_puts_the_kernel_first_and_keeps_the_callers_behind_it(monkeypatch, tmp_path):
    """The caller's PYTHONPATH (bitsandbytes from the GPU image's bundle) is kept, never ahead of
    the kernel under test; empty entries (a trailing ':') are dropped, not read as the cwd."""
    monkeypatch.setenv("PYTHONPATH", f"/opt/site{os.pathsep}")
    found = kernel_source.python_path(tmp_path / "stage", ROOT, behind=("/last",)).split(os.pathsep)
    assert found == [str(tmp_path / "stage"), str(ROOT), "/opt/site", "/last"]
    monkeypatch.delenv("PYTHONPATH")
    assert kernel_source.python_path(tmp_path) == str(tmp_path)
