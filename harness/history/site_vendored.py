"""The site's vendored libraries in ``site_assets/``, pinned by ``lock.json``: the check that each copy
is the pinned one, and ``vendor``, the one place that talks to the npm registry. Why vendored, and
how they are pinned: docs/performance-history.md, "How the site is built"."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
import urllib.request
from pathlib import Path

ASSETS = Path(__file__).resolve().parent / "site_assets"
LOCK = ASSETS / "lock.json"
REGISTRY = "https://registry.npmjs.org"


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
            raise ValueError(f"site assets: {entry['local']} is missing; run `python -m harness site vendor`")
        if sri(path.read_bytes()) != entry["sri"]:
            raise ValueError(f"site assets: {entry['local']} does not match its pinned hash in {LOCK.name}")


def _fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read()


def vendor(update: bool = False) -> None:
    """Fetch each pinned tarball from npm, check it against the registry's integrity and the lock's, and
    write the files the lock lists into ``site_assets/``. ``update`` records the hashes found instead."""
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
    for entry in (e for e in pins["files"] if e["package"] is None):  # ours: no registry to ask
        found = sri((ASSETS / entry["local"]).read_bytes())
        if not update and found != entry["sri"]:
            raise ValueError(f"{entry['local']} differs from its pinned hash (`vendor --update` records a change)")
        entry["sri"] = found
        print(f"site: {entry['local']} (ours) {found[:20]}... ok")
    if update:
        LOCK.write_text(json.dumps(pins, indent=1) + "\n")
