"""Hostile clients against `python -m service`, with the shipped models and default settings.

    python -m bench.serving.hostile [--model-dir models] [--cases headers stall files idle bombs uploads ...]

headers: four connections each send an 8 MB header field; the largest growth of an HTTP worker's RSS (goal:
    <= 20 MiB) and what each connection got (431, or its connection closed).
stall: four clients send one hostile request after another for a few seconds: 1,660 nested <b> (5 KB, format html),
    or 21,000 repeated q= in the query string; their answer times (goals: <= 0.3 s and <= 0.1 s) and meanwhile
    another client's GET /health latency, beside the same client's on an idle service.
files: the status of each file-name case: uploads of 日本語.txt, a 300-character name, a NUL byte, a '"'; the
    download of the first, of a 5,000-character name, a token that is no token (no 500). A refused upload
    leaves no folder.
idle: 1,000 connections that send nothing and 200 that send a header byte a second (slowloris): how long the service
    holds them (TRANSLATOR_HEADER_TIMEOUT_S, both).
drain: 16 keep-alive clients through a SIGTERM drain, then through the engine process's death (SIGKILL): requests on
    a reused connection that got a reset or EOF instead of an answer (goal 0), 503s without
    Connection: close, new connections refused or reset as the port closed (allowed).
bombs: each document bomb (a .docx of 40 MB of empty paragraphs, an .epub naming a 2 MB chapter four
    times, an .html of 4 MB of <br>; .htmls of as many paragraphs as the old and the HTML node limits let
    through; .epubs, .odts and .odps of paragraphs just within and just past their node limits) uploaded
    alone: its answer (a bomb within the limits is translated: its client hangs up after 20 s), the growth of an
    HTTP worker's RSS (goal <= 100 MiB), its RSS 10 s after over idle (goal <= 50 MiB), and how long after the
    answer or hang-up the engine is idle.
answered: the files of bombs within their node limits (.epub, .odt, .odp, and the .html within the HTML node limit)
    through the service with stand-in models (service.testing.ECHO_MODELS), each waited for to its answer: read,
    translated and written, as in bombs.
uploads: 50 clients upload a 1 MB .txt of real text at once and hang up after 30 s; meanwhile a probe
    sends one sentence every half second (goal: p99 <= 1 s); then how long until the engine is idle, and the
    workers' RSS 10 s after, over idle.
paragraph: 4 clients upload a .txt whose one line is 1 MB of real text (a paragraph within the limits) and hang
    up after 20 s; meanwhile the probe, as in uploads (goal: p99 <= 1 s). With --baseline CHECKOUT, the same against
    that checkout's service first (before: a document's text was split and tokenized on the event loop).
runs: a .docx of one paragraph of 20,000 runs, every other one in italics, through the service of this checkout
    (and of --baseline) with stand-in models (service.testing.ECHO_MODELS: the engine echoes, so what costs is the
    worker's): the answer, its seconds and the CPU seconds of the service's processes, the two checkouts in turn.
pool: documents read and written in the service's thread against a process of their own
    (bench.serving.document_process), stand-in models, in turn: 50 clients upload a 1 MB .txt of real text and hang
    up after 30 s, then 50 upload 50 kB and wait for their answers; meanwhile the probe, as in uploads. The probe's
    p99, the answers and the time of the last, and each HTTP worker's peak RSS with the processes it started.
refused: 8 large .txt uploads at once, whose clients hang up after 30 s; then 8 more on a service whose engine
    queue (TRANSLATOR_MAX_QUEUE=256, TRANSLATOR_DOCUMENTS_AT_ONCE=4) refuses them 503; how long after the last error
    answer or hang-up the engine's queue and batch are empty (goal: <= 2 s).
protocol: server CPU time per request under wrk (32 connections, GET on a trivial ASGI app) with uvicorn's httptools
    protocol, ours (service.worker.server.BoundedHttpProtocol: the same parser with limits) and h11.

Results: bench/results/hostile.json (--name: another name; the document cases' run is in hostile-documents.json), with
the load average after each case (the machine is shared). The tests (tests/test_hostile.py) run the same clients
against the tiny model.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

import docx
import odfdo
from ebooklib import epub

from bench.common.defaults import REPO, RESULTS
from bench.common.machine import cpu_seconds, environment, rss_mib, tree_cpu_seconds, tree_rss_mib
from bench.common.report import write_results
from bench.common.sentences import multi30k_sentences
from bench.common.timing import while_running
from bench.serving.frontend import STAND_IN, stand_in_service
from service.launch import RunningService, free_port, running_service
from service.settings import DEFAULT_DATA_DIR, Settings

SHIPPED_MODELS = REPO / "models"
NESTED_MARKUP = "<b>" * 1660 + "x"  # 5 KB, 1,660 elements deep
REPEATED_Q = "&".join(["q="] * 21000)  # 63 KB of query string


# --- HTTP over a raw socket ------------------------------------------------------------------------------------


class Reply(NamedTuple):
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes


def http_request(method: str, target: str, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    """An HTTP/1.1 request, with Host and (for a body) Content-Length."""
    fields = {"Host": "127.0.0.1", **({"Content-Length": str(len(body))} if body else {}), **(headers or {})}
    head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    return head.encode() + body


def json_request(target: str, payload: dict) -> bytes:
    return http_request("POST", target, {"Content-Type": "application/json"}, json.dumps(payload).encode())


def read_reply(sock: socket.socket) -> Reply:
    """One response (with a Content-Length, as the service's all have); ConnectionError if the connection ends first."""
    data = b""
    while b"\r\n\r\n" not in data:
        if not (chunk := sock.recv(65536)):
            raise ConnectionError(f"the connection closed before an answer ({len(data)} bytes of one)")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, value in (line.split(":", 1) for line in lines)}
    while len(body) < int(headers.get("content-length", 0)):
        if not (chunk := sock.recv(65536)):
            raise ConnectionError("the connection closed in the middle of an answer")
        body += chunk
    return Reply(int(status_line.split()[1]), headers, body)


