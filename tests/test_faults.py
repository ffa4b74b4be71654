"""Faults and abuse, over a real socket: `python -m service` in a subprocess, spoken to with httpx and raw sockets.

Every probe of the robustness issue gets a clear 4xx {"error": message} (never a 500) and the service keeps serving;
clients that hang up are counted as 499 and cost no more work; SIGTERM answers every accepted request (200 or 503
with Retry-After) and exits 0; the memory a heavy request took is given back once idle.

The probes run on the tiny random model (conftest.tiny_model_dir); what needs realistic time and memory (abandoned
work, shutdown with a backlog, memory) runs the shipped model in models/en-de on one thread.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from client import JSON, TIMEOUT, assert_error, body, metrics, translate, wait_until

from service.launch import RunningService, running_service

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "models" / "en-de"
BODY_LIMIT = 300_000  # TRANSLATOR_MAX_BODY_BYTES of the probed server: a 100,000-deep JSON body (200 kB) fits
WORK_LIMIT = 10_000  # TRANSLATOR_MAX_REQUEST_WORK of the probed server

SENTENCES = [
    "A man is riding a bicycle.",
    "Two dogs are running on the green grass.",
    "The cat sleeps on the sofa.",
    "A girl in a red dress is dancing.",
    "People are fixing the roof of a house.",
    "She drinks hot tea in the kitchen.",
    "Five people stand in the snow.",
    "A woman with a large purse is walking by a gate.",
    "The children play outside with a ball.",
    "Where is the station?",
    "My brother is very tall.",
    "A boy jumps into the lake.",
    "An old man reads a newspaper on a bench.",
    "We are reading a book together.",
    "A dog catches a red frisbee.",
    "Workers build a wall of bricks.",
]
SIXTY_FOUR = " ".join(SENTENCES * 4)  # 64 sentences in one text
# 64 sentences of two clauses each: about twice the cache a row of SIXTY_FOUR's holds
SIXTY_FOUR_LONG = " ".join(f"{first[:-1]}, and {second[0].lower()}{second[1:]}"
                           for first, second in zip(SENTENCES * 4, (SENTENCES[1:] + SENTENCES[:1]) * 4))


# --- talking to a server --------------------------------------------------------------------------------


def port_of(service: RunningService) -> int:
    return int(service.url.rsplit(":", 1)[1])


def http_head(path: str, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    return "\r\n".join(lines).encode()


def json_head(path: str, length: int) -> bytes:
    return http_head(path, {"Content-Type": "application/json", "Content-Length": str(length)})


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length from a socket: status, headers (lower-case names), body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection without a full response: {data!r}"
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, value in (h.split(":", 1) for h in header_lines)}
    while len(rest) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection in the middle of its response"
        rest += chunk
    return int(status_line.split()[1]), headers, rest


def requests_by_status(url: str) -> dict[str, float]:
    """translator_requests_total by status, every pair's summed."""
    counts: dict[str, float] = {}
    for (name, labels), value in metrics(url).items():
        if name == "translator_requests_total":
            counts[dict(labels)["status"]] = counts.get(dict(labels)["status"], 0.0) + value
    return counts


def queue_depth(url: str) -> float:
    return sum(value for (name, _), value in metrics(url).items() if name == "translator_queue_depth")


def joined_sentences(url: str) -> float:
    """Sentences that joined a running batch so far."""
    return metrics(url).get(("translator_queue_wait_seconds_count", frozenset()), 0.0)


def decoder_steps(url: str) -> float:
    return sum(value for (name, _), value in metrics(url).items() if name == "translator_decoder_steps_total")


def submitted_sentences(url: str) -> float:
    """Sentences the batcher took in so far: those waiting and those that went into a batch."""
    samples = metrics(url)
    started = samples.get(("translator_queue_wait_seconds_count", frozenset()), 0.0)
    return started + sum(value for (name, _), value in samples.items() if name == "translator_queue_depth")


def resident_bytes(pid: int) -> int:
    """VmRSS of a process, from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def children(pid: int) -> list[int]:
    return [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]


def engine_process(pid: int) -> int:
    """The process of `python -m service` (pid) that runs the models: the one that maps ONNX Runtime's library."""
    for candidate in [pid, *children(pid)]:
        if "onnxruntime" in Path(f"/proc/{candidate}/maps").read_text():
            return candidate
    raise AssertionError(f"no process of {pid} has loaded ONNX Runtime")


