"""The history site, self-contained: ``asv publish``, then asv's CDN scripts replaced by local copies.

asv's pages load jQuery, flot, bootstrap, blueimp-md5 and stupidtable from CDNs, so its site is
blank offline, on an air-gapped runner or an intranet mirror. The same libraries, from the npm
registry at the versions asv names (stupid-table-plugin: npm has only 1.1.3, not asv's 1.0.1), are
kept in ``site_assets/`` with their licences; ``site_assets/lock.json`` pins each package's tarball
(npm's sha512 integrity) and each file's own SRI hash, which the rewritten pages carry, so a browser
refuses a file that changed. Where npm's file is the very file the CDN serves, asv's own SRI hash
matches it too (the tests check both).

``publish`` is ``asv publish`` itself: the configuration's site plugin (``asv_site.py``) seeds the
results with the committed GPU history, graphs the GPU machines alone and calls this module to make
the pages self-contained, so a plain ``asv publish`` builds this same site. The pages load their data
over HTTP: opened as a file they can't, and ``site_assets/needs-http.js`` tells the reader so.

The pages show every name in the data as text: a git tag, a branch, a machine.json field, a
benchmark's parameters. asv's scripts built markup from some of them (a tag named
``v1<img/src='x'/onerror=...>`` ran script on every graph page); ``text_as_text`` changes those
places to insert text. And the pages carry a Content-Security-Policy that runs no script but the site's own
files, asv's one inline script moved to ``site_assets/load-failure.js``.

    python -m harness.history.site publish [--config asv.conf.json]   # asv publish, with the site plugin
    python -m harness.history.site preview [--port 8080]              # serve it (Ctrl-C or SIGTERM stops it)
    python -m harness.history.site vendor                             # re-fetch from npm and verify

Exit 0: done; preview: stopped by SIGINT (Ctrl-C) or SIGTERM, whether sent to this process or to
asv's server. Exit 1: failed, said in one line; preview: no site built yet, or asv's server failed
(its port taken, say).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
import urllib.request
from pathlib import Path

ASSETS = Path(__file__).resolve().parent / "site_assets"
LOCK = ASSETS / "lock.json"
REGISTRY = "https://registry.npmjs.org"
VENDOR = "vendor"  # where the copies go, inside the published site
PAGES = ("index.html", "error.html")
SITE_PLUGIN = ".harness.history.asv_site"  # asv.conf.json's "plugins" entry that makes asv publish this site
NEEDS_HTTP = "needs-http.js"  # our own script: on file:// it says to serve the site (site_assets/)
# Without an integrity attribute: a browser refuses an integrity-checked script on file:// (Chromium:
# "requires the request to be CORS enabled"), and file:// is the one place this script is for.
NEEDS_HTTP_TAG = f'<script src="{VENDOR}/{NEEDS_HTTP}"></script>'
LOAD_FAILURE = "load-failure.js"  # our own, in the lock: what asv's inline js_load_failure() did (site_assets/)
# The pages run no script but the site's own files: an injected tag or event handler is refused even if
# some text reached the page as markup. Styles may be inline: asv's pages and flot's legend and tick
# labels set them in style attributes, and a style runs no script. A <meta> policy, as the site is
# served statically; frame-ancestors and reporting are refused in one, so they are left out.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self'",
        "font-src 'self'",
        "connect-src 'self'",  # index.json and the graphs
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
    ]
)
CSP_META = f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'
# asv's index.html defines js_load_failure() inline, for its library tags' onerror attributes.
ASV_INLINE_SCRIPT = re.compile(
    r'<script type="text/javascript">\s*function js_load_failure\(\) \{\s*'
    r'window\.location = "error\.html";\s*\}\s*</script>'
)
INLINE_SCRIPT = re.compile(r"<script\b(?![^>]*\bsrc=)[^>]*>")
INLINE_HANDLER = re.compile(r"<[a-z][^>]*?\s(on[a-z]+)\s*=", re.IGNORECASE)
JAVASCRIPT_URL = re.compile(r"\b(?:href|src|action)\s*=\s*[\"']?\s*javascript:", re.IGNORECASE)


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
            raise ValueError(f"site assets: {entry['local']} is missing; run `python -m harness.history.site vendor`")
        if sri(path.read_bytes()) != entry["sri"]:
            raise ValueError(f"site assets: {entry['local']} does not match its pinned hash in {LOCK.name}")


def _script_or_link(url: str) -> re.Pattern:
    """The whole ``<script src=URL ...>`` or ``<link href=URL ...>`` tag of asv's page."""
    return re.compile(r"<(script|link)\b[^>]*\b(?:src|href)=\"" + re.escape(url) + r"\"[^>]*>")


