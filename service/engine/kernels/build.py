"""Compile decoder_step.cc into the library the CPU sessions register (service.engine.kernels.LIBRARY).

    python -m service.engine.kernels.build [--march native] [--headers DIR]

`make serve` and `make test` run it. It needs a C++ compiler (g++, or $CXX) and ONNX Runtime's C/C++ headers, which
no Python package carries: --headers (or $ORT_INCLUDE_DIR; from ONNX Runtime 1.17, the first with the API the
kernels use, to 1.31, the runtime's), else those of Debian 13's libonnxruntime-dev (1.21), fetched once from
Debian's archive (checked against its SHA-256) into ~/.cache/mt-service/. Exits 1 with the reason when it cannot
build; the service then runs the step as exported.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

from service.engine.kernels import LIBRARY, SOURCE

# Debian 13 (trixie)'s package of ONNX Runtime 1.21's headers: its C API is versioned, so the 1.31 runtime loads
# a library built against them. Only the headers are taken: any architecture's package would do.
HEADERS_DEB = "http://deb.debian.org/debian/pool/main/o/onnxruntime/libonnxruntime-dev_1.21.0+dfsg-1_amd64.deb"
HEADERS_SHA256 = "14f7d959d5deacbcf1504830d4189f91fc67382b399ed9ae9d3aa9c4050ced08"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "mt-service" / "onnxruntime-headers-1.21"
HEADER = "onnxruntime_cxx_api.h"


def find_headers(given: str | None) -> Path:
    """A folder holding onnxruntime_cxx_api.h: the one given, or Debian's package's, fetched once."""
    for folder in (given, os.environ.get("ORT_INCLUDE_DIR"), CACHE):
        if folder and (Path(folder) / HEADER).exists():
            return Path(folder)
    return fetch_headers()


def fetch_headers() -> Path:
    """Debian's .deb is an ar archive; its data.tar.xz holds usr/include/onnxruntime/."""
    with urllib.request.urlopen(HEADERS_DEB, timeout=60) as response:
        deb = response.read()
    if hashlib.sha256(deb).hexdigest() != HEADERS_SHA256:
        raise RuntimeError(f"{HEADERS_DEB} is not the package expected (SHA-256 differs)")
    data = ar_member(deb, "data.tar.xz")
    prefix = "./usr/include/onnxruntime/"
    staging = CACHE.with_suffix(".partial")
    shutil.rmtree(staging, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as archive:
        for member in archive.getmembers():
            if member.isfile() and member.name.startswith(prefix):
                write_member(archive, member, staging / member.name[len(prefix):])
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    staging.replace(CACHE)
    return CACHE


def write_member(archive: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    """A regular file's bytes, written under its folder only: no link, mode or owner taken from the archive.

    Written by hand rather than by `extract(..., filter="data")`, which Python has only from 3.11.4 on.
    """
    if ".." in Path(member.name).parts:
        raise RuntimeError(f"{member.name} leaves the package's include folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(archive.extractfile(member).read())


def ar_member(archive: bytes, name: str) -> bytes:
    """One member of an ar archive (the .deb format): 8 bytes of magic, then 60-byte headers, each before its data."""
    offset = 8
    while offset < len(archive):
        header = archive[offset : offset + 60]
        member, size = header[:16].decode().strip().rstrip("/"), int(header[48:58])
        if member == name:
            return archive[offset + 60 : offset + 60 + size]
        offset += 60 + size + size % 2
    raise RuntimeError(f"no {name} in the package")


def build(headers: Path, march: str) -> Path:
    """g++ -O3 -march=... -shared: the library, written beside its source."""
    compiler = os.environ.get("CXX", "g++")
    command = [compiler, "-O3", f"-march={march}", "-fassociative-math", "-fno-signed-zeros", "-fno-trapping-math",
               "-std=c++17", "-shared", "-fPIC", f"-I{headers}", str(SOURCE), "-o", str(LIBRARY)]
    subprocess.run(command, check=True)
    return LIBRARY


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--march", default="native",
                   help="the CPUs it runs on: native (this machine's), or e.g. x86-64-v2 for an image built elsewhere")
    p.add_argument("--headers", help="a folder with ONNX Runtime's onnxruntime_cxx_api.h")
    args = p.parse_args(argv)
    try:
        library = build(find_headers(args.headers), args.march)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as error:
        print(f"kernels not built ({error}); the service will run the decoder step as exported", file=sys.stderr)
        return 1
    print(f"built {library}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
