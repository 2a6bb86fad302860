"""The history site, self-contained: ``asv publish`` with the site plugin (``setup`` below).

The plugin, named in asv.conf.json's ``"plugins"``, seeds the results with the committed GPU
history, publishes the GPU machines alone, leaves off benchmarks without a result, makes asv's
scripts insert names as text and the pages load the vendored libraries in ``site_assets/`` (pinned
by ``lock.json``) under a Content-Security-Policy. Why each piece, and what it relies on of asv
0.6.6: docs/performance-history.md, "How the site is built". The pages load their data over HTTP:
opened as a file, ``site_assets/needs-http.js`` says so.

The runner builds it, ``python -m harness site publish``: exit 0, done; exit 1, failed, said in one
line; exit 2, bad arguments (a --config that can't be read as asv's configuration), said in one line
before anything runs. Re-fetching the vendored libraries and serving the built site are a person's,
beside the harness: ``python -m tools.history vendor`` and ``preview``.
"""

from __future__ import annotations

import base64
import hashlib
import inspect
import json
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from importlib.metadata import version
from pathlib import Path

import asv
from asv.commands.publish import Publish
from asv.console import log
from asv.util import UserError

from harness.core import command_output
from harness.history import asvrun, store
from harness.history.result_merge import gpu_machines

ASSETS = Path(__file__).resolve().parent / "site_assets"
LOCK = ASSETS / "lock.json"
SITE_PLUGIN = ".harness.history.site"  # asv.conf.json's "plugins" entry that makes asv publish this site


def sri(data: bytes, algorithm: str = "sha384") -> str:
    """A Subresource Integrity value: ``sha384-<base64 digest>``."""
    return f"{algorithm}-{base64.b64encode(hashlib.new(algorithm, data).digest()).decode()}"


def lock() -> dict:
    return json.loads(LOCK.read_text())


def check_assets() -> None:
    """Every vendored file is the one the lock pins (raises ValueError naming the first that isn't)."""
    for entry in lock()["files"]:
        path = ASSETS / entry["local"]
        if not path.is_file():
            raise ValueError(f"site assets: {entry['local']} is missing; run `python -m tools.history vendor`")
        if sri(path.read_bytes()) != entry["sri"]:
            raise ValueError(f"site assets: {entry['local']} does not match its pinned hash in {LOCK.name}")


# The bytes of asv 0.6.6's scripts, on which TEXT_AS_TEXT's places were read.
ASV_SCRIPTS = {
    "asv.js": "sha384-fgJ1nTT0xag0FGP8wclMveFdSn9le0U5uQIZ5D/WtOw2o9pEcSvvPnypZ0eFks7r",
    "asv_ui.js": "sha384-y1vfNI3z9nw3hReB9rZg0/QhukhEMI2OnjoES8R1DmLuYct4fvquaqp+gDO1C79q",
    "graphdisplay.js": "sha384-5sIdnZYOv9OtojYgz1DWrNS5uaRycFjtvi1Vf+o4y5aw+L4bGeFEsUoIatPxigna",
    "jquery.flot.axislabels.js": "sha384-IreRg2kH2VEJUtvEdWmUmQnK7pHH3qyF6H5nmau1dKTyYKw+Nk4G4hVNuKJNlHte",
    "regressions.js": "sha384-DSFXzvE+ONwrNBxINjlm05VQYm6bMHhm98yzz/3+gq8OlIMr0W+sX00lakqrJeHt",
    "summarygrid.js": "sha384-9zz2fo9S33IOLYbdGVqIyOkXnNaMjoB04VKOSqXzA6lmve0YBAa5wPJqmmTF/EE6",
    "summarylist.js": "sha384-ZTbG+GVlnhSQK/p8G5/m2Jw7qv+gdDDzD6dv/mP6AOEP8+CxD946eyhdrrShQxKl",
}
ASV_CHECKED = "0.6.6"


# Where asv's scripts build markup from a name, and what the site runs instead: (script, asv's lines,
# ours) per ``@@ script`` entry of site_assets/text-as-text.txt, asv's and ours parted by ``=>``.
TEXT_AS_TEXT = [
    (script, *lines.split("\n=>\n"))
    for script, lines in (
        entry.split("\n", 1) for entry in (ASSETS / "text-as-text.txt").read_text().split("\n@@ ")[1:]
    )
]


def check_asv_scripts(directory: Path) -> dict[str, str]:
    """{name: text} of asv's scripts in ``directory``; ValueError naming the first that is not the known one."""
    directory = Path(directory)
    texts = {name: (directory / name).read_text() for name in ASV_SCRIPTS if (directory / name).is_file()}
    if set(texts) != set(ASV_SCRIPTS):
        raise ValueError(f"{directory} lacks asv's {sorted(set(ASV_SCRIPTS) - set(texts))}: not asv's pages")
    for name, text in texts.items():
        if sri(text.encode()) != ASV_SCRIPTS[name]:
            raise ValueError(
                f"{name} is not asv {ASV_CHECKED}'s (or was changed already): where it inserts tag, branch, "
                "machine and benchmark names as markup was read on that one's; read this one's "
                "(harness/history/site_assets/text-as-text.txt)"
            )
    return texts


