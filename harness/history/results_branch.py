"""The ``asv-results`` branch: every GPU result history.yml measured, kept append-only.

``fetch`` merges the branch's files into DIR; ``store`` adds DIR's GPU results of the commits its
caller names as one commit on the branch's tip, never forced, merged again where the branch moved
under it (docs/performance-history.md, "The store's guarantees"). ``$GITHUB_TOKEN`` goes to git
through its environment, never on a command line. Standard library only (docs/harness-code.md).

Exit 0: done (or nothing to do, or no branch yet to fetch). 2: bad input (no URL, neither --commit
nor --unmeasured, a --commit that isn't a full hash, DIR holds no machine's results, a file that
isn't asv's). 3: the remote could not be read or written, or the branch moved under every attempt.
"""

from __future__ import annotations

import base64
import os
import random
import re
import subprocess
import tempfile
import time
from pathlib import Path

from harness.core import command_output, exits
from harness.core.schema import RecordError
from harness.history import result_merge

BRANCH = "asv-results"
REF = f"refs/heads/{BRANCH}"
BOT_NAME, BOT_EMAIL = "nf4kernel-bot", "nf4kernel-bot@users.noreply.github.com"
GIT_TIMEOUT_S = 300
ATTEMPTS = 5
EXIT_REMOTE = 3
FULL_HASH = re.compile(r"[0-9a-f]{40}")  # as github.sha gives it


class RemoteError(RuntimeError):
    """The remote could not be read or written; the message is one line."""


def say(message: str) -> None:
    print(f"results-branch: {message}", flush=True)


def git_env() -> dict[str, str]:
    """git's environment: no password prompt (a job would hang on it), the bot as author, the token as
    an HTTP header through GIT_CONFIG_* variables."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    env.update(GIT_AUTHOR_NAME=BOT_NAME, GIT_AUTHOR_EMAIL=BOT_EMAIL)
    env.update(GIT_COMMITTER_NAME=BOT_NAME, GIT_COMMITTER_EMAIL=BOT_EMAIL)
    token = os.environ.get("GITHUB_TOKEN")
    if token:
        count = int(env.get("GIT_CONFIG_COUNT") or 0)
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        env[f"GIT_CONFIG_KEY_{count}"] = "http.extraHeader"
        env[f"GIT_CONFIG_VALUE_{count}"] = f"Authorization: basic {basic}"
        env["GIT_CONFIG_COUNT"] = str(count + 1)
    return env


def git(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    command = ["git", "-c", "core.hooksPath=/dev/null", *args]
    try:
        return subprocess.run(
            command,
            cwd=cwd,
            env=git_env(),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RemoteError(f"git {args[0]} took more than {GIT_TIMEOUT_S} s") from None


def last_line(done: subprocess.CompletedProcess) -> str:
    """git's reason in one line: a ref push rejected (``!``), else its first fatal or error line, else its last."""
    text = f"{done.stdout or ''}\n{done.stderr or ''}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for prefixes in (("!",), ("fatal:", "error:")):
        found = [line for line in lines if line.startswith(prefixes)]
        if found:
            return " ".join(found[0].split())
    return lines[-1] if lines else f"exit {done.returncode}"


def local(*args: str, cwd: Path, stdin: str | None = None) -> str:
    """A git command on the scratch repository: it can't fail but for a bug, said in one line."""
    done = git(*args, cwd=cwd, stdin=stdin)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {last_line(done)}")
    return done.stdout.strip()


def branch_tip(url: str, cwd: Path) -> str | None:
    """The branch's commit, or None when the remote answered that it has no such branch."""
    done = git("ls-remote", "--exit-code", url, REF, cwd=cwd)
    if done.returncode == 2:
        return None
    if done.returncode != 0:
        raise RemoteError(f"could not read {url}: {last_line(done)}")
    return done.stdout.split()[0]


def check_out_branch(url: str, work: Path) -> str | None:
    """A scratch repository in ``work`` with the branch's files checked out; its commit, or None (an
    empty folder) where the branch does not exist yet."""
    local("init", "-q", cwd=work)
    if branch_tip(url, work) is None:
        return None
    done = git("fetch", "-q", "--no-tags", "--depth=1", url, REF, cwd=work)
    if done.returncode != 0:
        raise RemoteError(f"could not fetch {BRANCH} from {url}: {last_line(done)}")
    local("checkout", "-q", "--detach", "FETCH_HEAD", cwd=work)
    return local("rev-parse", "HEAD", cwd=work)


def fetch(url: str, into: Path) -> int:
    with tempfile.TemporaryDirectory(prefix="asv-results-") as scratch:
        work = Path(scratch)
        tip = check_out_branch(url, work)
        if tip is None:
            say(f"{url} has no {BRANCH} branch yet: nothing earlier to add (the first store creates it)")
            return 0
        merged = result_merge.merge_tree(work, into, incoming_label=BRANCH, target_label=str(into))
    for line in merged.decisions:
        say(line)
    say(f"{BRANCH} at {tip[:12]}: {len(merged.added)} files added to {into}, {len(merged.changed)} merged into")
    return 0


