"""The performance history's workshop, beside what the runner runs (``python -m harness bench``,
``results-branch``, ``site publish``): what a person runs by hand.

    python -m tools.history store [--machine M] [--history DIR]   # a GPU machine's results into benchmarks/history
    python -m tools.history list [--history DIR]                  # the machines and commits it holds
    python -m tools.history vendor [--update]                     # the vendored libraries from npm
    python -m tools.history preview [--config C] [--port N]       # the built site, served (nox -s preview)

``store`` merges by ``harness/history/result_merge.py``'s rules, as every seeding does.
``vendor`` re-fetches each library ``harness/history/site_assets/lock.json`` pins from the npm
registry, checks the tarball against the registry's integrity and the lock's, and writes the files
the lock lists; ``--update`` records the hashes found instead (after a deliberate version change).
The runner checks the files against the lock alone (``harness.history.site.check_assets``).
``preview`` serves the built site with asv's own server: its pages load their data over HTTP.

Exit 0: done; preview: stopped by SIGINT (Ctrl-C) or SIGTERM, whether sent to this process or to
asv's server. Exit 1: failed, said in one line (store: no such machine, no GPU, a file that isn't
asv's); preview: no site built yet, or asv's server failed (its port taken, say). Exit 2: bad
arguments, said in one line before anything runs: a port outside 1 to 65535, a --config that
can't be read as asv's configuration.
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

from harness.core import command_output
from harness.history import asvrun, result_merge, site, store

REGISTRY = "https://registry.npmjs.org"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOP_WAIT_S = 10


def _fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read()


def vendor(update: bool = False) -> None:
    """Fetch each pinned tarball from npm, check it against the registry's integrity and the lock's, and
    write the files the lock lists into ``site_assets/``. ``update`` records the hashes found instead."""
    pins = site.lock()
    for name, package in pins["packages"].items():
        meta = json.loads(_fetch(f"{REGISTRY}/{name}/{package['version']}"))
        tarball = _fetch(meta["dist"]["tarball"])
        found = site.sri(tarball, "sha512")
        if found != meta["dist"]["integrity"]:
            raise ValueError(f"{name}: the tarball does not match the registry's own integrity")
        if not update and found != package["integrity"]:
            raise ValueError(f"{name}@{package['version']}: the registry's tarball differs from the pinned one")
        package.update(tarball=meta["dist"]["tarball"], integrity=found)
        with tarfile.open(fileobj=io.BytesIO(tarball)) as archive:
            for entry in (e for e in pins["files"] if e["package"] == name):
                data = archive.extractfile(f"package/{entry['path']}").read()
                if not update and site.sri(data) != entry["sri"]:
                    raise ValueError(f"{name}: {entry['path']} differs from the pinned file")
                entry["sri"] = site.sri(data)
                target = site.ASSETS / entry["local"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        print(f"site: {name}@{package['version']} {found[:20]}... ok")
    for entry in (e for e in pins["files"] if e["package"] is None):  # ours: no registry to ask
        found = site.sri((site.ASSETS / entry["local"]).read_bytes())
        if not update and found != entry["sri"]:
            raise ValueError(f"{entry['local']} differs from its pinned hash (`vendor --update` records a change)")
        entry["sri"] = found
        print(f"site: {entry['local']} (ours) {found[:20]}... ok")
    if update:
        site.LOCK.write_text(json.dumps(pins, indent=1) + "\n")


def preview(config: str, port: int) -> int:
    """asv's own server on the built site, until it ends or is told to stop; one line where no site is built."""
    html = site.html_dir_of(config, asvrun.load_config(config))
    if not (html / "index.html").is_file():
        print(f"site: no site in {html} yet: build it with `nox -s publish` (or `nox -s bench`)")
        return 1
    print(f"site: serving {html} on http://127.0.0.1:{port} (Ctrl-C stops it)", flush=True)
    command = [sys.executable, "-m", "asv", "preview", "--port", str(port), "--config", str(config)]
    return serve(command, cwd=asvrun.ROOT, env=asvrun.asv_env())


