"""Hostile clients (issue 27), over real sockets: `python -m service` on the tiny model, spoken to with raw HTTP.

Each case holds the service to its limits: a request head past TRANSLATOR_MAX_HEADER_BYTES or
TRANSLATOR_MAX_HEADER_FIELDS gets 431 (or its connection closes) and costs the worker no memory; idle connections,
slow heads and slow bodies are closed (408 for the last two); file names never give a 500; markup and repeated
parameters do not hold the worker's event loop (another client's /health stays fast meanwhile); JSON and form bodies
are UTF-8; a drain or the engine's death answers every request sent on a keep-alive connection, with
Connection: close; document bombs are refused or read within a worker's memory, documents uploaded at once (even of
one long paragraph) leave another client's sentence fast, and the engine is idle soon after documents are refused or
their clients leave. The clients are bench.serving.hostile's, which measures the same cases on the shipped models.
"""

from __future__ import annotations

import asyncio
import json
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from bench.serving.hostile import (
    BOMBS,
    NESTED_MARKUP,
    QUEUE_THAT_REFUSES,
    REPEATED_Q,
    Reply,
    bombs,
    engine_death,
    exchange,
    file_names,
    header_flood,
    http_request,
    json_request,
    keep_alive_through,
    multipart_file,
    port_of,
    read_reply,
    refused_documents,
    sigterm,
    stall,
    uploads_and_probe,
)
from service.launch import RunningService, running_service
from service.settings import Settings
from service.supervisor import Supervisor

TIMEOUT_S = 1.0  # the probed server's header and body timeouts
KEEP_ALIVE_S = 2 * TIMEOUT_S  # and its keep-alive, longer, as by default
KEY = "secret"
DEFAULTS = {name: field.default for name, field in Settings.model_fields.items()}
ENGLISH = {"q": "A man is riding a bicycle.", "source": "en", "target": "de"}


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path, tmp_path_factory) -> Iterator[RunningService]:
    """One HTTP worker, so that every connection reaches the worker measured; short timeouts."""
    log = tmp_path_factory.mktemp("hostile") / "service.log"
    with running_service(tiny_model_dir, log, http_workers=1, threads=1, keep_alive_s=KEEP_ALIVE_S,
                         header_timeout_s=TIMEOUT_S, body_timeout_s=TIMEOUT_S, log_level="warning") as service:
        yield service


@pytest.fixture(scope="module")
def keyed(tiny_model_dir: Path, tmp_path_factory) -> Iterator[RunningService]:
    log = tmp_path_factory.mktemp("hostile-keyed") / "service.log"
    with running_service(tiny_model_dir, log, http_workers=1, threads=1, api_keys=KEY, log_level="warning") as service:
        yield service


def ask(service: RunningService, data: bytes) -> Reply | str:
    return exchange(port_of(service), data)


def status(reply: Reply | str) -> int | str:
    return reply.status if isinstance(reply, Reply) else reply


def error_of(reply: Reply | str, expected: int) -> str:
    """LibreTranslate's error shape with the expected status; returns the message."""
    assert isinstance(reply, Reply) and reply.status == expected, reply
    assert reply.headers["content-type"].startswith("application/json"), reply.headers
    return json.loads(reply.body)["error"]


# --- request heads: 431 ----------------------------------------------------------------------------------------


def test_a_flood_of_header_bytes_gets_431_and_costs_the_worker_no_memory(server: RunningService):
    """Four connections each send an 8 MB header field (before: the worker grew by 32 MB)."""
    flood = header_flood(server, connections=4, header_bytes=8 << 20)
    assert set(flood["got"]) <= {"431", "reset", "closed"} and "431" in flood["got"], flood
    assert flood["worker_rss_growth_mib"] <= 20, flood
    assert status(ask(server, http_request("GET", "/health"))) == 200


def test_a_head_within_the_limit_is_served_and_one_past_it_gets_431(server: RunningService):
    limit = DEFAULTS["max_header_bytes"]
    assert status(ask(server, http_request("GET", "/health", {"X-Pad": "a" * (limit - 200)}))) == 200
    message = error_of(ask(server, http_request("GET", "/health", {"X-Pad": "a" * limit})), 431)
    assert str(limit) in message
    assert error_of(ask(server, http_request("GET", "/health?" + "a" * limit)), 431) == message