# --- servers --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path, tmp_path_factory) -> Iterator[RunningService]:
    """The tiny model, with a smaller body limit and work budget than the defaults."""
    log = tmp_path_factory.mktemp("faults") / "service.log"
    settings = {"max_body_bytes": BODY_LIMIT, "max_request_work": WORK_LIMIT, "log_level": "warning"}
    with running_service(tiny_model_dir, log, threads=1, **settings) as service:
        yield service


@pytest.fixture(scope="module")
def waiting_server(tiny_model_dir: Path, tmp_path_factory) -> Iterator[RunningService]:
    """The tiny model, with batches that wait 2 s to fill: a request stays in flight long enough to hang up on."""
    log = tmp_path_factory.mktemp("waiting") / "service.log"
    with running_service(tiny_model_dir, log, threads=1, max_wait_ms=2000, log_level="warning") as service:
        yield service


# --- probes: each gets a 4xx {"error"}, never a 500 -----------------------------------------------------

TRANSLATE_PROBES = [
    pytest.param(b'{"q": "\\ud800", "source": "en", "target": "de"}', id="lone-surrogate-in-q"),
    pytest.param(b'{"q": ["Hello.", "\\udfff"], "source": "en", "target": "de"}', id="lone-surrogate-in-a-list"),
    pytest.param(b'{"q": "Hello.", "source": "\\ud800", "target": "de"}', id="lone-surrogate-in-source"),
    pytest.param(b'{"q": "Hello.", "source": "en", "target": "\\ud800"}', id="lone-surrogate-in-target"),
    pytest.param(b'{"q": "\xed\xa0\x80", "source": "en", "target": "de"}', id="surrogate-as-utf8-bytes"),
    pytest.param(b'{"q": "\xff\xfe Hello", "source": "en", "target": "de"}', id="invalid-utf8"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, id="nested-100000-deep"),
    pytest.param(b'{"q": ' + b"[" * 100_000 + b"]" * 100_000 + b', "target": "de"}', id="q-nested-100000-deep"),
    pytest.param(b'{"q": "Hello.", "target": "de", "alternatives": ' + b"7" * 5000 + b"}", id="5000-digit-int"),
    pytest.param(b"1" * 5000, id="5000-digit-body"),
    pytest.param(b'{"q": "Hello.", "target": "de", "alternatives": 1' + b"0" * 4000 + b"}", id="4001-digit-int"),
    pytest.param(b'{"q": "Hello.", "target": "de", "beam_size": 1e999}', id="infinite-float"),
    pytest.param(b'{"q": "Hello.", "target": "de", "alternatives": NaN}', id="nan"),
    pytest.param(b'{"q": "Hello.", "target": "de", "beam_size": 1000000000000000000000}', id="huge-beam"),
    pytest.param(b'{"q": "Hello\x01 world.", "target": "de"}', id="raw-control-character-in-json"),
    pytest.param(b'{"q": 5, "target": "de"}', id="q-a-number"),
    pytest.param(b'{"q": {"text": "Hello."}, "target": "de"}', id="q-an-object"),
    pytest.param(b'{"q": ["Hello.", null], "target": "de"}', id="q-list-with-null"),
    pytest.param(b'{"q": [["Hello."]], "target": "de"}', id="q-nested-list"),
    pytest.param(b'{"q": "Hello.", "target": ["de"]}', id="target-a-list"),
    pytest.param(b'{"q": "Hello.", "target": "de", "beam_size": "x"}', id="beam-a-string"),
    pytest.param(b'{"q": "Hello.", "target": "de", "beam_size": 0}', id="beam-zero"),
    pytest.param(b'{"q": "Hello.", "target": "de", "max_length": 0}', id="max-length-zero"),
    pytest.param(b'{"q": "Hello.", "target": "de", "format": 5}', id="format-a-number"),
    pytest.param(b'"Hello."', id="body-a-string"),
    pytest.param(b"null", id="body-null"),
    pytest.param(b"", id="empty-body"),
]


@pytest.mark.parametrize("content", TRANSLATE_PROBES)
def test_a_translate_probe_gets_400_and_an_error(server: RunningService, content: bytes):
    assert_error(httpx.post(server.url + "/translate", content=content, headers=JSON, timeout=TIMEOUT), 400)