def exchange(port: int, data: bytes, timeout: float = 30) -> Reply | str:
    """Send `data` on a new connection and read the answer; or how the connection ended without one."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
            return read_reply(sock)
        except ConnectionResetError:
            return "reset"
        except (ConnectionError, BrokenPipeError):
            return "closed"


def outcome(reply: Reply | str) -> str:
    """The status of an answer, or how the connection ended without one."""
    return str(reply.status) if isinstance(reply, Reply) else reply


def port_of(service: RunningService) -> int:
    return int(service.url.rsplit(":", 1)[1])


# --- the service's processes -----------------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    """A process's children, multiprocessing's resource tracker left out."""
    kids = [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]
    return [kid for kid in kids if b"resource_tracker" not in Path(f"/proc/{kid}/cmdline").read_bytes()]


def engine_and_workers(service: RunningService) -> tuple[int, list[int]]:
    """The engine process (the one child that has loaded ONNX Runtime) and the HTTP workers."""
    kids = children(service.process.pid)
    engines = [pid for pid in kids if "onnxruntime" in Path(f"/proc/{pid}/maps").read_text()]
    return engines[0], [pid for pid in kids if pid not in engines]


def files_folder(worker: int) -> Path:
    """Where the service keeps translated files: the files folder of the data folder its worker was given
    (TRANSLATOR_DATA_DIR), or of the setting's default."""
    environ = dict(entry.split(b"=", 1) for entry in Path(f"/proc/{worker}/environ").read_bytes().split(b"\0") if entry)
    data_dir = environ.get(b"TRANSLATOR_DATA_DIR")
    return (Path(data_dir.decode()) if data_dir else DEFAULT_DATA_DIR) / "files"


# --- the cases -------------------------------------------------------------------------------------------------


