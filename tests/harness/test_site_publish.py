"""``asv publish``, typed in the repository's root, builds the harness's site (harness/history/site.py):
the committed GPU history seeded into the results, the GPU machines alone graphed, the benchmarks
without results off the index, the vendored libraries loaded instead of CDNs; the very site
``python -m harness site publish`` builds (``nox -s publish``, ``nox -s bench``), which runs ``asv
publish`` too. asv runs for real, in a process of its own, on a clone of this checkout."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from another_gpu_type import add_another_gpu_type
from checkouts import clone_on_main, head, python_path
from site_checkout import CPU_MACHINE, MACHINES, add_a_cpu_machines_result, benchmarks_with_results

from harness.history import site
from harness.history import store as history

pytestmark = pytest.mark.skipif(head() is None, reason="asv reads the commits from git: needs the git checkout")
REMOTE = re.compile(r"<(?:script|link)\b[^>]*\b(?:src|href)=\"(?:https?:)?//")
TRACKED = "gpu.KernelTime.track_kernel_time"


def python(clone: Path, *args: str) -> subprocess.CompletedProcess:
    """``python ARGS`` in the clone's root, as a person types it there (asv's machine file in the
    clone's folder, not in ~)."""
    env = {**os.environ, "PYTHONPATH": python_path(clone), "HOME": str(clone.parent)}
    command = [sys.executable, *args]
    return subprocess.run(command, cwd=clone, env=env, capture_output=True, text=True, timeout=600)


def said(done: subprocess.CompletedProcess) -> str:
    return done.stdout + done.stderr


def fresh_clone(where: Path) -> Path:
    """A clone with its own asv.conf.json, nothing published yet, and a CPU machine's result in its
    .asv/results as the CPU machine's main job leaves one."""
    clone = clone_on_main(where)
    add_a_cpu_machines_result(clone / ".asv" / "results")
    return clone


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    return fresh_clone(tmp_path_factory.mktemp("publish") / "clone")


@pytest.fixture(scope="module")
def by_harness(clone) -> tuple[Path, str]:
    """The site ``python -m harness site publish`` builds (``nox -s bench`` ends with it), kept aside,
    and what it printed."""
    done = python(clone, "-m", "harness", "site", "publish")
    assert done.returncode == 0, said(done)[-4000:]
    kept = clone.parent / "by-harness-site"
    shutil.copytree(clone / ".asv" / "html", kept)
    return kept, done.stdout


@pytest.fixture(scope="module")
def by_asv(clone, by_harness) -> tuple[Path, str]:
    """What a plain ``asv publish`` makes of the same checkout afterwards, as a person who ran ``nox
    -s bench`` and then types it; and what it printed."""
    done = python(clone, "-m", "asv", "publish")
    assert done.returncode == 0, said(done)[-4000:]
    return clone / ".asv" / "html", done.stdout


def assert_self_contained(html: Path) -> None:
    """Every page loads the vendored libraries, each with its pinned SRI hash, and nothing remote."""
    for page in site.PAGES:
        text = (html / page).read_text()
        assert not REMOTE.search(text), f"{page} loads {REMOTE.search(text).group(0)}"
        assert '<script src="vendor/needs-http.js">' in text, page
    index = (html / "index.html").read_text()
    for entry in site.lock()["files"]:
        copy = html / site.VENDOR / entry["local"]
        assert copy.is_file() and site.sri(copy.read_bytes()) == entry["sri"], entry["local"]
        if entry["cdn"]:
            assert f'"{site.VENDOR}/{entry["local"]}" integrity="{entry["sri"]}"' in index, entry["local"]


def test_asv_publish_builds_a_self_contained_site(by_asv):
    html, _ = by_asv
    assert_self_contained(html)


def test_asv_publish_graphs_the_committed_gpu_history_alone(by_asv):
    html, printed = by_asv
    index = json.loads((html / "index.json").read_text())
    assert sorted(index["machines"]) == MACHINES and CPU_MACHINE not in index["params"]["machine"]
    assert f"{CPU_MACHINE}'s results are not graphed" in printed
    for machine in MACHINES:  # seeded: a point per committed commit
        graphs = [p for p in html.glob(f"graphs/**/{TRACKED}.json") if f"machine-{machine}" in p.parts]
        assert len(graphs) == 1
        assert len(json.loads(graphs[0].read_text())) == len(history.commits(history.STORE / machine))


def test_asv_publish_leaves_benchmarks_without_results_off_the_index(by_asv):
    html, _ = by_asv
    index = json.loads((html / "index.json").read_text())
    assert set(index["benchmarks"]) == benchmarks_with_results()


