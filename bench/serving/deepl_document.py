"""A .docx through DeepL's background documents (/v2/document) against the same through /translate_file, and what a
client with short requests waits meanwhile.

    python -m bench.serving.deepl_document [--megabytes 1] [--poll 0.5] [--probe-every 0.25] [--rounds 1]

Builds the Word document of bench.serving.document, starts `python -m service` with the shipped models and default
settings, warms it up with a small document, and translates the big one twice, en to de: through /translate_file
(one request, then the download), and through /v2/document (the upload, a status request every --poll seconds until
it is done, then /result). During each run a probe client sends a one-sentence /translate request every
--probe-every seconds (one at a time), as an interactive user would. With --rounds, each path runs that many times,
/translate_file first in odd rounds and /v2/document first in even ones, so that a load that drifts during the bench
(the machine is shared) weighs on both paths alike; the ratio is of their summed times.

Reported for each run: its time from the first byte sent to the translation downloaded, the load average of the
machine before and after it (the machine is shared), and the probe's requests: how many, their median, 99th
percentile and longest wait; for /v2/document the longest wait of its own requests (upload, status, result) too; the
engine's decoder steps that took longer than translator_step_seconds' largest bucket (a step of a full batch takes a
small part of it: such a step is the machine's stall, which every request running then waits out); the ratio of
the two runs' times; and whether both translations hold the same text. The goals (issue "The DeepL API as well";
bench.report states their bounds): /v2/document about as fast as /translate_file, and no request waiting long
meanwhile. Results: bench/results/deepl-document.{json,md}.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import docx
import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.common.cli import command_line
from bench.common.defaults import REPO, RESULTS
from bench.common.machine import environment
from bench.common.report import markdown_table, write_results
from bench.common.timing import while_running
from bench.serving.document import word_document
from service.launch import running_service
from service.metrics import STEP_BUCKETS

TIMEOUT = httpx.Timeout(3600.0)
WARM_UP_MEGABYTES = 0.02
PROBE = {"q": "A man is riding a bicycle in the park.", "source": "en", "target": "de"}


def through_translate_file(url: str, data: bytes) -> tuple[float, list[float], bytes]:
    """Seconds in all, the waits of its requests, the translation."""
    started = time.perf_counter()
    with httpx.Client(timeout=TIMEOUT) as client:
        response = client.post(url + "/translate_file", data={"source": "en", "target": "de"},
                               files={"file": ("book.docx", data)})
        response.raise_for_status()
        translated = client.get(response.json()["translatedFileUrl"]).content
    return time.perf_counter() - started, [], translated


def through_deepl(url: str, data: bytes, poll: float) -> tuple[float, list[float], bytes]:
    """Seconds in all, the waits of its own requests (upload, status requests, result), the translation. One
    client sends them all, as DeepL's clients do: a client made for each request would take the bench's CPU (its
    TLS context) from the service and from the probe's thread, in this run alone."""
    waits: list[float] = []
    with httpx.Client(timeout=TIMEOUT) as client:

        def timed(path: str, **request: object) -> httpx.Response:
            sent = time.perf_counter()
            response = client.post(url + path, **request)
            waits.append(time.perf_counter() - sent)
            response.raise_for_status()
            return response

        started = time.perf_counter()
        job = timed("/v2/document", data={"source_lang": "EN", "target_lang": "DE"},
                    files={"file": ("book.docx", data)}).json()
        key = {"document_key": job["document_key"]}
        while (status := timed(f"/v2/document/{job['document_id']}", data=key).json())["status"] != "done":
            assert status["status"] in ("queued", "translating"), status
            time.sleep(poll)
        translated = timed(f"/v2/document/{job['document_id']}/result", data=key).content
    return time.perf_counter() - started, waits, translated


def probed(url: str, every: float, run: Callable[[], tuple[float, list[float], bytes]]
           ) -> tuple[tuple[float, list[float], bytes], list[float]]:
    """run()'s answer, and the waits of the probe's requests sent while it ran."""
    waits: list[float] = []

    def probe(done: threading.Event) -> None:
        with httpx.Client(timeout=TIMEOUT) as client:
            while not done.is_set():
                sent = time.perf_counter()
                client.post(url + "/translate", json=PROBE).raise_for_status()
                waits.append(time.perf_counter() - sent)
                done.wait(max(0.0, every - (time.perf_counter() - sent)))

    return while_running(run, probe), waits