def header_flood(service: RunningService, connections: int = 4, header_bytes: int = 8 << 20) -> dict:
    """`connections` at once each send a header field of `header_bytes`: what each got, and the largest growth of
    an HTTP worker's RSS while they did (sampled every 5 ms)."""
    _, workers = engine_and_workers(service)
    before = settled_rss(workers)
    head = http_request("GET", "/health", {"X-Flood": ""}).removesuffix(b"\r\n\r\n")
    filler = b"a" * 65536

    def flood() -> str:
        with socket.create_connection(("127.0.0.1", port_of(service)), timeout=30) as sock:
            try:
                sock.sendall(head)
                for _ in range(header_bytes // len(filler)):
                    sock.sendall(filler)
                sock.sendall(b"\r\n\r\n")
                return outcome(read_reply(sock))
            except ConnectionResetError:
                return "reset"
            except (ConnectionError, BrokenPipeError):
                return "closed"

    def flood_all() -> list[str]:
        got = in_threads(flood, connections)
        time.sleep(0.2)
        return got

    got, peak = peak_rss_while(workers, flood_all)
    return {"connections": connections, "header_mib": header_bytes / 2**20, "got": dict(Counter(got)),
            "worker_rss_growth_mib": round(max(peak[pid] - before[pid] for pid in workers), 1)}


def settled_rss(pids: list[int], limit_s: float = 30) -> dict[int, float]:
    """The processes' RSS once it holds still (within 1 MiB over a second): a worker may still be loading its
    tokenizers after /ready first answers."""
    rss = {pid: rss_mib(pid) for pid in pids}
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = {pid: rss_mib(pid) for pid in pids}
        if all(abs(now[pid] - rss[pid]) < 1 for pid in pids):
            return now
        rss = now
    return rss


def in_threads(fn: Callable[[], object], count: int) -> list:
    """fn() in `count` threads at once; their results."""
    results: list = [None] * count

    def run(i: int) -> None:
        results[i] = fn()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def percentile(values: list[float], p: float) -> float:
    """The value that p % of `values` do not exceed (the nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def probe_health(port: int, until: float, every_s: float = 0.02) -> list[float]:
    """GET /health on a new connection every `every_s` until `until`: the seconds each took."""
    latencies = []
    while time.monotonic() < until:
        started = time.perf_counter()
        reply = exchange(port, http_request("GET", "/health"))
        assert isinstance(reply, Reply) and reply.status == 200, reply
        latencies.append(time.perf_counter() - started)
        time.sleep(every_s)
    return latencies


def latency_ms(seconds: list[float]) -> dict[str, float]:
    return {"p50": round(percentile(seconds, 50) * 1000, 1), "p90": round(percentile(seconds, 90) * 1000, 1),
            "max": round(max(seconds) * 1000, 1), "count": len(seconds)}


def stall(port: int, hostile: bytes, clients: int = 4, seconds: float = 5.0) -> dict:
    """`clients` send `hostile` one after another for `seconds` while another client probes GET /health: the
    hostile answers (statuses, seconds) and the probe's latency, beside its latency before, on the idle service."""
    idle = probe_health(port, time.monotonic() + min(2.0, seconds))
    until = time.monotonic() + seconds
    answers: list[tuple[str, float]] = []

    def hostile_client() -> None:
        while time.monotonic() < until:
            started = time.perf_counter()
            got = outcome(exchange(port, hostile))
            answers.append((got, time.perf_counter() - started))

    threads = [threading.Thread(target=hostile_client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    loaded = probe_health(port, until)
    for thread in threads:
        thread.join()
    times = [t for _, t in answers]
    return {"hostile": {"got": dict(Counter(got for got, _ in answers)), "median_s": round(statistics.median(times), 3),
                        "max_s": round(max(times), 3)},
            "health_ms_idle": latency_ms(idle), "health_ms_meanwhile": latency_ms(loaded)}


def multipart_file(name: bytes, content: bytes = b"A man is riding a bicycle.", source: bytes = b"en") -> bytes:
    """POST /translate_file to German, with a file name and a source language given as raw bytes (clients escape
    '"' and NUL in names, and send text in UTF-8)."""
    boundary = b"hostile-boundary"
    parts = [b'Content-Disposition: form-data; name="source"\r\n\r\n' + source,
             b'Content-Disposition: form-data; name="target"\r\n\r\nde',
             b'Content-Disposition: form-data; name="file"; filename="' + name + b'"\r\n'
             b"Content-Type: text/plain\r\n\r\n" + content]
    body = b"".join(b"--" + boundary + b"\r\n" + part + b"\r\n" for part in parts) + b"--" + boundary + b"--\r\n"
    return http_request("POST", "/translate_file", {"Content-Type": "multipart/form-data; boundary=hostile-boundary"},
                        body)


def file_names(service: RunningService) -> dict:
    """The status of every file-name case (no 500), the download's Content-Disposition, and the folders that refused
    uploads left behind."""
    port, folder = port_of(service), files_folder(engine_and_workers(service)[1][0])
    kept = len(list(folder.iterdir())) if folder.exists() else 0
    statuses, refused = {}, 0
    for case, name in [("日本語.txt", "日本語.txt".encode()), ("300 characters", b"a" * 296 + b".txt"),
                       ("NUL byte", b"nul\0.txt"), ('"', b'say \\"hi\\".txt')]:
        reply = exchange(port, multipart_file(name))
        statuses[f"upload {case}"] = outcome(reply)
        if not isinstance(reply, Reply) or reply.status != 200:
            refused += 1
            continue
        kept += 1
        path = urlsplit(json.loads(reply.body)["translatedFileUrl"]).path
        download = exchange(port, http_request("GET", path))
        statuses[f"download {case}"] = outcome(download)
        if isinstance(download, Reply):
            statuses[f"Content-Disposition {case}"] = download.headers.get("content-disposition")
    token = "0123456789abcdef" * 2
    for case, target in [("5,000-character name", f"/download_file/{token}/{'y' * 4996}.txt"),
                         ("5,000-character token", f"/download_file/{'x' * 5000}/x.txt"),
                         ("no token", "/download_file/..%5C..%5Cetc/x.txt"),
                         ("NUL byte", f"/download_file/{token}/a%00b.txt")]:
        statuses[f"download {case}"] = outcome(exchange(port, http_request("GET", target)))
    left = len(list(folder.iterdir())) - kept
    return {"statuses": statuses, "refused_uploads": refused, "folders_left_by_refused_uploads": left}


def held_connections(port: int, count: int, byte_every_s: float | None, limit_s: float) -> dict:
    """`count` connections that send nothing (byte_every_s None) or a header byte every byte_every_s: when the
    service closed them (seconds after they opened, the slowest), and what they got."""
    socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(count)]
    opened = time.monotonic()
    closed: dict[int, tuple[float, str]] = {}
    try:
        head = iter(http_request("GET", "/health", {"X-Slow": "x" * 10_000}))
        next_byte = opened
        while len(closed) < count and time.monotonic() - opened < limit_s:
            if byte_every_s is not None and time.monotonic() >= next_byte:
                byte = bytes([next(head)])
                for i, sock in enumerate(socks):
                    if i not in closed:
                        try:
                            sock.send(byte)
                        except OSError:
                            closed[i] = (time.monotonic() - opened, "reset")
                next_byte += byte_every_s
            for i, sock in enumerate(socks):
                if i not in closed:
                    closed_at = read_if_closed(sock)
                    if closed_at is not None:
                        closed[i] = (time.monotonic() - opened, closed_at)
            time.sleep(0.05)
    finally:
        for sock in socks:
            sock.close()
    return {"connections": count, "closed": len(closed),
            "slowest_closed_after_s": round(max((t for t, _ in closed.values()), default=float("nan")), 1),
            "got": dict(Counter(got for _, got in closed.values()))}


def read_if_closed(sock: socket.socket) -> str | None:
    """What a connection got if the service has closed it (its answer's status, or "closed"), else None."""
    sock.setblocking(False)
    try:
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/1.1 ") else "closed"
    except BlockingIOError:
        return None
    except ConnectionResetError:
        return "reset"
    finally:
        sock.setblocking(True)


@dataclass
class KeepAliveCounts:
    """What keep-alive clients met."""

    answers: Counter = field(default_factory=Counter)  # by status
    unclosed_503: int = 0  # 503s without Connection: close
    reused_unanswered: int = 0  # requests on a reused connection that got a reset or EOF instead of an answer
    new_unanswered: int = 0  # requests on a new connection that got a reset or EOF (the port closing)
    refused: int = 0  # connections refused (the port closed)


def keep_alive_client(port: int, request: bytes, done: threading.Event, counts: KeepAliveCounts) -> None:
    """Send `request` again and again on one connection, a new one only when the service closes it or says so."""
    sock: socket.socket | None = None
    while not done.is_set():
        reused = sock is not None
        if sock is None:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            except OSError:
                counts.refused += 1
                time.sleep(0.05)
                continue
        try:
            sock.sendall(request)
            reply = read_reply(sock)
        except OSError:  # a reset, an EOF (ConnectionError), a broken pipe
            if reused:
                counts.reused_unanswered += 1
            else:
                counts.new_unanswered += 1
            sock.close()
            sock = None
            continue
        counts.answers[reply.status] += 1
        closing = reply.headers.get("connection", "").lower() == "close"
        counts.unclosed_503 += reply.status == 503 and not closing
        if closing:
            sock.close()
            sock = None
    if sock is not None:
        sock.close()


def keep_alive_through(service: RunningService, stop: Callable[[], None], clients: int = 16) -> dict:
    """`clients` keep-alive clients translate one sentence after another; after a second, stop() (SIGTERM, or the
    engine's death), and on until the service has exited: what they met."""
    request = json_request("/translate", {"q": "A man is riding a bicycle.", "source": "en", "target": "de"})
    counts, done = [KeepAliveCounts() for _ in range(clients)], threading.Event()
    threads = [threading.Thread(target=keep_alive_client, args=(port_of(service), request, done, c)) for c in counts]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    stop()
    try:
        exit_code = service.process.wait(90)
        time.sleep(0.5)  # the clients meet the closed port
    finally:
        done.set()
        for thread in threads:
            thread.join()
    answers = sum((c.answers for c in counts), Counter())
    return {"exit_code": exit_code, "clients": clients, "answers": {str(k): v for k, v in sorted(answers.items())},
            **{name: sum(getattr(c, name) for c in counts)
               for name in ("unclosed_503", "reused_unanswered", "new_unanswered", "refused")}}


def sigterm(service: RunningService) -> Callable[[], None]:
    """Stopping the service as docker or Kubernetes does."""
    return lambda: service.process.send_signal(signal.SIGTERM)


def engine_death(service: RunningService) -> Callable[[], None]:
    """Killing the service's engine process (its pid looked up now, before any client runs)."""
    engine, _ = engine_and_workers(service)
    return lambda: os.kill(engine, signal.SIGKILL)


# --- the protocol's cost -------------------------------------------------------------------------------------


async def trivial_app(scope: dict, receive: Callable, send: Callable) -> None:
    """An ASGI app that answers every request at once: what is measured is the HTTP protocol's work."""
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"15")]})
        await send({"type": "http.response.body", "body": b'{"status":"ok"}'})


