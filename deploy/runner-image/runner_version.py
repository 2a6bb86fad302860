"""The actions runner's version the GPU runner image is built on, kept current.

  python3 deploy/runner-image/runner_version.py current           # the version the Dockerfile pins
  python3 deploy/runner-image/runner_version.py propose           # if GitHub released a newer runner:
                                                                  # pin it (version and digest) in the
                                                                  # Dockerfile; prints what it did
  python3 deploy/runner-image/runner_version.py set-digest DIGEST # the built image's digest, into
                                                                  # deploy/arc/kustomization.yaml

The Dockerfile's `FROM ghcr.io/actions/actions-runner:<version>@sha256:<digest>` is the one place the
version is written: the image's tag is made from it (.github/workflows/fleet.yml), and the manifests
name the built image by digest alone. Why it must stay current: ARC 0.14 stops scaling a runner set
whose runner version GitHub has deprecated (actions/actions-runner-controller#4404), and GitHub
refuses jobs to runners too far behind (docs.github.com, "Communicating with self-hosted runners").

`propose` reads the latest release of actions/runner from the REST API ($GITHUB_API_URL, default
https://api.github.com: releases/latest leaves out drafts and prereleases) and the digest of its
image from the registry ($RUNNER_REGISTRY_URL, default https://ghcr.io, anonymous pull token, the
manifest list's Docker-Content-Digest): a tag can move, the digest pinned with it can't. Both point
at a stand-in in the tests. Where $GITHUB_OUTPUT is set, it writes `version=` and `changed=` there.
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOCKERFILE = HERE / "Dockerfile"
KUSTOMIZATION = HERE.parent / "arc" / "kustomization.yaml"
IMAGE = "actions/actions-runner"
FROM = re.compile(r"^FROM ghcr\.io/actions/actions-runner:(\d+\.\d+\.\d+)@(sha256:[0-9a-f]{64})$", re.M)
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
KUSTOMIZE_DIGEST = re.compile(r"^(    digest: )sha256:[0-9a-f]{64}$", re.M)
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)


def current(text: str | None = None) -> tuple[str, str]:
    found = FROM.findall(DOCKERFILE.read_text() if text is None else text)
    if len(found) != 1:
        raise SystemExit(f"{DOCKERFILE}: expected one `FROM ghcr.io/{IMAGE}:<version>@sha256:<digest>`, found {found}")
    return found[0]


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _get(url: str, headers: dict, method: str = "GET"):
    request = urllib.request.Request(url, headers=headers, method=method)
    return urllib.request.urlopen(request, timeout=30)


def latest_release() -> str:
    api = os.environ.get("GITHUB_API_URL", "https://api.github.com").rstrip("/")
    headers = {"Accept": "application/vnd.github+json"}
    if os.environ.get("GITHUB_TOKEN"):  # the workflow's: the anonymous rate limit is shared per address
        headers["Authorization"] = f"Bearer {os.environ['GITHUB_TOKEN']}"
    with _get(f"{api}/repos/actions/runner/releases/latest", headers) as answer:
        tag = json.load(answer)["tag_name"]
    if not re.fullmatch(r"v\d+\.\d+\.\d+", tag):
        raise SystemExit(f"actions/runner's latest release has the tag {tag!r}, not vX.Y.Z")
    return tag[1:]


def image_digest(version: str) -> str:
    registry = os.environ.get("RUNNER_REGISTRY_URL", "https://ghcr.io").rstrip("/")
    token_url = f"{registry}/token?scope=repository:{IMAGE}:pull&service=ghcr.io"
    with _get(token_url, {}) as answer:
        token = json.load(answer)["token"]
    manifest = f"{registry}/v2/{IMAGE}/manifests/{version}"
    with _get(manifest, {"Accept": MANIFEST_TYPES, "Authorization": f"Bearer {token}"}, "HEAD") as answer:
        digest = answer.headers.get("Docker-Content-Digest", "")
    if not DIGEST.match(digest):
        raise SystemExit(f"{manifest}: no sha256 digest in the answer ({digest!r})")
    return digest


def output(**values: str) -> None:
    path = os.environ.get("GITHUB_OUTPUT")
    if path:
        with open(path, "a") as out:
            out.writelines(f"{key}={value}\n" for key, value in values.items())


def propose() -> bool:
    pinned, _ = current()
    newest = latest_release()
    if version_key(newest) <= version_key(pinned):
        print(f"the Dockerfile's runner {pinned} is the latest release ({newest})")
        output(version=pinned, changed="false")
        return False
    digest = image_digest(newest)
    text = DOCKERFILE.read_text()
    DOCKERFILE.write_text(FROM.sub(f"FROM ghcr.io/{IMAGE}:{newest}@{digest}", text))
    print(f"runner {pinned} -> {newest} ({digest})")
    output(version=newest, changed="true")
    return True


def set_digest(digest: str) -> None:
    if not DIGEST.match(digest):
        raise SystemExit(f"not a sha256 digest: {digest!r}")
    text = KUSTOMIZATION.read_text()
    if len(KUSTOMIZE_DIGEST.findall(text)) != 1:
        raise SystemExit(f"{KUSTOMIZATION}: expected one image digest line")
    KUSTOMIZATION.write_text(KUSTOMIZE_DIGEST.sub(lambda m: m.group(1) + digest, text))


if __name__ == "__main__":
    command = sys.argv[1:]
    if command == ["current"]:
        print(current()[0])
    elif command == ["propose"]:
        propose()
    elif len(command) == 2 and command[0] == "set-digest":
        set_digest(command[1])
    else:
        sys.exit(__doc__)
