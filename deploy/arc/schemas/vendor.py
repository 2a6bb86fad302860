"""Writes the JSON schemas the manifest tests validate against (tests/deploy/test_arc_manifests.py).
Run by hand when a pinned version changes; the tests never fetch anything.

  python3 deploy/arc/schemas/vendor.py crd CRD.yaml ARC_VERSION
      AutoscalingRunnerSet's openAPIV3Schema from the controller chart's CRD at that release: in a
      clone of actions/actions-runner-controller, `git show gha-runner-scale-set-0.14.2:PATH` with PATH
      charts/gha-runner-scale-set-controller/crds/actions.github.com_autoscalingrunnersets.yaml
  python3 deploy/arc/schemas/vendor.py kubernetes LOCAL_STRICT_DIR K8S_VERSION
      One self-contained ("standalone") file per kind we use, from a kubernetes-json-schema
      `vX.Y.Z-local-strict` folder (files that $ref a shared _definitions.json): each definition a
      kind reaches is copied into that kind's own $defs, so a file validates with nothing beside it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
# The Kubernetes kinds the manifests use, and the pod template the runner sets carry (validated on
# its own: the CRD's copy of PodSpec doesn't refuse unknown fields, the strict Kubernetes one does).
KINDS = (
    "namespace-v1",
    "serviceaccount-v1",
    "role-rbac-v1",
    "rolebinding-rbac-v1",
    "networkpolicy-networking-v1",
    "podtemplatespec-v1",
    "runtimeclass-node-v1",
)
SHARED = "/api/_definitions.json#/$defs/"


def crd(path: str, version: str) -> Path:
    document = yaml.safe_load(Path(path).read_text())
    (served,) = [v for v in document["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = served["schema"]["openAPIV3Schema"]
    out = HERE / f"autoscalingrunnerset-actions.github.com-v1alpha1-arc-{version}.json"
    out.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
    return out


def inline(node, definitions: dict, needed: dict):
    """``node`` with its references to the shared definitions made local; each definition it reaches
    (transitively) added to ``needed``."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and (ref.startswith(SHARED) or ref.startswith("#/$defs/")):
            name = ref.rsplit("/", 1)[1]
            node = {**node, "$ref": f"#/$defs/{name}"}
            if name not in needed:
                needed[name] = {}  # before recursing: a definition may reach itself
                needed[name] = inline(definitions[name], definitions, needed)
        return {key: inline(value, definitions, needed) for key, value in node.items()}
    if isinstance(node, list):
        return [inline(item, definitions, needed) for item in node]
    return node


def kubernetes(folder: str, version: str) -> Path:
    source = Path(folder)
    definitions = json.loads((source / "_definitions.json").read_text())["$defs"]
    out = HERE / f"kubernetes-{version}-standalone-strict"
    out.mkdir(exist_ok=True)
    for kind in KINDS:
        needed: dict[str, dict] = {}
        schema = inline(json.loads((source / f"{kind}.json").read_text()), definitions, needed)
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$defs"] = dict(sorted(needed.items()))
        (out / f"{kind}.json").write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
    return out


if __name__ == "__main__":
    command, *args = sys.argv[1:] or [""]
    if command == "crd" and len(args) == 2:
        print(crd(*args))
    elif command == "kubernetes" and len(args) == 2:
        print(kubernetes(*args))
    else:
        sys.exit(__doc__)