def store(source: Path, url: str, message: str, attempts: int, run: result_merge.RunOnly) -> int:
    for attempt in range(1, attempts + 1):
        moved = store_once(source, url, message, run)
        if moved is None:
            return 0
        if attempt < attempts:
            say(f"{BRANCH} moved under this store ({moved}): merging again onto it")
            time.sleep(random.uniform(0.5, 1.5) * min(2 ** (attempt - 1), 16))  # two racers don't retry in step
    raise RemoteError(f"{BRANCH} moved under each of {attempts} attempts to store")


def store_once(source: Path, url: str, message: str, run: result_merge.RunOnly) -> str | None:
    """Merge onto the branch's tip and push. None once stored (or nothing new); how the branch moved
    where it moved before the push; RemoteError for a push refused while it stayed."""
    with tempfile.TemporaryDirectory(prefix="asv-results-") as scratch:
        work = Path(scratch)
        base = check_out_branch(url, work)
        merged = result_merge.merge_tree(source, work, incoming_label="this run", target_label=BRANCH, run=run)
        if not merged.written:
            list(map(say, merged.lines()))
            say(f"nothing new for {BRANCH}" + (f" (at {base[:12]})" if base else "") + ": no commit made")
            return None
        commit = commit_of(work, base, message, merged)
        done = git("push", "--porcelain", url, f"{commit}:{REF}", cwd=work)
        if done.returncode == 0:
            list(map(say, merged.lines()))
            say(f"{BRANCH} is now {commit[:12]}" + (f", on top of {base[:12]}" if base else ", its first commit"))
            return None
        now = branch_tip(url, work)
        if now == base:
            raise RemoteError(f"{url} refused the push of {BRANCH}: {last_line(done)}")
        return f"{(base or 'none')[:12]} -> {(now or 'none')[:12]}"


def commit_of(work: Path, base: str | None, message: str, merged: result_merge.Merged) -> str:
    """A commit of the work tree whose parent is ``base`` (none: the branch's first commit)."""
    local("add", "-A", ".", cwd=work)
    tree = local("write-tree", cwd=work)
    body = "\n".join([*(f"added {p}" for p in merged.added), *(f"changed {p}" for p in merged.changed)])
    parents = ["-p", base] if base else []
    return local("commit-tree", tree, *parents, "-F", "-", cwd=work, stdin=f"{message}\n\n{body}\n")


def bad(line: str) -> int:
    say(line)
    return exits.BAD_INPUT


def default_url() -> str | None:
    server, repository = os.environ.get("GITHUB_SERVER_URL"), os.environ.get("GITHUB_REPOSITORY")
    return f"{server}/{repository}.git" if server and repository else None


def main(argv=None) -> int:
    parser = command_output.Parser(
        prog="python -m harness results-branch",
        description=__doc__.split("\n\n")[0].strip(),
        epilog="Exit 0 done; 2 bad input; 3 the remote could not be read or written.",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=command_output.Parser)
    fetch_cmd = commands.add_parser("fetch", help="merge the branch's results into DIR")
    fetch_cmd.add_argument("--into", type=Path, required=True, metavar="DIR", help="an asv results folder")
    store_cmd = commands.add_parser("store", help="add DIR's GPU results to the branch and push (never forced)")
    store_cmd.add_argument(
        "--from", dest="source", type=Path, required=True, metavar="DIR", help="an asv results folder"
    )
    store_cmd.add_argument("--commit", dest="commits", action="append", default=[], metavar="SHA", help="one measured")
    store_cmd.add_argument("--unmeasured", action="store_true", help="also commits with no measured value stored")
    store_cmd.add_argument("--message", default="asv results", help="the commit's first line")
    store_cmd.add_argument("--attempts", type=int, default=ATTEMPTS, help="pushes tried while the branch moves")
    for sub in (fetch_cmd, store_cmd):
        sub.add_argument("--url", default=default_url(), help="the repository (default: $GITHUB_SERVER_URL/...)")
    args = parser.parse_args(argv)
    if not args.url:
        return bad("no --url, and GITHUB_SERVER_URL / GITHUB_REPOSITORY are not both set")
    try:
        if args.command == "fetch":
            return fetch(args.url, args.into)
        if args.attempts < 1:
            return bad(f"--attempts must be 1 or more, not {args.attempts}")
        if not args.commits and not args.unmeasured:  # DIR can't say: it is the run's own upload
            return bad("store needs --commit SHA (each commit this run measured) or --unmeasured")
        for sha in args.commits:
            if not FULL_HASH.fullmatch(sha):
                return bad(f"--commit {sha!r}: not a full commit hash (40 hex digits)")
        if not result_merge.machines_in(args.source):
            return bad(f"nothing to store: {args.source} holds no <machine>/machine.json")
        run = result_merge.RunOnly(frozenset(args.commits), args.unmeasured)
        return store(args.source.resolve(), args.url, args.message, args.attempts, run)
    except (RecordError, RemoteError) as error:
        say(f"{error}; nothing was written")
        return EXIT_REMOTE if isinstance(error, RemoteError) else exits.BAD_INPUT
