"""The history site, self-contained: ``asv publish`` with the site plugin (``asv_site.py``).

    python -m harness site publish [--config asv.conf.json]   # asv publish, with the site plugin
    python -m harness site preview [--port 8080]              # serve it (Ctrl-C or SIGTERM stops it)
    python -m harness site vendor [--update]                  # re-fetch from npm and verify

The pages load their data over HTTP: opened as a file, ``site_assets/needs-http.js`` says so. How
the site is built: docs/performance-history.md, "How the site is built".

Exit 0: done; preview: stopped by SIGINT (Ctrl-C) or SIGTERM, whether sent to this process or to
asv's server. Exit 1: failed, said in one line; preview: no site built yet, or asv's server failed
(its port taken, say). Exit 2: bad arguments, said in one line before anything runs: a port outside
1 to 65535, a --config that can't be read as asv's configuration.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.core import command_output
from harness.history import asvrun
from harness.history.result_merge import gpu_machines
from harness.history.site_vendored import vendor

SITE_PLUGIN = ".harness.history.asv_site"  # asv.conf.json's "plugins" entry that makes asv publish this site
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOP_WAIT_S = 10


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


def preview(config: str, port: int) -> int:
    """asv's own server on the built site, until it ends or is told to stop; one line where no site is built."""
    html = html_dir_of(config, asvrun.load_config(config))
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


def main(argv=None) -> int:
    parser = command_output.Parser(prog="python -m harness site", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=command_output.Parser)
    publish_cmd = commands.add_parser("publish", help="seed the results, asv publish, make the site self-contained")
    asvrun.add_config(publish_cmd)
    preview_cmd = commands.add_parser("preview", help="serve the built site on http://127.0.0.1:PORT")
    asvrun.add_config(preview_cmd)
    preview_cmd.add_argument("--port", type=port, default=8080, help="1 to 65535 (default %(default)s)")
    vendor_cmd = commands.add_parser("vendor", help="re-fetch the libraries from npm and verify them")
    vendor_cmd.add_argument("--update", action="store_true", help="record new hashes (after changing a version)")
    args = parser.parse_args(argv)
    if args.command in ("publish", "preview"):
        try:
            asvrun.load_config(args.config)
        except asvrun.ConfigError as error:
            parser.error(f"--config {error}")
    if args.command == "preview":
        return preview(args.config, args.port)
    try:
        if args.command == "vendor":
            vendor(args.update)
        else:
            html = publish(args.config)
            print(
                f"site: built in {html}; serve it with `asv preview` or `nox -s preview` and open "
                "http://127.0.0.1:8080 (its pages load their data over HTTP: opened as a file, they can't)"
            )
    except (ValueError, subprocess.CalledProcessError) as error:
        print(f"site: {error}", file=sys.stderr)
        return 1
    return 0
