"""The CPU image, built by podman on bases made from Debian's archive, started and used as an operator would.

Each test starts its own container on a free 127.0.0.1 port and removes it afterwards.
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import engine
import httpx
import pptx
import yaml

from service.launch import free_port

# The goal, in podman's (decimal) megabytes (deploy/README.md, "The images, checked")
MAX_IMAGE_BYTES = 450 * 1000**2
PAIRS = {"en-de": "Two dogs are playing in the snow.", "de-en": "Zwei Hunde spielen im Schnee."}


@contextlib.contextmanager
def container(image: str, *options: str) -> Iterator[tuple[str, str]]:
    """A detached container of the image, port 8000 published on 127.0.0.1: (its name, its URL)."""
    port = free_port()
    name = f"mt-test-{port}"
    engine.podman("run", "--detach", "--name", name, "--publish", f"127.0.0.1:{port}:8000", *options, image)
    try:
        yield name, f"http://127.0.0.1:{port}"
    finally:
        engine.podman("rm", "--force", "--time", "0", name, check=False)


def translate(url: str, pair: str, text: str, timeout: float = 60) -> httpx.Response:
    source, target = pair.split("-")
    return httpx.post(f"{url}/translate", json={"q": text, "source": source, "target": target}, timeout=timeout)


def compose_translator() -> dict:
    return yaml.safe_load((engine.ROOT / "docker-compose.yml").read_text())["services"]["translator"]


def test_cpu_image_is_small_has_no_build_tools_and_carries_only_onnx_runtimes_cpu_build(cpu_image):
    size = engine.image_bytes(cpu_image)
    assert size <= MAX_IMAGE_BYTES, f"{size / 1e6:.0f} MB"
    # no compiler, package manager or pip in the runtime stage; only ONNX Runtime's CPU build
    found = engine.podman("run", "--rm", cpu_image, "sh", "-c",
                          "for t in gcc g++ cc c++ make apt-get pip pip3; do command -v $t; done; "
                          "python -m pip --version 2>/dev/null; true").stdout
    assert found.strip() == "", found
    listed = engine.podman("run", "--rm", cpu_image, "python", "-c",
                           "import importlib.metadata as m; print(sorted(d.metadata['Name'].lower() "
                           "for d in m.distributions() if 'onnxruntime' in d.metadata['Name'].lower()))").stdout
    assert listed.strip() == "['onnxruntime']", listed
    providers = engine.podman("run", "--rm", cpu_image, "python", "-c",
                              "import onnxruntime; print(onnxruntime.get_available_providers())").stdout
    assert "CUDAExecutionProvider" not in providers and "CPUExecutionProvider" in providers
    # our CPU kernels, built by the build stage on Debian 12's Python (3.11.2)
    built = engine.podman("run", "--rm", cpu_image, "python", "-c", "import platform; "
                          "from service.engine.kernels import built_library; "
                          "print(platform.python_version(), built_library() is not None)").stdout.split()
    assert built[0].startswith("3.11.") and built[1] == "True", built


def test_cpu_image_starts_passes_its_health_check_translates_both_pairs_and_is_scraped(cpu_image):
    compose = compose_translator()
    # the root filesystem read-only, as compose runs it, and the image's own user
    assert compose.get("read_only") is True
    tmpfs = [a for path in compose.get("tmpfs", []) for a in ("--tmpfs", path)]
    with container(cpu_image, "--read-only", *tmpfs) as (name, url):
        seconds = engine.wait_ready(url, name)
        print(f"ready {seconds:.1f} s after `podman run` returned")
        healthcheck = engine.podman("inspect", "--format", "{{json .Config.Healthcheck.Test}}", name).stdout
        assert "/app/healthcheck.py" in healthcheck
        assert engine.podman("healthcheck", "run", name, check=False).returncode == 0
        for pair, text in PAIRS.items():
            response = translate(url, pair, text)
            assert response.status_code == 200, response.text
            translated = response.json()["translatedText"]
            assert translated and translated != text, translated
        assert "our kernels" in engine.logs(name)
        scraped = httpx.get(f"{url}/metrics", timeout=10).text.splitlines()
        counted = [line for line in scraped if line.startswith("translator_requests_total{") and '"200"' in line]
        assert all(any(f'pair="{pair}"' in line for line in counted) for pair in PAIRS), counted
        uid = engine.podman("exec", name, "sh", "-c", "awk '/^Uid:/ {print $2}' /proc/1/status").stdout.strip()
        assert uid not in ("", "0"), uid
        assert engine.podman("exec", name, "sh", "-c", "touch /app/x", check=False).returncode != 0


def test_keys_in_the_sqlite_store_html_and_a_slide_deck_are_served(cpu_image):
    """What the slimmed venv must still do: the store (SQLite in /data), the HTML5 parser, documents (.pptx)."""
    deck = pptx.Presentation()
    deck.slides.add_slide(deck.slide_layouts[5]).shapes.title.text = PAIRS["en-de"]
    saved = io.BytesIO()
    deck.save(saved)
    with container(cpu_image, "--env", "TRANSLATOR_REQUIRE_API_KEYS=true") as (name, url):
        engine.wait_ready(url, name)
        assert translate(url, "en-de", PAIRS["en-de"]).status_code == 403
        key = engine.podman("exec", name, "python", "-m", "service.keys", "add", "image-test").stdout.strip()
        html = httpx.post(f"{url}/translate", json={"q": "<p>Two dogs <b>play</b> in the snow.</p>", "source": "en",
                                                    "target": "de", "format": "html", "api_key": key}, timeout=60)
        assert html.status_code == 200 and "<b>" in html.json()["translatedText"], html.text
        sent = httpx.post(f"{url}/translate_file", data={"source": "en", "target": "de", "api_key": key},
                          files={"file": ("deck.pptx", saved.getvalue())}, timeout=120)
        assert sent.status_code == 200, sent.text
        download = httpx.get(url + urlsplit(sent.json()["translatedFileUrl"]).path, params={"api_key": key}, timeout=60)
        assert download.status_code == 200, download.text
        title = pptx.Presentation(io.BytesIO(download.content)).slides[0].shapes.title.text
        assert title and title != PAIRS["en-de"], title
        usage = engine.podman("exec", name, "python", "-m", "service.keys", "usage", "image-test").stdout
        assert "\t2 requests\t" in usage, usage


def test_a_mounted_model_folder_is_served(cpu_image, tmp_path):
    mounted = tmp_path / "models" / "mine"
    shutil.copytree(engine.ROOT / "models" / "en-de", mounted, ignore=shutil.ignore_patterns("*.pt", "*.png"))
    with container(cpu_image, "--volume", f"{mounted.parent}:/models:ro,Z",
                   "--env", "TRANSLATOR_MODEL_DIR=/models/mine") as (name, url):
        engine.wait_ready(url, name)
        assert translate(url, "en-de", PAIRS["en-de"]).status_code == 200
        # only the mounted model is served, not the ones baked into the image
        assert translate(url, "de-en", PAIRS["de-en"]).status_code == 400


def test_a_bad_model_folder_leaves_the_container_running_unready_with_one_clear_line(cpu_image, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    with container(cpu_image, "--volume", f"{bad}:/models/bad:ro,Z",
                   "--env", "TRANSLATOR_MODEL_DIR=/models/bad") as (name, url):
        deadline = time.monotonic() + engine.READY_SECONDS
        while "cannot load the models" not in (logs := engine.logs(name)) and time.monotonic() < deadline:
            time.sleep(1)
        time.sleep(5)  # long enough for a crash or a restart to show
        assert engine.running(name), engine.logs(name)
        logs = engine.logs(name)
        lines = [line for line in logs.splitlines() if "cannot load the models" in line]
        assert len(lines) == 1 and "/models/bad" in lines[0], logs
        assert "Traceback" not in logs, logs
        assert httpx.get(f"{url}/ready", timeout=5).status_code == 503
        assert engine.podman("healthcheck", "run", name, check=False).returncode != 0


def test_a_malformed_setting_is_one_clear_line_and_a_missing_one_takes_its_default(cpu_image):
    with container(cpu_image, "--env", "TRANSLATOR_THREADS=many") as (name, _):
        exited = engine.podman("wait", name, timeout=120).stdout.strip()
        lines = [line for line in engine.logs(name).splitlines() if line.strip()]
    assert exited == "2"
    assert len(lines) == 1 and "TRANSLATOR_THREADS" in lines[0] and "many" in lines[0], lines
    # no TRANSLATOR_* variable but the image's own: the defaults serve
    with container(cpu_image) as (name, url):
        engine.wait_ready(url, name)
        environment = engine.podman("exec", name, "env").stdout
        assert {line.split("=")[0] for line in environment.splitlines() if line.startswith("TRANSLATOR_")} == {
            "TRANSLATOR_HOST", "TRANSLATOR_MODEL_DIR", "TRANSLATOR_MODEL_CACHE", "TRANSLATOR_DATA_DIR"}


def test_podman_stop_under_load_answers_every_accepted_request(cpu_image):
    text = " ".join(["A man in an orange hat is looking at something while two dogs run on the green grass."] * 3)
    with container(cpu_image) as (name, url):
        engine.wait_ready(url, name)
        with ThreadPoolExecutor(48) as pool:
            answers = [pool.submit(translate, url, "en-de", text, 120) for _ in range(48)]
            time.sleep(2)  # every request sent and taken in
            engine.podman("stop", "--time", "40", name)
            statuses = [a.result().status_code for a in answers]
        assert statuses == [200] * len(statuses), statuses
        exited = engine.podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        assert exited == "0", engine.logs(name)[-3000:]


def test_gpu_image_python_stage_builds_on_a_plain_debian_base():
    """No CUDA base can be made from Debian's archive: the GPU target is built on the build base instead (its
    apt-get line, its venv with onnxruntime-gpu, its runtime stage), and not run."""
    engine.make_base(engine.PYTHON_BUILD)
    image = engine.build("gpu", "mt-translator:gpu-on-debian")
    listed = engine.podman("run", "--rm", "--entrypoint", "/opt/venv/bin/pip", image, "list").stdout
    assert re.search(r"^onnxruntime-gpu\s", listed, re.M), listed
