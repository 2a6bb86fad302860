"""asv's pages made self-contained: the vendored libraries copied into the site and loaded from there
instead of CDNs, under a Content-Security-Policy that runs no script but the site's own files (asv's
one inline script moved to ``site_assets/load-failure.js``), and ``needs-http.js`` first, to tell a
reader who opened the site as a file to serve it. A page that would still load anything from the
network, or still carries inline script, is refused, not published."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from harness.history import site_vendored

VENDOR = "vendor"  # where the copies go, inside the published site
PAGES = ("index.html", "error.html")
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
