"""The self-contained site: the vendored libraries are the pinned ones, those that the CDN serves
byte for byte are the very files asv names (asv's own SRI hashes match), and a published site
loads nothing from the network."""

from __future__ import annotations

import http.client
import json
import re
import shutil
import urllib.error
from pathlib import Path

import asv
import pytest

from harness.history import site
from tools import history as history_tools

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


def published_pages(tmp_path) -> Path:
    html = tmp_path / "html"
    shutil.copytree(ASV_INDEX.parent, html)
    site.make_self_contained(html)
    return html


def test_every_page_carries_a_policy_that_refuses_inline_script(tmp_path):
    """A name that reached a page as markup would run no script: the policy allows the site's own
    files alone, and comes before anything that could run."""
    html = published_pages(tmp_path)
    for page in site.PAGES:
        text = (html / page).read_text()
        head = re.search(r"<head\b[^>]*>", text)
        assert text[head.end() :].startswith(site.CSP_META), page
        assert text.count("Content-Security-Policy") == 1, page
        policy = dict(part.split(" ", 1) for part in site.CONTENT_SECURITY_POLICY.split("; "))
        assert policy["script-src"] == "'self'" and policy["default-src"] == "'none'"
        assert policy["object-src"] == "'none'" and policy["base-uri"] == "'none'"


def test_no_page_has_inline_script_and_asvs_moves_to_a_pinned_file(tmp_path):
    """asv's inline js_load_failure() and the onerror attributes that call it would be refused by
    the policy: the pages have none, and load-failure.js, pinned like the libraries, stands where
    asv's script stood, before the first library."""
    html = published_pages(tmp_path)
    site.make_self_contained(html)  # once more, over a site already rewritten: the same pages
    for page in site.PAGES:
        text = (html / page).read_text()
        assert not re.search(r"<script\b(?![^>]*\bsrc=)[^>]*>", text), page
        assert not re.search(r"\son[a-z]+\s*=", text, re.IGNORECASE), page
        assert "js_load_failure" not in text, page
    index = (html / "index.html").read_text()
    entry = next(e for e in LOCK["files"] if e["local"] == site.LOAD_FAILURE)
    tag = f'<script src="vendor/{site.LOAD_FAILURE}" integrity="{entry["sri"]}"></script>'
    assert index.count(tag) == 1 and index.index(tag) < index.index("vendor/jquery/jquery.min.js")
    assert (html / "vendor" / site.LOAD_FAILURE).read_bytes() == (site.ASSETS / site.LOAD_FAILURE).read_bytes()


@pytest.mark.parametrize(
    "added",
    ["<script>alert(1)</script>", '<body onload="alert(1)">', '<a href="javascript:alert(1)">x</a>'],
    ids=["script", "handler", "javascript-url"],
)
def test_a_page_with_inline_script_is_refused(tmp_path, added):
    """An asv whose pages carry more inline script would half work under the policy: refused."""
    html = tmp_path / "html"
    shutil.copytree(ASV_INDEX.parent, html)
    page = html / "error.html"
    page.write_text(page.read_text().replace("</body>", added + "</body>"))
    with pytest.raises(ValueError, match="inline script"):
        site.make_self_contained(html)


def test_our_own_pinned_file_is_checked_like_the_libraries(tmp_path, monkeypatch):
    copy = tmp_path / "site_assets"
    shutil.copytree(site.ASSETS, copy)
    monkeypatch.setattr(site, "ASSETS", copy)
    monkeypatch.setattr(site, "LOCK", copy / "lock.json")
    (copy / site.LOAD_FAILURE).write_text((copy / site.LOAD_FAILURE).read_text() + "\n// changed")
    with pytest.raises(ValueError, match=f"{site.LOAD_FAILURE} does not match its pinned hash"):
        site.check_assets()
    # `python -m tools.history vendor` checks it without a registry to ask, and `vendor --update`
    # records the change.
    pins = site.lock()
    pins["packages"] = {}
    (copy / "lock.json").write_text(json.dumps(pins))
    with pytest.raises(ValueError, match=f"{site.LOAD_FAILURE} differs from its pinned hash"):
        history_tools.vendor()
    history_tools.vendor(update=True)
    site.check_assets()


@pytest.mark.parametrize(
    "failure",
    [urllib.error.URLError("no route to host"), http.client.IncompleteRead(b""), json.JSONDecodeError("x", "", 0)],
)
def test_vendor_without_a_registry_answer_says_so_in_one_line(monkeypatch, capsys, failure):
    def fetch(url):
        raise failure

    monkeypatch.setattr(history_tools, "_fetch", fetch)
    assert history_tools.main(["vendor"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("site: ") and len(err.strip().splitlines()) == 1


def asv_site_scripts(tmp_path) -> Path:
    html = tmp_path / "html"
    shutil.copytree(ASV_INDEX.parent, html)
    return html


def test_asvs_scripts_insert_names_as_text(tmp_path):
    """Where asv's scripts built markup from a name (a tag's, a machine.json field's, a parameter's,
    a benchmark's), the site's build it from text. What still builds markup is asv's own markup or
    escaped text: the machine tooltip (each line escaped, joined by <br/>) and the popovers that
    hold a graph."""
    html = asv_site_scripts(tmp_path)
    changed = site.text_as_text(html)
    assert changed == sorted({script for script, _, _ in site.TEXT_AS_TEXT})
    for name in set(site.ASV_SCRIPTS) - set(changed):  # the others are asv's, byte for byte
        assert (html / name).read_bytes() == (ASV_INDEX.parent / name).read_bytes()
    scripts = {name: (html / name).read_text() for name in site.ASV_SCRIPTS}
    html_true = {name: len(re.findall(r"html:\s*true", text)) for name, text in scripts.items()}
    assert {name: count for name, count in html_true.items() if count} == {
        "graphdisplay.js": 1,
        "summarylist.js": 1,
        "asv_ui.js": 2,
    }
    for name in ("graphdisplay.js", "summarylist.js"):
        assert "details.push($('<span/>').text(key + ': ' + val).html());" in scripts[name]
    for name, text in scripts.items():
        for value in ("tag", "heading", "parts[j]", "name", "display_name", "group", "bm.name", "bm_name"):
            assert not re.search(rf"['\"]\s*\+\s*{re.escape(value)}\s*\+\s*['\"]</?[a-z]", text), (name, value)


def test_another_asvs_scripts_are_refused_before_any_is_changed(tmp_path):
    """Another asv's scripts may build markup from names in other places: the site is not published
    from them until they are read. None is changed."""
    html = asv_site_scripts(tmp_path)
    graphdisplay = html / "graphdisplay.js"
    graphdisplay.write_text(graphdisplay.read_text() + "\n// another asv\n")
    with pytest.raises(ValueError, match=re.escape("graphdisplay.js is not asv 0.6.6's")):
        site.text_as_text(html)
    for name in site.ASV_SCRIPTS:
        if name != "graphdisplay.js":
            assert (html / name).read_bytes() == (ASV_INDEX.parent / name).read_bytes()