def serve_trivial_app(protocol: str, port: int) -> None:
    """`python -m bench.serving.hostile --serve-protocol NAME --port PORT`: the trivial app on one of uvicorn's
    protocols (httptools, h11) or ours (bounded), with the service's default limits."""
    import uvicorn

    from service.settings import Settings
    from service.worker.server import BoundedHttpProtocol, HttpLimits

    bounded = functools.partial(BoundedHttpProtocol, limits=HttpLimits.of(Settings()))
    http = bounded if protocol == "bounded" else protocol
    uvicorn.run(trivial_app, host="127.0.0.1", port=port, http=http, log_level="warning", access_log=False,
                lifespan="off")


def protocol_cost(protocol: str, seconds: float) -> dict:
    """Requests/s and server CPU per request of wrk's 32 connections against the trivial app."""
    port = free_port()
    command = [sys.executable, "-m", "bench.serving.hostile", "--serve-protocol", protocol, "--port", str(port)]
    server = subprocess.Popen(command, cwd=REPO)
    try:
        deadline = time.monotonic() + 30
        while not isinstance(exchange_or_none(port), Reply):
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"the trivial app on {protocol} did not start")
            time.sleep(0.1)
        before = cpu_seconds(server.pid)
        wrk = [shutil.which("wrk") or "wrk", "--threads", "1", "--connections", "32",
               "--duration", f"{round(seconds)}s", f"http://127.0.0.1:{port}/"]
        report = subprocess.run(wrk, capture_output=True, text=True, check=True).stdout
        cpu = cpu_seconds(server.pid) - before
    finally:
        server.terminate()
        server.wait()
    requests = int(next(line for line in report.splitlines() if "requests in" in line).split()[0])
    return {"requests_per_s": round(requests / round(seconds)), "cpu_us_per_request": round(cpu / requests * 1e6, 1)}


def exchange_or_none(port: int) -> Reply | str | None:
    """GET / on a new connection; None if nothing listens yet."""
    try:
        return exchange(port, http_request("GET", "/"), timeout=2)
    except OSError:
        return None


def protocols(rounds: int, seconds: float) -> dict:
    """protocol_cost() of each protocol, in interleaved rounds; the median round of each."""
    runs: dict[str, list[dict]] = {"httptools": [], "bounded": [], "h11": []}
    for round_ in range(rounds):
        for name in list(runs)[round_ % 3:] + list(runs)[: round_ % 3]:
            runs[name].append(protocol_cost(name, seconds))
    return {name: {"rounds": r, "median_cpu_us_per_request": statistics.median(x["cpu_us_per_request"] for x in r),
                   "median_requests_per_s": statistics.median(x["requests_per_s"] for x in r)}
            for name, r in runs.items()}

# --- documents --------------------------------------------------------------------------------------------------