def texts(document: bytes) -> list[str]:
    """The paragraphs' text of a .docx (its bytes differ from run to run: the zip holds the time it was written)."""
    return [paragraph.text for paragraph in docx.Document(io.BytesIO(document)).paragraphs]


def load() -> str:
    """The machine's load average over 1, 5 and 15 minutes."""
    return " / ".join(f"{value:.2f}" for value in os.getloadavg())


def slow_steps(url: str) -> int:
    """The engine's decoder steps so far that took longer than translator_step_seconds' largest bucket."""
    families = text_string_to_metric_families(httpx.get(url + "/metrics", timeout=TIMEOUT).text)
    samples = {(s.name, s.labels.get("le")): s.value
               for family in families if family.name == "translator_step_seconds" for s in family.samples}
    return int(samples["translator_step_seconds_count", None]
               - samples["translator_step_seconds_bucket", str(STEP_BUCKETS[-1])])


def measured(name: str, url: str, every: float, run: Callable[[], tuple[float, list[float], bytes]]
             ) -> tuple[dict, bytes]:
    before, slow_before = load(), slow_steps(url)
    (seconds, own_waits, translated), probe_waits = probed(url, every, run)
    row = {"path": name, "seconds": round(seconds, 1), "load_before": before, "load_after": load(),
           "probe_requests": len(probe_waits), "probe_median_s": round(statistics.median(probe_waits), 3),
           "probe_p99_s": round(statistics.quantiles(probe_waits, n=100)[-1], 3),
           "probe_longest_s": round(max(probe_waits), 3),
           "own_longest_s": round(max(own_waits), 3) if own_waits else None,
           f"steps_over_{STEP_BUCKETS[-1]}_s": slow_steps(url) - slow_before}
    print(row, flush=True)
    return row, translated


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--megabytes", type=float, default=1.0)
    p.add_argument("--poll", type=float, default=0.5, help="seconds between two status requests")
    p.add_argument("--probe-every", type=float, default=0.25, help="seconds between two probe requests")
    p.add_argument("--rounds", type=int, default=1, help="runs of each path, taking turns to go first")
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    data, paragraphs, sentences = word_document(args.megabytes)
    warm_up, _, _ = word_document(WARM_UP_MEGABYTES)
    print(f"{len(data):,} bytes, {paragraphs:,} paragraphs, {sentences:,} sentences", flush=True)
    rows: list[dict] = []
    translated: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory() as logs, running_service(REPO / "models", Path(logs) / "service.log") as service:
        paths = {"/translate_file": lambda: through_translate_file(service.url, data),
                 "/v2/document": lambda: through_deepl(service.url, data, args.poll)}
        through_translate_file(service.url, warm_up)
        for round_ in range(1, args.rounds + 1):
            for name in list(paths) if round_ % 2 else reversed(paths):
                row, translated[name] = measured(name, service.url, args.probe_every, paths[name])
                rows.append({"round": round_, **row})
    seconds = {name: sum(row["seconds"] for row in rows if row["path"] == name) for name in paths}
    ratio = seconds["/v2/document"] / seconds["/translate_file"]
    longest = max(max(row["probe_longest_s"], row["own_longest_s"]) for row in rows if row["path"] == "/v2/document")
    figures = {"bytes": len(data), "sentences": sentences, "translate_file_s": round(seconds["/translate_file"], 1),
               "v2_document_s": round(seconds["/v2/document"], 1), "ratio": f"{ratio:.3f}",
               "longest_request_wait_s": f"{longest:.3f}",
               "same_text": texts(translated["/translate_file"]) == texts(translated["/v2/document"])}
    markdown = (f"# A .docx through /v2/document and through /translate_file\n\n"
                f"`{command_line('bench.serving.deepl_document', argv)}`\n\n"
                f"A probe client sends a one-sentence /translate every {args.probe_every} s during each run; "
                f"/v2/document's own requests are its upload, its status requests (every {args.poll} s) and its "
                f"result. Load average: 1 / 5 / 15 minutes, of a shared machine.\n\n"
                + markdown_table(list(rows[0]), [list(row.values()) for row in rows]) + "\n"
                + markdown_table(list(figures), [list(figures.values())]))
    write_results(args.out_dir, "deepl-document", {"environment": environment([]), "runs": rows,
                                                   "figures": figures}, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
