"""An asv plugin (``"plugins"`` in asv.conf.json): a plain ``asv publish`` builds the harness's site.

It seeds the results with the committed GPU history (``store.seed``), lets asv publish a copy of
them with the GPU machines alone (``site.gpu_results``), then leaves off the benchmarks with no
result, inserts names as text (``site_scripts.text_as_text``) and points the pages at the vendored
libraries under a Content-Security-Policy (``site_pages.make_self_contained``), in the html_dir asv
was given. Without it asv's pages load their scripts from CDNs and graph the CPU machine too.
"""

from __future__ import annotations

import inspect
import tempfile
from importlib.metadata import version
from pathlib import Path

# Every handle of asv's that this module relies on, checked on asv 0.6.6 (requirements/harness.txt):
# - asv.commands.publish.Publish.run, a classmethod run(conf, range_spec=None, pull=True) that writes
#   the site into conf.html_dir from the results in conf.results_dir; every way of publishing calls
#   it (``asv publish`` after applying ``-o``, the gh-pages plugin), so it is the one place to wrap;
# - a plugin module's setup(), which asv's plugin manager calls once it has imported the module;
# - asv.util.UserError, which asv reports as one line, exiting 1;
# - asv.console.log.flush(), which ends the line asv's log leaves open (its docstring: "Needs to be
#   called before printing to stdout via other means, after using Log");
# - asv's www/ folder in its package, the pages and scripts Publish.run copies into the site, whose
#   scripts site_scripts.text_as_text changes (checked against asv 0.6.6's bytes before anything is written).
import asv
from asv.commands.publish import Publish
from asv.console import log
from asv.util import UserError

from harness.history import site, site_pages, site_scripts, site_vendored, store

CHECKED_ON = "0.6.6"
CHECKED_PARAMETERS = ["cls", "conf", "range_spec", "pull"]
_WRAPPED = "_nf4kernel_site"  # marks the wrapper, so that a second setup() does not wrap it again


def setup() -> None:
    """asv's plugin hook: ``Publish.run`` becomes the harness's whole publish. An asv whose
    ``Publish.run`` is not the one checked publishes nothing: it fails saying so."""
    current = Publish.__dict__.get("run")
    asvs_run = getattr(current, "__func__", None)
    if getattr(asvs_run, _WRAPPED, False):
        return
    Publish.run = classmethod(_publishing_with(asvs_run) if _is_the_checked_run(current) else _refuse)


def _is_the_checked_run(run) -> bool:
    if not isinstance(run, classmethod):
        return False
    return list(inspect.signature(run.__func__).parameters) == CHECKED_PARAMETERS


def _refuse(cls, *args, **kwargs):
    raise UserError(
        f"harness/history/asv_site.py was checked on asv {CHECKED_ON}'s Publish.run(conf, range_spec, pull); asv "
        f"{version('asv')}'s is another, so the site would not be the harness's: check the plugin against it"
    )


def _publishing_with(asvs_run):
    def run(cls, conf, range_spec=None, pull=True):
        results_dir = conf.results_dir
        _check_assets()  # before asv replaces the old site with one that could not be made self-contained
        seeded = store.seed(Path(results_dir))
        if seeded:
            _say(f"site: {seeded} files of the committed GPU history copied into {results_dir}")
        with tempfile.TemporaryDirectory(prefix="asv-publish-") as tmp:
            try:  # a truncated or foreign machine.json: one line naming it, before asv runs
                left_out = site.gpu_results(Path(results_dir), Path(tmp) / "results")
            except ValueError as error:
                raise UserError(f"site: {error}") from None
            conf.results_dir = str(Path(tmp) / "results")
            try:
                asvs_run(cls, conf, range_spec=range_spec, pull=pull)
            finally:
                conf.results_dir = results_dir
        for name in left_out:
            _say(f"site: {name}'s results are not graphed: a CPU machine's times are the interpreter's")
        _finish(Path(conf.html_dir))

    setattr(run, _WRAPPED, True)
    return run


def _say(line: str) -> None:
    """A line of the plugin's own, on a line of its own: asv's log leaves its last message ("Writing
    index") open for progress dots until the next one, so end that line first (asv's ``log.flush``)."""
    log.flush()
    print(line, flush=True)


def _check_assets() -> None:
    try:
        site_vendored.check_assets()
        site_scripts.check_asv_scripts(Path(asv.__file__).parent / "www")  # the pages asv is about to copy
    except ValueError as error:  # its message names the site's assets already
        raise UserError(str(error)) from None


def _finish(html_dir: Path) -> None:
    try:
        site.drop_benchmarks_without_results(html_dir)
        site_scripts.text_as_text(html_dir)
        site_pages.make_self_contained(html_dir)
    except ValueError as error:
        raise UserError(f"site: {error}") from None