def docx_of_empty_paragraphs(unpacked_mib: int = 40) -> bytes:
    """A .docx of a few KB whose document.xml unpacks to `unpacked_mib` MiB of empty paragraphs."""
    source = io.BytesIO()
    docx.Document().save(source)
    empty = b"<w:p/>" * (unpacked_mib * 2**20 // 6)
    body = (b"<w:document xmlns:w='http://schemas.openxmlformats.org/wordprocessingml/2006/main'><w:body>" + empty
            + b"</w:body></w:document>")
    return with_member(source.getvalue(), "word/document.xml", body)


def with_member(package: bytes, name: str, content: bytes) -> bytes:
    """A zip with one member's content replaced, compressed."""
    return with_members(package, {name: content})


def with_members(package: bytes, replaced: dict[str, bytes]) -> bytes:
    """A zip with these members' content replaced, compressed."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(package)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as written:
        for member in source.infolist():
            content = replaced[member.filename] if member.filename in replaced else source.read(member)
            written.writestr(member.filename, content)
    return out.getvalue()


def epub_of_one_chapter_named_four_times(chapter_mib: int = 2) -> bytes:
    """A small .epub whose manifest names its one chapter of `chapter_mib` MiB (paragraphs of 1,000 letters) four
    times."""
    book = epub.EpubBook()
    book.set_identifier("bomb")
    book.set_title("Bomb")
    book.set_language("en")
    chapter = epub.EpubHtml(title="One", file_name="chapter.xhtml", lang="en")
    paragraph = "<p>" + "word " * 200 + "</p>"
    chapter.content = "<html><body>" + paragraph * (chapter_mib * 2**20 // len(paragraph)) + "</body></html>"
    book.add_item(chapter)
    book.toc = [chapter]
    book.spine = ["nav", chapter]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    out = io.BytesIO()
    epub.write_epub(out, book)
    archive = zipfile.ZipFile(io.BytesIO(out.getvalue()))
    opf = next(name for name in archive.namelist() if name.endswith(".opf"))
    package = archive.read(opf).decode()
    item = re.search(r'<item [^>]*href="chapter.xhtml"[^>]*/>', package)[0]
    again = "".join(item.replace('id="', f'id="again{i}-') for i in range(3))
    return with_member(out.getvalue(), opf, package.replace(item, item + again).encode())


def epub_of_paragraphs(paragraphs: int, chapters: int = 4) -> bytes:
    """An .epub whose `chapters` chapters hold `paragraphs` paragraphs of one letter between them (each an element
    and a text)."""
    book = epub.EpubBook()
    book.set_identifier("paragraphs")
    book.set_title("Paragraphs")
    book.set_language("en")
    items = [epub.EpubHtml(title=f"Chapter {n}", file_name=f"chapter{n}.xhtml", lang="en") for n in range(chapters)]
    for item in items:
        item.content = "<html><body><p>x</p></body></html>"
        book.add_item(item)
    book.toc, book.spine = items, ["nav", *items]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    out = io.BytesIO()
    epub.write_epub(out, book)
    shares = [paragraphs // chapters + (n < paragraphs % chapters) for n in range(chapters)]
    return with_members(out.getvalue(), {
        f"EPUB/chapter{n}.xhtml": b'<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml">'
        b"<head><title>Chapter</title></head><body>" + b"<p>x</p>" * share + b"</body></html>"
        for n, share in enumerate(shares)})


ODF_PARAGRAPHS = {  # the kind of document, and the empty element of its blank one that the paragraphs replace
    ".odt": ("text", b'<text:p text:style-name="Standard"/>'),
    ".odp": ("presentation", b"<draw:text-box/>"),
}


def opendocument_of_paragraphs(suffix: str, paragraphs: int) -> bytes:
    """An .odt (its body) or .odp (a text box of its one slide) of `paragraphs` paragraphs of one letter, each an
    element."""
    kind, empty = ODF_PARAGRAPHS[suffix]
    blank = io.BytesIO()
    odfdo.Document(kind).save(blank)
    content = zipfile.ZipFile(io.BytesIO(blank.getvalue())).read("content.xml")
    filled = b"<text:p>x</text:p>" * paragraphs
    if suffix == ".odp":
        filled = b"<draw:text-box>" + filled + b"</draw:text-box>"
    return with_member(blank.getvalue(), "content.xml", content.replace(empty, filled, 1))


OLD_FILE_NODES = 200_000  # TRANSLATOR_MAX_FILE_NODES before .odt and .odp near it were measured


def near_the_limits() -> dict[str, tuple[str, Callable[[], bytes]]]:
    """Files of paragraphs a thousand nodes within and past the default node limits (each paragraph is an element
    and a text in a web page and in an e-book's XHTML, one element in an OpenDocument): an .html within
    TRANSLATOR_MAX_HTML_NODES, .epubs against it
    (one of them within TRANSLATOR_MAX_FILE_NODES), .odts and .odps against TRANSLATOR_MAX_FILE_NODES and its old
    default."""
    html_nodes, file_nodes = (Settings.model_fields[name].default for name in ("max_html_nodes", "max_file_nodes"))
    within = html_nodes // 2 - 500
    bombs = {f"html of {within:,} paragraphs (within the HTML node limit)": ("limit.html", lambda: b"<p>x" * within)}
    for paragraphs, what in ((html_nodes // 2 - 500, "within the HTML node limit"),
                             (html_nodes // 2 + 500, "past the HTML node limit"),
                             (file_nodes - 1000, "within the node limit, past the HTML node limit")):
        bombs[f"epub of {paragraphs:,} paragraphs in four chapters ({what})"] = (
            "paragraphs.epub", functools.partial(epub_of_paragraphs, paragraphs))
    for suffix in ODF_PARAGRAPHS:
        for paragraphs, what in ((file_nodes - 1000, "within the node limit"),
                                 (file_nodes + 1000, "past the node limit"),
                                 (OLD_FILE_NODES - 1000, "within the old node limit")):
            bombs[f"{suffix[1:]} of {paragraphs:,} paragraphs ({what})"] = (
                f"paragraphs{suffix}", functools.partial(opendocument_of_paragraphs, suffix, paragraphs))
    return bombs


BOMBS: dict[str, tuple[str, Callable[[], bytes]]] = {
    "docx of 40 MiB of empty paragraphs": ("bomb.docx", docx_of_empty_paragraphs),
    "epub naming a 2 MB chapter four times": ("bomb.epub", epub_of_one_chapter_named_four_times),
    "html of 4 MB of <br>": ("bomb.html", lambda: b"<br>" * (1 << 20)),
    # not the issue's: as many nodes as the old shared node limit let through, short of a thousand
    "html of 99,500 paragraphs (within the old node limit)": ("old-limit.html", lambda: b"<p>x" * 99_500),
    **near_the_limits(),
}


def paragraph_of_runs(runs: int = 20_000) -> bytes:
    """A .docx of one paragraph of `runs` runs of a word each, every other one in italics, a sentence every
    twelve."""
    document = docx.Document()
    paragraph = document.add_paragraph()
    words = "the quick brown fox jumps over a lazy dog and runs home".split()
    for i in range(runs):
        paragraph.add_run(words[i % len(words)] + (". " if i % 12 == 11 else " ")).italic = i % 2 == 1
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def runs_through(service: RunningService, data: bytes, limit_s: float = 600) -> dict:
    """The .docx `data` uploaded alone: its answer, its seconds, and the CPU seconds of the service's processes
    meanwhile."""
    cpu, started = tree_cpu_seconds(service.process.pid), time.perf_counter()
    reply = exchange_or_hang_up(port_of(service), upload("runs.docx", data), limit_s)
    return {"got": outcome(reply), "seconds": round(time.perf_counter() - started, 2),
            "service_cpu_s": round(tree_cpu_seconds(service.process.pid) - cpu, 2)}


TREE_SAMPLE_S = 0.05  # a process tree's RSS takes longer to read than one process's
DOCUMENTS_IN_A_PROCESS = ["bench.serving.document_process"]  # the same, documents read and written in a process


@contextmanager
def named_stand_in(model_dir: Path, name: str, checkout: Path = REPO, module: list[str] = STAND_IN
                   ) -> Iterator[RunningService]:
    """A checkout's service with stand-in models (`module`: STAND_IN or DOCUMENTS_IN_A_PROCESS), default
    settings."""
    log = RESULTS / "tmp" / f"hostile-{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with stand_in_service(log, checkout=checkout, module=module, model_dir=model_dir) as running:
        yield running


def paragraph_runs(model_dir: Path, checkouts: list[tuple[str, Path]], rounds: int, runs: int = 20_000) -> dict:
    """paragraph_of_runs() through each checkout's stand-in service, `rounds` times in turn, each round's load
    average beside it."""
    data = paragraph_of_runs(runs)
    results: dict = {"runs": runs, "bytes": len(data), **{label: [] for label, _ in checkouts}}
    for _ in range(rounds):
        for label, checkout in checkouts:
            with named_stand_in(model_dir, "runs", checkout) as running:
                results[label].append(loaded(runs_through(running, data)))
    return results


def http_workers(service: RunningService) -> list[int]:
    """The service's HTTP workers: its children that have loaded httptools (the engine has not)."""
    return [pid for pid in children(service.process.pid) if "httptools" in Path(f"/proc/{pid}/maps").read_text()]


def documents_and_probe(service: RunningService, clients: int, megabytes: float, limit_s: float) -> dict:
    """`clients` upload a `megabytes` MB .txt of real text at once, each waiting up to `limit_s` for its answer;
    meanwhile a probe sends one sentence every half second. The probe's latency, the uploads' answers and when the
    last came, and the peak RSS of each HTTP worker with the processes it started (sampled every TREE_SAMPLE_S)."""
    port, workers = port_of(service), http_workers(service)
    document = upload("real.txt", real_text(megabytes))
    idle = {pid: tree_rss_mib(pid) for pid in settled_rss(workers)}
    peak = dict(idle)
    answered: list[tuple[str, float]] = []
    started = time.monotonic()
    done = threading.Event()

    def client() -> None:
        answered.append((outcome(exchange_or_hang_up(port, document, limit_s)), time.monotonic() - started))

    def watch() -> None:
        while not done.wait(TREE_SAMPLE_S):
            for pid in workers:
                peak[pid] = max(peak[pid], tree_rss_mib(pid))

    threads = [threading.Thread(target=client) for _ in range(clients)] + [threading.Thread(target=watch)]
    for thread in threads:
        thread.start()
    probe = probe_translate(port, started + limit_s, until_done=lambda: len(answered) == clients)
    done.set()
    for thread in threads:
        thread.join()
    times = [t for _, t in probe]
    got = dict(Counter(g for g, _ in answered))
    return {"clients": clients, "megabytes": megabytes, "limit_s": limit_s, "uploads": got,
            "last_answer_s": round(max(t for g, t in answered if g == "200"), 1) if "200" in got else None,
            "probe": {"got": dict(Counter(g for g, _ in probe)), "p50_s": round(percentile(times, 50), 3),
                      "p99_s": round(percentile(times, 99), 3), "max_s": round(max(times), 3), "count": len(times)},
            "worker_peak_rss_over_idle_mib": [round(peak[pid] - idle[pid], 1) for pid in workers]}


def threads_or_process(model_dir: Path, rounds: int) -> dict:
    """documents_and_probe() against the service reading and writing documents in a thread (its own code) and in a
    process (bench.serving.document_process), in turn: 50 uploads of 1 MB for 30 s, then 50 of 50 kB answered
    whole."""
    results: dict = {"thread": [], "process": []}
    for _ in range(rounds):
        for label, module in (("thread", STAND_IN), ("process", DOCUMENTS_IN_A_PROCESS)):
            with named_stand_in(model_dir, f"documents-{label}", module=module) as running:
                results[label].append({"1 MB for 30 s": loaded(documents_and_probe(running, 50, 1.0, 30)),
                                       "50 kB answered": loaded(documents_and_probe(running, 50, 0.05, 300))})
    return results


def upload(name: str, content: bytes, source: bytes = b"en") -> bytes:
    return multipart_file(name.encode(), content, source)


def peak_rss_while(pids: list[int], work: Callable[[], object]) -> tuple[object, dict[int, float]]:
    """work()'s result, and each process's largest RSS while it ran (sampled every 5 ms)."""
    peak = {pid: rss_mib(pid) for pid in pids}

    def watch(done: threading.Event) -> None:
        while not done.wait(0.005):
            for pid in pids:
                peak[pid] = max(peak[pid], rss_mib(pid))

    return while_running(work, watch), peak


def bombs(service: RunningService, hang_up_s: float = 20, settle_s: float = 10, cases: tuple[str, ...] = tuple(BOMBS)
          ) -> dict:
    """Each document bomb of `cases` (names in BOMBS) uploaded alone: its answer (a bomb read within the limits is
    translated: its client hangs up after `hang_up_s`), its time, the largest growth of an HTTP worker's RSS meanwhile
    (goal: <= 100 MiB), how long after the answer or hang-up the engine is idle (goal: <= 2 s), and each worker's RSS
    `settle_s` after, beside idle (goal: <= 50 MiB)."""
    port, workers = port_of(service), http_workers(service)
    results = {}
    for case in cases:
        name, make = BOMBS[case]
        data = make()
        idle = settled_rss(workers)
        started = time.perf_counter()
        request = upload(name, data)
        reply, peak = peak_rss_while(workers, functools.partial(exchange_or_hang_up, port, request, hang_up_s))
        seconds = time.perf_counter() - started
        engine_idle = seconds_until_idle(port, time.monotonic())
        time.sleep(settle_s)
        after = {pid: rss_mib(pid) for pid in workers}
        body = reply.body.decode(errors="replace")[:200] if isinstance(reply, Reply) else ""
        results[case] = {"bytes": len(data), "got": outcome(reply), "answer": body, "seconds": round(seconds, 2),
                         "worker_rss_growth_mib": round(max(peak[pid] - idle[pid] for pid in workers), 1),
                         "engine_idle_after_s": engine_idle,
                         f"worker_rss_{settle_s:g}s_after_over_idle_mib":
                             round(max(after[pid] - idle[pid] for pid in workers), 1)}
    return results


def seconds_until_idle(port: int, since: float, limit_s: float = 120) -> float:
    """How long after `since` (time.monotonic()) the engine has no sentence waiting or running (at most limit_s)."""
    while engine_busy(port) and time.monotonic() - since < limit_s:
        time.sleep(0.05)
    return round(time.monotonic() - since, 2)


def exchange_or_hang_up(port: int, data: bytes, seconds: float) -> Reply | str:
    """exchange(), or "unfinished (hung up)" after `seconds` without an answer."""
    try:
        return exchange(port, data, timeout=seconds)
    except TimeoutError:
        return "unfinished (hung up)"


def real_text(megabytes: float) -> bytes:
    """`megabytes` MB of English paragraphs (Multi30k's training sentences, five a line)."""
    sentences = multi30k_sentences(split="train")
    lines, size, i = [], 0, 0
    while size < megabytes * 1e6:
        line = " ".join(sentences[(i + k) % len(sentences)] for k in range(5)) + "\n"
        lines.append(line)
        size += len(line.encode())
        i += 5
    return "".join(lines).encode()


def metric(port: int, name: str) -> float:
    """The sum of a metric's samples in /metrics."""
    reply = exchange(port, http_request("GET", "/metrics"))
    assert isinstance(reply, Reply) and reply.status == 200, reply
    return sum(float(line.rsplit(" ", 1)[1]) for line in reply.body.decode().splitlines()
               if line.startswith(name) and not line.startswith("#") and line[len(name)] in " {")


def engine_busy(port: int) -> float:
    """Sentences waiting for the engine and decoder rows running."""
    return metric(port, "translator_queue_depth") + metric(port, "translator_running_rows")


def probe_translate(port: int, until: float, every_s: float = 0.5,
                    until_done: Callable[[], bool] = lambda: False) -> list[tuple[str, float]]:
    """One sentence to translate every `every_s` until `until` (or until_done()): each answer's status and
    seconds."""
    request = json_request("/translate", {"q": "A man is riding a bicycle.", "source": "en", "target": "de"})
    answers = []
    while time.monotonic() < until and not until_done():
        started = time.perf_counter()
        got = outcome(exchange(port, request))
        answers.append((got, time.perf_counter() - started))
        time.sleep(max(0.0, every_s - (time.perf_counter() - started)))
    return answers


def uploads_and_probe(service: RunningService, clients: int = 50, megabytes: float = 1.0,
                      seconds: float = 30.0, settle_s: float = 10, one_line: bool = False) -> dict:
    """`clients` upload a `megabytes` MB .txt of real text at once (`one_line`: all of it one line, a paragraph), and
    hang up after `seconds`; meanwhile a probe sends one sentence every half second (goal: its p99 <= 1 s), beside its
    latency on the idle service just before. Then how long the engine takes to be idle again, and the workers' RSS
    `settle_s` after that, over their RSS before."""
    port, (_, workers) = port_of(service), engine_and_workers(service)
    text = real_text(megabytes)
    document = upload("real.txt", text.replace(b"\n", b" ") + b"\n" if one_line else text)
    rss_before = settled_rss(workers)
    idle = [t for _, t in probe_translate(port, time.monotonic() + 5)]
    until = time.monotonic() + seconds
    got: list[str] = []

    def client() -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=seconds) as sock:
            try:
                sock.sendall(document)
                sock.settimeout(max(0.1, until - time.monotonic()))
                got.append(outcome(read_reply(sock)))
            except TimeoutError:
                got.append("unfinished (hung up)")
            except (ConnectionError, BrokenPipeError):
                got.append("closed")

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    answers, peak = peak_rss_while(workers, lambda: probe_translate(port, until))
    for thread in threads:
        thread.join()
    engine_idle = seconds_until_idle(port, time.monotonic(), limit_s=60)
    time.sleep(settle_s)
    times = [t for _, t in answers]
    return {"clients": clients, "megabytes": megabytes, "one_line": one_line, "seconds": seconds,
            "uploads": dict(Counter(got)),
            "probe_idle_before": {"p50_s": round(percentile(idle, 50), 3), "max_s": round(max(idle), 3)},
            "probe": {"got": dict(Counter(g for g, _ in answers)), "p50_s": round(percentile(times, 50), 3),
                      "p99_s": round(percentile(times, 99), 3), "max_s": round(max(times), 3), "count": len(times)},
            "worker_peak_rss_mib": [round(peak[pid], 1) for pid in workers],
            "engine_idle_after_hang_up_s": engine_idle,
            f"worker_rss_{settle_s:g}s_after_over_idle_mib":
                round(max(rss_mib(pid) - rss_before[pid] for pid in workers), 1)}


def refused_documents(service: RunningService, count: int = 8, megabytes: float = 1.0, hang_up_s: float = 30) -> dict:
    """`count` large .txt uploads at once, each client hanging up after `hang_up_s` without an answer: their answers
    (503 when the queue cannot take them), and how long after the last answer or hang-up the engine's queue and batch
    are empty (goal: <= 2 s)."""
    port = port_of(service)
    document = upload("large.txt", real_text(megabytes))
    answered: list[tuple[str, float]] = []

    def client() -> None:
        answered.append((outcome(exchange_or_hang_up(port, document, hang_up_s)), time.monotonic()))

    in_threads(client, count)
    return {"documents": count, "megabytes": megabytes, "got": dict(Counter(got for got, _ in answered)),
            "engine_idle_after_last_answer_or_hang_up_s": seconds_until_idle(port, max(at for _, at in answered))}


# --- the benchmark --------------------------------------------------------------------------------------------


QUEUE_THAT_REFUSES = {"max_queue": 256, "documents_at_once": 4}  # the refused case's second service


@contextmanager
def service(model_dir: Path, name: str, checkout: Path = REPO, **settings: object) -> Iterator[RunningService]:
    """The service of a checkout (this one) with default settings (and these), logging to
    bench/results/tmp/hostile-NAME.log."""
    log = RESULTS / "tmp" / f"hostile-{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with running_service(model_dir, log, checkout=checkout, **settings) as running:
        yield running


def loaded(case: dict) -> dict:
    """A case's results with the machine's load average as it ended (the machine is shared)."""
    return {**case, "load_average_after": [round(load, 1) for load in os.getloadavg()]}


def run_cases(model_dir: Path, cases: list[str], rounds: int, baseline: Path | None = None) -> dict:
    results: dict = {}
    if {"headers", "stall", "files", "idle"} & set(cases):
        with service(model_dir, "probes") as running:
            port = port_of(running)
            if "headers" in cases:
                results["headers"] = header_flood(running)
            if "stall" in cases:
                markup = json_request("/translate", {"q": NESTED_MARKUP, "source": "en", "target": "de",
                                                     "format": "html"})
                results["stall"] = {
                    "nested_markup": stall(port, markup),
                    "repeated_q": stall(port, http_request("POST", f"/translate?{REPEATED_Q}&source=en&target=de")),
                }
            if "files" in cases:
                results["files"] = file_names(running)
            if "idle" in cases:
                results["idle"] = {"idle": held_connections(port, 1000, None, 60),
                                   "slowloris": held_connections(port, 200, 1.0, 60)}
    if "bombs" in cases:
        with service(model_dir, "bombs") as running:
            results["bombs"] = loaded(bombs(running))
    if "answered" in cases:
        within = tuple(case for case in BOMBS if re.search(r"\(within the (HTML )?node limit\)$", case))
        with named_stand_in(model_dir, "answered") as running:
            results["bombs_answered"] = loaded(bombs(running, hang_up_s=300, cases=within))
    if "uploads" in cases:
        with service(model_dir, "uploads") as running:
            results["uploads"] = loaded(uploads_and_probe(running))
    if "paragraph" in cases:
        results["paragraph"] = {}
        for label, checkout in ([("baseline", baseline)] if baseline else []) + [("this checkout", REPO)]:
            with service(model_dir, "paragraph", checkout) as running:
                case = uploads_and_probe(running, clients=4, seconds=20, one_line=True)
            results["paragraph"][label] = loaded({"checkout": str(checkout), **case})
    if "runs" in cases:
        results["paragraph_runs"] = paragraph_runs(
            model_dir, ([("baseline", baseline)] if baseline else []) + [("this checkout", REPO)], rounds)
    if "pool" in cases:
        results["threads_or_process"] = threads_or_process(model_dir, rounds)
    if "refused" in cases:
        with service(model_dir, "refused") as running:
            results["refused"] = loaded(refused_documents(running))
        with service(model_dir, "refused-503", **QUEUE_THAT_REFUSES) as running:
            results["refused_503"] = loaded({"settings": QUEUE_THAT_REFUSES, **refused_documents(running)})
    if "drain" in cases:
        results["drain"] = {}
        for stop in (sigterm, engine_death):
            with service(model_dir, stop.__name__) as running:
                results["drain"][stop.__name__] = keep_alive_through(running, stop(running))
    if "protocol" in cases:
        results["protocol"] = protocols(rounds, seconds=4)
    return results


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=SHIPPED_MODELS)
    names = ["headers", "stall", "files", "idle", "bombs", "answered", "uploads", "paragraph", "runs", "pool",
             "refused", "drain", "protocol"]
    p.add_argument("--cases", nargs="+", choices=names, default=names)
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the protocol and runs comparisons")
    p.add_argument("--baseline", type=Path, help="another checkout whose service the paragraph and runs cases also "
                   "measure")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--name", default="hostile", help="the results file's name (bench/results/NAME.json)")
    p.add_argument("--serve-protocol", choices=["httptools", "bounded", "h11"], help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_protocol:
        serve_trivial_app(args.serve_protocol, args.port)
        return
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    run = {"commit": commit,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "command": "python -m bench.serving.hostile " + " ".join(argv if argv is not None else sys.argv[1:]),
           "load_average_before": [round(load, 1) for load in os.getloadavg()]}  # the machine is shared
    results = {"run": run, "machine": environment(["uvicorn", "httptools", "h11", "beautifulsoup4", "selectolax"]),
               **run_cases(args.model_dir, args.cases, args.rounds, args.baseline)}
    print(json.dumps(results, indent=2, ensure_ascii=False))
    write_results(args.out, args.name, results)


if __name__ == "__main__":
    main()
