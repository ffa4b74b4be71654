"""The translation service over a real socket: `python -m service` in a subprocess, spoken to with httpx.

Most tests run a tiny random model (conftest.tiny_model_dir), which translates into garbage that still
depends on the source; the tests of translation quality run the shipped model in models/en-de.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from client import JSON, TIMEOUT, assert_error, body, metrics, metrics_after, translate
from libretranslatepy import LibreTranslateAPI

from core.folder import EOS_ID, ModelConfig
from core.search import SearchOptions, StepPlan
from service.engine.admission import NEWCOMER_SHARE
from service.engine.batcher import Batcher
from service.engine.config import BatchLimits
from service.engine.engine import Engine, engine_config
from service.launch import RunningService, free_port, running_service
from service.metrics import Metrics
from service.settings import Settings
from service.testing import echo_model
from service.worker.app import create_app

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "models" / "en-de"

# Sixteen different sentences; the tiny model's translations of them all differ.
SENTENCES = [
    "A man is riding a bicycle.",
    "Two dogs are running on the green grass.",
    "The cat sleeps on the sofa.",
    "A girl in a red dress is dancing.",
    "People are fixing the roof of a house.",
    "She drinks hot tea.",
    "Five people stand in the snow.",
    "A woman with a large purse is walking by a gate.",
    "The children play outside.",
    "Where is the station?",
    "My brother is very tall.",
    "A boy jumps into the lake.",
    "An old man reads a newspaper on a bench.",
    "We are reading a book.",
    "A dog catches a ball.",
    "Workers build a wall of bricks.",
]


# --- talking to a server --------------------------------------------------------------------------------


async def post_all(url: str, bodies: list[dict]) -> list[httpx.Response]:
    """POST every body to /translate at once, each on its own connection."""
    limits = httpx.Limits(max_connections=len(bodies))
    async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT, limits=limits) as client:
        return await asyncio.gather(*(client.post("/translate", json=b) for b in bodies))


def sample(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    """The sum of the samples of `name` that have these labels (and any others: every pair's, say)."""
    wanted = frozenset(labels.items())
    return sum(value for (found, their), value in samples.items() if found == name and wanted <= their)


def run_load(url: str, sentences: list[str], concurrency: int, seconds: int, source: str = "en") -> dict:
    """The report of `python -m bench.serving.loadgen` (wrk), the sentences on its standard input."""
    command = [sys.executable, "-m", "bench.serving.loadgen", url, "--concurrency", str(concurrency)]
    command += ["--seconds", str(seconds), "--source", source]
    done = subprocess.run(command, cwd=REPO, input="\n".join(sentences), capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def wait_for_queue_depth(url: str, depth: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while sum(v for (name, _), v in metrics(url).items() if name == "translator_queue_depth") != depth:
        assert time.monotonic() < deadline, f"the queue never held {depth} sentences"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path, tmp_path_factory) -> Iterator[RunningService]:
    """The tiny model served with batches that wait up to 50 ms to fill."""
    log = tmp_path_factory.mktemp("server") / "service.log"
    with running_service(tiny_model_dir, log, threads=1, max_wait_ms=50, log_level="warning") as service:
        yield service


@pytest.fixture(scope="module")
def solo(server: RunningService) -> dict[str, str]:
    """Each of SENTENCES translated on its own, one request at a time."""
    translations = {s: translate(server.url, s) for s in SENTENCES}
    assert len(set(translations.values())) == len(SENTENCES), "translations do not differ: a weak test"
    return translations


@pytest.fixture(scope="module")
def shipped_server(tmp_path_factory) -> Iterator[RunningService]:
    if not (SHIPPED / "config.json").exists():
        pytest.fail(f"the shipped model is missing: {SHIPPED} should hold config.json, spm.model and *.onnx")
    log = tmp_path_factory.mktemp("shipped") / "service.log"
    with running_service(SHIPPED, log, threads=1, log_level="warning") as service:
        yield service


# --- translations ---------------------------------------------------------------------------------------


def test_shipped_model_translates_a_known_sentence(shipped_server: RunningService):
    german = translate(shipped_server.url, "A man is riding a bicycle.")
    assert "Mann" in german and "Fahrrad" in german, german


REAL_WORLD = [  # the examples: each span must come back exactly as written
    ("Visit https://example.com/docs/setup?lang=en&v=2 for the details.", ["https://example.com/docs/setup?lang=en&v=2"]),
    ("Please write to anna.schmidt@example.org if you need help.", ["anna.schmidt@example.org"]),
    ("Your order A-77321 has been shipped.", ["A-77321"]),
    ("I love this song 🎵 so much!", ["🎵"]),
    ("Thanks @maria_k, the file /etc/nginx/nginx.conf works! #devops 👍", ["@maria_k", "/etc/nginx/nginx.conf",
                                                                          "#devops", "👍"]),
]


def test_protected_spans_come_back_exactly_and_are_counted(shipped_server: RunningService):
    before = metrics(shipped_server.url)
    for text, spans in REAL_WORLD:
        german = translate(shipped_server.url, text)
        assert all(german.count(span) == 1 for span in spans), (text, german)
    after = metrics(shipped_server.url)
    counted = sum(sample(after, "translator_placeholders_total", how=how) -
                  sample(before, "translator_placeholders_total", how=how) for how in ("copied", "put_back"))
    assert counted == sum(len(spans) for _, spans in REAL_WORLD)


@pytest.mark.parametrize("text", ["https://example.com/a?b=c", "anna@example.org 👍", "😀👍"])
def test_a_text_of_spans_alone_comes_back_as_it_is(shipped_server: RunningService, text: str):
    assert translate(shipped_server.url, text) == text


def test_a_list_comes_back_in_order(server: RunningService):
    texts = [SENTENCES[3], "The cat sleeps. A dog runs!\n\nWhere is the station?", SENTENCES[0], SENTENCES[7]]
    assert translate(server.url, texts) == [translate(server.url, text) for text in texts]


def test_concurrent_requests_are_batched_and_each_gets_its_own_translation(
    server: RunningService, solo: dict[str, str]
):
    before = metrics(server.url)
    responses = asyncio.run(post_all(server.url, [body(s) for s in SENTENCES]))
    after = metrics_after(server.url, before, len(SENTENCES))

    assert [r.json()["translatedText"] for r in responses] == [solo[s] for s in SENTENCES]
    batches = sample(after, "translator_batch_size_count") - sample(before, "translator_batch_size_count")
    singles = sample(after, "translator_batch_size_bucket", le="1.0") - sample(
        before, "translator_batch_size_bucket", le="1.0"
    )
    assert batches - singles > 0, "no step decoded more than one sentence"
    steps = sample(after, "translator_decoder_steps_total") - sample(before, "translator_decoder_steps_total")
    produced = sample(after, "translator_output_tokens_total") - sample(before, "translator_output_tokens_total")
    assert steps < produced, "the sentences did not share their steps"


# --- bad input ------------------------------------------------------------------------------------------

BAD_REQUESTS = [
    pytest.param({"content": b'{"q": "Hello.", "target": ', "headers": JSON}, id="malformed-json"),
    pytest.param({"content": b"\xff\xfe", "headers": JSON}, id="not-utf8"),
    pytest.param({"json": ["Hello."]}, id="json-not-an-object"),
    pytest.param({"json": {"q": 5, "target": "de"}}, id="q-a-number"),
    pytest.param({"json": {"q": ["Hello.", 5], "target": "de"}}, id="q-list-with-a-number"),
    pytest.param({"json": {"q": "Hello."}}, id="no-target"),
    pytest.param({"json": body("Hello.", alternatives="two")}, id="alternatives-a-string"),
    pytest.param({"data": {"q": "Hello.", "source": "en"}}, id="form-without-target"),
    pytest.param({"json": body("")}, id="empty-q"),
    pytest.param({"json": body([])}, id="empty-list"),
    pytest.param({"json": body("Hello.", target="xx")}, id="unknown-target"),
    pytest.param({"json": body("Hello.", source="fr")}, id="unknown-source"),
    pytest.param({"json": body("Hallo.", source="de", target="en")}, id="reversed-pair"),
    pytest.param({"json": body("a" * 5001)}, id="over-max-chars"),
    pytest.param({"json": body("Je voudrais réserver une table pour deux personnes ce soir.", source="auto")},
                 id="unserved-language-with-auto"),
    pytest.param({"json": body("Hello.", format="xml")}, id="unknown-format"),
    pytest.param({"json": body("Hello.", beam_size=9)}, id="beam-too-large"),
    pytest.param({"json": body("Hello.", alternatives=4)}, id="too-many-alternatives"),
]


@pytest.mark.parametrize("request_args", BAD_REQUESTS)
def test_bad_input_gets_400_and_an_error(server: RunningService, request_args: dict):
    assert_error(httpx.post(server.url + "/translate", timeout=TIMEOUT, **request_args), 400)


def test_an_unserved_language_is_named_and_a_short_text_is_never_refused_for_it(server: RunningService):
    response = httpx.post(server.url + "/translate", json=body("Je voudrais une table ce soir.", source="auto"),
                          timeout=TIMEOUT)
    assert response.status_code == 400 and "French (fr)" in response.json()["error"]
    assert httpx.post(server.url + "/translate", json=body("Merci !", source="auto"), timeout=TIMEOUT).is_success


def test_a_sentence_longer_than_the_sentence_bound_is_translated_in_parts(server: RunningService):
    """300 words, no clause boundary: split between words (TRANSLATOR_SPLIT_TOKENS), never refused."""
    response = httpx.post(server.url + "/translate", json=body(" ".join(["word"] * 300)), timeout=TIMEOUT)
    assert response.status_code == 200 and response.json()["translatedText"].strip()


def test_the_server_still_serves_after_bad_input(server: RunningService, solo: dict[str, str]):
    async def flood() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as client:
            bad = [client.post("/translate", **p.values[0]) for p in BAD_REQUESTS]
            return await asyncio.gather(*bad)

    assert {r.status_code for r in asyncio.run(flood())} == {400}
    assert translate(server.url, SENTENCES[1]) == solo[SENTENCES[1]]


def test_api_keys_are_required_when_set(tiny_model_dir: Path, tmp_path: Path):
    with running_service(tiny_model_dir, tmp_path / "service.log", threads=1, api_keys="key-1, key-2") as service:
        url = service.url + "/translate"
        assert_error(httpx.post(url, json=body("Hello."), timeout=TIMEOUT), 403)
        assert_error(httpx.post(url, json=body("Hello.", api_key="key-3"), timeout=TIMEOUT), 403)
        assert httpx.post(url, json=body("Hello.", api_key="key-2"), timeout=TIMEOUT).status_code == 200
        assert LibreTranslateAPI(service.url, api_key="key-1").translate("Hello.", "en", "de")


def test_a_full_queue_answers_503_with_retry_after(tiny_model_dir: Path, tmp_path: Path):
    """Batches wait 2 s to fill, so the first four sentences stay queued and the fifth finds the queue full."""
    settings = {"threads": 1, "max_queue": 4, "max_wait_ms": 2000}
    with running_service(tiny_model_dir, tmp_path / "service.log", **settings) as service:

        async def overflow() -> tuple[list[httpx.Response], httpx.Response]:
            async with httpx.AsyncClient(base_url=service.url, timeout=TIMEOUT) as client:
                queued = [asyncio.create_task(client.post("/translate", json=body(s))) for s in SENTENCES[:4]]
                await asyncio.to_thread(wait_for_queue_depth, service.url, 4)
                refused = await client.post("/translate", json=body(SENTENCES[4]))
                return await asyncio.gather(*queued), refused

        queued, refused = asyncio.run(overflow())
        assert_error(refused, 503)
        assert int(refused.headers["retry-after"]) >= 1
        assert [r.status_code for r in queued] == [200] * 4
        assert translate(service.url, SENTENCES[4])  # and with room again, it serves


# --- metrics, Prometheus, LibreTranslate's client, health -----------------------------------------------


def test_metrics_move_as_requests_arrive(server: RunningService):
    before = metrics(server.url)
    translate(server.url, SENTENCES[2])
    httpx.post(server.url + "/translate", json=body(""), timeout=TIMEOUT)
    after = metrics_after(server.url, before, 1)

    def moved(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert moved("translator_requests_total", status="200", pair="en-de") == 1
    assert moved("translator_requests_total", status="400", pair="") == 1  # the empty q: refused before it is read
    assert moved("translator_request_latency_seconds_count") == 2
    assert moved("translator_input_tokens_total", pair="en-de") >= len(SENTENCES[2].split())
    assert moved("translator_output_tokens_total", pair="en-de") > 0
    assert sample(after, "translator_model_info", model="en-de", provider="CPUExecutionProvider", precision="fp32")
    assert sample(after, "translator_resident_memory_bytes", process="engine") > 0


PROMETHEUS_CONFIG = """\
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: translator
    static_configs:
      - targets: ["{target}"]
"""


@pytest.fixture
def prometheus(server: RunningService, tmp_path: Path) -> Iterator[str]:
    """A real Prometheus on loopback scraping the server every second; yields its URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (make system-deps)")
    config = tmp_path / "prometheus.yml"
    config.write_text(PROMETHEUS_CONFIG.format(target=server.url.removeprefix("http://")))
    port = free_port()
    args = [
        binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
    ]  # fmt: skip
    with open(tmp_path / "prometheus.log", "wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(30)


def test_prometheus_scrapes_the_service(server: RunningService, prometheus: str):
    translate(server.url, SENTENCES[5])
    deadline = time.monotonic() + 30
    while True:
        try:
            response = httpx.get(prometheus + "/api/v1/query", params={"query": "translator_requests_total"})
            # 503 "Service Unavailable" in plain text while Prometheus is still starting
            answer = response.json() if response.status_code == 200 else {"status": response.status_code}
            if answer["status"] == "success" and answer["data"]["result"]:
                break
        except httpx.TransportError:
            pass  # not listening yet
        assert time.monotonic() < deadline, "Prometheus never returned translator_requests_total"
        time.sleep(0.5)
    series = {r["metric"]["status"]: float(r["value"][1]) for r in answer["data"]["result"]}
    assert series["200"] >= 1
    assert {r["metric"]["job"] for r in answer["data"]["result"]} == {"translator"}


def test_libretranslate_client_translates_through_the_service(server: RunningService, solo: dict[str, str]):
    client = LibreTranslateAPI(server.url)
    assert client.translate(SENTENCES[6], "en", "de") == solo[SENTENCES[6]]
    assert client.languages() == [  # every language served, by code, with the languages it translates into
        {"code": "de", "name": "German", "targets": ["de"]},  # every language also into itself
        {"code": "en", "name": "English", "targets": ["de", "en"]},
    ]


def test_health_answers_during_load(server: RunningService):
    load = [body(SENTENCES[i : i + 8], beam_size=8) for i in range(0, 16, 2)] * 4  # some 2 s here

    async def health_while_loaded() -> tuple[list[httpx.Response], list[httpx.Response], int]:
        async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as client:
            pending = asyncio.ensure_future(post_all(server.url, load))
            health, during = [], 0
            await asyncio.sleep(0.1)
            while not pending.done() or not health:
                health.append(await client.get("/health"))
                during += not pending.done()
                await asyncio.sleep(0.05)
            return await pending, health, during

    translations, health, during = asyncio.run(health_while_loaded())
    assert {r.status_code for r in translations} == {200}
    assert all(r.status_code == 200 and r.json()["status"] == "ok" for r in health)
    assert during >= 2, "the load was over before /health was asked: a weak test"


def test_the_load_generator_counts_translations_and_errors(server: RunningService):
    """bench.serving.loadgen (wrk) against the real service: every answer counted, a refused request as an error."""
    good = run_load(server.url, SENTENCES[:4], concurrency=4, seconds=1)
    assert good["ok"] > 0 and good["errors"] == 0 and good["requests"] == good["ok"]
    assert good["latency_ms"]["p50"] > 0
    bad = run_load(server.url, SENTENCES[:4], concurrency=2, seconds=1, source="xx")
    assert bad["ok"] == 0 and bad["errors"] > 0
    assert bad["error_examples"][0].startswith("HTTP 400: ")


# --- shutdown -------------------------------------------------------------------------------------------


def test_sigterm_finishes_requests_in_flight_then_exits_0(tiny_model_dir: Path, solo: dict[str, str], tmp_path):
    with running_service(tiny_model_dir, tmp_path / "service.log", threads=1, max_wait_ms=1000) as service:

        async def terminate_while_queued() -> list[httpx.Response]:
            requests = asyncio.ensure_future(post_all(service.url, [body(s) for s in SENTENCES[:4]]))
            await asyncio.to_thread(wait_for_queue_depth, service.url, 4)
            service.process.terminate()
            return await requests

        responses = asyncio.run(terminate_while_queued())
        assert [r.status_code for r in responses] == [200] * 4
        assert [r.json()["translatedText"] for r in responses] == [solo[s] for s in SENTENCES[:4]]
        assert service.process.wait(30) == 0, service.log_tail()


# --- the service never needs torch ----------------------------------------------------------------------


def test_the_service_does_not_import_torch():
    code = "import sys, service.solo, service.__main__; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


# --- the batcher, with a decoder that echoes its input ------------------------------------------------------


class EchoDecoder:
    """A decoder (core.search.Decoder) whose rows say their source again, a token a step, then </s>; every other
    token is far less likely. It records the source ids of the rows of each step, and takes `pace` seconds a
    step, so that requests can come while it runs."""

    cache_bytes = 0  # it holds no caches

    def __init__(self, steps: list[list[list[int]]], pace: float) -> None:
        self.sources: list[list[int]] = []  # of each row
        self.positions: list[int] = []
        self.steps = steps
        self.pace = pace

    def add(self, src: np.ndarray, src_mask: np.ndarray) -> None:
        for ids, mask in zip(src, src_mask):
            self.sources.append(ids[mask].tolist())
            self.positions.append(0)

    def step(self, tokens: np.ndarray, width: int, log_probs: bool = True) -> tuple[np.ndarray, np.ndarray]:
        time.sleep(self.pace)
        self.steps.append(list(self.sources))
        said = [s[p] if p < len(s) else EOS_ID for s, p in zip(self.sources, self.positions)]
        others = [[t for t in range(100, 100 + width) if t != token][: width - 1] for token in said]
        top = np.array([[token, *rest] for token, rest in zip(said, others)])
        logp = np.array([[0.0] + [-20.0 - j for j in range(width - 1)]] * len(said))
        self.positions = [p + 1 for p in self.positions]
        return top, logp

    def apply(self, plan: StepPlan) -> None:
        self.sources = [self.sources[r] for r in plan.parents]
        self.positions = [self.positions[r] for r in plan.parents]



class EchoTranslator:
    """What the batcher needs of a translator, with EchoDecoder; `steps` has the sources of every step's rows."""

    def __init__(self, pace: float = 0.0) -> None:
        self.model_config = ModelConfig(vocab_size=200, max_len=64)
        self.steps: list[list[list[int]]] = []
        self.pace = pace

    def new_decoder(self) -> EchoDecoder:
        return EchoDecoder(self.steps, self.pace)

    def release_memory(self) -> None:
        pass


def batch_limits(**settings) -> BatchLimits:
    """The batcher's limits as the service reads them from its settings, with `settings` changed."""
    return engine_config(Settings(**settings)).batch


def run_batcher(requests: list[tuple[list[list[int]], SearchOptions]], **limits) -> tuple[list, EchoTranslator]:
    """Submit all requests at once; each request's results, and the translator that saw the steps."""
    translator = EchoTranslator()

    async def main() -> list:
        batcher = Batcher(translator, Metrics(), "echo", batch_limits(**{"max_wait_ms": 50, **limits}))
        batcher.start()
        results = await asyncio.gather(*(batcher.submit(ids, opts) for ids, opts in requests))
        await batcher.stop()
        return results

    return asyncio.run(main()), translator


def tokens(length: int, fill: int) -> list[int]:
    return [fill] * length


GREEDY, BEAM = SearchOptions(beam_size=1), SearchOptions(beam_size=4)


@pytest.mark.parametrize("sentences,tokens_bound,fullest", [(8, 4096, 8), (64, 20, 20 // 7)],
                         ids=["sentences", "tokens"])
def test_batcher_answers_each_request_in_order_within_the_bounds(sentences: int, tokens_bound: int, fullest: int):
    """Sources of 3 to 7 tokens: at most `sentences` sentences and `tokens_bound` padded source tokens share a
    step (the first sentences of requests may take NEWCOMER_SHARE more), and the fullest step holds at least what
    the bound always allows."""
    requests = [([tokens(3 + (i * 7 + j) % 5, 10 * i + j + 4) for j in range(5)], GREEDY) for i in range(6)]
    requests += [([tokens(4, 99)], BEAM)]
    results, translator = run_batcher(requests, max_batch_sentences=sentences, max_batch_tokens=tokens_bound)
    for (sent, _), hyps in zip(requests, results):
        assert [h[0].tokens for h in hyps] == sent
    in_step = [{tuple(r) for r in rows} for rows in translator.steps]  # a beam sentence's rows say the same
    places = sentences + max(1, int(NEWCOMER_SHARE * sentences))
    assert all(len(step) <= places and len(step) * max(map(len, step)) <= tokens_bound * places / sentences
               for step in in_step)
    assert max(len(step) for step in in_step) >= fullest


def test_sentences_join_the_running_batch_and_leave_it_when_done():
    """A long sentence is decoding when short ones arrive (max_batch_sentences 2, and one more place for a new
    request's first sentence): each short one takes a free place at the next step, greedy or beam, and is answered
    while the long one goes on."""
    long, shorts = tokens(30, 7), [tokens(2, 10 + i) for i in range(4)]
    translator = EchoTranslator(pace=0.005)
    answered: dict[int, int] = {}  # short sentence -> steps run when its request was answered

    async def main() -> None:
        batcher = Batcher(translator, Metrics(), "echo", batch_limits(max_batch_sentences=2))
        batcher.start()
        first = asyncio.ensure_future(batcher.submit([long], BEAM))
        while len(translator.steps) < 3:
            await asyncio.sleep(0.001)

        async def short(i: int) -> None:
            (hyps,) = await batcher.submit([shorts[i]], BEAM if i % 2 else GREEDY)
            assert hyps[0].tokens == shorts[i]
            answered[i] = len(translator.steps)

        await asyncio.gather(*(short(i) for i in range(4)))
        assert not first.done()
        assert (await first)[0][0].tokens == long
        await batcher.stop()

    asyncio.run(main())
    for rows in translator.steps:
        assert long in rows and len({tuple(r) for r in rows}) <= 3
    assert all(rows == [long] * 4 for rows in translator.steps[max(answered.values()) :])  # the short ones left


def test_requests_take_turns_to_join_the_batch():
    """Two places (max_batch_sentences 2), both taken by a 20-sentence request: a one-sentence request sent while
    it runs joins the full batch at the next step (a new request's first sentence may take one place more), not
    after the other's 18 waiting sentences, nor when one of its running sentences ends."""
    translator, lone = EchoTranslator(pace=0.002), tokens(3, 99)
    sent_at: list[int] = []

    async def main() -> None:
        batcher = Batcher(translator, Metrics(), "echo", batch_limits(max_batch_sentences=2))
        batcher.start()
        big = asyncio.ensure_future(batcher.submit([tokens(30, 10 + i) for i in range(20)], GREEDY))
        while not translator.steps:
            await asyncio.sleep(0.001)
        sent_at.append(len(translator.steps))
        (hyps,) = await batcher.submit([lone], GREEDY)
        assert hyps[0].tokens == lone and not big.done()
        assert [h[0].tokens for h in await big] == [tokens(30, 10 + i) for i in range(20)]
        await batcher.stop()

    asyncio.run(main())
    first_step = next(i for i, rows in enumerate(translator.steps) if lone in rows)
    assert len(translator.steps[first_step]) == 3  # beside the two running sentences
    assert first_step <= sent_at[0] + 2  # the step running when it came, then its own (a place frees every 31)


def test_a_documents_requests_are_never_refused_for_its_own_and_an_interactive_one_goes_first():
    """A document (bulk work) sends 6 requests of 8 sentences, two at a time, into a queue whose sentences must start
    within 0.05 s: none is refused or shed, although its later requests wait behind its earlier ones far longer; an
    interactive sentence sent meanwhile joins at once and is answered while the document's sentences still wait."""
    translator = EchoTranslator(pace=0.002)
    limits = batch_limits(max_batch_sentences=8, max_queue=16, max_queue_work=100, max_queue_wait_s=0.05)

    async def main() -> None:
        batcher = Batcher(translator, Metrics(), "echo", limits)
        batcher.start()
        parts = [[tokens(20, 10 + 8 * part + i) for i in range(8)] for part in range(6)]
        document = [asyncio.ensure_future(batcher.submit(part, GREEDY, bulk=True)) for part in parts[:2]]
        while not translator.steps:
            await asyncio.sleep(0.001)
        (hyps,) = await batcher.submit([tokens(3, 99)], GREEDY)
        assert hyps[0].tokens == tokens(3, 99) and not all(part.done() for part in document)
        for part in parts[2:]:  # the document's later requests, two at a time, as the earlier ones finish
            await asyncio.wait([p for p in document if not p.done()], return_when=asyncio.FIRST_COMPLETED)
            document.append(asyncio.ensure_future(batcher.submit(part, GREEDY, bulk=True)))
        answers = await asyncio.gather(*document)
        assert [[h[0].tokens for h in answer] for answer in answers] == parts
        await batcher.stop()

    asyncio.run(main())


# --- a worker that hears "ready" a moment after another ---------------------------------------------------------


class LateEngine(Engine):
    """The engine with service.testing's echo model, whose start() waits until `released` is set."""

    def __init__(self, settings: Settings, metrics: Metrics):
        super().__init__(settings, metrics, echo_model)
        self.released = asyncio.Event()

    async def start(self) -> None:
        await self.released.wait()
        await super().start()


@pytest.mark.parametrize("ready_after,status", [(0.2, 200), (None, 503)], ids=["a-moment-later", "still-loading"])
def test_a_request_waits_a_moment_for_its_worker_to_hear_ready(tiny_model_dir: Path, ready_after, status: int):
    """Every HTTP worker hears the engine's "ready" at once, give or take a moment: a request that reaches a worker
    in that moment is translated, not refused; one that comes while the models really load gets 503 at once."""
    settings = Settings(model_dir=tiny_model_dir)
    metrics = Metrics()
    engine = LateEngine(settings, metrics)
    app = create_app(settings, engine, metrics)

    async def main() -> httpx.Response:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                assert (await client.get("/ready")).status_code == 503
                if ready_after is not None:
                    asyncio.get_running_loop().call_later(ready_after, engine.released.set)
                response = await client.post("/translate", json=body("Hello."))
                engine.released.set()
                return response

    response = asyncio.run(main())
    assert response.status_code == status, response.text
    if status == 503:
        assert response.json()["error"] == "Models are loading"
