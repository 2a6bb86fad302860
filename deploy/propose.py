"""Proposes a change the fleet's scheduled jobs made (.github/workflows/fleet.yml) as a pull request.

  python3 deploy/propose.py --branch fleet/NAME --title TITLE --body BODY PATH...

If none of PATH differs from the checkout's HEAD, it says so and does nothing. Else it commits PATH
alone on the branch (made anew from HEAD), pushes it (force: the branch is the job's own), and opens
a pull request to the default branch, unless one from that branch is open already. Where the
repository doesn't let workflows open pull requests (configure-github.sh leaves "Allow GitHub Actions
to create and approve pull requests" off, and a pull request opened with the workflow's own token
would start no CI), the refusal is answered with an issue that links the pushed branch, so a
maintainer opens the pull request. Exit 1 when neither could be opened.

Environment: GH_TOKEN (the token), GITHUB_REPOSITORY (owner/name), GITHUB_API_URL (default
https://api.github.com: a stand-in in the tests), PROPOSE_BASE (default main).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

AUTHOR = [
    "-c",
    "user.name=github-actions[bot]",
    "-c",
    "user.email=41898282+github-actions[bot]@users.noreply.github.com",
]


def git(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=check)


def api(method: str, path: str, body: dict | None = None) -> tuple[int, dict | list]:
    url = os.environ.get("GITHUB_API_URL", "https://api.github.com").rstrip("/") + path
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Accept", "application/vnd.github+json")
    request.add_header("Authorization", f"Bearer {os.environ['GH_TOKEN']}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def push(branch: str) -> None:
    """Push HEAD to ``branch`` on origin; over HTTPS with the token (the checkout keeps none)."""
    url = git("remote", "get-url", "origin").stdout.strip()
    auth = []
    if url.startswith("https://"):
        basic = base64.b64encode(f"x-access-token:{os.environ['GH_TOKEN']}".encode()).decode()
        auth = ["-c", f"http.extraheader=AUTHORIZATION: basic {basic}"]
    git(*auth, "push", "--force", "origin", f"HEAD:refs/heads/{branch}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--branch", required=True)
    parser.add_argument("--title", required=True)
    parser.add_argument("--body", default="")
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args(argv)
    if not args.branch.startswith("fleet/"):
        parser.error("the branch must be under fleet/: the job's own, which it force-pushes")
    if git("diff", "--quiet", "HEAD", "--", *args.paths, check=False).returncode == 0:
        print(f"unchanged: {' '.join(args.paths)}")
        return 0
    repository, base = os.environ["GITHUB_REPOSITORY"], os.environ.get("PROPOSE_BASE", "main")
    git("checkout", "-B", args.branch)
    git("add", "--", *args.paths)
    git(*AUTHOR, "commit", "-m", args.title, "-m", args.body)
    push(args.branch)
    owner = repository.split("/")[0]
    status, open_pulls = api("GET", f"/repos/{repository}/pulls?state=open&head={owner}:{args.branch}")
    if status == 200 and open_pulls:
        print(f"pull request already open: {open_pulls[0].get('html_url')} (its branch now updated)")
        return 0
    body = {"title": args.title, "head": args.branch, "base": base, "body": args.body}
    status, answer = api("POST", f"/repos/{repository}/pulls", body)
    if status == 201:
        print(f"opened {answer.get('html_url')}")
        return 0
    why = answer.get("message", "") if isinstance(answer, dict) else ""
    print(f"could not open a pull request ({status}: {why}); opening an issue instead", file=sys.stderr)
    issue = {
        "title": args.title,
        "body": f"{args.body}\n\nThe change is on the branch `{args.branch}`: open a pull request from it "
        f"(this workflow's token may not: {status} {why}).",
    }
    status, answer = api("POST", f"/repos/{repository}/issues", issue)
    if status == 201:
        print(f"opened {answer.get('html_url')}")
        return 0
    print(f"could not open an issue either ({status})", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
