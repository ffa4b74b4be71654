"""The Kubernetes manifests of deploy/k8s, against Kubernetes's own schemas, each other, the image and the service.

- Rendering: each variant (gpu/, and cpu/: gpu/ with a JSON patch) is rendered as `kubectl kustomize` renders it,
  here in Python (resources and RFC 6902 patches are all deploy/k8s uses), and compared with kubectl's own output
  where kubectl is installed.
- Schemas: every rendered document, and the prometheus-adapter ConfigMap, validates against the JSON schema of its
  kind for each of KUBERNETES_VERSIONS, strict (an unknown field is an error): the schemas generated from
  Kubernetes's OpenAPI spec, per Kubernetes version, that the kubernetes-validate package ships.
- What a schema cannot see: selectors that select the pods, probes on the service's real routes and port, the
  grace period against the drain, the GPU, settings that are real settings, the autoscaler's metric from the
  service through prometheus-adapter's rule (whose query promtool runs on test series) to the HPA.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import dockerfile
import httpx
import jsonpatch
import kubernetes_validate
import pytest
import yaml

from service.metrics import Metrics
from service.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy/k8s"
VARIANTS = {"gpu": K8S / "gpu", "cpu": K8S / "cpu"}
ADAPTER_RULE = K8S / "prometheus-adapter-rule.yaml"
# The oldest Kubernetes the manifests are for (deploy/README.md), and the newest schemas of kubernetes-validate.
KUBERNETES_VERSIONS = ["1.30", kubernetes_validate.utils.major_minor(kubernetes_validate.utils.latest_version())]
GPU = "nvidia.com/gpu"


# --- reading the files ----------------------------------------------------------------------------------


def load_all(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def render(folder: Path) -> list[dict]:
    """What `kubectl kustomize folder` prints, for the kustomization features deploy/k8s uses."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert set(kustomization) <= {"apiVersion", "kind", "resources", "patches"}, "a feature render() lacks"
    docs = []
    for entry in kustomization["resources"]:
        path = folder / entry
        docs += render(path) if path.is_dir() else load_all(path)
    for patch in kustomization.get("patches", []):
        assert set(patch) == {"path", "target"} and set(patch["target"]) == {"kind", "name"}, patch
        ops = yaml.safe_load((folder / patch["path"]).read_text())
        targets = [
            d for d in docs if (d["kind"], d["metadata"]["name"]) == (patch["target"]["kind"], patch["target"]["name"])
        ]
        assert len(targets) == 1, f"{patch} matches {len(targets)} documents"
        docs[docs.index(targets[0])] = jsonpatch.apply_patch(targets[0], ops)
    return docs


def by_kind(docs: list[dict]) -> dict[str, dict]:
    kinds = {d["kind"]: d for d in docs}
    assert len(kinds) == len(docs), "one document per kind expected"
    return kinds


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request) -> tuple[str, dict[str, dict]]:
    return request.param, by_kind(render(VARIANTS[request.param]))


def deployment_gpu() -> dict:
    return by_kind(render(VARIANTS["gpu"]))["Deployment"]


def container(deployment: dict) -> dict:
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return c


def env(deployment: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(deployment)["env"]}


def selects(selector: dict, labels: dict) -> bool:
    """A label selector (matchLabels only, as deploy/k8s writes them) against a pod's labels."""
    assert set(selector) == {"matchLabels"}, selector
    return selector["matchLabels"].items() <= labels.items()


def container_port(c: dict, port: int | str) -> int:
    """A probe's or Service's port, a number or a port name, as the container port it reaches."""
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    return ports[port] if isinstance(port, str) else port


def adapter_rules() -> list[dict]:
    (configmap,) = load_all(ADAPTER_RULE)
    return yaml.safe_load(configmap["data"]["config.yaml"])["rules"]


class TaggedLoader(yaml.SafeLoader):
    """Compose files as YAML: their merge tags (!reset, !override) read as null."""


TaggedLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def dockerfile_stage(name: str) -> dict[str, tuple[str, ...]]:
    """The instructions of one Dockerfile stage, by instruction."""
    stage, found = None, {}
    for command in dockerfile.parse_file(str(ROOT / "Dockerfile")):
        if command.cmd == "FROM":
            stage = command.value[-1]
        elif stage == name:
            found[command.cmd] = command.value
    assert found, f"no stage {name}"
    return found


# --- files and schemas ----------------------------------------------------------------------------------


