"""An asv plugin (``"plugins"`` in asv.conf.json): a plain ``asv publish`` builds the harness's site.

It wraps ``Publish.run``: the results seeded with the committed GPU history, asv's publish of a copy
holding the GPU machines alone, then the benchmarks without a result left off, names inserted as
text and the pages made self-contained. Without it asv's pages load CDNs and graph the CPU machine
too. What it relies on of asv 0.6.6: docs/performance-history.md, "How the site is built".
"""

from __future__ import annotations

import inspect
import tempfile
from importlib.metadata import version
from pathlib import Path

import asv
from asv.commands.publish import Publish
from asv.console import log
from asv.util import UserError

from harness.history import site, site_pages, site_scripts, site_vendored, store

CHECKED_ON = "0.6.6"
CHECKED_PARAMETERS = ["cls", "conf", "range_spec", "pull"]
_WRAPPED = "_nf4kernel_site"  # marks the wrapper, so that a second setup() does not wrap it again


def setup() -> None:
    """asv's plugin hook. An asv whose ``Publish.run`` is not the one checked publishes nothing."""
    current = Publish.__dict__.get("run")
    asvs_run = getattr(current, "__func__", None)
    if getattr(asvs_run, _WRAPPED, False):
        return
    checked = isinstance(current, classmethod) and list(inspect.signature(asvs_run).parameters) == CHECKED_PARAMETERS
    Publish.run = classmethod(_publishing_with(asvs_run) if checked else _refuse)


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


def _say(line: str) -> None:
    log.flush()  # asv's log leaves its last line open for progress dots: end it first
    print(line, flush=True)
