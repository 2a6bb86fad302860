"""The self-contained site: the vendored libraries are the pinned ones, those that the CDN serves
byte for byte are the very files asv names (asv's own SRI hashes match), and a published site
loads nothing from the network."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import asv
import pytest

from harness import site

ASV_INDEX = Path(asv.__file__).parent / "www" / "index.html"
LOCK = site.lock()


def asv_cdn_tags() -> dict:
    """{CDN address: SRI hash} of every library asv's own index.html loads from a CDN."""
    text = ASV_INDEX.read_text()
    tags = re.findall(r'<(?:script|link)\b[^>]*?(?:src|href)="(https://[^"]+)"[^>]*?integrity="([^"]+)"', text)
    return dict(tags)


def test_every_vendored_file_is_the_pinned_one():
    site.check_assets()


def test_a_changed_file_is_refused(tmp_path, monkeypatch):
    copy = tmp_path / "site_assets"
    shutil.copytree(site.ASSETS, copy)
    monkeypatch.setattr(site, "ASSETS", copy)
    monkeypatch.setattr(site, "LOCK", copy / "lock.json")
    target = copy / LOCK["files"][0]["local"]
    target.write_bytes(target.read_bytes() + b"\n// tampered")
    with pytest.raises(ValueError, match="does not match its pinned hash"):
        site.check_assets()


def test_the_lock_replaces_every_cdn_library_asv_loads():
    replaced = {entry["cdn"] for entry in LOCK["files"] if entry["cdn"]}
    assert set(asv_cdn_tags()) == replaced


def test_the_versions_are_the_ones_asv_names():
    """The npm version is asv's, except where the registry lacks it (then the lock says so)."""
    for entry in LOCK["files"]:
        if not entry["cdn"]:
            continue
        package = LOCK["packages"][entry["package"]]
        named = re.search(r"(\d+\.\d+\.\d+)", entry["cdn"]).group(1)
        if package["version"] != named:
            assert package["asv_names"].startswith(named) and "npm has" in package["asv_names"], entry["package"]


@pytest.mark.parametrize("entry", [e for e in LOCK["files"] if e.get("cdn_identical")], ids=lambda e: e["local"])
def test_files_the_cdn_serves_identically_match_asvs_own_hash(entry):
    algorithm, _ = asv_cdn_tags()[entry["cdn"]].split("-", 1)
    data = (site.ASSETS / entry["local"]).read_bytes()
    assert site.sri(data, algorithm) == asv_cdn_tags()[entry["cdn"]]


def test_a_published_site_loads_nothing_from_the_network(tmp_path):
    html = tmp_path / "html"
    shutil.copytree(ASV_INDEX.parent, html)
    replaced = site.make_self_contained(html)
    assert set(replaced) == set(asv_cdn_tags())
    text = (html / "index.html").read_text()
    assert not re.findall(r"<(?:script|link)\b[^>]*\b(?:src|href)=\"https?://", text)
    for local, integrity in re.findall(r'(?:src|href)="(vendor/[^"]+)" integrity="([^"]+)"', text):
        assert site.sri((html / local).read_bytes()) == integrity


def test_a_page_naming_an_unknown_library_is_refused(tmp_path):
    html = tmp_path / "html"
    shutil.copytree(ASV_INDEX.parent, html)
    page = html / "index.html"
    page.write_text(page.read_text().replace("</head>", '<script src="https://cdn.example/x.js"></script></head>'))
    with pytest.raises(ValueError, match="still loads"):
        site.make_self_contained(html)


def test_every_page_loads_the_needs_http_script_first_and_without_an_integrity_check(tmp_path):
    """Opened as a file, a page refuses its integrity-checked scripts and sends the reader to
    error.html: the script that says to serve the site runs first on both, unchecked, or not at all."""
    html = tmp_path / "html"
    shutil.copytree(ASV_INDEX.parent, html)
    site.make_self_contained(html)
    site.make_self_contained(html)  # once more, as over a site already made self-contained: one reference
    for page in site.PAGES:
        text = (html / page).read_text()
        assert re.search(r"<script\b[^>]*>", text).group(0) == '<script src="vendor/needs-http.js">', page
        assert text.count("needs-http.js") == 1, page
    assert (html / "vendor" / "needs-http.js").read_bytes() == (site.ASSETS / "needs-http.js").read_bytes()