DETECT_PROBES = [
    pytest.param(b'{"q": "\\ud800"}', id="lone-surrogate"),
    pytest.param(b'{"q": "\xff\xfe"}', id="invalid-utf8"),
    pytest.param(b'{"q": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", id="nested-100000-deep"),
    pytest.param(b'{"q": ' + b"9" * 5000 + b"}", id="5000-digit-int"),
]


@pytest.mark.parametrize("content", DETECT_PROBES)
def test_a_detect_probe_gets_400_and_an_error(server: RunningService, content: bytes):
    assert_error(httpx.post(server.url + "/detect", content=content, headers=JSON, timeout=TIMEOUT), 400)


# Read as LibreTranslate reads them (tests/test_libretranslate.py): text with nothing to translate comes back as it
# came, a null source is auto, negative alternatives none, and /detect takes a list.
ANSWERED_PROBES = [
    pytest.param({"q": "\u200b\u200c\u200d\ufeff\u2060", "target": "de"}, "\u200b\u200c\u200d\ufeff\u2060",
                 id="zero-width-only"),
    pytest.param({"q": "\u0000\u0001\u0007\u001b\u007f", "target": "de"}, "\u0000\u0001\u0007\u001b\u007f",
                 id="control-characters-only"),
    pytest.param({"q": "\u200b\u200b", "source": None, "target": "de"}, "\u200b\u200b", id="source-null"),
    pytest.param({"q": "\u200b", "target": "de", "alternatives": -1}, "\u200b", id="negative-alternatives"),
]


@pytest.mark.parametrize(("fields", "answer"), ANSWERED_PROBES)
def test_a_probe_libretranslate_answers_gets_its_answer(server: RunningService, fields: dict, answer: str):
    response = httpx.post(server.url + "/translate", json=fields, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert response.json()["translatedText"] == answer and "alternatives" not in response.json()


@pytest.mark.parametrize("q", ["\u200b\u200d\ufeff", "\u0000\u0007", ["\u200b", " "]])
def test_detect_of_nothing_to_detect_is_libretranslates_answer(server: RunningService, q: str | list[str]):
    response = httpx.post(server.url + "/detect", json={"q": q}, timeout=TIMEOUT)
    assert response.status_code == 200 and response.json() == [{"confidence": 0.0, "language": "en"}]


def test_form_and_query_probes_get_400(server: RunningService):
    url = server.url + "/translate"
    zero_width = {"q": "\u200b\u200c", "source": "en", "target": "de"}
    for where in ("data", "params"):  # nothing to translate: given back as it came
        answer = httpx.post(url, **{where: zero_width}, timeout=TIMEOUT)
        assert answer.status_code == 200 and answer.json()["translatedText"] == "\u200b\u200c", answer.text
    assert_error(httpx.post(url, params={"q": "Hello.", "target": "de", "alternatives": "x"}, timeout=TIMEOUT), 400)
    text = httpx.post(url, content=b"q=Hello.&target=de", headers={"content-type": "text/plain"}, timeout=TIMEOUT)
    assert "Content-Type" in assert_error(text, 400)


@pytest.mark.parametrize("content_type", ["Application/JSON", "application/json; charset=utf-8", "APPLICATION/JSON"])
def test_json_content_types_are_accepted(server: RunningService, content_type: str):
    content = json.dumps(body("Hello.")).encode()
    response = httpx.post(server.url + "/translate", content=content, headers={"content-type": content_type},
                          timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert response.json()["translatedText"] == translate(server.url, "Hello.")


def test_nfd_text_is_translated_like_its_nfc_form(server: RunningService):
    nfc = "Ein Mädchen fährt über die Brücke. Café in Zürich."
    nfd = unicodedata.normalize("NFD", nfc)
    assert nfd != nfc and len(nfd) > len(nfc)
    assert translate(server.url, nfd) == translate(server.url, nfc)
    assert translate(server.url, [nfd, nfc]) == [translate(server.url, nfc)] * 2


def test_invisible_and_control_characters_are_cleaned_before_translating(server: RunningService):
    assert translate(server.url, "A man\u200b is rid\u200ding a bi\ufeffcycle.") == translate(server.url, SENTENCES[0])
    assert translate(server.url, "A man is\x00riding a\x07bicycle.") == translate(server.url, SENTENCES[0])
    assert translate(server.url, SENTENCES[0]) != translate(server.url, SENTENCES[1]), "a weak test"


def test_a_large_max_length_is_capped_not_an_error(server: RunningService):
    assert translate(server.url, "Hello.", max_length=10**30) == translate(server.url, "Hello.")


def test_a_request_over_the_work_budget_gets_400_naming_the_limit(server: RunningService):
    url = server.url + "/translate"
    message = assert_error(httpx.post(url, json=body(SIXTY_FOUR, beam_size=8), timeout=TIMEOUT), 400)
    assert f"the limit is {WORK_LIMIT}" in message, message
    assert translate(server.url, SENTENCES[1], beam_size=8)  # one sentence with the same beam is within it


# --- bodies over the limit: 413 ---------------------------------------------------------------------------


def test_a_body_over_the_limit_gets_413_before_it_is_read(server: RunningService):
    """The Content-Length says 10 MB; only 1 kB is sent, and the 413 comes all the same."""
    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=10) as sock:
        sock.sendall(json_head("/translate", 10_000_000) + b'{"q": "' + b"a" * 1000)
        status, headers, content = read_response(sock)
    assert status == 413 and headers["content-type"].startswith("application/json")
    assert str(BODY_LIMIT) in json.loads(content)["error"]


def test_a_chunked_body_over_the_limit_gets_413_without_waiting_for_its_end(server: RunningService):
    """No Content-Length: chunks past the limit, the last chunk never sent; the 413 comes all the same."""
    head = http_head("/translate", {"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    chunk = b"a" * 16_384
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(BODY_LIMIT // len(chunk) + 2))
    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=10) as sock:
        sock.sendall(head + b'5\r\n{"q":\r\n' + chunks)
        status, headers, content = read_response(sock)
    assert status == 413 and headers["content-type"].startswith("application/json")
    assert str(BODY_LIMIT) in json.loads(content)["error"]


def test_a_body_just_under_the_limit_is_read(server: RunningService):
    """The limit is the limit: a JSON body of exactly BODY_LIMIT bytes is read and translated."""
    content = json.dumps(body("Hello.", padding="x")).encode()
    content = content.replace(b'"x"', b'"' + b"x" * (BODY_LIMIT - len(content) + 1) + b'"')
    assert len(content) == BODY_LIMIT
    assert httpx.post(server.url + "/translate", content=content, headers=JSON, timeout=TIMEOUT).status_code == 200


# --- after every probe, the service still serves ----------------------------------------------------------


def test_the_service_still_serves_after_every_probe_at_once(server: RunningService):
    async def flood() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as client:
            probes = [client.post("/translate", content=p.values[0], headers=JSON) for p in TRANSLATE_PROBES]
            probes += [client.post("/detect", content=p.values[0], headers=JSON) for p in DETECT_PROBES]
            return await asyncio.gather(*probes)

    assert {r.status_code for r in asyncio.run(flood())} == {400}
    assert translate(server.url, SENTENCES[2])
    assert "Traceback" not in server.log.read_text(errors="replace"), server.log_tail(60)


# --- API keys: 403 before anything else is said about the request ---------------------------------------


def test_with_api_keys_a_malformed_body_without_a_key_gets_403(tiny_model_dir: Path, tmp_path: Path):
    with running_service(tiny_model_dir, tmp_path / "service.log", threads=1, api_keys="key-1") as service:
        url = service.url + "/translate"
        malformed = [probe.values[0] for probe in TRANSLATE_PROBES[:10]] + [b'{"q": "Hello.", "target": ']
        for content in malformed:
            assert_error(httpx.post(url, content=content, headers=JSON, timeout=TIMEOUT), 403)
            assert_error(httpx.post(url, params={"api_key": "key-2"}, content=content, headers=JSON,
                                    timeout=TIMEOUT), 403)
            assert_error(httpx.post(url, params={"api_key": "key-1"}, content=content, headers=JSON,
                                    timeout=TIMEOUT), 400)
        assert_error(httpx.post(service.url + "/detect", content=b'{"q": "\\ud800"}', headers=JSON,
                                timeout=TIMEOUT), 403)
        assert httpx.post(url, json=body("Hello.", api_key="key-1"), timeout=TIMEOUT).status_code == 200


# --- clients that hang up: counted as 499, never as 500 ------------------------------------------------


def test_a_client_that_hangs_up_while_its_request_waits_is_counted_499(waiting_server: RunningService):
    url = waiting_server.url
    before = requests_by_status(url)
    content = json.dumps(body(SENTENCES[0])).encode()
    with socket.create_connection(("127.0.0.1", port_of(waiting_server)), timeout=10) as sock:
        sock.sendall(json_head("/translate", len(content)) + content)
        wait_until(lambda: queue_depth(url) == 1, 10, "the request never queued")
    wait_until(lambda: requests_by_status(url).get("499", 0) == before.get("499", 0) + 1, 10, "499 not counted")
    assert requests_by_status(url).get("500", 0) == before.get("500", 0)
    assert queue_depth(url) == 0, "the abandoned sentence stayed in the queue"


def test_a_client_that_hangs_up_in_the_middle_of_its_body_is_counted_499(waiting_server: RunningService):
    """Content-Length 1000, 20 bytes sent, then the client is gone: a client that disconnects, not a server fault."""
    url = waiting_server.url
    before = requests_by_status(url)
    with socket.create_connection(("127.0.0.1", port_of(waiting_server)), timeout=10) as sock:
        sock.sendall(json_head("/translate", 1000) + b'{"q": "A man is rid')
        time.sleep(0.2)  # the request reaches the endpoint, which waits for the rest of the body

    def counted() -> bool:
        return sum(requests_by_status(url).values()) == sum(before.values()) + 1

    wait_until(counted, 10, "the request was never counted")
    after = requests_by_status(url)
    assert after.get("500", 0) == before.get("500", 0), f"a client that hung up was counted as a 500: {after}"
    assert after.get("499", 0) == before.get("499", 0) + 1, after


# --- abandoned work costs nothing: the shipped model ------------------------------------------------------


@pytest.fixture
def shipped_server(tmp_path: Path) -> Iterator[RunningService]:
    if not (SHIPPED / "config.json").exists():
        pytest.fail(f"the shipped model is missing: {SHIPPED} should hold config.json, spm.model and *.onnx")
    with running_service(SHIPPED, tmp_path / "service.log", threads=1, log_level="warning") as service:
        yield service


def test_the_work_of_16_abandoned_requests_is_not_done(shipped_server: RunningService):
    """16 clients each send 64 sentences with beam 4 and hang up at once (bench.serving.probes measures the next
    request's wait). Nobody waits for that work, so it must not be done: few of the sentences ever join the running
    batch, and the decoder runs a fraction of the steps the work takes."""
    url = shipped_server.url
    expected = translate(url, "The cat sleeps on the sofa.")
    before, joined_before, steps_before = requests_by_status(url), joined_sentences(url), decoder_steps(url)
    content = json.dumps(body(SIXTY_FOUR, beam_size=4)).encode()
    sockets = [socket.create_connection(("127.0.0.1", port_of(shipped_server)), timeout=10) for _ in range(16)]
    for sock in sockets:
        sock.sendall(json_head("/translate", len(content)) + content)
    for sock in sockets:
        sock.close()

    assert translate(url, "The cat sleeps on the sofa.") == expected
    wait_until(lambda: queue_depth(url) == 0, 10, "the abandoned sentences stayed in the queue")
    wait_until(lambda: sum(requests_by_status(url).values()) == sum(before.values()) + 17, 10, "requests uncounted")
    after = requests_by_status(url)
    assert after.get("499", 0) - before.get("499", 0) == 16, after
    assert after.get("500", 0) == before.get("500", 0), after
    joined, steps = joined_sentences(url) - joined_before, decoder_steps(url) - steps_before
    assert joined <= 2 * 72 + 1, f"{joined} of the 1,025 sentences joined the batch"  # a full batch: 64 + 8 places
    assert steps <= 60, f"{steps} decoder steps ran"  # the whole work: 1,024 sentences / 64 places x ~15 steps


# --- memory: given back once idle -------------------------------------------------------------------------


def test_the_memory_of_a_heavy_request_is_given_back_once_idle(shipped_server: RunningService):
    pid, url = engine_process(shipped_server.process.pid), shipped_server.url
    time.sleep(2)  # past the first idle release (TRANSLATOR_RELEASE_MEMORY_AFTER_S, 1 s)
    idle = resident_bytes(pid)
    peak, stop = [idle], threading.Event()

    def watch() -> None:
        while not stop.wait(0.05):
            peak.append(resident_bytes(pid))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        response = httpx.post(url + "/translate", json=body(SIXTY_FOUR_LONG, beam_size=8, alternatives=3),
                              timeout=TIMEOUT)
    finally:
        stop.set()
        watcher.join()
    assert response.status_code == 200, response.text
    assert len(response.json()["alternatives"]) == 3

    mib = 1 << 20
    grown = max(peak) - idle
    back = idle + grown / 4  # given back: at most a quarter of the growth kept
    deadline, now = time.monotonic() + 10, resident_bytes(pid)
    while now > back and time.monotonic() < deadline:
        time.sleep(0.25)
        now = resident_bytes(pid)
    report = f"idle {idle / mib:.0f} MiB, peak {max(peak) / mib:.0f} MiB, then {now / mib:.0f} MiB"
    assert grown > 64 * mib, "the heavy request did not grow the process: a weak test; " + report
    assert now <= back, report


# --- shutdown: every accepted request answered, exit 0 ----------------------------------------------------


async def post_each(url: str, bodies: list[dict]) -> list[httpx.Response | Exception]:
    """POST every body to /translate at once, each on its own connection; an exception where there was no answer."""
    limits = httpx.Limits(max_connections=len(bodies))
    async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT, limits=limits) as client:
        return await asyncio.gather(*(client.post("/translate", json=b) for b in bodies), return_exceptions=True)


def assert_translated_or_503(response: httpx.Response | Exception, sentences: int) -> None:
    assert isinstance(response, httpx.Response), f"no answer: {response!r}"
    if response.status_code == 200:
        assert len(response.json()["translatedText"]) == sentences
    else:
        assert_error(response, 503)
        assert int(response.headers["retry-after"]) >= 1


def test_sigterm_with_a_backlog_answers_every_request_then_exits_0(tmp_path: Path):
    """Drain of 2 s: four single sentences (queued first) are translated in it, 24 requests of 32 sentences
    behind them (some 770 one-sentence batches) cannot be, and get 503 with Retry-After."""
    settings = {"threads": 1, "drain_seconds": 2, "max_batch_sentences": 1, "log_level": "warning"}
    with running_service(SHIPPED, tmp_path / "service.log", **settings) as service:
        url = service.url
        first = [body([s], beam_size=4) for s in SENTENCES[:4]]
        backlog = [body(SENTENCES * 2, beam_size=4) for _ in range(24)]

        async def terminate_with_a_backlog() -> tuple[list, list, httpx.Response | Exception]:
            early = asyncio.ensure_future(post_each(url, first))
            await asyncio.to_thread(wait_until, lambda: submitted_sentences(url) == 4, 10, "first not accepted")
            late = asyncio.ensure_future(post_each(url, backlog))
            total = 4 + 32 * len(backlog)
            await asyncio.to_thread(wait_until, lambda: submitted_sentences(url) == total, 30, "backlog not accepted")
            service.process.terminate()
            await asyncio.sleep(0.5)
            try:
                newcomer = await asyncio.to_thread(httpx.post, url + "/translate", json=body("Hi."), timeout=10)
            except (httpx.ConnectError, httpx.ReadError) as refused:  # refused, or reset from the closing backlog
                newcomer = refused
            return await early, await late, newcomer

        early, late, newcomer = asyncio.run(terminate_with_a_backlog())
        assert service.process.wait(60) == 0, service.log_tail()

    for response in early:
        assert_translated_or_503(response, 1)
    for response in late:
        assert_translated_or_503(response, 32)
    assert [r.status_code for r in early] == [200] * 4, "the drain did not finish the first requests"
    assert any(r.status_code == 503 for r in late), "the backlog was all translated in 2 s: a weak test"
    if isinstance(newcomer, httpx.Response):
        assert_error(newcomer, 503)
    else:
        assert isinstance(newcomer, (httpx.ConnectError, httpx.ReadError))


def test_sigterm_with_a_long_drain_translates_the_whole_backlog(tmp_path: Path):
    settings = {"threads": 1, "drain_seconds": 30, "max_batch_sentences": 2, "log_level": "warning"}
    with running_service(SHIPPED, tmp_path / "service.log", **settings) as service:
        url = service.url
        bodies = [body(SENTENCES[i:] + SENTENCES[:i], beam_size=4) for i in (0, 8, 4, 2)]

        async def terminate_with_a_backlog() -> tuple[list, float]:
            requests = asyncio.ensure_future(post_each(url, bodies))
            await asyncio.to_thread(wait_until, lambda: submitted_sentences(url) == 64, 10, "backlog not accepted")
            waiting = await asyncio.to_thread(queue_depth, url)
            service.process.terminate()
            return await requests, waiting

        responses, waiting = asyncio.run(terminate_with_a_backlog())
        assert service.process.wait(60) == 0, service.log_tail()
    assert waiting > 0, "the work was done before SIGTERM: a weak test"
    assert [r.status_code if isinstance(r, httpx.Response) else repr(r) for r in responses] == [200] * 4
    for request, response in zip(bodies, responses):
        assert len(response.json()["translatedText"]) == len(request["q"]) == 16
