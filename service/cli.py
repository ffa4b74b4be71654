"""Translate a file from the command line: a document of any format /translate_file takes, or standard input.

    python -m service.cli story.docx --target de                        # the shipped models, in this process
    python -m service.cli story.docx --target de --model-dir models/en-de --out story.de.docx
    python -m service.cli page.html --target de --url http://127.0.0.1:8000 # through a running server
    echo "A man is riding a bicycle." | python -m service.cli - --source en --target de

The document is read and rebuilt here (service.worker.documents: paragraphs, runs, tables, slides, cues, chapters
kept); its texts are translated in batches, with a progress bar on standard error: in this process, by the engine
and pipeline the service runs (--model-dir, every TRANSLATOR_* setting applies), or by a running server's
POST /translate (--url; each batch within its character limit). The output goes to --out, else beside the input as
NAME.TARGET.SUFFIX, or to standard output for standard input.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import httpx
from tqdm import tqdm

from service.engine.engine import Engine
from service.metrics import Metrics
from service.settings import Settings
from service.worker.app import pipeline_for
from service.worker.documents import FORMATS, Limits, translated_name
from service.worker.documents.translate import TranslateTexts, translate_file
from service.worker.errors import RequestError

BATCH = 64  # texts a progress step
TIMEOUT = httpx.Timeout(300.0)


def with_progress(translate: TranslateTexts, batch: Callable[[list[str]], list[list[str]]]) -> TranslateTexts:
    """`translate` called batch by batch, with a progress bar of the texts done."""

    async def translate_texts(texts: list[str]) -> list[str]:
        done: list[str] = []
        with tqdm(total=len(texts), unit="text", file=sys.stderr, disable=len(texts) < BATCH) as progress:
            for part in batch(texts):
                done += await translate(part)
                progress.update(len(part))
        return done

    return translate_texts


def by_count(texts: list[str]) -> list[list[str]]:
    return [texts[begin : begin + BATCH] for begin in range(0, len(texts), BATCH)]


def by_characters(limit: int) -> Callable[[list[str]], list[list[str]]]:
    """Batches of at most BATCH texts and `limit` characters (a server's charLimit)."""

    def batch(texts: list[str]) -> list[list[str]]:
        batches: list[list[str]] = [[]]
        for text in texts:
            if len(text) > limit:
                raise SystemExit(f"a paragraph of {len(text)} characters is over the server's limit of {limit}: "
                                 "translate the file with --model-dir, or through POST /translate_file")
            if len(batches[-1]) == BATCH or sum(map(len, batches[-1])) + len(text) > limit:
                batches.append([])
            batches[-1].append(text)
        return [b for b in batches if b]

    return batch


@asynccontextmanager
async def in_process(model_dir: Path | None, source: str, target: str) -> AsyncIterator[TranslateTexts]:
    """The service's engine and pipeline in this process, as `--http-workers 0` runs them."""
    settings = Settings(**({"model_dir": model_dir} if model_dir else {}))
    metrics = Metrics()
    engine = Engine(settings, metrics)
    await engine.start()
    try:
        pipeline = await asyncio.to_thread(pipeline_for, engine, settings, metrics)
        yield with_progress(lambda texts: pipeline.translate_document(texts, source, target), by_count)
    finally:
        await engine.stop(0)


@asynccontextmanager
async def through(url: str, source: str, target: str) -> AsyncIterator[TranslateTexts]:
    """A running server's POST /translate, batches within its character limit."""
    async with httpx.AsyncClient(base_url=url.rstrip("/"), timeout=TIMEOUT) as client:
        limit = (await client.get("/frontend/settings")).raise_for_status().json()["charLimit"]

        async def translate(texts: list[str]) -> list[str]:
            answer = await client.post("/translate", json={"q": texts, "source": source, "target": target})
            if answer.status_code != 200:
                raise SystemExit(f"{url} answered {answer.status_code}: {answer.text[:300]}")
            return answer.json()["translatedText"]

        yield with_progress(translate, by_characters(limit))


async def translate(data: bytes, suffix: str, translator: AbstractAsyncContextManager[TranslateTexts],
                    target: str) -> bytes:
    """The file translated into `target`, by the translator given (in_process or through)."""
    async with translator as translate_texts:
        settings = Settings()
        limits = Limits.of(settings)
        return await translate_file(data, suffix, limits, translate_texts, target)


def output_path(args: argparse.Namespace, suffix: str) -> Path | None:
    if args.out:
        return args.out
    if args.file == "-":
        return None
    path = Path(args.file)
    return path.with_name(translated_name(f"{path.stem}{suffix}", args.target))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="the file to translate, or - for standard input")
    p.add_argument("--target", required=True, help="the language to translate into")
    p.add_argument("--source", default="auto", help="the file's language (default: detected)")
    p.add_argument("--out", type=Path, help="where to write the translation")
    p.add_argument("--format", choices=[suffix[1:] for suffix in FORMATS], help="of standard input (default txt)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--model-dir", type=Path, help="the model folder(s) to run in this process (default: "
                       "TRANSLATOR_MODEL_DIR, or the shipped models)")
    where.add_argument("--url", help="a running server to translate through, e.g. http://127.0.0.1:8000")
    args = p.parse_args(argv)
    if args.file == "-":
        data, suffix = sys.stdin.buffer.read(), f".{args.format or 'txt'}"
    else:
        data, suffix = Path(args.file).read_bytes(), Path(args.file).suffix.lower()
    source, target = args.source.lower(), args.target.lower()
    translator = through(args.url, source, target) if args.url else in_process(args.model_dir, source, target)
    try:
        translated = asyncio.run(translate(data, suffix, translator, args.target))
    except RequestError as error:
        raise SystemExit(f"{args.file}: {error.message}") from None
    if (out := output_path(args, suffix)) is None:
        sys.stdout.buffer.write(translated)
    else:
        out.write_bytes(translated)
        print(f"{args.file} -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
