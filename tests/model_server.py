"""A local stand-in for the Hugging Face hub and Argos Translate's package index, over real HTTP on 127.0.0.1.

The hub's API as huggingface_hub's snapshot_download and model_info read it: GET /api/models/REPO[/revision/REV]
(the model's sha, its files with their sizes, tags and card data), GET /api/models/REPO/tree/REV (the file list),
HEAD and GET /REPO/resolve/REV/FILE (ETag, X-Repo-Commit, Content-Length; Range requests answered 206); unknown
repositories and revisions answered as the hub answers them (404 with X-Error-Code). Any other file under /files/
(an Argos index, .argosmodel packages) is served as it is, with Range requests. Every request is recorded, so that
a test sees what was fetched; `cut` makes the next GET of a file stop halfway, as a dropped connection does;
`sizeless` paths are answered without their size to HEAD, as some servers answer.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

RESOLVE = re.compile(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)")
API = re.compile(r"/api/models/(?P<repo>[^/]+/[^/]+?)(?:/revision/(?P<rev>[^/]+))?")
TREE = re.compile(r"/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)")


class Repo:
    """A hub repository of one commit: its files (path -> bytes), its card's licence and tags."""

    def __init__(self, folder: Path, licence: str = "apache-2.0"):
        self.files = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
        self.sha = hashlib.sha1(b"".join(self.files.values())).hexdigest()
        self.licence = licence

    def info(self, name: str) -> dict:
        siblings = [{"rfilename": path, "size": len(data), "blobId": hashlib.sha1(data).hexdigest()}
                    for path, data in self.files.items()]
        return {"id": name, "modelId": name, "sha": self.sha, "siblings": siblings, "tags": [f"license:{self.licence}"],
                "cardData": {"license": self.licence}, "private": False, "disabled": False, "gated": False}

    def tree(self) -> list[dict]:
        return [{"type": "file", "path": path, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                for path, data in self.files.items()]


class ModelServer:
    def __init__(self):
        self.repos: dict[str, Repo] = {}
        self.files: dict[str, bytes] = {}  # /files/NAME
        self.requests: list[tuple[str, str, str | None]] = []  # method, path, Range header
        self.authorizations: list[str | None] = []  # each request's Authorization header
        self.cut_next: set[str] = set()
        self.sizeless: set[str] = set()  # paths whose HEAD answers without Content-Length, as some servers do
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def cut(self, path: str) -> None:
        """The next GET of `path` sends half of it, then closes the connection."""
        self.cut_next.add(path)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:
                self.answer(body=False)

            def do_GET(self) -> None:
                self.answer(body=True)

            def answer(self, body: bool) -> None:
                path = unquote(urlparse(self.path).path)
                server.requests.append((self.command, path, self.headers.get("Range")))
                server.authorizations.append(self.headers.get("Authorization"))
                if path.startswith("/files/") and path[7:] in server.files:
                    return self.send(server.files[path[7:]], body, path)
                if match := TREE.fullmatch(path):
                    if repo := self.repo(match["repo"], match["rev"]):
                        self.json(repo.tree())
                    return None
                if match := API.fullmatch(path):
                    if repo := self.repo(match["repo"], match["rev"]):
                        self.json(repo.info(match["repo"]))
                    return None
                if match := RESOLVE.fullmatch(path):
                    repo = self.repo(match["repo"], match["rev"])
                    if repo is None:
                        return None
                    if match["file"] not in repo.files:
                        return self.error(404, "EntryNotFound")
                    data = repo.files[match["file"]]
                    return self.send(data, body, path, {"X-Repo-Commit": repo.sha,
                                                         "ETag": f'"{hashlib.sha1(data).hexdigest()}"'})
                return self.error(404, "RepoNotFound")

            def repo(self, name: str, revision: str | None) -> Repo | None:
                repo = server.repos.get(name)
                if repo is None:
                    self.error(404, "RepoNotFound")
                elif revision not in (None, "main", repo.sha):
                    self.error(404, "RevisionNotFound")
                else:
                    return repo
                return None

            def error(self, status: int, code: str) -> None:
                data = json.dumps({"error": code}).encode()
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def json(self, value: object) -> None:
                self.send(json.dumps(value).encode(), True, "", {"Content-Type": "application/json"})

            def send(self, data: bytes, body: bool, path: str, headers: dict[str, str] | None = None) -> None:
                start = 0
                if (ranged := re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")) and self.command == "GET":
                    start = int(ranged[1])
                self.send_response(206 if start else 200)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("Accept-Ranges", "bytes")
                if body or path not in server.sizeless:
                    self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                if not body:
                    return
                if self.command == "GET" and path in server.cut_next:
                    server.cut_next.discard(path)
                    self.wfile.write(data[start : start + (len(data) - start) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(data[start:])

        return Handler

    @contextmanager
    def running(self) -> Iterator[ModelServer]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
            thread.join()