def test_every_file_is_used():
    used = {ADAPTER_RULE}
    for folder in VARIANTS.values():
        kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
        used.add(folder / "kustomization.yaml")
        used.update(folder / r for r in kustomization["resources"] if (folder / r).is_file())
        used.update(folder / p["path"] for p in kustomization.get("patches", []))
    assert {p.resolve() for p in used} == {p for p in K8S.rglob("*") if p.is_file()}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_manifests_match_the_kubernetes_schemas(variant, version):
    _, docs = variant
    for doc in [*docs.values(), *load_all(ADAPTER_RULE)]:
        kubernetes_validate.validate(doc, version, strict=True)  # raises on the first error


POD = "/spec/template/spec"


@pytest.mark.parametrize(
    "op",
    [
        {"op": "replace", "path": f"{POD}/containers/0/ports/0/containerPort", "value": "eight thousand"},
        {"op": "add", "path": f"{POD}/containers/0/readinesProbe", "value": {"httpGet": {"path": "/ready"}}},  # typo
        {"op": "replace", "path": f"{POD}/terminationGracePeriodSeconds", "value": "30s"},  # seconds, a number
        {"op": "replace", "path": "/spec/strategy/type", "value": {"RollingUpdate": True}},
        {"op": "remove", "path": f"{POD}/containers"},  # required
    ],
    ids=["port-type", "unknown-field", "grace-period-type", "object-for-string", "no-containers"],
)
def test_the_schema_rejects_a_broken_deployment(op):
    broken = jsonpatch.apply_patch(deployment_gpu(), [op])
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[0], strict=True)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_render_matches_kubectl_kustomize(name):
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: render() is not compared with kustomize")
    out = subprocess.run([kubectl, "kustomize", str(VARIANTS[name])], capture_output=True, text=True, check=True)
    assert by_kind(list(yaml.safe_load_all(out.stdout))) == by_kind(render(VARIANTS[name]))


def test_the_cpu_patch_fails_loudly_if_the_env_moves():
    moved = deployment_gpu()
    env = container(moved)["env"]
    env.append(env.pop(0))  # every variable one place up
    ops = yaml.safe_load((VARIANTS["cpu"] / "deployment-patch.yaml").read_text())
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(moved, ops)


# --- what the schemas cannot see ------------------------------------------------------------------------


