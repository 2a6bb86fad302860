"""What the package indexes list, asked as pip asks them and without downloading anything: the
indexes (PyPI or PIP_INDEX_URL, and PIP_EXTRA_INDEX_URL's), and each project's files from a PEP 691
(JSON) or PEP 503 (HTML) page, an index that can't answer skipped with a warning, as pip skips it.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser

PYPI = "https://pypi.org/simple"


@dataclass(frozen=True)
class IndexFile:
    filename: str
    requires_python: str | None = None
    yanked: bool = False


Lister = Callable[[str], list[IndexFile]]  # canonical project name -> the files the indexes list


def index_urls(environ: dict[str, str] | None = None) -> list[str]:
    environ = os.environ if environ is None else environ
    urls = [environ.get("PIP_INDEX_URL") or PYPI, *environ.get("PIP_EXTRA_INDEX_URL", "").split()]
    return [url.rstrip("/") for url in urls if url.startswith(("http://", "https://"))]


class _Anchors(HTMLParser):
    """The files of a PEP 503 (HTML) project page: each link's text and data-* attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.files: list[IndexFile] = []
        self._attrs: dict[str, str | None] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._attrs = dict(attrs)

    def handle_data(self, data):
        if self._attrs is not None and data.strip():
            attrs = self._attrs
            self.files.append(IndexFile(data.strip(), attrs.get("data-requires-python"), "data-yanked" in attrs))
            self._attrs = None


def list_from_indexes(urls: list[str], timeout: float = 20) -> Lister:
    unreachable: set[str] = set()

    def skip(url: str, why) -> None:
        # As pip does: an index it can't reach, or that answers with an error, is skipped with a
        # warning; a pin then passes only if another index has its wheel.
        print(f"WARNING: skipping index {url}: {why}", file=sys.stderr)
        unreachable.add(url)

    def list_files(project: str) -> list[IndexFile]:
        files: list[IndexFile] = []
        for url in urls:
            if url in unreachable:
                continue
            try:
                body, kind = _project_page(url, project, timeout)
            except urllib.error.HTTPError as error:
                if error.code != 404:  # 404: this index doesn't have the project; another may
                    skip(url, f"HTTP {error.code} for {project}")
                continue
            except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as error:
                skip(url, error)
                continue
            try:
                files += _files_of(body, kind)
            except ValueError as error:
                skip(url, f"its page for {project} is no index page ({error})")
        return files

    list_files.unreachable = unreachable  # type: ignore[attr-defined]
    return list_files


def _project_page(url: str, project: str, timeout: float) -> tuple[str, str]:
    request = urllib.request.Request(
        f"{url}/{project}/", headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read().decode(errors="replace"), response.headers.get("Content-Type", "")


def _files_of(body: str, kind: str) -> list[IndexFile]:
    """The files a PEP 691 (JSON) or PEP 503 (HTML) page lists; ValueError for JSON that is no such
    page. An entry without a filename is no file."""
    if "json" not in kind:
        parser = _Anchors()
        parser.feed(body)
        return parser.files
    try:
        page = json.loads(body)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    listed = page.get("files") if isinstance(page, dict) else None
    if not isinstance(listed, list):
        raise ValueError("no list of files")
    return [
        IndexFile(f["filename"], _string_or_none(f.get("requires-python")), bool(f.get("yanked")))
        for f in listed
        if isinstance(f, dict) and isinstance(f.get("filename"), str)
    ]


def _string_or_none(value) -> str | None:
    return value if isinstance(value, str) else None
