"""DeepL's official Node client, deepl-node 1.28, against the service (tests/deepl_node_client.js), run with
Debian's nodejs; the package is installed by npm into .cache/deepl-node (git-ignored) on first use."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.launch import REPO, running_service

DEEPL_NODE = "deepl-node@1.28"
PACKAGES = REPO / ".cache" / "deepl-node"
KEY = "deepl-node-key"


@pytest.fixture(scope="module")
def node_modules() -> Path:
    """deepl-node's folder, installed by npm if it is not there yet (make system-deps installs nodejs and npm)."""
    assert shutil.which("node") and shutil.which("npm"), "nodejs and npm are needed: make system-deps"
    if not (PACKAGES / "node_modules" / "deepl-node").is_dir():
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(PACKAGES), DEEPL_NODE],
                       check=True, capture_output=True, timeout=300)
    return PACKAGES / "node_modules"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("deepl-node") / "service.log"
    with running_service(REPO / "models", log, threads=1, log_level="warning", api_keys=KEY) as service:
        yield service.url


def test_the_node_client_calls_every_endpoint_it_has_for_texts_languages_usage_and_glossaries(
    node_modules: Path, url: str
):
    env = {**os.environ, "NODE_PATH": str(node_modules), "DEEPL_SERVER_URL": url, "DEEPL_AUTH_KEY": KEY}
    run = subprocess.run(["node", str(REPO / "tests" / "deepl_node_client.js")], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "every check passed" in run.stdout
