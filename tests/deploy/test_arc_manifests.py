"""deploy/arc/: the GPU runner fleet's manifests, checked without a cluster. `kubectl kustomize` renders
them; every rendered object is validated against vendored schemas (the ARC CRD at the pinned release,
Kubernetes' strict JSON schemas at the pinned version); then the policy the fleet promises is read off
the rendered objects. Each policy check is shown to fail on a copy broken in one field."""

from __future__ import annotations

import copy
import ipaddress
import json
import os
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
}
RUNNER_SET = ("actions.github.com/v1alpha1", "AutoscalingRunnerSet")
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
        else:
            assert kind(o) in SCHEMA_FILES, f"{where}: no vendored schema for {kind(o)}"
            jsonschema.validate(o, json.loads((KUBERNETES_SCHEMAS / SCHEMA_FILES[kind(o)]).read_text()))
        seen.add(kind(o))
    assert seen == {RUNNER_SET, *SCHEMA_FILES}, f"kinds rendered: {sorted(seen)}"


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
}


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_each_policy_check_fails_on_a_copy_broken_in_one_field(rendered, name):
    check, break_it = BREAKS[name]
    broken = copy.deepcopy(rendered)
    break_it(broken)
    assert CHECKS[check](broken), f"{check} did not notice: {name}"


def test_every_check_has_a_break_that_it_notices():
    assert {check for check, _ in BREAKS.values()} == set(CHECKS)


def test_each_runner_set_gives_its_runner_the_cpus_its_type_was_given(rendered):
    """The timing types' runners have the 16 CPUs the two-runner rehearsals ran with
    (benchmarks/results/fleet-pinned-two-h200); the T4's patch (by list index: kustomize can't merge a
    custom resource's lists by name) lands on the runner container and nowhere else."""
    base = yaml.safe_load((ARC / "runner-set" / "autoscalingrunnerset.yaml").read_text())
    assert pod_spec(base)["containers"][0]["name"] == "runner"
    t4_cpus = {p["value"] for p in yaml.safe_load((ARC / "gpu-t4" / "cpus.yaml").read_text())}
    assert t4_cpus == {"8"}
    for rs in runner_sets(rendered):
        name = rs["metadata"]["name"]
        for c in all_containers(pod_spec(rs)):
            wanted = (t4_cpus if name == "gpu-t4" else {"16"}) if c["name"] == "runner" else {"1"}
            resources = c["resources"]
            got = {_quantity(resources[k]["cpu"]) for k in ("requests", "limits") if "cpu" in resources.get(k, {})}
            assert got == wanted, f"{name}/{c['name']}: cpu {got}, expected {wanted}"


def test_there_is_a_runner_set_for_every_gpu_type_the_workflows_know():
    registry = ROOT / ".github" / "gpu-types.toml"
    if not registry.exists():
        pytest.skip(".github/gpu-types.toml is not in this checkout")
    assert sorted(tomllib.loads(registry.read_text())) == sorted(GPU_TYPES)


def test_the_kustomizations_use_only_what_kubectl_1_20_reads():
    for path in sorted(ARC.rglob("kustomization.yaml")):
        fields = set(yaml.safe_load(path.read_text()))
        assert fields <= KUSTOMIZE_V2_FIELDS, f"{path.relative_to(ROOT)}: {sorted(fields - KUSTOMIZE_V2_FIELDS)}"


def test_the_kustomization_names_the_pinned_arc_version():
    text = (ARC / "kustomization.yaml").read_text()
    assert f"ARC) {ARC_VERSION}" in text and f"gha-runner-scale-set-controller {ARC_VERSION}" in text
    assert f"ARC {ARC_VERSION}" in (ROOT / "deploy" / "README.md").read_text()


@pytest.mark.parametrize("script", ["seccomp/build.py", "github-meta/update.py"])
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


def test_the_pod_lets_the_sandbox_refuse_its_code_a_nested_user_namespace(rendered):
    """The profile allows unshare to the whole container; the sandbox then refuses its code a nested
    user namespace (--disable-userns), which writes the sandbox's own /proc/sys/user: an unmasked
    /proc on the runner container."""
    from harness.core import sandbox

    assert "--disable-userns" in sandbox.namespaces() and "--assert-userns-disabled" in sandbox.namespaces()
    for runner_set in (o for o in rendered if o["kind"] == "AutoscalingRunnerSet"):
        pod = runner_set["spec"]["template"]["spec"]
        runner = next(c for c in pod["containers"] if c["name"] == "runner")
        assert runner["securityContext"]["procMount"] == "Unmasked", runner_set["metadata"]["name"]
        assert pod["hostUsers"] is False  # Kubernetes allows an unmasked /proc only then


def test_the_github_ranges_are_networks():
    data = json.loads((ARC / "github-meta" / "ranges.json").read_text())
    assert data["keys"] == ["web", "api", "git"] and data["ranges"]
    for cidr in data["ranges"]:
        network = ipaddress.ip_network(cidr)
        assert not network.is_private and network.prefixlen >= 16, cidr
