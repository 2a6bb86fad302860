"""asv's scripts as the site runs them: where asv's pages built markup from a name in the data (a git
tag, a machine.json field, a benchmark's parameters), they build it from text (``text_as_text``), on
asv's known scripts alone (``check_asv_scripts``): a tag named ``v1<img/src='x'/onerror=...>`` ran
script on every graph page of asv's own site. The places, and why not escape the data instead:
docs/performance-history.md, "How the site is built"."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from harness.history.site_vendored import sri

# The bytes of asv 0.6.6's scripts, on which TEXT_AS_TEXT's places were read.
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


def _table(text: str) -> list[tuple[str, str, str]]:
    """(script, asv's lines, ours) per ``@@ script`` entry of ``site_assets/text-as-text.txt``."""
    entries = []
    for entry in text.split("\n@@ ")[1:]:
        script, lines = entry.split("\n", 1)
        asvs, ours = lines.split("\n=>\n")
        entries.append((script, asvs, ours))
    return entries


# Where asv's scripts build markup from a name, and what the site runs instead.
TEXT_AS_TEXT = _table((Path(__file__).resolve().parent / "site_assets" / "text-as-text.txt").read_text())


def check_asv_scripts(directory: Path) -> dict[str, str]:
    """{name: text} of asv's scripts in ``directory``; ValueError naming the first that is not the known one."""
    directory = Path(directory)
    texts = {name: (directory / name).read_text() for name in ASV_SCRIPTS if (directory / name).is_file()}
    if set(texts) != set(ASV_SCRIPTS):
        raise ValueError(f"{directory} lacks asv's {sorted(set(ASV_SCRIPTS) - set(texts))}: not asv's pages")
    for name, text in texts.items():
        if sri(text.encode()) != ASV_SCRIPTS[name]:
            raise ValueError(
                f"{name} is not asv {ASV_CHECKED}'s (or was changed already): where it inserts tag, branch, "
                "machine and benchmark names as markup was read on that one's; read this one's "
                "(harness/history/site_assets/text-as-text.txt)"
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
    """asv's scripts in ``html_dir`` changed as ``TEXT_AS_TEXT`` says. Returns the scripts changed;
    ValueError, before changing any, where a script is not asv's known one."""
    html_dir = Path(html_dir)
    texts = check_asv_scripts(html_dir)
    changed = {}
    for script, asvs, ours in TEXT_AS_TEXT:
        changed[script] = _replace_once(changed.get(script, texts[script]), asvs, ours, script)
    for script, text in changed.items():
        (html_dir / script).write_text(text)
    return sorted(changed)
