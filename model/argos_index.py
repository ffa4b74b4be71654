"""Argos Translate's package index, as LibreTranslate reads it, and its packages downloaded.

The index (argospm-index's index.json; service.settings.ARGOS_INDEX) is a list of packages, each with from_code,
to_code, package_version, type, links (URLs of its .argosmodel file, tried in order) and, where the index has one,
checksum (the file's SHA-256). A download goes to DIR/NAME.part, resumed from where an earlier one stopped (an HTTP
Range request), checked against the checksum (or, without one, as a readable zip), and only then renamed to
DIR/NAME.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import json
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

USER_AGENT = "mt-service-pull/0.1"
CHUNK = 1 << 20
TIMEOUT_S = 60

Progress = Callable[[int, int], None]  # bytes done, bytes in all (0: unknown)


def get(url: str, headers: dict[str, str] | None = None):
    """An open HTTP response; urllib.error.URLError (HTTPError for a bad status) on failure."""
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **(headers or {})})
    return urllib.request.urlopen(request, timeout=TIMEOUT_S)


def read_index(url: str) -> list[dict]:
    with get(url) as response:
        index = json.loads(response.read())
    if not isinstance(index, list):
        raise ValueError(f"{url} is not an Argos Translate package index (a JSON list of packages)")
    return index


def version_key(package: dict) -> tuple[int, ...]:
    return tuple(int(part) for part in str(package.get("package_version", "0")).split(".") if part.isdigit())


def find_package(index: list[dict], source: str, target: str) -> dict | None:
    """The newest translation package from `source` into `target`, or None."""
    found = [p for p in index if p.get("type", "translate") == "translate" and p.get("from_code") == source
             and p.get("to_code") == target and p.get("links")]
    return max(found, key=version_key, default=None)


def pairs(index: list[dict]) -> list[str]:
    return sorted({f"{p.get('from_code')}-{p.get('to_code')}" for p in index if p.get("type", "translate") ==
                   "translate"})


def file_name(package: dict) -> str:
    """The .argosmodel file's name, from its first link."""
    return package["links"][0].rstrip("/").rsplit("/", 1)[-1]


def download_size(package: dict) -> int:
    """The size of the package's file as its first link's server says it (0: unknown)."""
    request = urllib.request.Request(package["links"][0], method="HEAD", headers={"User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return int(response.headers.get("Content-Length") or 0)
    except (urllib.error.URLError, ValueError):
        return 0


def resume(url: str, part: Path, progress: Progress) -> None:
    """Append the rest of `url` to `part`: from its end, where the server takes a Range, else from the start."""
    start = part.stat().st_size if part.exists() else 0
    with get(url, {"Range": f"bytes={start}-"} if start else None) as response:
        if response.status != 206:  # the whole file
            start = 0
        total = start + int(response.headers.get("Content-Length") or 0)
        with part.open("ab" if start else "wb") as out:
            done = start
            while chunk := response.read(CHUNK):
                out.write(chunk)
                done += len(chunk)
                progress(done, total)
    if done < total:
        raise ConnectionAbortedError(f"the connection closed after {done:,} of {total:,} bytes")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def check(path: Path, checksum: str | None) -> None:
    """Raise ValueError where the file is not the package: another SHA-256 than the index's, or no readable zip."""
    if checksum and (found := sha256(path)) != checksum.lower():
        raise ValueError(f"the download's SHA-256 is {found}, the index says {checksum}")
    if not zipfile.is_zipfile(path):
        raise ValueError("the download is not a zip file (.argosmodel)")


def download(package: dict, folder: Path, progress: Progress) -> Path:
    """The package's .argosmodel file in `folder`: downloaded (resumed where a .part file is), checked, renamed.
    A file that fails its check is removed; so is a link that fails, before the next is tried."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name(package)
    if path.is_file():
        return path
    part = path.with_name(path.name + ".part")
    errors = []
    for url in package["links"]:
        try:
            resume(url, part, progress)
            check(part, package.get("checksum"))
        except ValueError as e:
            part.unlink(missing_ok=True)
            errors.append(f"{url}: {e}")
            continue
        except (OSError, http.client.HTTPException) as e:  # the network: the .part file stays, to resume
            if isinstance(e, OSError) and e.errno == errno.ENOSPC:  # the disk, not the network (the caller says so)
                raise
            errors.append(f"{url}: {getattr(e, 'reason', e)!s}")
            continue
        part.rename(path)
        return path
    raise ConnectionError("; ".join(errors))