def _local_tag(tag: re.Match, entry: dict) -> str:
    local = f"{VENDOR}/{entry['local']}"
    if tag.group(1) == "link":
        return f'<link rel="stylesheet" href="{local}" integrity="{entry["sri"]}">'
    # No onerror attribute, as asv's tag had: the policy refuses inline handlers (load-failure.js).
    return f'<script src="{local}" integrity="{entry["sri"]}">'


def _first_in_head(text: str, page: str) -> str:
    """``text`` with the Content-Security-Policy and then the needs-http script as the first things
    in its ``<head>``: a policy applies only to what follows it, and the script must run before the
    libraries, whose refusal on file:// sends the reader off to error.html."""
    text = text.replace(CSP_META, "").replace(NEEDS_HTTP_TAG, "")  # once, wherever a former pass put them
    text, count = re.subn(r"<head\b[^>]*>", lambda head: head.group(0) + CSP_META + NEEDS_HTTP_TAG, text, count=1)
    if not count:
        raise ValueError(f"{page} has no <head> to load {NEEDS_HTTP} from: this asv's pages are not the ones known")
    return text


def _load_failure_from_a_file(text: str, entries: list[dict]) -> str:
    """asv's inline js_load_failure() replaced, where it stood (before the libraries), by our file."""
    entry = next(entry for entry in entries if entry["local"] == LOAD_FAILURE)
    tag = f'<script src="{VENDOR}/{LOAD_FAILURE}" integrity="{entry["sri"]}"></script>'
    return ASV_INLINE_SCRIPT.sub(lambda _: tag, text)


def _check_no_inline_script(text: str, page: str) -> None:
    """The policy would refuse inline script silently, and the page would half work: refuse to publish
    a page that has any (an asv whose pages carry more of it than the one known)."""
    found = INLINE_SCRIPT.search(text) or INLINE_HANDLER.search(text) or JAVASCRIPT_URL.search(text)
    if found:
        raise ValueError(
            f"{page} has inline script ({found.group(0)[:80]}...), which its Content-Security-Policy refuses: "
            "this asv's pages are not the ones known"
        )


def make_self_contained(html_dir: Path) -> list[str]:
    """Copy the vendored libraries (and our scripts) into ``html_dir/vendor`` and point asv's pages at
    them, under a Content-Security-Policy that allows no inline script (asv's one inline script moves
    to a file). Returns the CDN addresses replaced; raises ValueError if a page still loads anything
    from the network or still has inline script."""
    check_assets()
    html_dir = Path(html_dir)
    entries = lock()["files"]
    for local in [entry["local"] for entry in entries] + [NEEDS_HTTP]:
        target = html_dir / VENDOR / local
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ASSETS / local, target)
    replaced = []
    for page in PAGES:
        path = html_dir / page
        if not path.is_file():
            continue
        text = _load_failure_from_a_file(_first_in_head(path.read_text(), page), entries)
        for entry in entries:
            if entry.get("cdn") and entry["cdn"] in text:
                text, count = _script_or_link(entry["cdn"]).subn(lambda m, e=entry: _local_tag(m, e), text)
                if count:
                    replaced.append(entry["cdn"])
        remote = re.findall(r"<(?:script|link)\b[^>]*\b(?:src|href)=\"(https?://[^\"]+)\"", text)
        if remote:
            raise ValueError(f"{page} still loads {remote}: this asv's pages name a library the lock lacks")
        _check_no_inline_script(text, page)
        path.write_text(text)
    return replaced


def drop_benchmarks_without_results(html_dir: Path) -> list[str]:
    """asv lists every benchmark of the suite on the index and fetches a summary graph for each; one
    with no result on any machine (the CPU smoke benchmark in a GPU-only history, say) has none, and
    the page logs a 404 for it. Leave such benchmarks off the index. Returns their names."""
    index_path = Path(html_dir) / "index.json"
    index = json.loads(index_path.read_text())
    summaries = Path(html_dir) / "graphs" / "summary"
    dropped = [name for name in index["benchmarks"] if not (summaries / f"{name}.json").is_file()]
    for name in dropped:
        del index["benchmarks"][name]
    index_path.write_text(json.dumps(index))
    return dropped