def _replace_once(text: str, asvs: str, ours: str, script: str) -> str:
    asvs, ours = textwrap.dedent(asvs).strip(), textwrap.dedent(ours).strip()
    pattern = re.compile(r"\s+".join(re.escape(word) for word in asvs.split()))
    found = list(pattern.finditer(text))
    if len(found) != 1:  # a slip in the table: the script is the known one
        raise ValueError(f"{script}: TEXT_AS_TEXT's {asvs.splitlines()[0]!r} is there {len(found)} times, not once")
    start = found[0].start()
    indentation = text[text.rfind("\n", 0, start) + 1 : start]
    ours = ours.replace("\n", "\n" + indentation)
    return text[:start] + ours + text[found[0].end() :]


def text_as_text(html_dir: Path) -> list[str]:
    """asv's scripts in ``html_dir`` changed as ``TEXT_AS_TEXT`` says. Returns the scripts changed;
    ValueError, before changing any, where a script is not asv's known one."""
    html_dir = Path(html_dir)
    texts = check_asv_scripts(html_dir)
    changed = {}
    for script, asvs, ours in TEXT_AS_TEXT:
        changed[script] = _replace_once(changed.get(script, texts[script]), asvs, ours, script)
    for script, text in changed.items():
        (html_dir / script).write_text(text)
    return sorted(changed)


VENDOR = "vendor"  # where the copies go, inside the published site
PAGES = ("index.html", "error.html")
NEEDS_HTTP = "needs-http.js"  # ours: on file:// it says to serve the site; no integrity (file:// refuses it)
NEEDS_HTTP_TAG = f'<script src="{VENDOR}/{NEEDS_HTTP}"></script>'
LOAD_FAILURE = "load-failure.js"  # ours, pinned in the lock: what asv's inline js_load_failure() did
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self'; font-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'"
)
CSP_META = f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'
ASV_INLINE_SCRIPT = re.compile(
    r'<script type="text/javascript">\s*function js_load_failure\(\) \{\s*'
    r'window\.location = "error\.html";\s*\}\s*</script>'
)
INLINE_SCRIPT = re.compile(r"<script\b(?![^>]*\bsrc=)[^>]*>")
INLINE_HANDLER = re.compile(r"<[a-z][^>]*?\s(on[a-z]+)\s*=", re.IGNORECASE)
JAVASCRIPT_URL = re.compile(r"\b(?:href|src|action)\s*=\s*[\"']?\s*javascript:", re.IGNORECASE)


def _local_tag(tag: re.Match, entry: dict) -> str:
    local = f"{VENDOR}/{entry['local']}"
    if tag.group(1) == "link":
        return f'<link rel="stylesheet" href="{local}" integrity="{entry["sri"]}">'
    # No onerror attribute, as asv's tag had: the policy refuses inline handlers (load-failure.js).
    return f'<script src="{local}" integrity="{entry["sri"]}">'


def _first_in_head(text: str, page: str) -> str:
    """``text`` with the policy, then the needs-http script, first in its ``<head>`` (once each)."""
    text = text.replace(CSP_META, "").replace(NEEDS_HTTP_TAG, "")  # once, wherever a former pass put them
    text, count = re.subn(r"<head\b[^>]*>", lambda head: head.group(0) + CSP_META + NEEDS_HTTP_TAG, text, count=1)
    if not count:
        raise ValueError(f"{page} has no <head> to load {NEEDS_HTTP} from: this asv's pages are not the ones known")
    return text