def test_selectors_select_the_pods(variant):
    _, docs = variant
    labels = docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert selects(docs["Deployment"]["spec"]["selector"], labels)
    assert selects({"matchLabels": docs["Service"]["spec"]["selector"]}, labels)
    assert selects(docs["PodDisruptionBudget"]["spec"]["selector"], labels)
    spread = docs["Deployment"]["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert all(selects(s["labelSelector"], labels) for s in spread)
    assert not selects({"matchLabels": {"app.kubernetes.io/name": "translater"}}, labels)  # the check bites


async def get(paths: list[str]) -> dict[str, httpx.Response]:
    """GET each path from the service's app, as it answers while its model loads (the lifespan has not run)."""
    from service.solo import solo_app  # here: the app (and ONNX Runtime) only for the test that needs it

    transport = httpx.ASGITransport(app=solo_app(Settings()))
    async with httpx.AsyncClient(transport=transport, base_url="http://pod") as client:
        return {path: await client.get(path) for path in paths}


def test_ports_probes_and_scraping_reach_the_service(variant):
    _, docs = variant
    c = container(docs["Deployment"])
    port = int(env(docs["Deployment"])["TRANSLATOR_PORT"])
    assert env(docs["Deployment"])["TRANSLATOR_HOST"] == "0.0.0.0"  # probes and Prometheus come from outside the pod
    assert [p["containerPort"] for p in c["ports"]] == [port]
    (service_port,) = docs["Service"]["spec"]["ports"]
    assert container_port(c, service_port["targetPort"]) == port
    annotations = docs["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == port
    probes = {name: c[name]["httpGet"] for name in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert all(container_port(c, probe["port"]) == port for probe in probes.values())
    paths = [p["path"] for p in probes.values()]
    assert paths == ["/health", "/health", "/ready"]
    answers = asyncio.run(get([*paths, annotations["prometheus.io/path"], "/readyz"]))
    # Alive while the model loads (so a slow load never trips liveness), and not ready yet.
    assert answers["/health"].status_code == 200
    assert answers["/ready"].status_code == 503
    metrics = answers[annotations["prometheus.io/path"]]
    assert metrics.status_code == 200 and "# TYPE translator_queue_depth gauge" in metrics.text
    assert answers["/readyz"].status_code == 404  # a wrong path would not pass


def test_the_pods_match_their_image(variant):
    name, docs = variant
    deployment = docs["Deployment"]
    compose_file = {"gpu": "docker-compose.yml", "cpu": "docker-compose.cpu.yml"}[name]
    compose = yaml.load((ROOT / compose_file).read_text(), Loader=TaggedLoader)
    assert container(deployment)["image"] == compose["services"]["translator"]["image"] == f"mt-translator:{name}"
    stage = dockerfile_stage(name)
    user, group = stage["USER"][0].split(":")
    context = deployment["spec"]["template"]["spec"]["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["runAsNonRoot"]) == (int(user), int(group), True)
    assert stage["EXPOSE"] == (env(deployment)["TRANSLATOR_PORT"],)


def test_env_names_are_service_settings(variant):
    _, docs = variant
    settings = {f"TRANSLATOR_{name.upper()}" for name in Settings.model_fields}
    assert set(env(docs["Deployment"])) <= settings
    # A Service named `translator` would put TRANSLATOR_PORT=tcp://... and others into every pod of the namespace.
    assert docs["Deployment"]["spec"]["template"]["spec"]["enableServiceLinks"] is False


def test_shutdown_drains_within_the_grace_period(variant):
    _, docs = variant
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    drain = float(env(docs["Deployment"])["TRANSLATOR_DRAIN_SECONDS"])
    command = container(docs["Deployment"])["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] == 30
    assert pod["terminationGracePeriodSeconds"] > int(command[1]) + drain


def test_resources(variant):
    name, docs = variant
    c = container(docs["Deployment"])
    requests, limits = c["resources"]["requests"], c["resources"]["limits"]
    assert requests == limits  # the Guaranteed QoS class, and Kubernetes requires it of a GPU
    assert (GPU in limits, limits.get(GPU)) == ((True, 1) if name == "gpu" else (False, None))
    assert (name == "gpu") == ("tolerations" in docs["Deployment"]["spec"]["template"]["spec"])
    # ONNX Runtime would start one thread per core of the node, not of the pod.
    assert env(docs["Deployment"])["TRANSLATOR_THREADS"] == str(limits["cpu"])


def test_the_autoscaler_scales_the_deployment_on_the_queue(variant):
    _, docs = variant
    hpa, deployment = docs["HorizontalPodAutoscaler"]["spec"], docs["Deployment"]
    ref = hpa["scaleTargetRef"]
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == (
        deployment["apiVersion"],
        deployment["kind"],
        deployment["metadata"]["name"],
    )
    assert "replicas" not in deployment["spec"]  # the HPA owns it
    # A node drain (the PDB lets one pod go at a time) always leaves a pod serving.
    assert hpa["minReplicas"] - docs["PodDisruptionBudget"]["spec"]["maxUnavailable"] >= 1
    (metric,) = hpa["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["target"]["type"] == "AverageValue"
    exported = {m.name: m.type for m in Metrics().registry.collect()}
    assert exported[metric["pods"]["metric"]["name"]] == "gauge"
    (rule,) = adapter_rules()
    # prometheus-adapter serves a rule's metric under the series' name (the rule has no `name` to rename it).
    assert "name" not in rule and rule["seriesQuery"].startswith(metric["pods"]["metric"]["name"] + "{")


def test_the_adapter_rule_gives_each_pod_its_queue(tmp_path):
    """The rule's query, filled in as prometheus-adapter fills it for the HPA's two pods, on test series."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (make system-deps)")
    (rule,) = adapter_rules()
    assert rule["resources"] == {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}}
    query = (
        rule["metricsQuery"]
        .replace("<<.Series>>", "translator_queue_depth")
        .replace("<<.LabelMatchers>>", 'namespace="mt",pod=~"translator-a|translator-b"')
        .replace("<<.GroupBy>>", "pod")
    )
    series = 'translator_queue_depth{namespace="%s",pod="%s",model="%s"}'
    test = {
        "rule_files": [],
        "evaluation_interval": "15s",  # promtool loads the input series up to the last evaluation before eval_time
        "tests": [
            {
                "interval": "15s",
                "input_series": [
                    # Pod a: empty, then 40 sentences waiting; serves two models, one of them idle.
                    {"series": series % ("mt", "translator-a", "en-de"), "values": "0 0 0 0 40 40 40 40"},
                    {"series": series % ("mt", "translator-a", "de-en"), "values": "0x7"},
                    {"series": series % ("mt", "translator-b", "en-de"), "values": "10x7"},
                    {"series": series % ("other", "translator-a", "en-de"), "values": "99x7"},  # another namespace
                ],
                # 95 s: the minute holds the samples at 45, 60, 75 and 90 s, one 0 and three 40s for pod a.
                "promql_expr_test": [
                    {
                        "expr": query,
                        "eval_time": "95s",
                        "exp_samples": [
                            {"labels": '{pod="translator-a"}', "value": 30},
                            {"labels": '{pod="translator-b"}', "value": 10},
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    result = subprocess.run([promtool, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