def site_files(html: Path) -> dict[str, bytes]:
    """Every file of a site by its path, less what records when it was built."""
    files = {str(path.relative_to(html)): path.read_bytes() for path in html.rglob("*") if path.is_file()}
    files["info.json"] = json.dumps({**json.loads(files["info.json"]), "timestamp": None}).encode()
    files["regressions.xml"] = re.sub(rb"<updated>[^<]*</updated>", b"", files["regressions.xml"])
    return files


def test_harness_site_publish_builds_the_same_site(by_asv, by_harness):
    ours, asvs = site_files(by_harness[0]), site_files(by_asv[0])
    assert sorted(ours) == sorted(asvs)
    assert [name for name in ours if ours[name] != asvs[name]] == []
    printed = by_harness[1]
    assert "`asv preview`" in printed and "`nox -s preview`" in printed  # how to see it


def test_asv_publish_on_a_fresh_clone_into_another_folder(tmp_path):
    """Nothing seeded yet, and ``-o DIR``: the committed history is seeded, the site goes to DIR,
    made the same way."""
    clone = fresh_clone(tmp_path / "clone")
    elsewhere = tmp_path / "elsewhere"
    done = python(clone, "-m", "asv", "publish", "-o", str(elsewhere))
    assert done.returncode == 0, said(done)[-4000:]
    assert_self_contained(elsewhere)
    machines = json.loads((elsewhere / "index.json").read_text())["machines"]
    assert sorted(machines) == MACHINES and not (clone / ".asv" / "html").exists()


def test_each_gpu_types_history_is_graphed_as_its_own_machine(tmp_path):
    """history.yml stores each GPU type as an asv machine of its own: with a second type's results
    beside the committed one's, the site offers both machines and graphs each, a point per commit."""
    clone = fresh_clone(tmp_path / "clone")
    add_another_gpu_type(clone / ".asv" / "results", "h100")
    done = python(clone, "-m", "asv", "publish")
    assert done.returncode == 0, said(done)[-4000:]
    html = clone / ".asv" / "html"
    index = json.loads((html / "index.json").read_text())
    assert sorted(index["machines"]) == sorted([*MACHINES, "h100"])
    assert index["machines"]["h100"]["gpu"] == "NVIDIA H100 80GB HBM3"
    for machine in index["machines"]:
        (graph,) = [p for p in html.glob(f"graphs/**/{TRACKED}.json") if f"machine-{machine}" in p.parts]
        points = json.loads(graph.read_text())
        assert len(points) == len(history.commits(history.STORE / MACHINES[0])), machine


def test_harness_site_publish_refuses_a_configuration_without_the_site_plugin(clone, tmp_path):
    conf = {
        "version": 1,
        "repo": str(clone),
        "plugins": [".harness.history.asvrun"],
        "html_dir": str(tmp_path / "html"),
    }
    (tmp_path / "asv.conf.json").write_text(json.dumps(conf))
    done = python(clone, "-m", "harness", "site", "publish", "--config", str(tmp_path / "asv.conf.json"))
    assert done.returncode == 1 and "Traceback" not in said(done), said(done)
    assert said(done).strip().startswith("site: ") and len(said(done).strip().splitlines()) == 1, said(done)
    assert site.SITE_PLUGIN in said(done) and not (tmp_path / "html").exists()


def test_an_asv_whose_publish_is_not_the_checked_one_refuses_in_one_line(clone):
    """Another asv's Publish.run may take other arguments or write elsewhere: wrapped blindly, it
    would publish a site that is not the harness's, or fail deep inside. It says so instead."""
    another_asv = (
        "import sys; from asv.commands.publish import Publish; from asv import main;"
        "Publish.run = classmethod(lambda cls, conf, range_spec=None, pull=True, extra=None: None);"
        "sys.argv = ['asv', 'publish']; main.main()"
    )
    done = python(clone, "-c", another_asv)
    assert done.returncode == 1 and "Traceback" not in said(done), said(done)
    line = next(line for line in said(done).splitlines() if "history/site.py" in line)
    assert "checked on asv 0.6.6" in line and len(line) < 300


def test_the_plugin_imports_no_torch(clone):
    """asv imports its plugins for every command, in the user's Python: publishing needs no torch."""
    check = "import sys, harness.history.site; print(sorted(m for m in ('torch', 'nf4kernel') if m in sys.modules))"
    done = python(clone, "-c", check)
    assert done.returncode == 0 and done.stdout.strip() == "[]", said(done)


def test_a_second_setup_wraps_asvs_publish_once(monkeypatch):
    """Wrapped twice, one publish would seed, filter and rewrite twice over."""
    from asv.commands.publish import Publish

    asvs = Publish.__dict__["run"]
    monkeypatch.setattr(Publish, "run", asvs)  # put back as it was after the test
    site.setup()
    wrapped = Publish.__dict__["run"]
    site.setup()
    assert Publish.__dict__["run"] is wrapped and wrapped.__func__ is not asvs.__func__
