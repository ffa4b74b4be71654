"""`docker compose up` with models named in .env, without a Docker engine: the commands of compose's models service
and then of its translator, in the order compose starts them, each with the environment compose gives its container
(tests/test_deploy.py reads the compose files with Docker Compose itself and the Dockerfile with BuildKit's parser),
the .env's settings, and one folder standing for the model-cache volume that both mount.

What differs from the containers, and only this: their python is this interpreter and their files the repo's (as
in tests/test_deploy.py); the translator listens on 127.0.0.1 and a free port; the .env points the Argos index and
the hub at tests/model_server.py's stand-in, which holds an Argos Translate package of a pair the shipped models do
not serve (en-fr).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import httpx
import pytest

pytest.importorskip("ctranslate2")

from model_server import ModelServer  # noqa: E402
from test_argos import sentencepiece_model  # noqa: E402, F401 (a fixture)
from test_deploy import (  # noqa: E402
    COMPOSE_VARIANTS,
    ROOT,
    answers_ready,
    clean_env,
    compose_config,
    image_of,
    repo_path,
    run_locally,
    running,
    wait_until,
)

from bench.common.argos_package import opennmt_vocabulary, random_spec, write_package, zip_package  # noqa: E402
from service.launch import free_port  # noqa: E402
from service.settings import SHIPPED_MODELS  # noqa: E402

PACKAGE = "translate-en_fr-1_0.argosmodel"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, sentencepiece_model: Path):  # noqa: F811
    """The stand-in, with an index of one en-fr package."""
    folder = tmp_path_factory.mktemp("argos") / "translate-en_fr-1_0"
    spec = random_spec(opennmt_vocabulary(sentencepiece_model))
    package = zip_package(write_package(folder, spec, sentencepiece_model, to_code="fr", to_name="French"))
    model_server = ModelServer()
    model_server.files[PACKAGE] = data = package.read_bytes()
    model_server.files["index.json"] = json.dumps([{
        "from_code": "en", "to_code": "fr", "package_version": "1.0", "type": "translate", "license": "CC0",
        "links": [f"{model_server.url}/files/{PACKAGE}"], "checksum": hashlib.sha256(data).hexdigest()}]).encode()
    with model_server.running():
        yield model_server


def container_env(service: dict, target: str, dotenv: dict[str, str], cache: Path) -> dict[str, str]:
    """The environment compose gives the service's container: the image's, the service's own values, and the
    variables it passes on (listed without a value) from .env; the volume's folder for /cache."""
    image = image_of(target)
    passed = {name for name, value in service["environment"].items() if value is None}
    assert set(dotenv) <= passed, f"compose does not pass {set(dotenv) - passed} on to the container"
    env = {**image.env, **{k: v for k, v in service["environment"].items() if v is not None}, **dotenv}
    env.pop("PATH")  # the image's venv first: here, this interpreter's
    volumes = {v["target"]: v["source"] for v in service["volumes"] if v["type"] == "volume"}
    assert volumes["/cache"] == "model-cache" and env["TRANSLATOR_MODEL_CACHE"] == "/cache"
    return clean_env(**env | {"TRANSLATOR_MODEL_CACHE": str(cache)})


def command(service: dict, target: str) -> list[str]:
    image = image_of(target)
    return run_locally(image, (service.get("entrypoint") or image.entrypoint) + (service.get("command") or image.cmd))


def test_one_setting_and_compose_up_serve_the_named_models(tmp_path: Path, server: ModelServer):
    services = compose_config(COMPOSE_VARIANTS["cpu"])["services"]
    models, translator = services["models"], services["translator"]
    assert translator["depends_on"]["models"]["condition"] == "service_completed_successfully"
    cache = tmp_path / "model-cache"  # the volume
    dotenv = {"TRANSLATOR_MODELS": "en-fr", "TRANSLATOR_ARGOS_INDEX": f"{server.url}/files/index.json",
              "HF_ENDPOINT": server.url}

    # the models service: made into the volume, then it exits with 0, which lets the translator start
    env = container_env(models, models["build"]["target"], dotenv, cache)
    done = subprocess.run(command(models, models["build"]["target"]), env=env, capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "en-fr: Argos Translate package translate-en_fr-1_0.argosmodel 1.0, licence: CC0" in done.stderr
    assert (cache / "argos-en-fr" / "config.json").is_file() and "argos-en-fr: ready (en-fr)" in done.stdout
    fetched = len(server.requests)

    # a second `docker compose up`: the models service finds the volume's model and touches no network
    done = subprocess.run(command(models, models["build"]["target"]), env=env, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0 and len(server.requests) == fetched, done.stdout + done.stderr

    # the translator, on the same volume: serves the named pair beside the shipped ones, fetching nothing
    target = translator["build"]["target"]
    port = free_port()
    env = container_env(translator, target, {"TRANSLATOR_MODELS": dotenv["TRANSLATOR_MODELS"]}, cache)
    shipped = repo_path(image_of(target), env["TRANSLATOR_MODEL_DIR"])
    assert shipped == SHIPPED_MODELS
    env |= {"TRANSLATOR_HOST": "127.0.0.1", "TRANSLATOR_PORT": str(port), "TRANSLATOR_MODEL_DIR": str(shipped),
            "TRANSLATOR_THREADS": "1", "TRANSLATOR_HTTP_WORKERS": "1"}
    log = tmp_path / "translator.log"
    with running(command(translator, target), env, log) as proc:
        wait_until(lambda: answers_ready(f"http://127.0.0.1:{port}/ready"), proc, log, "the translator's start")
        base = f"http://127.0.0.1:{port}"
        targets = {language["code"]: language["targets"] for language in httpx.get(f"{base}/languages").json()}
        assert "fr" in targets["en"] and "de" in targets["en"], targets
        answer = httpx.post(f"{base}/translate", json={"q": "the house is small", "source": "en", "target": "fr"})
        assert answer.status_code == 200 and answer.json()["translatedText"]
    assert len(server.requests) == fetched
