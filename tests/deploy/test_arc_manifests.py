"""deploy/arc/: the GPU runner fleet's manifests, checked without a cluster. `kubectl kustomize` renders
them; every rendered object is validated against vendored schemas (the ARC CRD at the pinned release,
Kubernetes' strict JSON schemas at the pinned version); then the policy the fleet promises is read off
the rendered objects. Each policy check is shown to fail on a copy broken in one field."""

from __future__ import annotations

import copy
import importlib.util
import ipaddress
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

try:
    import jsonschema
except ImportError:
    # Where nox installed requirements/ci-tools.txt (NF4KERNEL_CI_TOOLS), or CI asks for these tests,
    # a missing validator is an error, not a skip.
    if os.environ.get("NF4KERNEL_CI_TOOLS") or os.environ.get("NF4KERNEL_REQUIRE_KUBECTL") == "1":
        raise
    pytest.skip("no jsonschema here: pip install -r requirements/ci-tools.txt", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
ARC = ROOT / "deploy" / "arc"
SCHEMAS = ARC / "schemas"
ARC_VERSION = "0.14.2"
KUBERNETES_VERSION = "v1.33.0"
CRD_SCHEMA = SCHEMAS / f"autoscalingrunnerset-actions.github.com-v1alpha1-arc-{ARC_VERSION}.json"
KUBERNETES_SCHEMAS = SCHEMAS / f"kubernetes-{KUBERNETES_VERSION}-standalone-strict"
SCHEMA_FILES = {
    ("v1", "Namespace"): "namespace-v1.json",
    ("v1", "ServiceAccount"): "serviceaccount-v1.json",
    ("rbac.authorization.k8s.io/v1", "Role"): "role-rbac-v1.json",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebinding-rbac-v1.json",
    ("networking.k8s.io/v1", "NetworkPolicy"): "networkpolicy-networking-v1.json",
    ("node.k8s.io/v1", "RuntimeClass"): "runtimeclass-node-v1.json",
}
# Cilium's policy is validated structurally: a hand-written schema of the fields used (deploy/README.md).
CILIUM_POLICY = ("cilium.io/v2", "CiliumNetworkPolicy")
CILIUM_SCHEMA = SCHEMAS / "ciliumnetworkpolicy-cilium.io-v2-structural.json"
RUNNER_SET = ("actions.github.com/v1alpha1", "AutoscalingRunnerSet")
# The isolation (deploy/README.md, "Isolation"): gVisor's runsc with its GPU proxy, named by the pods.
RUNTIME_CLASS, RUNTIME_HANDLER = "gvisor-nvproxy", "runsc-nvproxy"
# The hosts a self-hosted runner must reach on 443 (docs.github.com, "Communicating with self-hosted
# runners"; the runner's own connectivity check, actions/runner src/Runner.Listener/Checks/ActionsCheck.cs,
# probes vstoken, pipelines and results-receiver), as concrete names: each must be allowed by name.
ACTIONS_HOSTS = (
    "github.com", "api.github.com", "codeload.github.com",
    "pipelines.actions.githubusercontent.com", "broker.actions.githubusercontent.com",
    "vstoken.actions.githubusercontent.com", "pkg.actions.githubusercontent.com",
    "results-receiver.actions.githubusercontent.com", "productionresultssa0.blob.core.windows.net",
    "objects.githubusercontent.com", "objects-origin.githubusercontent.com",
    "github-releases.githubusercontent.com", "github-registry-files.githubusercontent.com",
    "release-assets.githubusercontent.com",
)  # fmt: skip
# The only wildcards GitHub's list has: no broader pattern may be allowed.
ACTIONS_PATTERNS = {"*.actions.githubusercontent.com", "*.blob.core.windows.net"}
NODES = json.loads((ARC / "nodes.json").read_text())
FLEET_WORKFLOW = ROOT / ".github" / "workflows" / "fleet.yml"
RUNNER_IMAGE = ROOT / "deploy" / "runner-image"
GPU_TYPES = ("t4", "h100", "h200")
GPU = "nvidia.com/gpu"
# The ARC controller adds this label to every runner pod it makes (resourcebuilder.go,
# newEphemeralRunnerPod), beside the template's own labels.
CONTROLLER_POD_LABELS = {"actions-ephemeral-runner": "True"}
GITHUB_RANGES = [
    ipaddress.ip_network(r) for r in json.loads((ARC / "github-meta" / "ranges.json").read_text())["ranges"]
]
# The kustomization fields kubectl 1.20's kustomize (v2, Debian bookworm's kubernetes-client) reads;
# it takes folders only under `bases:`.
KUSTOMIZE_V2_FIELDS = {
    "apiVersion", "kind", "resources", "bases", "patchesStrategicMerge", "patchesJson6902", "namePrefix", "nameSuffix",
    "commonLabels", "commonAnnotations", "images", "namespace",
}  # fmt: skip


def kubectl_or_skip() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if os.environ.get("NF4KERNEL_REQUIRE_KUBECTL") == "1":
            pytest.fail("NF4KERNEL_REQUIRE_KUBECTL=1 and no kubectl on the PATH")
        pytest.skip("no kubectl here (Debian's kubernetes-client); .ci/run installs it")
    return kubectl


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    done = subprocess.run(
        [kubectl_or_skip(), "kustomize", str(ARC)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"kubectl kustomize deploy/arc failed:\n{done.stderr}"
    return [o for o in yaml.safe_load_all(done.stdout) if o is not None]


# ---- the policy, as checks over rendered objects; each returns its problems, one line each ----


def kind(o: dict) -> tuple[str, str]:
    return (o.get("apiVersion"), o.get("kind"))


def runner_sets(objects):
    return [o for o in objects if kind(o) == RUNNER_SET]


def pod_spec(runner_set: dict) -> dict:
    return runner_set.get("spec", {}).get("template", {}).get("spec", {})


def all_containers(spec: dict):
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


def gpu_limit(container: dict):
    return (container.get("resources") or {}).get("limits", {}).get(GPU)


def check_one_gpu(objects):
    problems = []
    for rs in runner_sets(objects):
        spec, name = pod_spec(rs), rs["metadata"]["name"]
        runner = [c for c in spec.get("containers", []) if c.get("name") == "runner"]
        if len(runner) != 1 or str(gpu_limit(runner[0])) != "1":
            problems.append(f"{name}: the runner container must have limits {GPU}: 1")
        total = sum(int(gpu_limit(c) or 0) for c in spec.get("containers", []))
        if total != 1:
            problems.append(f"{name}: the pod's containers ask for {total} GPUs, not 1")
        if any(gpu_limit(c) for c in spec.get("initContainers", [])):
            problems.append(f"{name}: an init container asks for a GPU")
    return problems


def check_non_root(objects):
    problems = []
    for rs in runner_sets(objects):
        spec, name = pod_spec(rs), rs["metadata"]["name"]
        pod = spec.get("securityContext") or {}
        if pod.get("runAsNonRoot") is not True:
            problems.append(f"{name}: the pod doesn't set runAsNonRoot: true")
        if pod.get("runAsUser") in (None, 0):
            problems.append(f"{name}: the pod must run as the image's non-root uid, not {pod.get('runAsUser')}")
        for c in all_containers(spec):
            context = c.get("securityContext") or {}
            if context.get("runAsNonRoot") is False or context.get("runAsUser") == 0:
                problems.append(f"{name}/{c.get('name')}: runs as root")
    return problems


def check_read_only_root(objects):
    return [
        f"{rs['metadata']['name']}/{c.get('name')}: root filesystem not read-only"
        for rs in runner_sets(objects)
        for c in all_containers(pod_spec(rs))
        if (c.get("securityContext") or {}).get("readOnlyRootFilesystem") is not True
    ]


def check_no_host_access(objects):
    problems = []

    def walk(node, where):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "hostPath":
                    problems.append(f"{where}: hostPath")
                if key in ("hostNetwork", "hostPID", "hostIPC") and value is True:
                    problems.append(f"{where}: {key}")
                if key == "hostUsers" and value is True:
                    problems.append(f"{where}: hostUsers")
                walk(value, where)
        elif isinstance(node, list):
            for item in node:
                walk(item, where)

    for o in objects:
        walk(o, f"{o.get('kind')}/{o.get('metadata', {}).get('name')}")
    return problems


def check_no_token(objects):
    problems = []
    accounts = {o["metadata"]["name"]: o for o in objects if kind(o) == ("v1", "ServiceAccount")}
    for rs in runner_sets(objects):
        spec, name = pod_spec(rs), rs["metadata"]["name"]
        if spec.get("automountServiceAccountToken") is not False:
            problems.append(f"{name}: the pod may mount a service-account token")
        account = accounts.get(spec.get("serviceAccountName"))
        if account is None:
            problems.append(f"{name}: its service account {spec.get('serviceAccountName')!r} is not in the manifests")
        elif account.get("automountServiceAccountToken") is not False:
            problems.append(f"{name}: its service account mounts tokens by default")
    return problems


def check_capabilities(objects):
    problems = []
    for rs in runner_sets(objects):
        for c in all_containers(pod_spec(rs)):
            where = f"{rs['metadata']['name']}/{c.get('name')}"
            context = c.get("securityContext") or {}
            caps = context.get("capabilities") or {}
            if "ALL" not in (caps.get("drop") or []):
                problems.append(f"{where}: capabilities not dropped (drop: [ALL])")
            if caps.get("add"):
                problems.append(f"{where}: adds capabilities {caps['add']}")
            if context.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{where}: allowPrivilegeEscalation is not false")
            if context.get("privileged"):
                problems.append(f"{where}: privileged")
    return problems


def check_seccomp(objects):
    problems = []
    for rs in runner_sets(objects):
        profile = (pod_spec(rs).get("securityContext") or {}).get("seccompProfile") or {}
        wanted = {"type": "Localhost", "localhostProfile": "nf4kernel/bwrap.json"}
        if profile != wanted:
            problems.append(f"{rs['metadata']['name']}: seccompProfile {profile}, not {wanted}")
        for c in all_containers(pod_spec(rs)):
            if ((c.get("securityContext") or {}).get("seccompProfile") or {}).get("type") == "Unconfined":
                problems.append(f"{rs['metadata']['name']}/{c.get('name')}: seccomp Unconfined")
    return problems


def check_scaling(objects):
    problems = []
    for rs in runner_sets(objects):
        spec, name = rs.get("spec", {}), rs["metadata"]["name"]
        if spec.get("minRunners") != 0:
            problems.append(f"{name}: minRunners is {spec.get('minRunners')}, not 0")
        if not isinstance(spec.get("maxRunners"), int) or spec["maxRunners"] < 1:
            problems.append(f"{name}: maxRunners {spec.get('maxRunners')!r} is not a positive number")
    return problems


def check_one_set_per_type(objects):
    problems = []
    names = sorted(rs["metadata"]["name"] for rs in runner_sets(objects))
    if names != sorted(f"gpu-{t}" for t in GPU_TYPES):
        problems.append(f"runner sets {names}, not one per GPU type {['gpu-' + t for t in GPU_TYPES]}")
    for rs in runner_sets(objects):
        name = rs["metadata"]["name"]
        if rs["spec"].get("runnerScaleSetName", name) != name:
            problems.append(f"{name}: jobs would ask for {rs['spec']['runnerScaleSetName']!r}, not {name!r}")
        if rs["spec"].get("runnerScaleSetLabels"):
            # ARC 0.14 matches these too (actions-runner-controller#4408): a job asking for one of
            # them would land here without asking for this GPU type (tools/gpu-runner/policy.json).
            problems.append(f"{name}: answers to labels beyond its name: {rs['spec']['runnerScaleSetLabels']}")
        if not (pod_spec(rs).get("nodeSelector") or {}).get("nvidia.com/gpu.product"):
            problems.append(f"{name}: no nodeSelector on nvidia.com/gpu.product")
    products = [(pod_spec(rs).get("nodeSelector") or {}).get("nvidia.com/gpu.product") for rs in runner_sets(objects)]
    if len(set(products)) != len(products):
        problems.append(f"two runner sets select the same GPU product: {products}")
    return problems


def selects(selector: dict, labels: dict) -> bool:
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, op, values = expression["key"], expression["operator"], expression.get("values") or []
        if not {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]:
            return False
    return True


def is_dns_rule(rule: dict) -> bool:
    ports = rule.get("ports") or []
    peers = rule.get("to") or []
    return (
        bool(ports)
        and all(str(p.get("port")) == "53" for p in ports)
        and bool(peers)
        and all("ipBlock" not in peer and "podSelector" in peer and "namespaceSelector" in peer for peer in peers)
    )


def is_github_rule(rule: dict) -> bool:
    ports = rule.get("ports") or []
    peers = rule.get("to") or []
    if not ports or any(str(p.get("port")) != "443" or p.get("protocol", "TCP") != "TCP" for p in ports):
        return False
    if not peers or any(set(peer) != {"ipBlock"} for peer in peers):
        return False
    for peer in peers:
        cidr = ipaddress.ip_network(peer["ipBlock"]["cidr"])
        if not any(cidr.version == r.version and cidr.subnet_of(r) for r in GITHUB_RANGES):
            return False
    return True


def check_network(objects):
    problems = []
    policies = [o for o in objects if kind(o) == ("networking.k8s.io/v1", "NetworkPolicy")]
    for rs in runner_sets(objects):
        name, namespace = rs["metadata"]["name"], rs["metadata"].get("namespace")
        labels = {**(rs["spec"].get("template", {}).get("metadata", {}).get("labels") or {}), **CONTROLLER_POD_LABELS}
        chosen = [
            p
            for p in policies
            if p["metadata"].get("namespace") == namespace and selects(p["spec"].get("podSelector", {}), labels)
        ]
        types = {t for p in chosen for t in p["spec"].get("policyTypes", [])}
        if not {"Ingress", "Egress"} <= types:
            problems.append(f"{name}: its pods are not held by an Ingress and an Egress policy (have {sorted(types)})")
        rules = [rule for p in chosen for rule in p["spec"].get("egress") or []]
        if not any(map(is_dns_rule, rules)) or not any(map(is_github_rule, rules)):
            problems.append(f"{name}: its pods may not reach both DNS and GitHub")
        for p in chosen:
            if p["spec"].get("ingress"):
                problems.append(f"{name}: {p['metadata']['name']} lets traffic in")
            for rule in p["spec"].get("egress") or []:
                if not (is_dns_rule(rule) or is_github_rule(rule)):
                    problems.append(f"{name}: {p['metadata']['name']} allows egress beyond DNS and GitHub: {rule}")
    return problems


def check_secrets(objects):
    return [
        f"Secret/{o['metadata']['name']} carries data: secrets are made out of band"
        for o in objects
        if o.get("kind") == "Secret" and (o.get("data") or o.get("stringData"))
    ]


def check_image_pinned(objects):
    problems = []
    for rs in runner_sets(objects):
        for c in all_containers(pod_spec(rs)):
            image = c.get("image", "")
            digest = image.partition("@sha256:")[2]
            if len(digest) != 64 or any(ch not in "0123456789abcdef" for ch in digest):
                problems.append(f"{rs['metadata']['name']}/{c.get('name')}: image {image!r} not pinned by digest")
    return problems


def check_controller_version(objects):
    # The controller deletes a runner set whose app.kubernetes.io/version label is not its own
    # major.minor (apis/actions.github.com/v1alpha1/version.go, IsVersionAllowed).
    problems = []
    for rs in runner_sets(objects):
        version = rs["metadata"].get("labels", {}).get("app.kubernetes.io/version")
        if str(version) != ARC_VERSION:
            problems.append(f"{rs['metadata']['name']}: version label {version!r}, not the controller's {ARC_VERSION}")
    return problems


def _quantity(value) -> str:
    return str(value) if value is not None else ""


def check_guaranteed_cpus(objects):
    """Every runner pod is of the Guaranteed class with whole CPUs: each container's CPU and memory
    requests equal its limits (a request left out defaults to the limit), the CPUs a whole number.
    Where the kubelet runs the static CPU manager, the runner then has cores no other pod shares, so a
    neighbour's test job can't crowd a gate's timing (benchmarks/results/fleet-two-h200)."""
    problems = []
    for rs in runner_sets(objects):
        for c in all_containers(pod_spec(rs)):
            where = f"{rs['metadata']['name']}/{c.get('name')}"
            resources = c.get("resources", {})
            limits, requests = resources.get("limits", {}), resources.get("requests", {})
            for resource in ("cpu", "memory"):
                if resource not in limits:
                    problems.append(f"{where}: no {resource} limit")
                elif _quantity(requests.get(resource, limits[resource])) != _quantity(limits[resource]):
                    wanted = limits[resource]
                    problems.append(f"{where}: {resource} request {requests[resource]!r} is not its limit {wanted!r}")
            if not _quantity(limits.get("cpu")).isdigit():
                problems.append(f"{where}: cpu {limits.get('cpu')!r} is not a whole number of CPUs")
    return problems


def check_isolation(objects):
    """Every GPU pod runs under gVisor's runsc with its GPU proxy, and none is user-namespaced or
    unmasks /proc: NVIDIA's toolkit does not support GPU pods with hostUsers: false
    (NVIDIA/cloud-native-docs#402, #403; nvidia-container-toolkit#648), and no runtime named here is
    documented to."""
    problems = []
    classes = {o["metadata"]["name"]: o for o in objects if kind(o) == ("node.k8s.io/v1", "RuntimeClass")}
    for rs in runner_sets(objects):
        spec, name = pod_spec(rs), rs["metadata"]["name"]
        if spec.get("runtimeClassName") != RUNTIME_CLASS:
            problems.append(f"{name}: runtimeClassName {spec.get('runtimeClassName')!r}, not {RUNTIME_CLASS!r}")
        elif (classes.get(RUNTIME_CLASS) or {}).get("handler") != RUNTIME_HANDLER:
            problems.append(f"{name}: no RuntimeClass {RUNTIME_CLASS} with handler {RUNTIME_HANDLER} in the manifests")
        if spec.get("hostUsers") is False:
            problems.append(
                f"{name}: a user-namespaced GPU pod (hostUsers: false), which NVIDIA's toolkit does not support"
            )
        for c in all_containers(spec):
            if (c.get("securityContext") or {}).get("procMount", "Default") != "Default":
                problems.append(f"{name}/{c.get('name')}: procMount {c['securityContext']['procMount']}")
    for rc in classes.values():
        if not ((rc.get("scheduling") or {}).get("nodeSelector")):
            problems.append(
                f"RuntimeClass/{rc['metadata']['name']}: no nodeSelector: pods could land where it isn't installed"
            )
    return problems


def check_pod_security(objects):
    namespaces = {o["metadata"]["name"]: o for o in objects if kind(o) == ("v1", "Namespace")}
    problems = []
    for namespace in {rs["metadata"].get("namespace") for rs in runner_sets(objects)}:
        labels = (namespaces.get(namespace) or {}).get("metadata", {}).get("labels") or {}
        if labels.get("pod-security.kubernetes.io/enforce") != "restricted":
            problems.append(f"Namespace/{namespace}: Pod Security restricted not enforced")
    return problems


def _fqdn_matches(entry: dict, host: str) -> bool:
    if "matchName" in entry:
        return entry["matchName"].rstrip(".") == host
    # Cilium's matchPattern: "*" stands for one DNS label or part of one, never a dot.
    pattern = entry.get("matchPattern", "").rstrip(".")
    return re.fullmatch(re.escape(pattern).replace(r"\*", "[-a-zA-Z0-9_]*"), host) is not None


def check_actions_egress(objects):
    """The runner pods reach every host GitHub lists for self-hosted runners, on 443 only, by name,
    through Cilium's DNS proxy; no name pattern broader than GitHub's own wildcards."""
    problems = []
    policies = [o for o in objects if kind(o) == CILIUM_POLICY]
    for rs in runner_sets(objects):
        name, namespace = rs["metadata"]["name"], rs["metadata"].get("namespace")
        labels = {**(rs["spec"].get("template", {}).get("metadata", {}).get("labels") or {}), **CONTROLLER_POD_LABELS}
        rules = [
            rule
            for p in policies
            if p["metadata"].get("namespace") == namespace and selects(p["spec"].get("endpointSelector", {}), labels)
            for rule in p["spec"].get("egress") or []
        ]
        dns = [
            r
            for r in rules
            if any(
                (e.get("matchLabels") or {}).get("k8s:k8s-app") == "kube-dns"
                and (e.get("matchLabels") or {}).get("k8s:io.kubernetes.pod.namespace") == "kube-system"
                for e in r.get("toEndpoints") or []
            )
            and any((tp.get("rules") or {}).get("dns") for tp in r.get("toPorts") or [])
        ]
        if not dns:
            problems.append(f"{name}: no DNS rule through Cilium's DNS proxy (toFQDNs would learn no address)")
        named = []
        for rule in rules:
            if not rule.get("toFQDNs"):
                continue
            ports = [p for tp in rule.get("toPorts") or [] for p in tp.get("ports") or []]
            if not ports or any(str(p.get("port")) != "443" or p.get("protocol", "ANY") != "TCP" for p in ports):
                problems.append(f"{name}: names allowed on other ports than TCP 443: {ports}")
            for entry in rule["toFQDNs"]:
                if "matchPattern" in entry and entry["matchPattern"] not in ACTIONS_PATTERNS:
                    problems.append(f"{name}: name pattern {entry['matchPattern']!r} is broader than GitHub's list")
            named += rule["toFQDNs"]
        missing = [host for host in ACTIONS_HOSTS if not any(_fqdn_matches(e, host) for e in named)]
        if missing:
            problems.append(f"{name}: the Actions service's hosts not allowed: {missing}")
    return problems


def _cpus(quantity) -> float:
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _mebibytes(quantity) -> float:
    text = str(quantity)
    for suffix, factor in (("Ki", 1 / 1024), ("Mi", 1), ("Gi", 1024), ("Ti", 1024 * 1024)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text) / (1024 * 1024)


def _pod_request(spec: dict, overhead: dict) -> tuple[float, float]:
    """What the scheduler counts for one pod: the larger of its containers' sum and any init
    container, plus its RuntimeClass's overhead (Kubernetes, "Resource Management for Pods")."""

    def requests(c, resource, parse):
        resources = c.get("resources") or {}
        return parse(
            (resources.get("requests") or {}).get(resource) or (resources.get("limits") or {}).get(resource) or 0
        )

    result = []
    for resource, parse in (("cpu", _cpus), ("memory", _mebibytes)):
        app = sum(requests(c, resource, parse) for c in spec.get("containers", []))
        init = max([requests(c, resource, parse) for c in spec.get("initContainers", [])] or [0])
        result.append(max(app, init) + parse(overhead.get(resource, 0)))
    return result[0], result[1]


def check_fits_node(objects):
    """Every runner set, one pod per GPU of its node type (nodes.json) with all of them busy, fits the
    node's allocatable CPUs and memory beside the node's own pods, and its runners' whole CPUs fit
    what the static CPU manager can hand out exclusively."""
    problems = []
    classes = {o["metadata"]["name"]: o for o in objects if kind(o) == ("node.k8s.io/v1", "RuntimeClass")}
    kubelet, shared = NODES["kubelet"], NODES["daemonsets"]
    for rs in runner_sets(objects):
        spec, name = pod_spec(rs), rs["metadata"]["name"]
        product = (spec.get("nodeSelector") or {}).get("nvidia.com/gpu.product")
        nodes = [n for n in NODES["node_types"] if n["runner_set"] == name and n["gpu_product"] == product]
        if not nodes:
            problems.append(f"{name}: no node type in nodes.json for it (GPU product {product!r})")
            continue
        overhead = ((classes.get(spec.get("runtimeClassName")) or {}).get("overhead") or {}).get("podFixed") or {}
        pod_cpu, pod_memory = _pod_request(spec, overhead)
        runner = next((c for c in spec.get("containers", []) if c.get("name") == "runner"), {})
        runner_cpu = _cpus(((runner.get("resources") or {}).get("limits") or {}).get("cpu") or 0)
        for node in nodes:
            where = f"{name} on {node['instance_type']} ({node['gpus']} GPUs busy)"
            reserved_cpu = _cpus(kubelet["kube_reserved"]["cpu"]) + _cpus(kubelet["system_reserved"]["cpu"])
            allocatable_cpu = node["vcpus"] - reserved_cpu
            allocatable_memory = (
                _mebibytes(node["memory"])
                - _mebibytes(kubelet["kube_reserved"]["memory"])
                - _mebibytes(kubelet["system_reserved"]["memory"])
                - _mebibytes(kubelet["eviction_hard_memory"])
            )
            if node["gpus"] * pod_cpu + _cpus(shared["cpu"]) > allocatable_cpu:
                problems.append(f"{where}: {node['gpus']} x {pod_cpu} CPUs + the node's own pods > {allocatable_cpu}")
            if node["gpus"] * pod_memory + _mebibytes(shared["memory"]) > allocatable_memory:
                memory = f"{node['gpus']} x {pod_memory:.0f} MiB + the node's own pods"
                problems.append(f"{where}: {memory} > {allocatable_memory:.0f} MiB")
            shared_cpu = _cpus(shared["cpu"]) + node["gpus"] * _cpus(overhead.get("cpu", 0))
            exclusive = node["vcpus"] - math.ceil(reserved_cpu) - math.ceil(shared_cpu)
            if node["gpus"] * runner_cpu > exclusive:
                problems.append(f"{where}: {node['gpus']} x {runner_cpu} exclusive CPUs > the {exclusive} it can give")
    return problems


def check_shm(objects):
    """/dev/shm of the runner: a memory-backed emptyDir with a size limit, within its memory limit."""
    problems = []
    for rs in runner_sets(objects):
        spec, name = pod_spec(rs), rs["metadata"]["name"]
        volumes = {v.get("name"): v for v in spec.get("volumes", [])}
        runner = next((c for c in spec.get("containers", []) if c.get("name") == "runner"), {})
        mounts = [m for m in runner.get("volumeMounts") or [] if m.get("mountPath") == "/dev/shm"]
        if len(mounts) != 1:
            problems.append(f"{name}: the runner has no /dev/shm of the pod's (the runtime's 64 MiB)")
            continue
        shm = (volumes.get(mounts[0].get("name")) or {}).get("emptyDir") or {}
        limit = ((runner.get("resources") or {}).get("limits") or {}).get("memory")
        if shm.get("medium") != "Memory" or not shm.get("sizeLimit"):
            problems.append(f"{name}: /dev/shm is not a memory-backed emptyDir with a sizeLimit: {shm}")
        elif limit is None or _mebibytes(shm["sizeLimit"]) > _mebibytes(limit) / 2:
            problems.append(f"{name}: /dev/shm's {shm['sizeLimit']} is more than half the memory limit {limit}")
    return problems


def built_image() -> str:
    """The image fleet.yml builds from deploy/runner-image/Dockerfile, as the manifests name it
    (the repository's owner is the manifests' OWNER placeholder)."""
    steps = yaml.safe_load(FLEET_WORKFLOW.read_text())["jobs"]["runner-image"]["steps"]
    script = next(step["run"] for step in steps if step.get("id") == "image")
    assert 'docker build --pull -t "$tag" deploy/runner-image' in script, (
        "fleet.yml no longer builds deploy/runner-image"
    )
    found = re.search(r'image="ghcr\.io/\$\{OWNER,,\}/([a-z0-9-]+)"', script)
    assert found, "fleet.yml's image name is not where this test reads it"
    return f"ghcr.io/OWNER/{found.group(1)}"


def check_image_built_here(objects):
    """Every container runs the image built from the repository's Dockerfile, by digest."""
    wanted = built_image()
    return [
        f"{rs['metadata']['name']}/{c.get('name')}: image {c.get('image')!r} is not {wanted} (deploy/runner-image)"
        for rs in runner_sets(objects)
        for c in all_containers(pod_spec(rs))
        if c.get("image", "").partition("@")[0] != wanted
    ]


CHECKS = {
    "guaranteed_cpus": check_guaranteed_cpus,
    "one_gpu": check_one_gpu,
    "non_root": check_non_root,
    "read_only_root": check_read_only_root,
    "no_host_access": check_no_host_access,
    "no_token": check_no_token,
    "capabilities": check_capabilities,
    "seccomp": check_seccomp,
    "scaling": check_scaling,
    "one_set_per_type": check_one_set_per_type,
    "network": check_network,
    "secrets": check_secrets,
    "image_pinned": check_image_pinned,
    "controller_version": check_controller_version,
    "isolation": check_isolation,
    "pod_security": check_pod_security,
    "actions_egress": check_actions_egress,
    "fits_node": check_fits_node,
    "shm": check_shm,
    "image_built_here": check_image_built_here,
}


# ---- the tests ----


def test_every_rendered_object_is_valid_against_its_pinned_schema(rendered):
    crd = json.loads(CRD_SCHEMA.read_text())
    template = json.loads((KUBERNETES_SCHEMAS / "podtemplatespec-v1.json").read_text())
    seen = set()
    for o in rendered:
        where = f"{o.get('kind')}/{o.get('metadata', {}).get('name')}"
        if kind(o) == RUNNER_SET:
            jsonschema.validate(o, crd, cls=jsonschema.Draft7Validator)
            # The CRD embeds PodSpec without refusing unknown fields; Kubernetes' strict schema does.
            jsonschema.validate(o["spec"]["template"], template)
        elif kind(o) == CILIUM_POLICY:
            jsonschema.validate(o, json.loads(CILIUM_SCHEMA.read_text()), cls=jsonschema.Draft7Validator)
        else:
            assert kind(o) in SCHEMA_FILES, f"{where}: no vendored schema for {kind(o)}"
            jsonschema.validate(o, json.loads((KUBERNETES_SCHEMAS / SCHEMA_FILES[kind(o)]).read_text()))
        seen.add(kind(o))
    assert seen == {RUNNER_SET, CILIUM_POLICY, *SCHEMA_FILES}, f"kinds rendered: {sorted(seen)}"


@pytest.mark.parametrize(
    "break_it",
    [
        pytest.param(lambda o: o["spec"].update(maxRunners="2"), id="maxRunners-a-string"),
        pytest.param(lambda o: o["spec"].update(minRunners=-1), id="negative-minRunners"),
        pytest.param(
            lambda o: o["spec"]["template"]["spec"]["containers"][0].update(imagePullPolcy="Always"), id="typo"
        ),
        pytest.param(
            lambda o: o["spec"]["template"]["spec"]["securityContext"].update(runAsNonRoot="yes"), id="wrong-type"
        ),
    ],
)
def test_the_schemas_refuse_a_broken_runner_set(rendered, break_it):
    crd = json.loads(CRD_SCHEMA.read_text())
    template = json.loads((KUBERNETES_SCHEMAS / "podtemplatespec-v1.json").read_text())
    broken = copy.deepcopy(runner_sets(rendered)[0])
    break_it(broken)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, crd, cls=jsonschema.Draft7Validator)
        jsonschema.validate(broken["spec"]["template"], template)


@pytest.mark.parametrize(
    "break_it",
    [
        pytest.param(lambda o: o["spec"]["egress"][1].update(toFQDN=[]), id="typo"),
        pytest.param(lambda o: o["spec"]["egress"][1]["toFQDNs"].append({"matchName": "a b"}), id="bad-name"),
        pytest.param(lambda o: o["spec"]["egress"][1]["toPorts"][0]["ports"][0].update(port=443), id="port-a-number"),
        pytest.param(lambda o: o["spec"]["egress"][1].update(toEntities=["world"]), id="world"),
    ],
)
def test_the_structural_schema_refuses_a_broken_cilium_policy(rendered, break_it):
    policy = copy.deepcopy(next(o for o in rendered if kind(o) == CILIUM_POLICY))
    break_it(policy)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(policy, json.loads(CILIUM_SCHEMA.read_text()), cls=jsonschema.Draft7Validator)


def test_the_runtime_class_schema_refuses_an_unknown_field(rendered):
    runtime_class = copy.deepcopy(next(o for o in rendered if o["kind"] == "RuntimeClass"))
    runtime_class["handlr"] = "runc"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(runtime_class, json.loads((KUBERNETES_SCHEMAS / "runtimeclass-node-v1.json").read_text()))


def test_a_strict_kubernetes_schema_refuses_an_unknown_field(rendered):
    policy = copy.deepcopy(next(o for o in rendered if o["kind"] == "NetworkPolicy"))
    policy["spec"]["egres"] = []
    schema = json.loads((KUBERNETES_SCHEMAS / "networkpolicy-networking-v1.json").read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(policy, schema)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_the_rendered_fleet_keeps_the_policy(rendered, check):
    assert CHECKS[check](rendered) == []


def _runner(objects, name="gpu-h100"):
    return next(o for o in runner_sets(objects) if o["metadata"]["name"] == name)


def _spec(objects):
    return pod_spec(_runner(objects))


def _container(objects, name="runner"):
    return next(c for c in all_containers(_spec(objects)) if c["name"] == name)


def _policy(objects, name="gpu-runner-egress"):
    return next(o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == name)


def _cilium(objects):
    return next(o for o in objects if kind(o) == CILIUM_POLICY)


def _fqdns(objects):
    return next(rule for rule in _cilium(objects)["spec"]["egress"] if rule.get("toFQDNs"))


def _volume(objects, name="dshm"):
    return next(v for v in _spec(objects)["volumes"] if v["name"] == name)


def _set_runner_size(objects, cpu, memory, name="gpu-h100"):
    runner = next(c for c in pod_spec(_runner(objects, name))["containers"] if c["name"] == "runner")
    for part in ("requests", "limits"):
        runner["resources"][part].update(cpu=cpu, memory=memory)


BREAKS = {
    "two-gpus": ("one_gpu", lambda o: _container(o)["resources"]["limits"].update({GPU: 2})),
    "no-gpu": ("one_gpu", lambda o: _container(o)["resources"]["limits"].pop(GPU)),
    "gpu-in-init": ("one_gpu", lambda o: _container(o, "runner-copy")["resources"]["limits"].update({GPU: 1})),
    "root-pod": ("non_root", lambda o: _spec(o)["securityContext"].update(runAsNonRoot=False)),
    "uid-0": ("non_root", lambda o: _container(o)["securityContext"].update(runAsUser=0)),
    "writable-root": (
        "read_only_root",
        lambda o: _container(o, "runner-copy")["securityContext"].pop("readOnlyRootFilesystem"),
    ),
    "hostPath": ("no_host_access", lambda o: _spec(o)["volumes"].append({"name": "x", "hostPath": {"path": "/"}})),
    "hostNetwork": ("no_host_access", lambda o: _spec(o).update(hostNetwork=True)),
    "token": ("no_token", lambda o: _spec(o).pop("automountServiceAccountToken")),
    "token-by-account": (
        "no_token",
        lambda o: next(x for x in o if x["kind"] == "ServiceAccount").update(automountServiceAccountToken=True),
    ),
    "caps-kept": ("capabilities", lambda o: _container(o)["securityContext"]["capabilities"].update(drop=["NET_RAW"])),
    "caps-added": (
        "capabilities",
        lambda o: _container(o)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
    ),
    "escalation": ("capabilities", lambda o: _container(o)["securityContext"].update(allowPrivilegeEscalation=True)),
    "seccomp-runtime-default": (
        "seccomp",
        lambda o: _spec(o)["securityContext"].update(seccompProfile={"type": "RuntimeDefault"}),
    ),
    "burstable-cpu": ("guaranteed_cpus", lambda o: _container(o)["resources"]["requests"].update(cpu="4")),
    "no-memory-limit": ("guaranteed_cpus", lambda o: _container(o)["resources"]["limits"].pop("memory")),
    "fractional-cpu": (
        "guaranteed_cpus",
        lambda o: [_container(o)["resources"][k].update(cpu="7500m") for k in ("requests", "limits")],
    ),
    "min-1": ("scaling", lambda o: _runner(o)["spec"].update(minRunners=1)),
    "no-max": ("scaling", lambda o: _runner(o)["spec"].pop("maxRunners")),
    "renamed": ("one_set_per_type", lambda o: _runner(o)["metadata"].update(name="gpu-a100")),
    "missing": ("one_set_per_type", lambda o: o.remove(_runner(o, "gpu-t4"))),
    "asked-by-other-name": ("one_set_per_type", lambda o: _runner(o)["spec"].update(runnerScaleSetName="h100")),
    "no-node-selector": ("one_set_per_type", lambda o: _spec(o).pop("nodeSelector")),
    "policy-gone": ("network", lambda o: o.remove(_policy(o))),
    "policy-deny-gone": ("network", lambda o: [o.remove(_policy(o)), o.remove(_policy(o, "default-deny"))]),
    "ingress": ("network", lambda o: _policy(o)["spec"].update(ingress=[{}])),
    "egress-anywhere": (
        "network",
        lambda o: _policy(o)["spec"]["egress"].append({"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}),
    ),
    "egress-other-port": (
        "network",
        lambda o: _policy(o)["spec"]["egress"][1]["ports"].append({"protocol": "TCP", "port": 22}),
    ),
    "egress-all-ports": ("network", lambda o: _policy(o)["spec"]["egress"][0].pop("ports")),
    "other-namespace": (
        "network",
        lambda o: [
            _policy(o)["metadata"].update(namespace="x"),
            _policy(o, "default-deny")["metadata"].update(namespace="x"),
        ],
    ),
    "secret-with-data": (
        "secrets",
        lambda o: o.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "dg=="}}),
    ),
    "image-tag": ("image_pinned", lambda o: _container(o).update(image="registry.invalid/nf4kernel/gpu-runner:latest")),
    "version-label": (
        "controller_version",
        lambda o: _runner(o)["metadata"]["labels"].update({"app.kubernetes.io/version": "0.13.1"}),
    ),
    "extra-scale-set-label": ("one_set_per_type", lambda o: _runner(o)["spec"].update(runnerScaleSetLabels=["gpu"])),
    "runc": ("isolation", lambda o: _spec(o).pop("runtimeClassName")),
    "user-namespaced-gpu-pod": ("isolation", lambda o: _spec(o).update(hostUsers=False)),
    "unmasked-proc": ("isolation", lambda o: _container(o)["securityContext"].update(procMount="Unmasked")),
    "runtime-class-gone": ("isolation", lambda o: o.remove(next(x for x in o if x["kind"] == "RuntimeClass"))),
    "runtime-class-anywhere": (
        "isolation",
        lambda o: next(x for x in o if x["kind"] == "RuntimeClass").pop("scheduling"),
    ),
    "pod-security-warn-only": (
        "pod_security",
        lambda o: next(x for x in o if x["kind"] == "Namespace")["metadata"]["labels"].pop(
            "pod-security.kubernetes.io/enforce"
        ),
    ),
    "cilium-policy-gone": ("actions_egress", lambda o: o.remove(_cilium(o))),
    "no-dns-proxy": ("actions_egress", lambda o: _cilium(o)["spec"]["egress"][0]["toPorts"][0].pop("rules")),
    "artifact-storage-dropped": (
        "actions_egress",
        lambda o: _fqdns(o)["toFQDNs"].remove({"matchPattern": "*.blob.core.windows.net"}),
    ),
    "github-dropped": ("actions_egress", lambda o: _fqdns(o)["toFQDNs"].remove({"matchName": "github.com"})),
    "broker-dropped": (
        "actions_egress",
        lambda o: _fqdns(o)["toFQDNs"].remove({"matchPattern": "*.actions.githubusercontent.com"}),
    ),
    "any-github-host": (
        "actions_egress",
        lambda o: _fqdns(o)["toFQDNs"].append({"matchPattern": "*.githubusercontent.com"}),
    ),
    "names-on-any-port": ("actions_egress", lambda o: _fqdns(o).pop("toPorts")),
    "other-pods-selected": (
        "actions_egress",
        lambda o: _cilium(o)["spec"].update(endpointSelector={"matchLabels": {"app": "other"}}),
    ),
    "t4-asks-64gi": ("fits_node", lambda o: _set_runner_size(o, "10", "64Gi", "gpu-t4")),
    "t4-asks-16-cpus": ("fits_node", lambda o: _set_runner_size(o, "16", "44Gi", "gpu-t4")),
    "h200-whole-node-memory": ("fits_node", lambda o: _set_runner_size(o, "16", "256Gi", "gpu-h200")),
    "no-node-type": (
        "fits_node",
        lambda o: _spec(o)["nodeSelector"].update({"nvidia.com/gpu.product": "NVIDIA-H100-PCIe"}),
    ),
    "shm-runtime-default": ("shm", lambda o: _container(o)["volumeMounts"].pop(0)),
    "shm-on-disk": ("shm", lambda o: _volume(o)["emptyDir"].pop("medium")),
    "shm-unbounded": ("shm", lambda o: _volume(o)["emptyDir"].pop("sizeLimit")),
    "shm-bigger-than-memory": ("shm", lambda o: _volume(o)["emptyDir"].update(sizeLimit="300Gi")),
    "image-from-elsewhere": (
        "image_built_here",
        lambda o: _container(o).update(image="ghcr.io/actions/actions-runner@sha256:" + "a" * 64),
    ),
}


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_each_policy_check_fails_on_a_copy_broken_in_one_field(rendered, name):
    check, break_it = BREAKS[name]
    broken = copy.deepcopy(rendered)
    break_it(broken)
    assert CHECKS[check](broken), f"{check} did not notice: {name}"


def test_every_check_has_a_break_that_it_notices():
    assert {check for check, _ in BREAKS.values()} == set(CHECKS)


def _sizes_module():
    spec = importlib.util.spec_from_file_location("fleet_sizes", ARC / "sizes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_runner_set_gets_what_its_node_type_gives(rendered):
    """The rendered runner's CPUs, memory and /dev/shm are sizes.py's derivation from its node type
    (the patch lands on the runner container and the dshm volume, by index: kustomize can't merge a
    custom resource's lists by name), and the timing types keep the 16 CPUs the rehearsals measured
    (benchmarks/results/fleet-pinned-two-h200)."""
    sizes = _sizes_module()
    base = yaml.safe_load((ARC / "runner-set" / "autoscalingrunnerset.yaml").read_text())
    assert pod_spec(base)["containers"][0]["name"] == "runner" and pod_spec(base)["volumes"][0]["name"] == "dshm"
    for node in NODES["node_types"]:
        size = sizes.derive(node, NODES)
        rs = _runner(rendered, node["runner_set"])
        runner = next(c for c in pod_spec(rs)["containers"] if c["name"] == "runner")
        for part in ("requests", "limits"):
            assert runner["resources"][part]["cpu"] == str(size["cpu"]), node["runner_set"]
            assert runner["resources"][part]["memory"] == f"{size['memory_gi']}Gi", node["runner_set"]
        shm = next(v for v in pod_spec(rs)["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"]["sizeLimit"] == f"{size['shm_gi']}Gi"
        init = next(c for c in pod_spec(rs)["initContainers"] if c["name"] == "runner-copy")
        assert init["resources"]["limits"] == {"cpu": "1", "memory": "512Mi"}
    assert {n["runner_set"]: sizes.derive(n, NODES)["cpu"] for n in NODES["node_types"]} == {
        "gpu-t4": 10,  # a g4dn.12xlarge's 48 CPUs, less 2 reserved and 3 shared, in whole cores per T4
        "gpu-h100": 16,
        "gpu-h200": 16,
    }


def test_every_node_type_figure_says_where_it_comes_from():
    for node in NODES["node_types"]:
        assert node["source"].startswith("AWS") and "https://" in node["source"], node["instance_type"]
    for part in ("kubelet", "daemonsets", "runtime_overhead"):
        assert NODES[part]["source"].startswith("assumed"), part
    runtime_class = yaml.safe_load((ARC / "base" / "runtimeclass.yaml").read_text())
    assert runtime_class["overhead"]["podFixed"] == {k: NODES["runtime_overhead"][k] for k in ("cpu", "memory")}


def test_the_fit_check_fails_the_sizes_the_issue_found(rendered):
    """The T4 set once asked 16 CPUs and 64 GiB per pod, so a g4dn.12xlarge held two of its four."""
    broken = copy.deepcopy(rendered)
    _set_runner_size(broken, "8", "64Gi", "gpu-t4")
    assert any("gpu-t4 on g4dn.12xlarge" in p for p in check_fits_node(broken))


def test_there_is_a_runner_set_for_every_gpu_type_the_workflows_know():
    registry = ROOT / ".github" / "gpu-types.toml"
    if not registry.exists():
        pytest.skip(".github/gpu-types.toml is not in this checkout")
    types = [name for name in tomllib.loads(registry.read_text()) if name != "policy"]  # the verdicts' tables
    assert sorted(types) == sorted(GPU_TYPES)


def test_the_kustomizations_use_only_what_kubectl_1_20_reads():
    for path in sorted(ARC.rglob("kustomization.yaml")):
        fields = set(yaml.safe_load(path.read_text()))
        assert fields <= KUSTOMIZE_V2_FIELDS, f"{path.relative_to(ROOT)}: {sorted(fields - KUSTOMIZE_V2_FIELDS)}"


def test_the_kustomization_names_the_pinned_arc_version():
    text = (ARC / "kustomization.yaml").read_text()
    assert f"ARC) {ARC_VERSION}" in text and f"gha-runner-scale-set-controller {ARC_VERSION}" in text
    assert f"ARC {ARC_VERSION}" in (ROOT / "deploy" / "README.md").read_text()


@pytest.mark.parametrize("script", ["seccomp/build.py", "github-meta/update.py", "sizes.py"])
def test_the_generated_files_are_what_their_script_makes(script):
    done = subprocess.run([sys.executable, str(ARC / script), "--check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_seccomp_profile_adds_only_what_bubblewrap_needs():
    profile = json.loads((ARC / "seccomp" / "nf4kernel-bwrap.json").read_text())
    unconditional = {
        name
        for rule in profile["syscalls"]
        if rule["action"] == "SCMP_ACT_ALLOW" and not rule.get("args")
        for name in rule["names"]
    }
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    assert {"unshare", "clone", "mount", "umount2", "pivot_root"} <= unconditional
    # Still refused, as RuntimeDefault refuses them to a process without capabilities.
    assert not unconditional & {"setns", "bpf", "perf_event_open", "init_module", "open_by_handle_at", "fsopen"}
    assert all("includes" not in rule and "excludes" not in rule for rule in profile["syscalls"])


def test_the_pod_needs_no_user_namespace_of_its_own_for_the_sandbox(rendered):
    """Under gVisor the sandbox's namespaces and its fresh /proc are the Sentry's (no host masks over
    it), so the pod needs neither a user namespace of its own nor an unmasked /proc, which Pod
    Security's restricted level refuses."""
    for runner_set in runner_sets(rendered):
        pod = pod_spec(runner_set)
        assert pod["runtimeClassName"] == RUNTIME_CLASS and "hostUsers" not in pod
        runner = next(c for c in pod["containers"] if c["name"] == "runner")
        assert "procMount" not in runner["securityContext"], runner_set["metadata"]["name"]


def test_the_sandbox_refuses_a_nested_user_namespace_in_a_way_gvisor_supports(monkeypatch):
    """gVisor has no /proc/sys/user, which --disable-userns writes: there the sandbox leaves that flag
    out, and its system-call filter (harness/core/seccomp.py) refuses a nested user namespace alone."""
    from harness.core import sandbox, seccomp

    monkeypatch.setattr(sandbox, "USERNS_LIMIT", "/proc/sys/user/as-under-gvisor")
    assert "--disable-userns" not in sandbox.namespaces() and "--assert-userns-disabled" not in sandbox.namespaces()
    assert seccomp.supported(), "the GPU runners are x86-64, the filter's ABI"
    with sandbox.filter_fd() as fd:
        line, _ = sandbox.command(["true"], seccomp_fd=fd)
    assert line[line.index("--seccomp") + 1] == str(fd)


def test_the_node_runtime_files_name_the_runtime_class_handler():
    containerd = tomllib.loads((ROOT / "deploy" / "node" / "containerd-runsc-nvproxy.toml").read_text())
    runtimes = containerd["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]
    assert runtimes[RUNTIME_HANDLER]["runtime_type"] == "io.containerd.runsc.v1"
    assert runtimes[RUNTIME_HANDLER]["options"]["ConfigPath"] == "/etc/containerd/runsc-nvproxy.toml"
    runsc = tomllib.loads((ROOT / "deploy" / "node" / "runsc-nvproxy.toml").read_text())["runsc_config"]
    assert runsc == {"nvproxy": "true", "oci-seccomp": "true"}
    runtime_class = yaml.safe_load((ARC / "base" / "runtimeclass.yaml").read_text())
    assert runtime_class["handler"] == RUNTIME_HANDLER and runtime_class["metadata"]["name"] == RUNTIME_CLASS


def test_the_image_is_built_from_the_pinned_runner_image():
    """One place names the runner's version: the Dockerfile's FROM, by version and digest; the
    manifests name the built image by digest only."""
    dockerfile = (RUNNER_IMAGE / "Dockerfile").read_text()
    froms = re.findall(r"^FROM (\S+)$", dockerfile, re.M)
    assert len(froms) == 1 and re.fullmatch(
        r"ghcr\.io/actions/actions-runner:\d+\.\d+\.\d+@sha256:[0-9a-f]{64}", froms[0]
    )
    version = froms[0].split(":")[1].split("@")[0]
    for path in [ARC / "kustomization.yaml", *ARC.rglob("*.yaml")]:
        assert version not in path.read_text(), f"{path.relative_to(ROOT)} repeats the runner version {version}"
    assert "bubblewrap" in dockerfile and "python3.12" in dockerfile and "site.tgz" in dockerfile
    assert re.search(r"^USER runner$", dockerfile, re.M), "the jobs must run as the base's runner user"


def test_the_github_ranges_are_networks():
    data = json.loads((ARC / "github-meta" / "ranges.json").read_text())
    assert data["keys"] == ["web", "api", "git"] and data["ranges"]
    for cidr in data["ranges"]:
        network = ipaddress.ip_network(cidr)
        assert not network.is_private and network.prefixlen >= 16, cidr


@pytest.mark.parametrize(
    "source",
    [
        "NVIDIA/cloud-native-docs#402",  # hostUsers: false unsupported on GPU pods
        "NVIDIA/nvidia-container-toolkit#648",  # nvidia-cdi-hook in a user namespace
        "NVIDIA/nvidia-container-toolkit#1833",  # NVIDIA's /proc mounts stop bubblewrap's fresh /proc
        "kubernetes/kubernetes#123520",  # Unmasked only with hostUsers: false
        "google/gvisor#13034",  # CDI hooks under runsc
        "google/gvisor#13233",  # nvproxy with k8s-device-plugin, documented
        "google/gvisor#9245",  # no OCI masked paths under gVisor
        "g3doc/user_guide/gpu.md",
        "NVIDIA/k8s-device-plugin#1818",
        "actions/actions-runner-controller#4404",  # deprecated runner versions stop a scale set
        "actions/actions-runner-controller#4408",  # runnerScaleSetLabels
        "Communicating with self-hosted runners",
        "ActionsCheck.cs",
        "docs.cilium.io",
        "https://aws.amazon.com/ec2/instance-types/p5/",
    ],
)
def test_the_readme_names_the_source_of_each_choice(source):
    assert source in (ROOT / "deploy" / "README.md").read_text() or source in (ARC / "nodes.json").read_text()


def test_the_image_installs_the_torch_the_runner_requirements_pin():
    """The Dockerfile installs torch's CUDA build by name (pip can't take it from PyPI's index), at the
    version requirements/gpu-runner.txt pins: one version, kept in one place."""
    pins = dict(
        line.split("==", 1)
        for line in (ROOT / "requirements" / "gpu-runner.txt").read_text().splitlines()
        if "==" in line
    )
    dockerfile = (RUNNER_IMAGE / "Dockerfile").read_text()
    assert re.findall(r"torch==(\S+) --index-url https://download\.pytorch\.org/whl/cu\d+", dockerfile) == [
        pins["torch"]
    ]
    assert "-r /tmp/nf4kernel/gpu-runner.txt" in dockerfile
