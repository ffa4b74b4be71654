"""The compose files brought up by a real compose tool (podman-compose), on the images the tests build.

Prometheus, nginx and PostgreSQL are images made from Debian's packages (PROMETHEUS_IMAGE, NGINX_IMAGE,
POSTGRES_IMAGE); no Grafana image can be made here, so Grafana is not started (tests/test_deploy.py checks its
provisioning). Every port is published on 127.0.0.1 only. podman runs no health checks by itself on a machine
without systemd, and podman-compose does not wait for `service_healthy` on podman 4.3: the tests wait for /ready and
run each translator's health check.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import engine
import httpx
import pytest

from service.launch import free_port

PROJECT = "mt-compose-test"
# compose.models.yml: the models service on the CPU image (its own target needs torch's index, out of reach here)
CPU = ["docker-compose.yml", "docker-compose.cpu.yml", "tests/deploy/compose.models.yml"]
SCALE = [*CPU, "docker-compose.scale.yml"]
SCRAPE_SECONDS = 120  # Prometheus finds the replicas by DNS every 15 s and scrapes them every 15 s


@pytest.fixture(scope="module")
def third_party_images() -> dict[str, str]:
    return {"PROMETHEUS_IMAGE": engine.make_base(engine.PROMETHEUS), "NGINX_IMAGE": engine.make_base(engine.NGINX),
            "POSTGRES_IMAGE": engine.make_base(engine.POSTGRES)}


def compose(files: list[str], *args: str, env: dict[str, str], timeout: float = 600) -> str:
    command = ["podman-compose", "--project-name", PROJECT, *(a for f in files for a in ("-f", f)), *args]
    done = subprocess.run(command, cwd=engine.ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def containers(service: str) -> list[str]:
    listed = engine.podman("ps", "--filter", f"label=io.podman.compose.project={PROJECT}",
                           "--filter", f"label=com.docker.compose.service={service}", "--format", "{{.Names}}")
    return listed.stdout.split()


@contextlib.contextmanager
def stack(files: list[str], variables: dict[str, str], *services: str) -> Iterator[dict[str, str]]:
    """`podman-compose up -d` of the files (only the services named, with what they depend on) with these compose
    variables; then `down -v`."""
    ports = {"TRANSLATOR_PUBLISHED_PORT": free_port(), "PROMETHEUS_PUBLISHED_PORT": free_port()}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRANSLATOR_", "COMPOSE_"))}
    env |= variables | {k: f"127.0.0.1:{port}" for k, port in ports.items()}
    try:
        compose(files, "up", "--detach", "--no-build", *services, env=env)
        yield {"translator": f"http://127.0.0.1:{ports['TRANSLATOR_PUBLISHED_PORT']}",
               "prometheus": f"http://127.0.0.1:{ports['PROMETHEUS_PUBLISHED_PORT']}"}
    finally:
        compose(files, "down", "--volumes", "--timeout", "5", env=env, timeout=300)


def prometheus_query(url: str, query: str) -> list[dict]:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=10).json()
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def wait_for_series(url: str, query: str, count: int) -> list[dict]:
    deadline = time.monotonic() + SCRAPE_SECONDS
    while len(result := prometheus_query(url, query)) < count and time.monotonic() < deadline:
        time.sleep(3)
    assert len(result) >= count, (query, result)
    return result


def translate(url: str, text: str = "Two dogs are playing in the snow.", api_key: str | None = None) -> httpx.Response:
    body = {"q": text, "source": "en", "target": "de"} | ({"api_key": api_key} if api_key else {})
    return httpx.post(f"{url}/translate", json=body, timeout=120)


def assert_healthy(service: str) -> None:
    for name in containers(service):
        assert engine.podman("healthcheck", "run", name, check=False).returncode == 0, engine.logs(name)[-3000:]


def wait_healthy(service: str) -> None:
    """Every container of the service passes its health check (each replica loads its models at its own pace)."""
    deadline = time.monotonic() + engine.READY_SECONDS
    while time.monotonic() < deadline:
        if all(engine.podman("healthcheck", "run", n, check=False).returncode == 0 for n in containers(service)):
            return
        time.sleep(2)
    assert_healthy(service)


def test_cpu_variant_serves_and_prometheus_scrapes_the_translator(cpu_image, third_party_images):
    with stack(CPU, third_party_images, "translator", "prometheus") as urls:
        engine.wait_ready(urls["translator"])
        assert_healthy("translator")
        response = translate(urls["translator"])
        assert response.status_code == 200 and response.json()["translatedText"], response.text
        # the translator's read-only root filesystem, as compose runs it
        (name,) = containers("translator")
        assert engine.podman("inspect", "--format", "{{.HostConfig.ReadonlyRootfs}}", name).stdout.strip() == "true"
        up = wait_for_series(urls["prometheus"], 'up{job="translator"} == 1', 1)
        assert len(up) == 1
        wait_for_series(urls["prometheus"], 'translator_requests_total{status="200",pair="en-de"}', 1)


def test_scale_out_spreads_requests_over_two_replicas_and_survives_one_killed(cpu_image, third_party_images):
    keys_required = {"TRANSLATOR_REQUIRE_API_KEYS": "true"}
    with stack(SCALE, third_party_images | keys_required, "translator", "prometheus", "nginx") as urls:
        assert len(containers("translator")) == 2
        engine.wait_ready(urls["translator"])
        for service in ("postgres", "translator", "nginx"):
            wait_healthy(service)
        # one PostgreSQL store: a key made on one replica is known to both, and counts what both answered
        first, second = containers("translator")
        assert translate(urls["translator"]).status_code == 403
        key = engine.podman("exec", first, "python", "-m", "service.keys", "add", "compose-test").stdout.strip()
        answers = [translate(urls["translator"], api_key=key) for _ in range(12)]
        assert [a.status_code for a in answers] == [200] * 12, [a.text for a in answers]
        answered_by = {a.headers["x-upstream"] for a in answers}
        assert len(answered_by) == 2, answered_by
        usage = engine.podman("exec", second, "python", "-m", "service.keys", "usage", "compose-test").stdout
        assert "\t12 requests\t" in usage, usage
        # both replicas' metrics reach Prometheus (it scrapes each replica, not nginx)
        up = wait_for_series(urls["prometheus"], 'up{job="translator"} == 1', 2)
        assert len({series["metric"]["instance"] for series in up}) == 2
        wait_for_series(urls["prometheus"], 'sum by (instance) (translator_requests_total{status="200"}) > 0', 2)
        # one replica killed while requests flow: nginx hands what it sent there to the other one
        with ThreadPoolExecutor(8) as pool:
            answers = [pool.submit(translate, urls["translator"], api_key=key) for _ in range(40)]
            time.sleep(1)
            engine.podman("kill", first)
            statuses = [a.result().status_code for a in answers]
        assert statuses == [200] * len(statuses), statuses
        after = [translate(urls["translator"], api_key=key).status_code for _ in range(10)]
        assert after == [200] * 10, after
