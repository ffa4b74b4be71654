"""Our CPU image beside LibreTranslate's, both built here by podman: their sizes (podman's `.Size`, what
tests/deploy's size guard reads) and what each carries (torch, ONNX Runtime, CTranslate2, its largest packages).

No image registry is reachable here, so neither image is pulled. Ours is `podman build --target cpu` of our
Dockerfile on tests/deploy's Debian bases, as `make test-deploy` builds it. LibreTranslate's is its own
docker/Dockerfile, from the sdist (PyPI) of the version bench.serving.servers runs, built with the Dockerfile's
defaults (as its published image is: `with_models=false`, no language model in the image; it downloads them at its
first start) and only the substitutions this machine forces (SUBSTITUTIONS): its `python:*-slim` base, which no
registry gives here, and what that base carried. Its builder stage gets the machine's certificate bundle for pip;
the runtime stage copies /app alone from it.

    python -m bench.deploy.images                       build both, write bench/results/images.json and .md
    python -m bench.deploy.images --source DIR          LibreTranslate from a work tree (e.g. its git tag's)
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from bench.common.defaults import LIBRETRANSLATE_VERSION, REPO, RESULTS
from bench.common.report import markdown_table, write_results


def load_engine() -> ModuleType:
    """tests/deploy/engine.py (podman, the Debian bases, our image's build), loaded by its path (tests/ is no
    package, and argos-translate-lt installs a `tests` package of its own)."""
    spec = importlib.util.spec_from_file_location("engine", REPO / "tests" / "deploy" / "engine.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["engine"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


engine = load_engine()

OURS = "localhost/mt-bench/translator:cpu"
THEIRS = f"localhost/mt-bench/libretranslate:{LIBRETRANSLATE_VERSION}"
# LibreTranslate's runtime stage on our Python base plus adduser: the stage runs addgroup and adduser, which
# python:*-slim carries and Debian's essential packages do not.
LT_RUNTIME = dataclasses.replace(engine.PYTHON, name="localhost/mt-base/python-adduser:bookworm",
                                 packages=(*engine.PYTHON.packages, "adduser"))
CA_CONTEXT = "machine-ca"  # the build context holding the machine's certificate bundle, as ca.crt
# what each image's Python reports on (metadata names)
PACKAGES = ["torch", "onnxruntime", "onnxruntime-gpu", "ctranslate2"]


@dataclass(frozen=True)
class Substitution:
    """One change to LibreTranslate's Dockerfile: a regular expression that must match exactly once, what replaces
    it, and why this machine needs it."""

    pattern: str
    replacement: str
    why: str


SUBSTITUTIONS = [
    Substitution(r"^FROM python:\S+ AS builder$", f"FROM {engine.PYTHON_BUILD.name} AS builder",
                 "the builder stage's python:*-slim base (no registry here): tests/deploy's build base, Debian 12's "
                 "Python 3.11 with venv, g++ and apt"),
    Substitution(rf"^FROM {re.escape(engine.PYTHON_BUILD.name)} AS builder$",
                 rf"\g<0>\nCOPY --from={CA_CONTEXT} ca.crt /etc/pip-ca.crt\nENV PIP_CERT=/etc/pip-ca.crt",
                 "pip in the builder stage trusts the machine's certificate bundle (the runtime stage copies /app "
                 "alone from that stage)"),
    Substitution(r"^RUN python -mvenv venv", "RUN python3 -mvenv venv",
                 "Debian's Python has no `python` command, python:*-slim's has"),
    Substitution(r"^FROM python:\S+$", f"FROM {LT_RUNTIME.name}",
                 "the runtime stage's python:*-slim base: tests/deploy's Python base plus adduser (the stage runs "
                 "addgroup and adduser)"),
]

# Run by each image's Python: the versions of PACKAGES (with the distributions that require each), its
# site-packages' largest entries, and the sizes of the folders named (apparent sizes, bytes).
CARRIED = r"""
import importlib.metadata as m, json, os, re, sys, sysconfig
packages, folders = json.loads(sys.argv[1])
def size(path):
    if not os.path.isdir(path):
        return os.lstat(path).st_size if os.path.lexists(path) else None
    return sum(os.lstat(os.path.join(d, f)).st_size for d, _, files in os.walk(path) for f in files)
def name(requirement):
    return re.split(r"[^A-Za-z0-9._-]", requirement, maxsplit=1)[0].lower().replace("_", "-")
site = sysconfig.get_paths()["purelib"]
entries = {entry: size(os.path.join(site, entry)) for entry in os.listdir(site)}
dists = list(m.distributions())
def required_by(package):
    return sorted(d.metadata["Name"] for d in dists
                  if any(name(r) == package and "extra ==" not in r for r in d.requires or []))
versions = {}
for package in packages:
    try:
        versions[package] = {"version": m.version(package), "required_by": required_by(package)}
    except m.PackageNotFoundError:
        versions[package] = None
print(json.dumps({"python": sys.version.split()[0], "site_packages": site,
                  "site_packages_bytes": sum(entries.values()),
                  "largest": sorted(entries.items(), key=lambda kv: -kv[1])[:8],
                  "packages": versions, "folders": {f: size(f) for f in folders}}))
