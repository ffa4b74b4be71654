"""The container tests run only under `make test-deploy` (DEPLOY_TESTS=1): they build images and need root's podman.

Session fixtures make the Debian base images and build the translator's CPU image once.
"""

from __future__ import annotations

import os
import shutil

import engine
import pytest

if not os.environ.get("DEPLOY_TESTS"):
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session", autouse=True)
def podman_settings(tmp_path_factory) -> None:
    """podman, mmdebstrap and this machine's rlimits for containers, or the run fails saying what is missing."""
    missing = [tool for tool in ("podman", "mmdebstrap", "podman-compose") if not shutil.which(tool)]
    assert not missing, f"{missing} not installed: `make test-deploy` installs them"
    os.environ["CONTAINERS_CONF"] = str(engine.containers_conf(tmp_path_factory.mktemp("podman")))


@pytest.fixture(scope="session")
def cpu_image() -> str:
    for base in (engine.PYTHON, engine.PYTHON_BUILD):
        engine.make_base(base)
    return engine.build("cpu", "mt-translator:cpu")
