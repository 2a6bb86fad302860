"""asv's pages made self-contained: the vendored libraries loaded instead of CDNs, under a
Content-Security-Policy that runs no script but the site's own files, with ``needs-http.js`` first.
A page still loading anything remote, or carrying inline script, is refused. Why each piece:
docs/performance-history.md, "How the site is built"."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from harness.history import site_vendored

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
    """``text`` with the policy, then the needs-http script, first in its ``<head>`` (once each)."""
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
    """The policy would refuse inline script silently and the page half work: refuse it here instead."""
    found = INLINE_SCRIPT.search(text) or INLINE_HANDLER.search(text) or JAVASCRIPT_URL.search(text)
    if found:
        raise ValueError(
            f"{page} has inline script ({found.group(0)[:80]}...), which its Content-Security-Policy refuses: "
            "this asv's pages are not the ones known"
        )


def make_self_contained(html_dir: Path) -> list[str]:
    """Copy the vendored files into ``html_dir/vendor`` and point asv's pages at them, under the policy.
    Returns the CDN addresses replaced; ValueError where a page still loads anything remote or has
    inline script."""
    site_vendored.check_assets()
    html_dir = Path(html_dir)
    entries = site_vendored.lock()["files"]
    for local in [entry["local"] for entry in entries] + [NEEDS_HTTP]:
        target = html_dir / VENDOR / local
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(site_vendored.ASSETS / local, target)
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