def test_too_many_header_fields_get_431(server: RunningService):
    limit = DEFAULTS["max_header_fields"]
    fields = {f"X-Field-{i}": "x" for i in range(limit - 1)}  # and Host
    assert status(ask(server, http_request("GET", "/health", fields))) == 200
    fields["X-One-Too-Many"] = "x"
    assert str(limit) in error_of(ask(server, http_request("GET", "/health", fields)), 431)


def test_a_query_string_as_deep_translator_sends_fits_the_head(server: RunningService):
    """deep-translator sends q in the query string: 5,000 characters of any script, percent-encoded, fit."""
    target = "/detect?q=" + quote("\U0001f600" * 4990 + "Hello")
    assert len(target) > DEFAULTS["max_header_bytes"] * 0.9
    assert status(ask(server, http_request("POST", target))) == 200


# --- idle connections, slow heads and bodies --------------------------------------------------------------------


def wait_for_close(sock: socket.socket, limit_s: float) -> tuple[bytes, float]:
    """What the server sends until it closes the connection, and after how long; fails past limit_s."""
    started, data = time.monotonic(), b""
    sock.settimeout(limit_s)
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"the connection was still open after {limit_s} s; it sent {data[:200]!r}")
    return data, time.monotonic() - started


@pytest.mark.parametrize("sent", [b"", b"\r\n"], ids=["nothing", "an empty line"])
def test_a_connection_that_sends_no_request_is_closed_after_the_header_timeout(server: RunningService, sent: bytes):
    """Not after the longer keep-alive: that is for clients between two requests."""
    with socket.create_connection(("127.0.0.1", port_of(server))) as sock:
        sock.sendall(sent)
        data, seconds = wait_for_close(sock, 5 * TIMEOUT_S)
    assert data == b"" and TIMEOUT_S * 0.8 <= seconds < KEEP_ALIVE_S, seconds


def test_a_connection_idle_after_its_answer_is_closed_after_the_keep_alive(server: RunningService):
    with socket.create_connection(("127.0.0.1", port_of(server))) as sock:
        sock.sendall(http_request("GET", "/health"))
        assert read_reply(sock).status == 200
        data, seconds = wait_for_close(sock, 5 * KEEP_ALIVE_S)
    assert data == b"" and seconds >= KEEP_ALIVE_S * 0.8, seconds


def test_a_connection_idle_for_nearly_the_keep_alive_is_still_served(server: RunningService):
    """A client that reuses its connection, idle a little less than the keep-alive before each request, is answered
    on that same connection every time: the wait starts again after each answer, and lasts the whole keep-alive.
    Before: deepl-node, polling a document's status every 5 s on a kept-alive socket, now and then got "socket hang
    up" from a service whose keep-alive was 5 s too, which closed the connection just as the request came."""
    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=5 * KEEP_ALIVE_S) as sock:
        sock.sendall(http_request("GET", "/health"))
        assert read_reply(sock).status == 200
        for _ in range(2):  # idle longer than the keep-alive in all
            time.sleep(KEEP_ALIVE_S * 0.75)
            sock.sendall(http_request("GET", "/health"))
            reply = read_reply(sock)
            assert reply.status == 200 and reply.headers.get("connection") != "close", reply


def test_a_head_sent_a_byte_at_a_time_gets_408(server: RunningService):
    """Slowloris: a byte every 0.2 s keeps no connection open past the header timeout."""
    head = http_request("GET", "/health", {"X-Slow": "x" * 100})
    with socket.create_connection(("127.0.0.1", port_of(server))) as sock:
        started = time.monotonic()
        for byte in head[:20]:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            time.sleep(0.2)
        data, _ = wait_for_close(sock, 5 * TIMEOUT_S)
    assert data.startswith(b"HTTP/1.1 408 "), data
    assert time.monotonic() - started < 4 * TIMEOUT_S + 1


def test_a_body_that_does_not_come_gets_408(server: RunningService):
    head = http_request("POST", "/translate", {"Content-Type": "application/json", "Content-Length": "1000"})
    with socket.create_connection(("127.0.0.1", port_of(server))) as sock:
        sock.sendall(head + b'{"q": "A man')
        data, seconds = wait_for_close(sock, 5 * TIMEOUT_S)
    assert data.startswith(b"HTTP/1.1 408 "), data
    assert b"connection: close" in data.lower()
    assert seconds < 3 * TIMEOUT_S


# --- transfer codings ------------------------------------------------------------------------------------------


def chunked(coding: str, body: bytes) -> bytes:
    head = http_request("POST", "/translate", {"Content-Type": "application/json", "Transfer-Encoding": coding})
    return head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def test_a_chunked_body_is_read(server: RunningService):
    assert status(ask(server, chunked("chunked", json.dumps(ENGLISH).encode()))) == 200


