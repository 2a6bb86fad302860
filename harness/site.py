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

    python -m harness.site publish [--config asv.conf.json]   # asv publish, with the site plugin
    python -m harness.site preview [--port 8080]              # serve it (Ctrl-C or SIGTERM stops it)
    python -m harness.site vendor                             # re-fetch from npm and verify

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
import time
import urllib.request
from pathlib import Path

ASSETS = Path(__file__).resolve().parent / "site_assets"
LOCK = ASSETS / "lock.json"
REGISTRY = "https://registry.npmjs.org"
VENDOR = "vendor"  # where the copies go, inside the published site
PAGES = ("index.html", "error.html")
SITE_PLUGIN = ".harness.asv_site"  # asv.conf.json's "plugins" entry that makes asv publish this site
NEEDS_HTTP = "needs-http.js"  # our own script: on file:// it says to serve the site (site_assets/)
# Without an integrity attribute: a browser refuses an integrity-checked script on file:// (Chromium:
# "requires the request to be CORS enabled"), and file:// is the one place this script is for.
NEEDS_HTTP_TAG = f'<script src="{VENDOR}/{NEEDS_HTTP}"></script>'


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
            raise ValueError(f"site assets: {entry['local']} is missing; run `python -m harness.site vendor`")
        if sri(path.read_bytes()) != entry["sri"]:
            raise ValueError(f"site assets: {entry['local']} does not match its pinned hash in {LOCK.name}")


def _script_or_link(url: str) -> re.Pattern:
    """The whole ``<script src=URL ...>`` or ``<link href=URL ...>`` tag of asv's page."""
    return re.compile(r"<(script|link)\b[^>]*\b(?:src|href)=\"" + re.escape(url) + r"\"[^>]*>")


def _local_tag(tag: re.Match, entry: dict) -> str:
    local = f"{VENDOR}/{entry['local']}"
    if tag.group(1) == "link":
        return f'<link rel="stylesheet" href="{local}" integrity="{entry["sri"]}">'
    return f'<script src="{local}" integrity="{entry["sri"]}" onerror="js_load_failure()">'


def _first_in_head(text: str, page: str) -> str:
    """``text`` with the needs-http script as the first thing in its ``<head>``: it must run before
    the libraries, whose refusal on file:// sends the reader off to error.html."""
    if NEEDS_HTTP_TAG in text:
        return text
    text, count = re.subn(r"<head\b[^>]*>", lambda head: head.group(0) + NEEDS_HTTP_TAG, text, count=1)
    if not count:
        raise ValueError(f"{page} has no <head> to load {NEEDS_HTTP} from: this asv's pages are not the ones known")
    return text


def make_self_contained(html_dir: Path) -> list[str]:
    """Copy the vendored libraries (and the needs-http script) into ``html_dir/vendor`` and point
    asv's pages at them. Returns the CDN addresses replaced; raises ValueError if a page still loads
    anything from the network."""
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
        text = _first_in_head(path.read_text(), page)
        for entry in entries:
            if entry.get("cdn") and entry["cdn"] in text:
                text, count = _script_or_link(entry["cdn"]).subn(lambda m, e=entry: _local_tag(m, e), text)
                if count:
                    replaced.append(entry["cdn"])
        remote = re.findall(r"<(?:script|link)\b[^>]*\b(?:src|href)=\"(https?://[^\"]+)\"", text)
        if remote:
            raise ValueError(f"{page} still loads {remote}: this asv's pages name a library the lock lacks")
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
            if json.loads((path / "machine.json").read_text()).get("gpu", "none") == "none":
                left_out.append(path.name)
            else:
                shutil.copytree(path, into / path.name)
    return left_out


def config_of(config: str) -> dict:
    from harness import asvrun

    return asvrun.load_config(str(asvrun.ROOT / config))


def html_dir_of(config: str, conf: dict) -> Path:
    """The site's folder: asv reads a configuration's paths from the configuration's own folder."""
    from harness import asvrun

    return (asvrun.ROOT / config).parent / conf.get("html_dir", "html")


def publish(config: str = "asv.conf.json") -> Path:
    """``asv publish`` with ``config``, whose site plugin does the rest (``asv_site.py``): one way
    to build the site, whoever asks for it. Returns the site's folder."""
    from harness import asvrun

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
    if update:
        LOCK.write_text(json.dumps(pins, indent=1) + "\n")


def preview(config: str, port: int) -> int:
    """asv's own server on the built site, until it ends or this process is told to stop; one line,
    not asv's traceback, where no site is built."""
    from harness import asvrun

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
    parser = argparse.ArgumentParser(prog="python -m harness.site", description=__doc__.splitlines()[0])
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