def make_self_contained(html_dir: Path) -> list[str]:
    """Copy the vendored files into ``html_dir/vendor`` and point asv's pages at them, under the policy.
    Returns the CDN addresses replaced; ValueError where a page still loads anything remote or has
    inline script."""
    check_assets()
    html_dir = Path(html_dir)
    entries = lock()["files"]
    load_failure = next(entry for entry in entries if entry["local"] == LOAD_FAILURE)
    load_failure_tag = f'<script src="{VENDOR}/{LOAD_FAILURE}" integrity="{load_failure["sri"]}"></script>'
    for local in [entry["local"] for entry in entries] + [NEEDS_HTTP]:
        target = html_dir / VENDOR / local
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ASSETS / local, target)
    replaced = []
    for page in PAGES:
        path = html_dir / page
        if not path.is_file():
            continue
        # asv's inline js_load_failure() replaced, where it stood (before the libraries), by our file.
        text = ASV_INLINE_SCRIPT.sub(lambda _: load_failure_tag, _first_in_head(path.read_text(), page))
        for entry in entries:
            if entry.get("cdn") and entry["cdn"] in text:  # its whole <script src=CDN ...> or <link href=CDN ...>
                tag = re.compile(r"<(script|link)\b[^>]*\b(?:src|href)=\"" + re.escape(entry["cdn"]) + r"\"[^>]*>")
                text, count = tag.subn(lambda m, e=entry: _local_tag(m, e), text)
                if count:
                    replaced.append(entry["cdn"])
        remote = re.findall(r"<(?:script|link)\b[^>]*\b(?:src|href)=\"(https?://[^\"]+)\"", text)
        if remote:
            raise ValueError(f"{page} still loads {remote}: this asv's pages name a library the lock lacks")
        # The policy would refuse inline script silently and the page half work: refuse it here instead.
        found = INLINE_SCRIPT.search(text) or INLINE_HANDLER.search(text) or JAVASCRIPT_URL.search(text)
        if found:
            raise ValueError(
                f"{page} has inline script ({found.group(0)[:80]}...), which its Content-Security-Policy refuses: "
                "this asv's pages are not the ones known"
            )
        path.write_text(text)
    return replaced


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
        f"harness/history/site.py was checked on asv {ASV_CHECKED}'s Publish.run(conf, range_spec, pull); asv "
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
                left_out = gpu_results(Path(results_dir), Path(tmp) / "results")
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
        check_assets()
        check_asv_scripts(Path(asv.__file__).parent / "www")  # the pages asv is about to copy
    except ValueError as error:  # its message names the site's assets already
        raise UserError(str(error)) from None


def _finish(html_dir: Path) -> None:
    try:
        drop_benchmarks_without_results(html_dir)
        text_as_text(html_dir)
        make_self_contained(html_dir)
    except ValueError as error:
        raise UserError(f"site: {error}") from None


def _say(line: str) -> None:
    log.flush()  # asv's log leaves its last line open for progress dots: end it first
    print(line, flush=True)


def drop_benchmarks_without_results(html_dir: Path) -> list[str]:
    """Leave off the index the benchmarks with no summary graph (no result on any machine: the CPU
    smoke benchmark in a GPU-only history), for which the page would log a 404. Returns their names."""
    index_path = Path(html_dir) / "index.json"
    index = json.loads(index_path.read_text())
    summaries = Path(html_dir) / "graphs" / "summary"
    dropped = [name for name in index["benchmarks"] if not (summaries / f"{name}.json").is_file()]
    for name in dropped:
        del index["benchmarks"][name]
    index_path.write_text(json.dumps(index))
    return dropped


def gpu_results(results_dir: Path, into: Path) -> list[str]:
    """A copy of ``results_dir`` holding its GPU machines only; returns the machine folders left out.
    A CPU machine's figures are the interpreter's, and its description would split every legend."""
    into.mkdir(parents=True)
    gpus = gpu_machines(results_dir)
    left_out = []
    for path in sorted(results_dir.iterdir()):
        if path.is_file():
            shutil.copyfile(path, into / path.name)
        elif path.name in gpus:
            shutil.copytree(path, into / path.name)
        elif (path / "machine.json").is_file():
            left_out.append(path.name)
    return left_out


def html_dir_of(config: str, conf: dict) -> Path:
    """The site's folder: asv reads a configuration's paths from the configuration's own folder."""
    return (asvrun.ROOT / config).parent / conf.get("html_dir", "html")


def publish(config: str = "asv.conf.json") -> Path:
    """``asv publish`` with ``config``, whose site plugin does the rest. Returns the site's folder."""
    conf = asvrun.load_config(config)
    if SITE_PLUGIN not in conf.get("plugins", []):
        raise ValueError(
            f'{config} does not load the site plugin ("plugins": [..., "{SITE_PLUGIN}"]): '
            "asv publish would build pages that load CDNs and graph CPU machines"
        )
    asvrun.ensure_branches(config)  # a checkout of one commit (a workflow's) has no local main for asv
    try:
        asvrun.asv("publish", config=config)
    except subprocess.CalledProcessError as failed:
        raise ValueError(f"asv publish failed (exit {failed.returncode}); asv said why above") from None
    return html_dir_of(config, conf)


def main(argv=None) -> int:
    parser = command_output.Parser(prog="python -m harness site", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=command_output.Parser)
    publish_cmd = commands.add_parser("publish", help="seed the results, asv publish, make the site self-contained")
    asvrun.add_config(publish_cmd)
    args = parser.parse_args(argv)
    try:
        asvrun.load_config(args.config)
    except asvrun.ConfigError as error:
        parser.error(f"--config {error}")
    try:
        html = publish(args.config)
    except (ValueError, subprocess.CalledProcessError) as error:
        print(f"site: {error}", file=sys.stderr)
        return 1
    print(
        f"site: built in {html}; serve it with `asv preview` or `nox -s preview` and open "
        "http://127.0.0.1:8080 (its pages load their data over HTTP: opened as a file, they can't)"
    )
    return 0
