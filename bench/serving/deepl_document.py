"""A .docx through DeepL's background documents (/v2/document) against the same through /translate_file.

    python -m bench.serving.deepl_document [--megabytes 1] [--poll 0.5]

Builds the Word document of bench.serving.document, starts `python -m service` with the shipped models and default
settings, and translates it twice, en to de: through /translate_file (one request, then the download), and through
/v2/document (the upload, a status request every --poll seconds until it is done, then /result). Reported: each
one's time from the first byte sent to the translation downloaded, their ratio, the longest that any single
request of the /v2/document run waited for its answer, and whether both translations hold the same text.
Results: bench/results/deepl-document.{json,md}.
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
from pathlib import Path

import docx
import httpx

from bench.common.cli import command_line
from bench.common.defaults import REPO, RESULTS
from bench.common.machine import environment
from bench.common.report import markdown_table, write_results
from bench.serving.document import word_document
from service.launch import running_service

TIMEOUT = httpx.Timeout(3600.0)


def through_translate_file(url: str, data: bytes) -> tuple[float, bytes]:
    started = time.perf_counter()
    response = httpx.post(url + "/translate_file", data={"source": "en", "target": "de"},
                          files={"file": ("book.docx", data)}, timeout=TIMEOUT)
    response.raise_for_status()
    translated = httpx.get(response.json()["translatedFileUrl"], timeout=TIMEOUT).content
    return time.perf_counter() - started, translated


def through_deepl(url: str, data: bytes, poll: float) -> tuple[float, float, int, bytes]:
    """Seconds in all, the longest one request waited, the status requests made, the translation."""
    waits: list[float] = []

    def timed(path: str, **request: object) -> httpx.Response:
        sent = time.perf_counter()
        response = httpx.post(url + path, timeout=TIMEOUT, **request)
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
    return time.perf_counter() - started, max(waits), len(waits) - 2, translated


def texts(document: bytes) -> list[str]:
    """The paragraphs' text of a .docx (its bytes differ from run to run: the zip holds the time it was written)."""
    return [paragraph.text for paragraph in docx.Document(io.BytesIO(document)).paragraphs]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--megabytes", type=float, default=1.0)
    p.add_argument("--poll", type=float, default=0.5, help="seconds between two status requests")
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    data, paragraphs, sentences = word_document(args.megabytes)
    print(f"{len(data):,} bytes, {paragraphs:,} paragraphs, {sentences:,} sentences", flush=True)
    with tempfile.TemporaryDirectory() as logs, running_service(REPO / "models", Path(logs) / "service.log") as service:
        file_seconds, file_result = through_translate_file(service.url, data)
        deepl_seconds, longest_wait, polls, deepl_result = through_deepl(service.url, data, args.poll)
    figures = {"bytes": len(data), "sentences": sentences, "translate_file_s": round(file_seconds, 1),
               "v2_document_s": round(deepl_seconds, 1), "ratio": f"{deepl_seconds / file_seconds:.3f}",
               "longest_request_wait_s": f"{longest_wait:.3f}", "status_requests": polls,
               "same_text": texts(file_result) == texts(deepl_result)}
    markdown = (f"# A .docx through /v2/document and through /translate_file\n\n"
                f"`{command_line('bench.serving.deepl_document', argv)}`\n\n"
                + markdown_table(list(figures), [list(figures.values())]))
    write_results(args.out_dir, "deepl-document", {"environment": environment([]), "figures": figures}, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