@pytest.mark.parametrize("coding", ["gzip, chunked", "gzip", "identity", "deflate,chunked"])
def test_a_transfer_coding_other_than_chunked_gets_501(server: RunningService, coding: str):
    """Before: "gzip, chunked" was read as chunked, its gzip data taken for JSON."""
    assert "Transfer-Encoding" in error_of(ask(server, chunked(coding, json.dumps(ENGLISH).encode())), 501)


# --- file names ------------------------------------------------------------------------------------------------


def test_file_names_never_give_a_500_and_refused_uploads_leave_nothing(server: RunningService):
    found = file_names(server)
    statuses = found["statuses"]
    assert "500" not in statuses.values(), statuses
    assert statuses["upload 日本語.txt"] == statuses["download 日本語.txt"] == "200", statuses
    assert statuses["Content-Disposition 日本語.txt"] == (
        "attachment; filename=\"___.de.txt\"; filename*=UTF-8''%E6%97%A5%E6%9C%AC%E8%AA%9E.de.txt"
    )
    assert statuses["upload 300 characters"] == statuses["upload NUL byte"] == "400", statuses
    assert statuses['Content-Disposition "'] == (
        "attachment; filename=\"say _hi_.de.txt\"; filename*=UTF-8''say%20%22hi%22.de.txt"
    )
    for case in ("5,000-character name", "5,000-character token", "no token", "NUL byte"):
        assert statuses[f"download {case}"] == "404", statuses
    assert found["refused_uploads"] == 2 and found["folders_left_by_refused_uploads"] == 0, found


@pytest.mark.parametrize("name", [b"C:\\\\Users\\\\me\\\\story.txt", b"../../story.txt"])
def test_an_uploaded_name_keeps_its_last_path_part(server: RunningService, name: bytes):
    reply = ask(server, multipart_file(name))
    assert status(reply) == 200, reply
    assert json.loads(reply.body)["translatedFileUrl"].endswith("/story.de.txt")  # named as the CLI names it


# --- the event loop: markup and repeated parameters -----------------------------------------------------------


def test_nested_markup_is_refused_at_once_and_does_not_stall_the_worker(server: RunningService):
    """Parsing deeply nested markup is quadratic in the depth: refused at once, it holds no worker's loop."""
    markup = json_request("/translate", {**ENGLISH, "q": NESTED_MARKUP, "format": "html"})
    found = stall(port_of(server), markup, clients=4, seconds=3)
    assert found["hostile"]["got"].keys() == {"400"}, found
    assert found["hostile"]["median_s"] <= 0.3, found
    assert found["health_ms_meanwhile"]["p90"] <= 250, found


def test_repeated_query_parameters_are_refused_at_once_and_do_not_stall_the_worker(server: RunningService):
    """21,000 q= (merging them would rebuild the list at every repeat)."""
    found = stall(port_of(server), http_request("POST", f"/translate?{REPEATED_Q}&source=en&target=de"), 4, 3)
    assert found["hostile"]["got"].keys() == {"400"}, found
    assert found["hostile"]["median_s"] <= 0.1, found
    assert found["health_ms_meanwhile"]["p90"] <= 250, found


def test_repeated_parameters_are_refused_before_their_key_is_read(keyed: RunningService):
    """Like a body over the size limit: the key may be among them, so the 400 comes before any 403."""
    started = time.perf_counter()
    message = error_of(ask(keyed, http_request("POST", f"/translate?{REPEATED_Q}&api_key={KEY}")), 400)
    assert time.perf_counter() - started <= 0.1
    assert "more than 1000 query parameters" in message
    error_of(ask(keyed, http_request("POST", f"/translate?{REPEATED_Q}&source=en&target=de")), 400)


# --- bodies: UTF-8, and 413 before 403 ---------------------------------------------------------------------------


FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.mark.parametrize(
    "headers,body,says",
    [
        pytest.param(FORM, "q=Caf\xe9&source=en&target=de".encode("latin-1"), "UTF-8", id="latin-1-form"),
        pytest.param(FORM, b"q=Caf%E9&source=en&target=de", "UTF-8", id="latin-1-percent-encoded-form"),
        pytest.param({"Content-Type": "application/json"}, json.dumps(ENGLISH).encode("utf-16"), "UTF-8",
                     id="utf-16-json"),
        # without a byte order mark, UTF-16 of ASCII is UTF-8 with a NUL after each character: not JSON
        pytest.param({"Content-Type": "application/json; charset=utf-16"}, json.dumps(ENGLISH).encode("utf-16-le"),
                     "malformed JSON", id="utf-16-le-json"),
    ],
)
def test_a_body_that_is_not_utf8_gets_400(server: RunningService, headers: dict, body: bytes, says: str):
    """Before: 200, the text read as latin-1 or UTF-16."""
    assert says in error_of(ask(server, http_request("POST", "/translate", headers, body)), 400)