# --- Text as text: where asv's scripts put the data into the page as markup -------------------------
#
# asv's pages insert names and descriptions of the data into the page, some with .text() (shown as
# written) and some by concatenating them into markup (.html(), $('<tag>' + value + ...), a tooltip
# with html: true). A tag named v1<img/src='x'/onerror=...>, valid in git, ran script on every graph
# page; markup in machine.json's gpu, on pointing at the machine's button. Escaping the data in
# index.json instead would mend some places and break others: one value reaches both kinds (a
# benchmark parameter's name heads its panel as markup and labels its x-axis button as text; a
# branch's name is a button's text and part of a graph's file name), so an escaped value would show
# "&lt;" there, or name a graph that does not exist. Instead, each place that builds markup from a
# value builds it from text, and index.json keeps the names as they are. The places, in asv
# 0.6.6's scripts:
#   graphdisplay.js  tag names over the graph; machine.json's fields in each machine button's
#                    tooltip; the benchmark tree's names; the code tooltip; a point's tooltip (unit)
#   summarylist.js   machine.json's fields in each machine button's tooltip
#   asv_ui.js        every panel's heading (a parameter's name: machine.json's, a benchmark's)
#   summarygrid.js   the grid's group and benchmark names, their tooltips (name, code)
# The rest insert text (.text(), attr(), textContent), or escape it themselves (the legend's
# labelFormatter, the category axis's labels), or draw on a canvas (axis labels), or insert
# markup of their own making (numbers, commit hashes, fixed strings). The list was made on these
# very files: another asv's must be read again, so a site is not published from them.
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
# (script, asv's lines, the lines the site runs instead). asv's lines are found once each, whatever
# their indentation; the lines put in their place take the indentation of the first.
TEXT_AS_TEXT = [
    # Tag names, over the graph.
    (
        "graphdisplay.js",
        """
        graph_div.append(
            "<div style='position:absolute;" +
                "left:" + p.left + "px;" +
                "top: -2ex;" +
                "color:#666;background:white;padding-left:0.25em;font-size:smaller;'>" + tag + "</div>");
        """,
        """
        graph_div.append($(
            "<div style='position:absolute;" +
                "left:" + p.left + "px;" +
                "top: -2ex;" +
                "color:#666;background:white;padding-left:0.25em;font-size:smaller;'></div>").text(tag));
        """,
    ),
    # machine.json's fields in a machine button's tooltip, a "key: value" line each (the <br/>
    # between them stays markup), on the graph page and on the benchmark list.
    *[
        (
            script,
            "details.push(key + ': ' + val);",
            "details.push($('<span/>').text(key + ': ' + val).html());",
        )
        for script in ("graphdisplay.js", "summarylist.js")
    ],
    # The benchmark tree: a group's name, a benchmark's name (or pretty_name), its code's tooltip.
    (
        "graphdisplay.js",
        """
        var top = $(
            '<li class="dropdown">' +
                '<label class="nav-header"><b class="caret-right"/> ' + parts[j] +
                '</label><ul class="nav nav-list tree" style="display: none;"/></li>');
        """,
        """
        var top = $(
            '<li class="dropdown">' +
                '<label class="nav-header"><b class="caret-right"/></label>' +
                '<ul class="nav nav-list tree" style="display: none;"/></li>');
        top.children('label').append(document.createTextNode(' ' + parts[j]));
        """,
    ),
    (
        "graphdisplay.js",
        """var top = $('<li><a href="#' + bm_name + '">' + name + '</li>');""",
        """var top = $('<li/>').append($('<a/>').attr('href', '#' + bm_name).text(name));""",
    ),
    ("graphdisplay.js", "title: bm.code,\nhtml: true,", "title: bm.code,\nhtml: false,"),
    # A point's tooltip: its value in the benchmark's unit, and the commit.
    ("graphdisplay.js", "title: contents,\nhtml: true,", "title: contents,\nhtml: false,"),
    # Every panel's heading: "machine", a parameter's name (a result's or a benchmark's).
    (
        "asv_ui.js",
        """
        var panel_header = $(
            '<div class="panel-heading">' + heading + '</div>');
        """,
        """var panel_header = $('<div class="panel-heading"/>').text(heading);""",
    ),
    # The grid: a group's name, a benchmark's name, pretty_name and code.
    (
        "summarygrid.js",
        """
        var container = $(
            '<a class="btn benchmark-container" href="#' + bm.name +
            '"/>');
        var plot_div = $(
            '<div id="summarygrid-' + bm.name + '" class="benchmark-plot"/>');
        """,
        """
        var container = $('<a class="btn benchmark-container"/>').attr('href', '#' + bm.name);
        var plot_div = $('<div class="benchmark-plot"/>').attr('id', 'summarygrid-' + bm.name);
        """,
    ),
    (
        "summarygrid.js",
        """
        var name = $('<div class="benchmark-text">' + display_name + '</div>');
        name.tooltip({
            title: bm.name,
            html: true,
        """,
        """
        var name = $('<div class="benchmark-text"/>').text(display_name);
        name.tooltip({
            title: bm.name,
            html: false,
        """,
    ),
    ("summarygrid.js", "title: bm.code,\nhtml: true,", "title: bm.code,\nhtml: false,"),
    (
        "summarygrid.js",
        "group_container.append($('<h1>' + group + '</h1>'));",
        "group_container.append($('<h1/>').text(group));",
    ),
]