def serve(command: list[str], cwd: Path, env: dict) -> int:
    """Run ``command``, a server, until it ends or SIGINT or SIGTERM reaches this process or it: then
    stop it (SIGTERM, SIGKILL STOP_WAIT_S later) and wait for it, exit 0. Any other end: 1."""
    told_to_stop = []
    # Only a note: a handler that raised could interrupt Popen after the server had started, leaving
    # it running and unknown here.
    previous = {
        number: signal.signal(number, lambda signum, frame: told_to_stop.append(signum)) for number in STOP_SIGNALS
    }
    try:
        print("+ python", " ".join(command[1:]), flush=True)
        server = subprocess.Popen(command, cwd=cwd, env=env)
        while server.poll() is None and not told_to_stop:
            time.sleep(0.1)
        if told_to_stop:
            server.terminate()
            try:
                server.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            return 0
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return 0 if server.returncode in (0, -signal.SIGINT, -signal.SIGTERM) else 1  # the signals ended it


def port(text: str) -> int:
    """A TCP port a server can listen on: 1 to 65535 (asv's server would end in a traceback)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port: give 1 to 65535")
    return value


def store_or_list(args) -> int:
    """``store`` (every GPU machine's results, or ``--machine``'s) or ``list``; exit 1 in one line."""
    try:
        if args.command == "list":
            for machine_dir in sorted(p for p in args.history.iterdir() if p.is_dir()):
                print(f"{machine_dir.name}: {len(store.commits(machine_dir))} commits")
            return 0
        results = asvrun.results_dir(args.config)
        machines = [args.machine] if args.machine else result_merge.gpu_machines(results)
        if not machines:
            raise ValueError(f"no GPU machine's results in {store.label(results)}: nothing to store")
        for machine in machines:
            count = store.store(results, machine, args.history)
            store.say(f"{machine}: {count} result files in {store.label(args.history)}")
    except (OSError, ValueError) as error:  # a truncated or foreign file is one line, naming it
        print(f"history: {error}", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    command_output.plain_streams()  # as under `python -m harness`: an argument that is no UTF-8 is quoted back
    parser = command_output.Parser(prog="python -m tools.history", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=command_output.Parser)
    store_cmd = commands.add_parser("store", help="merge a GPU machine's results into benchmarks/history")
    store_cmd.add_argument("--machine", help="asv machine name (default: every GPU machine in the results)")
    list_cmd = commands.add_parser("list", help="the machines and commits in benchmarks/history")
    for sub in (store_cmd, list_cmd):
        sub.add_argument("--history", type=Path, default=store.STORE, help="the history's folder (benchmarks/history)")
    preview_cmd = commands.add_parser("preview", help="serve the built site on http://127.0.0.1:PORT")
    preview_cmd.add_argument("--port", type=port, default=8080, help="1 to 65535 (default %(default)s)")
    for sub in (store_cmd, preview_cmd):
        asvrun.add_config(sub)
    vendor_cmd = commands.add_parser("vendor", help="re-fetch the libraries from npm and verify them")
    vendor_cmd.add_argument("--update", action="store_true", help="record new hashes (after changing a version)")
    args = parser.parse_args(argv)
    if args.command in ("store", "preview"):
        try:
            asvrun.load_config(args.config)
        except asvrun.ConfigError as error:
            parser.error(f"--config {error}")
    if args.command in ("store", "list"):
        return store_or_list(args)
    if args.command == "preview":
        return preview(args.config, args.port)
    try:
        vendor(args.update)
    except (ValueError, KeyError, OSError, http.client.HTTPException, tarfile.TarError) as error:
        # npm unreachable or refusing (URLError is an OSError), or an answer without what it should hold
        print(f"site: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
