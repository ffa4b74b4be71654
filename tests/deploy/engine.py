"""Podman, the images the container tests run, and the base images they are built on (made with mmdebstrap).

No image registry is reached: every base is made from Debian's archive and imported into podman's store, once
(an image whose recipe label matches is reused). The machine's certificate bundle goes to pip as a build secret.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CA_BUNDLE = Path(os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt")
READY_SECONDS = 120  # a container's start, loading and warming the models on a busy 2-core machine


@dataclass(frozen=True)
class Base:
    """An image made from Debian packages: mmdebstrap's variant, the packages, and what the image runs."""

    name: str
    variant: str
    packages: tuple[str, ...]
    changes: tuple[str, ...] = ()  # podman import --change instructions
    files: tuple[tuple[str, str], ...] = ()  # (a file in tests/deploy, its path in the image): executables

    @property
    def recipe(self) -> str:
        contents = [(HERE / local).read_text() for local, _ in self.files]
        recipe = [self.variant, self.packages, self.changes, self.files, contents]
        return hashlib.sha256(json.dumps(recipe).encode()).hexdigest()[:16]


# The translator's runtime base has Python alone (no apt: the runtime stage installs nothing); its build base adds
# venv, g++ and apt. With no CUDA base to be had from Debian, the GPU image's build runs on the build base.
PYTHON = Base("localhost/mt-base/python:bookworm", "essential", ("python3", "libstdc++6"))
PYTHON_BUILD = Base("localhost/mt-base/python-build:bookworm", "apt", ("python3", "python3-venv", "g++"))
PROMETHEUS = Base("localhost/mt-base/prometheus:bookworm", "essential", ("prometheus", "wget"),
                  ('ENTRYPOINT ["/usr/bin/prometheus"]',))
NGINX = Base("localhost/mt-base/nginx:bookworm", "essential", ("nginx-light", "wget"),
             ('CMD ["nginx", "-g", "daemon off;"]',))
# Debian 12's PostgreSQL (15), started as the official image starts it (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB)
POSTGRES = Base("localhost/mt-base/postgres:bookworm", "essential", ("postgresql-15",),
                ("ENV PATH=/usr/lib/postgresql/15/bin:/usr/sbin:/usr/bin:/sbin:/bin", "STOPSIGNAL SIGINT",
                 'ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]'),
                (("postgres-entrypoint.sh", "/usr/local/bin/postgres-entrypoint"),))
BUILD_ARGS = {"PYTHON_IMAGE": PYTHON.name, "PYTHON_BUILD_IMAGE": PYTHON_BUILD.name, "CUDA_IMAGE": PYTHON_BUILD.name}
MMDEBSTRAP_OPTIONS = [
    "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
    "--aptopt=Apt::Install-Recommends=false",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
]


def containers_conf(folder: Path) -> Path:
    """podman's settings for this machine: rlimits no higher than it lets a process raise them to.

    Containers otherwise get podman's defaults, which runc fails to set without CAP_SYS_RESOURCE.
    """
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], int(Path("/proc/sys/kernel/pid_max").read_text()))
    path = folder / "containers.conf"
    path.write_text(f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n')
    return path


def podman(*args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
    """One podman command, its output captured; raises with podman's words when it fails and check is set."""
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return done


def label(image: str, key: str) -> str | None:
    done = podman("image", "inspect", "--format", f'{{{{index .Labels "{key}"}}}}', image, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def make_base(base: Base) -> str:
    """The base image, made by mmdebstrap from Debian's archive unless podman already has this recipe's."""
    if label(base.name, "mt.recipe") == base.recipe:
        return base.name
    uploads = [f"--customize-hook={hook}" for local, path in base.files
               for hook in (f"upload {HERE / local} {path}", f'chmod 755 "$1{path}"')]
    with tempfile.TemporaryDirectory() as folder:
        tarball = Path(folder) / "rootfs.tar"
        done = subprocess.run(["mmdebstrap", "--quiet", f"--variant={base.variant}", *MMDEBSTRAP_OPTIONS, *uploads,
                               f"--include={','.join(base.packages)}", "bookworm", str(tarball)],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"mmdebstrap of {base.name} failed:\n{done.stderr[-4000:]}"
        changes = [a for c in (*base.changes, f"LABEL mt.recipe={base.recipe}") for a in ("--change", c)]
        podman("import", "--quiet", *changes, str(tarball), base.name)
    return base.name


def build(target: str, tag: str) -> str:
    """`podman build --target TARGET` of the Dockerfile on the Debian bases, pip trusting this machine's CAs."""
    args = [a for name, value in BUILD_ARGS.items() for a in ("--build-arg", f"{name}={value}")]
    if os.environ.get("PIP_INDEX_URL"):
        args += ["--build-arg", f"PIP_INDEX_URL={os.environ['PIP_INDEX_URL']}"]
    podman("build", "--format", "docker", "--target", target, "--tag", tag,
           "--secret", f"id=pip_cert,src={CA_BUNDLE}", *args, str(ROOT), timeout=1800)
    return tag


def image_bytes(image: str) -> int:
    return int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout)


def wait_ready(url: str, container: str | None = None, seconds: float = READY_SECONDS) -> float:
    """Seconds until GET url/ready answers 200; fails early if the container stops."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                return time.monotonic() - start
        except httpx.TransportError:
            pass
        if container and not running(container):
            raise AssertionError(f"{container} stopped before it was ready:\n{logs(container)}")
        time.sleep(0.2)
    raise AssertionError(f"{url} not ready after {seconds} s" + (f":\n{logs(container)}" if container else ""))


def running(container: str) -> bool:
    return podman("inspect", "--format", "{{.State.Running}}", container, check=False).stdout.strip() == "true"


def logs(container: str) -> str:
    done = podman("logs", container, check=False)
    return done.stdout + done.stderr
