"""A large .docx translated through the service in one request: its time, and its structure after.

    python -m bench.serving.document [--megabytes 1] [--setting precision=int8 ...]

Builds a Word document of about --megabytes MB from Multi30k's English training sentences (paragraphs of four
sentences, one word of each in bold, and a table), starts `python -m service` with the shipped models and default
settings, POSTs it to /translate_file (source en, target de) and downloads the translation: the request's time, the
sentences per second, and whether every paragraph, bold run and table cell came back. Results:
bench/results/document.{json,md}.
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
from pathlib import Path

import docx
import httpx

from bench.common.cli import command_line, parse_settings
from bench.common.defaults import REPO, RESULTS
from bench.common.machine import environment
from bench.common.report import markdown_table, write_results
from bench.common.sentences import multi30k_sentences
from service.launch import running_service


def word_document(megabytes: float) -> tuple[bytes, int, int]:
    """A .docx of about `megabytes` MB; its bytes, paragraphs and sentences."""
    sentences = multi30k_sentences(split="train")
    document = docx.Document()
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = sentences[0], sentences[1]
    paragraphs = used = 0
    while True:
        four = [sentences[(used + i) % len(sentences)] for i in range(4)]
        words = four[0].split()
        paragraph = document.add_paragraph(" ".join(words[:2]) + " ")
        paragraph.add_run(words[2] if len(words) > 2 else "bold").bold = True
        paragraph.add_run(" " + " ".join(words[3:] + four[1:]))
        paragraphs, used = paragraphs + 1, used + 4
        if paragraphs % 500 == 0:
            out = io.BytesIO()
            document.save(out)
            if out.tell() >= megabytes * 1_000_000:
                return out.getvalue(), paragraphs, used


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--megabytes", type=float, default=1.0)
    p.add_argument("--setting", action="append", default=[], help="a service setting, NAME=VALUE")
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    data, paragraphs, sentences = word_document(args.megabytes)
    print(f"{len(data):,} bytes, {paragraphs:,} paragraphs, {sentences:,} sentences", flush=True)
    with tempfile.TemporaryDirectory() as logs:
        with running_service(REPO / "models", Path(logs) / "service.log", **parse_settings(args.setting)) as service:
            started = time.perf_counter()
            response = httpx.post(service.url + "/translate_file", data={"source": "en", "target": "de"},
                                  files={"file": ("book.docx", data)}, timeout=httpx.Timeout(3600.0))
            seconds = time.perf_counter() - started
            response.raise_for_status()
            translated = httpx.get(response.json()["translatedFileUrl"], timeout=60).content
    result = docx.Document(io.BytesIO(translated))
    bold = sum(1 for paragraph in result.paragraphs if any(run.bold and run.text.strip() for run in paragraph.runs))
    figures = {"bytes": len(data), "paragraphs": paragraphs, "sentences": sentences, "seconds": round(seconds, 1),
               "sentences_per_s": round(sentences / seconds, 1), "paragraphs_back": len(result.paragraphs),
               "paragraphs_with_bold_back": bold, "table_cells_back": len(result.tables[0]._cells)}
    markdown = (f"# A large .docx through /translate_file\n\n`{command_line('bench.serving.document', argv)}`\n\n"
                + markdown_table(list(figures), [list(figures.values())]))
    write_results(args.out_dir, "document", {"environment": environment([]), "settings": args.setting,
                                             "figures": figures}, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