def test_a_multipart_field_that_is_not_utf8_gets_400(server: RunningService):
    assert "UTF-8" in error_of(ask(server, multipart_file(b"story.txt", source="en\xe9".encode("latin-1"))), 400)
    assert "UTF-8" in error_of(ask(server, multipart_file("Caf\xe9.txt".encode("latin-1"))), 400)


@pytest.mark.parametrize(
    "headers,body",
    [
        pytest.param(FORM, b"q=Caf%C3%A9 au lait.&source=en&target=de", id="utf-8-form"),
        pytest.param({"Content-Type": "application/json"}, json.dumps(ENGLISH).encode("utf-8-sig"), id="json-bom"),
    ],
)
def test_a_utf8_body_is_read(server: RunningService, headers: dict, body: bytes):
    assert status(ask(server, http_request("POST", "/translate", headers, body))) == 200


def test_an_oversized_body_gets_413_before_its_key_is_checked(keyed: RunningService):
    """The key may be in the body, which is not read: 413 comes first (as README.md says)."""
    head = http_request("POST", "/translate", {"Content-Type": "application/json", "Content-Length": "10000000"})
    error_of(ask(keyed, head), 413)
    error_of(ask(keyed, json_request("/translate", ENGLISH)), 403)


def test_of_two_api_keys_in_json_the_last_counts(keyed: RunningService):
    """As README.md says: Python's json keeps the last of a key given twice, api_key too."""
    text = json.dumps(ENGLISH)[:-1]
    accepted = f'{text}, "api_key": "wrong", "api_key": "{KEY}"}}'.encode()
    refused = f'{text}, "api_key": "{KEY}", "api_key": "wrong"}}'.encode()
    json_type = {"Content-Type": "application/json"}
    assert status(ask(keyed, http_request("POST", "/translate", json_type, accepted))) == 200
    error_of(ask(keyed, http_request("POST", "/translate", json_type, refused)), 403)


# --- keep-alive connections when the service stops -----------------------------------------------------------


@pytest.mark.parametrize("stop", [sigterm, engine_death], ids=["sigterm", "engine-death"])
def test_no_request_on_a_keep_alive_connection_goes_unanswered_when_the_service_stops(
    tiny_model_dir: Path, tmp_path: Path, stop
):
    """Before: 16 requests on reused connections got a reset or EOF, and 146-212 answers of 503 went out without
    Connection: close."""
    with running_service(tiny_model_dir, tmp_path / "service.log", http_workers=2, threads=1, drain_seconds=2,
                         log_level="warning") as service:
        found = keep_alive_through(service, stop(service), clients=8)
    assert found["exit_code"] == (0 if stop is sigterm else 1), found
    assert found["reused_unanswered"] == 0 and found["unclosed_503"] == 0, found
    assert found["answers"].get("503", 0) > 0, f"nothing was answered while stopping: a weak test: {found}"


# --- the temporary folder ----------------------------------------------------------------------------------------