"""


def substituted(dockerfile: str) -> str:
    """LibreTranslate's Dockerfile with SUBSTITUTIONS applied in turn; fails if one does not match exactly once."""
    for s in SUBSTITUTIONS:
        dockerfile, count = re.subn(s.pattern, s.replacement, dockerfile, flags=re.MULTILINE)
        assert count == 1, f"{s.pattern!r} matched {count} times in LibreTranslate's Dockerfile, not once"
    return dockerfile


def sdist(folder: Path) -> tuple[Path, dict]:
    """LibreTranslate's sdist of LIBRETRANSLATE_VERSION, downloaded by pip and unpacked: its source tree and where
    it came from."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                    "--dest", str(folder), f"libretranslate=={LIBRETRANSLATE_VERSION}"], check=True)
    (archive,) = folder.glob("libretranslate-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(folder / "src")
    (tree,) = (folder / "src").iterdir()
    return tree, {"source": f"PyPI sdist {archive.name}",
                  "sha256": hashlib.sha256(archive.read_bytes()).hexdigest()}


def build_libretranslate(tree: Path, folder: Path) -> dict:
    """LibreTranslate's image from its tree's docker/Dockerfile, substituted: what was built and how."""
    engine.make_base(engine.PYTHON_BUILD)
    engine.make_base(LT_RUNTIME)
    original = (tree / "docker" / "Dockerfile").read_text()
    dockerfile = folder / "Dockerfile"
    dockerfile.write_text(substituted(original))
    ca = folder / CA_CONTEXT
    ca.mkdir()
    shutil.copyfile(engine.CA_BUNDLE, ca / "ca.crt")
    engine.podman("build", "--format", "docker", "--file", str(dockerfile), "--build-context", f"{CA_CONTEXT}={ca}",
                  "--tag", THEIRS, str(tree), timeout=1800)
    diff = difflib.unified_diff(original.splitlines(), dockerfile.read_text().splitlines(), "docker/Dockerfile",
                                "as built", lineterm="")
    return {"version": LIBRETRANSLATE_VERSION, "substitutions": [s.why for s in SUBSTITUTIONS],
            "dockerfile_diff": list(diff)}


def measure(image: str, base: str, python: str, folders: list[str]) -> dict:
    """The image's size and its base's (podman's .Size, bytes), its user, and what its Python carries."""
    done = engine.podman("run", "--rm", "--network", "none", "--entrypoint", python, image, "-c", CARRIED,
                         json.dumps([PACKAGES, folders]))
    size, base_size = engine.image_bytes(image), engine.image_bytes(base)
    user = engine.podman("image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip()
    carried = json.loads(done.stdout)
    return {"image": image, "bytes": size, "base": base, "base_bytes": base_size, "above_base_bytes": size - base_size,
            "user": user, "carries": carries(carried["packages"]), **carried}


def carries(packages: dict) -> str:
    """Which of PACKAGES an image carries, with their versions, and which not: one line."""
    found = [f"{name} {p['version']}" for name, p in packages.items() if p]
    return ", ".join(found) + "; no " + ", no ".join(name for name, p in packages.items() if not p)


def markdown(images: dict) -> str:
    rows = [[name, image["image"], f"{image['bytes'] / 1e6:.0f} MB", f"{image['base_bytes'] / 1e6:.0f} MB",
             f"{image['above_base_bytes'] / 1e6:.0f} MB", image["carries"],
             ", ".join(f"{entry} {size / 1e6:.0f} MB" for entry, size in image["largest"][:5])]
            for name, image in images.items()]
    header = ["", "image", "size", "its base", "above the base", "carries", "largest in site-packages"]
    return "# The images\n\n" + markdown_table(header, rows)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser("python -m bench.deploy.images", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", type=Path, help="a LibreTranslate source tree (default: its sdist from PyPI)")
    p.add_argument("--name", default="images", help="the result files' name under bench/results")
    args = p.parse_args(argv)
    missing = [tool for tool in ("podman", "mmdebstrap") if not shutil.which(tool)]
    if missing:
        raise SystemExit(f"{', '.join(missing)} not installed: `make deploy-deps` installs them")
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        os.environ["CONTAINERS_CONF"] = str(engine.containers_conf(folder))
        for base in (engine.PYTHON, engine.PYTHON_BUILD):
            engine.make_base(base)
        engine.build("cpu", OURS)
        tree, origin = (args.source.resolve(), {"source": str(args.source)}) if args.source else sdist(folder)
        built = {**origin, **build_libretranslate(tree, folder)}
        images = {
            "ours": measure(OURS, engine.PYTHON.name, "python", ["/opt/venv", "/app/models"]),
            "libretranslate": {**built, **measure(THEIRS, LT_RUNTIME.name, "/app/venv/bin/python",
                                                  ["/app", "/app/venv", "/home/libretranslate/.local"])},
        }
        data = {"images": images, "podman": engine.podman("--version").stdout.strip()}
    for path in write_results(RESULTS, args.name, data, markdown(images)):
        print(f"wrote {path}")
    print(markdown(images))


if __name__ == "__main__":
    main()