def check_asv_scripts(directory: Path) -> dict[str, str]:
    """{name: text} of asv's scripts in ``directory`` (asv's www/, or a site it has just written);
    raises ValueError naming the first that is not the known one."""
    directory = Path(directory)
    texts = {name: (directory / name).read_text() for name in ASV_SCRIPTS if (directory / name).is_file()}
    if set(texts) != set(ASV_SCRIPTS):
        raise ValueError(f"{directory} lacks asv's {sorted(set(ASV_SCRIPTS) - set(texts))}: not asv's pages")
    for name, text in texts.items():
        if sri(text.encode()) != ASV_SCRIPTS[name]:
            raise ValueError(
                f"{name} is not asv {ASV_CHECKED}'s (or was changed already): where it inserts tag, branch, "
                "machine and benchmark names as markup was read on that one's; read this one's "
                "(harness/history/site.py, TEXT_AS_TEXT)"
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
    """asv's scripts in ``html_dir`` changed to insert the data's names as text wherever they built
    markup from them (``TEXT_AS_TEXT``). Returns the scripts changed; raises ValueError, before
    changing any, where a script is not asv's known one."""
    html_dir = Path(html_dir)
    texts = check_asv_scripts(html_dir)
    changed = {}
    for script, asvs, ours in TEXT_AS_TEXT:
        changed[script] = _replace_once(changed.get(script, texts[script]), asvs, ours, script)
    for script, text in changed.items():
        (html_dir / script).write_text(text)
    return sorted(changed)


def _read_machine(path: Path) -> dict:
    from harness.core import records

    return records.read_machine(path)


def gpu_results(results_dir: Path, into: Path) -> list[str]:
    """A copy of ``results_dir`` holding its GPU machines only; returns the machines left out. A CPU
    machine's figures are the interpreter's, no verdict on the kernel, and its description (no GPU,
    no driver, another torch) would split every graph's legend and fill the selectors with "none"."""
    into.mkdir(parents=True)
    left_out = []
    for path in sorted(results_dir.iterdir()):
        if path.is_file():
            shutil.copyfile(path, into / path.name)
        elif (path / "machine.json").is_file():
            if _read_machine(path / "machine.json").get("gpu", "none") == "none":
                left_out.append(path.name)
            else:
                shutil.copytree(path, into / path.name)
    return left_out


def config_of(config: str) -> dict:
    from harness.history import asvrun

    return asvrun.load_config(str(asvrun.ROOT / config))


def html_dir_of(config: str, conf: dict) -> Path:
    """The site's folder: asv reads a configuration's paths from the configuration's own folder."""
    from harness.history import asvrun

    return (asvrun.ROOT / config).parent / conf.get("html_dir", "html")


def publish(config: str = "asv.conf.json") -> Path:
    """``asv publish`` with ``config``, whose site plugin does the rest (``asv_site.py``): one way
    to build the site, whoever asks for it. Returns the site's folder."""
    from harness.history import asvrun

    conf = config_of(config)
    if SITE_PLUGIN not in conf.get("plugins", []):
        raise ValueError(
            f'{config} does not load the site plugin ("plugins": [..., "{SITE_PLUGIN}"]): '
            "asv publish would build pages that load CDNs and graph CPU machines"
        )
    try:
        asvrun.asv("publish", config=config)
    except subprocess.CalledProcessError as failed:
        raise ValueError(f"asv publish failed (exit {failed.returncode}); asv said why above") from None
    return html_dir_of(config, conf)


# --- Vendoring: the one place that talks to the npm registry ---------------------------------------


def _fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read()


def vendor(update: bool = False) -> None:
    """Fetch each pinned package's tarball from npm, check it against the registry's integrity and the
    lock's, and write the files the lock lists (and licences) into ``site_assets/``. With ``update``,
    record the hashes found instead of checking them (for a deliberate version change)."""
    pins = lock()
    for name, package in pins["packages"].items():
        meta = json.loads(_fetch(f"{REGISTRY}/{name}/{package['version']}"))
        tarball = _fetch(meta["dist"]["tarball"])
        found = sri(tarball, "sha512")
        if found != meta["dist"]["integrity"]:
            raise ValueError(f"{name}: the tarball does not match the registry's own integrity")
        if not update and found != package["integrity"]:
            raise ValueError(f"{name}@{package['version']}: the registry's tarball differs from the pinned one")
        package.update(tarball=meta["dist"]["tarball"], integrity=found)
        with tarfile.open(fileobj=io.BytesIO(tarball)) as archive:
            for entry in (e for e in pins["files"] if e["package"] == name):
                data = archive.extractfile(f"package/{entry['path']}").read()
                if not update and sri(data) != entry["sri"]:
                    raise ValueError(f"{name}: {entry['path']} differs from the pinned file")
                entry["sri"] = sri(data)
                target = ASSETS / entry["local"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        print(f"site: {name}@{package['version']} {found[:20]}... ok")
    for entry in (e for e in pins["files"] if e["package"] is None):  # our own files: no registry to ask
        found = sri((ASSETS / entry["local"]).read_bytes())
        if not update and found != entry["sri"]:
            raise ValueError(f"{entry['local']} differs from its pinned hash (`vendor --update` records a change)")
        entry["sri"] = found
        print(f"site: {entry['local']} (ours) {found[:20]}... ok")
    if update:
        LOCK.write_text(json.dumps(pins, indent=1) + "\n")


def preview(config: str, port: int) -> int:
    """asv's own server on the built site, until it ends or this process is told to stop; one line,
    not asv's traceback, where no site is built."""
    from harness.history import asvrun

    html = html_dir_of(config, config_of(config))
    if not (html / "index.html").is_file():
        print(f"site: no site in {html} yet: build it with `python3 -m nox -s publish` (or `nox -s bench`)")
        return 1
    print(f"site: serving {html} on http://127.0.0.1:{port} (Ctrl-C stops it)", flush=True)
    command = [sys.executable, "-m", "asv", "preview", "--port", str(port), "--config", str(config)]
    return serve(command, cwd=asvrun.ROOT, env=asvrun.asv_env())


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOPPED_BY_A_SIGNAL = (-signal.SIGINT, -signal.SIGTERM)  # Popen's returncode of a child those ended
POLL_S = 0.1
STOP_WAIT_S = 10


def serve(command: list[str], cwd: Path, env: dict) -> int:
    """Run ``command``, a server, until it ends or SIGINT or SIGTERM reaches this process; then stop
    it and wait for it. Either signal is how a server is stopped, sent here or to the server itself:
    0. Any other end of the server: 1.

    Unhandled, SIGTERM would kill this process and leave the server listening. And a server ended by
    SIGTERM has Popen's returncode -15: returned as it is, ``SystemExit(-15)`` is exit status 241
    (-15 modulo 256), which nox passes on."""
    told_to_stop = []

    def take_note(signum, frame):
        told_to_stop.append(signum)

    # The handler only takes note: one that raised could interrupt Popen after the server had started,
    # leaving it running and unknown here. The loop below looks every POLL_S.
    previous = {number: signal.signal(number, take_note) for number in STOP_SIGNALS}
    try:
        print("+ python", " ".join(command[1:]), flush=True)
        server = subprocess.Popen(command, cwd=cwd, env=env)
        while server.poll() is None and not told_to_stop:
            time.sleep(POLL_S)
        if told_to_stop:
            stop(server)
            return 0
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return 0 if server.returncode in (0, *STOPPED_BY_A_SIGNAL) else 1


def stop(server: subprocess.Popen) -> None:
    """SIGTERM (an HTTP server has nothing to save), then SIGKILL if it is still there STOP_WAIT_S later."""
    server.terminate()
    try:
        server.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.history.site", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    publish_cmd = commands.add_parser("publish", help="seed the results, asv publish, make the site self-contained")
    publish_cmd.add_argument("--config", default="asv.conf.json")
    preview_cmd = commands.add_parser("preview", help="serve the built site on http://127.0.0.1:PORT")
    preview_cmd.add_argument("--config", default="asv.conf.json")
    preview_cmd.add_argument("--port", type=int, default=8080)
    vendor_cmd = commands.add_parser("vendor", help="re-fetch the libraries from npm and verify them")
    vendor_cmd.add_argument("--update", action="store_true", help="record new hashes (after changing a version)")
    args = parser.parse_args(argv)
    if args.command == "preview":
        return preview(args.config, args.port)
    try:
        if args.command == "vendor":
            vendor(args.update)
        else:
            html = publish(args.config)
            print(
                f"site: built in {html}; serve it with `asv preview` or `python3 -m nox -s preview` and open "
                "http://127.0.0.1:8080 (its pages load their data over HTTP: opened as a file, they can't)"
            )
    except (ValueError, subprocess.CalledProcessError) as error:
        print(f"site: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