def test_a_failed_bind_leaves_no_temporary_folder(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            Supervisor(Settings(host="127.0.0.1", port=taken.getsockname()[1]))
    assert list(tmp_path.iterdir()) == []


def test_translated_file_urls_come_from_the_public_url_or_an_allowed_host():
    """A client's Host header names where download links point only when that host is allowed."""
    from starlette.requests import Request

    from service.settings import Settings
    from service.worker.routes.files import public_base

    def request(host: str) -> Request:
        return Request({"type": "http", "scheme": "http", "server": ("127.0.0.1", 8000), "path": "/translate_file",
                        "root_path": "", "headers": [(b"host", host.encode())], "query_string": b""})

    defaults = Settings(_env_file=None)
    assert public_base(request("localhost:8000"), defaults) == "http://localhost:8000/"
    assert public_base(request("evil.example"), defaults) == "http://127.0.0.1:8000/"
    public = Settings(_env_file=None, public_url="https://translate.example.org/base")
    assert public_base(request("evil.example"), public) == "https://translate.example.org/base/"
    anyone = Settings(_env_file=None, allowed_hosts="*")
    assert public_base(request("other.example:81"), anyone) == "http://other.example:81/"


# --- work that ends with its answer; a document admitted as one unit --------------------------------------------


class Recording:
    """An engine that echoes each sentence and records whether each call was bulk work."""

    def __init__(self, pairs) -> None:
        from service.protocol import Phase

        self.pairs, self.phase, self.calls = pairs, Phase.READY, []

    async def translate(self, pair, sentences, opts, bulk=False):
        from core.search import Hypothesis

        self.calls.append(bulk)
        return [[Hypothesis(ids[:-1], 0.0)] * opts.n_best for ids in sentences]


def test_a_documents_requests_go_to_the_engine_as_bulk_work_and_a_requests_do_not(tiny_model_dir: Path):
    """A document's internal requests are bulk work (the engine admits them after interactive work, and never
    refuses them for the document's own requests waiting ahead: tests/test_admission.py); a request is not."""
    from service.metrics import Metrics
    from service.protocol import PairInfo
    from service.settings import Settings
    from service.worker.app import pipeline_for
    from service.worker.schemas import TranslateRequest

    engine = Recording([PairInfo("en", "de", str(tiny_model_dir), "stand-in", "fp32")])
    pipeline = pipeline_for(engine, Settings(), Metrics())
    asyncio.run(pipeline.translate_document([f"Sentence number {n}." for n in range(40)], "en", "de"))
    assert engine.calls and all(engine.calls)
    engine.calls.clear()
    asyncio.run(pipeline.translate(TranslateRequest(q="A dog runs.", source="en", target="de")))
    assert engine.calls == [False]


def test_the_first_error_cancels_the_other_parts_of_a_request():
    """A document's other internal requests are cancelled when one fails (their sentences leave the engine)."""
    from service.worker.pipeline import all_or_none

    cancelled = []

    async def part(fails: bool) -> None:
        try:
            await asyncio.sleep(0.01 if fails else 10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        raise RuntimeError("refused")

    async def main() -> float:
        started = time.monotonic()
        with pytest.raises(RuntimeError):
            await all_or_none([part(False), part(True), part(False)])
        await asyncio.sleep(0)  # the cancellations are delivered at the tasks' next step
        return time.monotonic() - started

    assert asyncio.run(main()) < 1 and len(cancelled) == 2


# --- documents: bombs, uploads at once, clients that leave ----------------------------------------------------


def test_document_bombs_are_refused_or_read_within_a_workers_memory(server: RunningService):
    """Before: a 60 KB .docx raised its worker by 3 GB, a 4 KB .epub naming its chapter four times by 1 GB, 4 MB of
    <br> by 640 MB."""
    cases = ("docx of 40 MiB of empty paragraphs", "epub naming a 2 MB chapter four times", "html of 4 MB of <br>")
    found = bombs(server, hang_up_s=3, settle_s=2, cases=cases)
    docx, epub, html = (found[case] for case in cases)
    assert docx["got"] == html["got"] == "413", found
    assert epub["got"] in ("200", "unfinished (hung up)"), found  # within the limits: translated
    for case in (docx, epub, html):
        assert case["worker_rss_growth_mib"] <= 100 and case["worker_rss_2s_after_over_idle_mib"] <= 50, found
        assert case["engine_idle_after_s"] <= 2, found


def test_epubs_odts_and_odps_past_their_node_limits_are_refused_within_a_workers_memory(server: RunningService):
    """With the default limits. Before: an .epub of as many paragraphs as the package's element limit let through
    grew a worker by hundreds of MiB, and an .odt or .odp near that limit past the goal."""
    cases = tuple(case for case in BOMBS if case.startswith(("epub of", "odt of", "odp of")) and "past the" in case)
    # each is answered once read, which may wait for the documents before it: its client waits
    found = bombs(server, hang_up_s=30, settle_s=2, cases=cases)
    assert {name: case["got"] for name, case in found.items()} == dict.fromkeys(cases, "413")
    for name, case in found.items():
        assert case["worker_rss_growth_mib"] <= 100 and case["worker_rss_2s_after_over_idle_mib"] <= 50, (name, case)


def test_a_sentence_stays_fast_while_clients_upload_documents(tiny_model_dir: Path, tmp_path: Path):
    """Documents are bulk work: a probe's sentence goes before them and is never refused for them, and they are
    never shed for waiting (here past a queue deadline of 1 s, so that a document taken for interactive work would
    be answered 503, and the probe refused behind it)."""
    with running_service(tiny_model_dir, tmp_path / "service.log", http_workers=1, threads=1, log_level="warning",
                         max_queue_wait_s=1) as service:
        found = uploads_and_probe(service, clients=10, megabytes=0.2, seconds=5, settle_s=2)
    assert found["probe"]["got"] == {"200": found["probe"]["count"]}, found
    assert found["probe"]["p99_s"] <= 1, found
    assert "503" not in found["uploads"], found
    assert found["engine_idle_after_hang_up_s"] <= 2, found
    assert found["worker_rss_2s_after_over_idle_mib"] <= 50, found


def test_a_paragraph_of_a_megabyte_does_not_hold_the_event_loop(server: RunningService):
    """A document's text is split and tokenized off the event loop. Before: a paragraph of 1 MB held it for
    seconds, and every other request of the worker waited."""
    found = uploads_and_probe(server, clients=1, megabytes=1.0, seconds=5, settle_s=0, one_line=True)
    assert found["probe"]["got"] == {"200": found["probe"]["count"]}, found
    assert found["probe"]["max_s"] <= 1, found


def test_the_engine_is_idle_soon_after_documents_are_refused_or_their_clients_leave(
    server: RunningService, tiny_model_dir: Path, tmp_path: Path
):
    """Their sentences leave the engine at its next step."""
    left = refused_documents(server, count=4, megabytes=0.3, hang_up_s=3)
    assert left["got"] == {"unfinished (hung up)": 4}, left
    assert left["engine_idle_after_last_answer_or_hang_up_s"] <= 2, left
    with running_service(tiny_model_dir, tmp_path / "service.log", http_workers=1, threads=1, log_level="warning",
                         **QUEUE_THAT_REFUSES) as refusing:
        refused = refused_documents(refusing, count=8, megabytes=0.3, hang_up_s=10)
    assert refused["got"].get("503", 0) >= 4, refused
    assert refused["engine_idle_after_last_answer_or_hang_up_s"] <= 2, refused


def test_the_memory_of_documents_goes_back_once_the_last_one_is_answered(monkeypatch):
    """glibc's free pages go back to the system when a worker holds no document any more, not before."""
    from service.worker.documents import Limits
    from service.worker.documents import translate as documents

    released, both_read = [], asyncio.Event()
    monkeypatch.setattr(documents, "trim_malloc", lambda: released.append(documents.HELD.count))

    async def translate_texts(texts: list[str]) -> list[str]:
        if documents.HELD.count == 2:
            both_read.set()
        await both_read.wait()  # the two documents are held at once
        return [text.upper() for text in texts]

    async def main() -> list[bytes]:
        limits = Limits(chars=1000, nodes=1000, html_nodes=1000)
        first = documents.translate_file(b"A man is riding.\n", ".txt", limits, translate_texts, "de")
        second = documents.translate_file(b"A dog runs.\n", ".txt", limits, translate_texts, "de")
        return await asyncio.gather(first, second)

    assert asyncio.run(main()) == [b"A MAN IS RIDING.\n", b"A DOG RUNS.\n"]
    documents.READING.submit(lambda: None).result()  # what was queued in the thread has run
    assert released == [0]


def test_documents_waiting_for_their_turn_are_not_read_yet(monkeypatch):
    """A worker reads, translates and writes TRANSLATOR_DOCUMENTS_AT_ONCE documents at once: the others hold their
    bytes only, never a parsed tree (50 uploads of a 1 MB document used to be parsed, and held, at once)."""
    from service.worker.documents import Limits
    from service.worker.documents import translate as documents

    reads, read_while_translating, first_translating = [], [], asyncio.Event()
    read = documents.read
    monkeypatch.setattr(documents, "read", lambda data, *rest: reads.append(data) or read(data, *rest))

    async def translate_texts(texts: list[str]) -> list[str]:
        first_translating.set()
        await asyncio.sleep(0.2)
        read_while_translating.append(len(reads))
        return texts

    async def main() -> None:
        turn, limits = asyncio.Semaphore(1), Limits(chars=1000, nodes=1000, html_nodes=1000)
        first = asyncio.ensure_future(documents.translate_file(b"One.\n", ".txt", limits, translate_texts, "de", turn))
        await first_translating.wait()
        await asyncio.gather(first, documents.translate_file(b"Two.\n", ".txt", limits, translate_texts, "de", turn))

    asyncio.run(main())
    assert read_while_translating == [1, 2], read_while_translating  # the second waited for its turn unread
    assert reads == [b"One.\n", b"Two.\n"]
