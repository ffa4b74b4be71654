"""Download a corpus into the `{split}.{lang}.gz` layout that model.train reads.

    python -m model.download multi30k --out DIR [--url URL]   Multi30k task 1 raw text: train, val,
                                                              test_2016_flickr in en, de, fr, cs
    python -m model.download tatoeba --out DIR [--url URL]    Tatoeba English-German (manythings.org/anki),
                                                              split into train, val, test by English sentence

--url replaces the base URL the files are fetched from (a mirror, or a local server in tests).
"""

from __future__ import annotations

import argparse
import gzip
import io
import random
import urllib.request
import zipfile
from pathlib import Path

from core.corpus import read_lines

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
MULTI30K_SPLITS = ("train", "val", "test_2016_flickr")
MULTI30K_LANGS = ("en", "de", "fr", "cs")

TATOEBA_URL = "https://www.manythings.org/anki"
TATOEBA_ARCHIVE = "deu-eng.zip"
TATOEBA_MEMBER = "deu.txt"  # the pairs inside the archive
TATOEBA_SEED = 1
TATOEBA_HELD_OUT = 2000  # distinct English sentences in val, and again in test

Pair = tuple[str, str]


def fetch(url: str) -> bytes:
    """The body of a URL; raises urllib.error.URLError (HTTPError for a bad status) on failure."""
    request = urllib.request.Request(url, headers={"User-Agent": "mt-service-download/0.1"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.read()


def write_file(path: Path, data: bytes) -> None:
    """Write all of data or nothing: an interrupted download leaves no truncated file behind."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.rename(path)


def download_multi30k(out: Path, url: str = MULTI30K_URL) -> list[Path]:
    """Fetch every split and language as `{split}.{lang}.gz` and check that each split's languages align."""
    paths = []
    for split in MULTI30K_SPLITS:
        counts = set()
        for lang in MULTI30K_LANGS:
            path = out / f"{split}.{lang}.gz"
            write_file(path, fetch(f"{url}/{path.name}"))
            counts.add(len(read_lines(path)))
            paths.append(path)
        if len(counts) > 1:
            raise ValueError(f"{split}: the languages have different line counts {sorted(counts)}")
    return paths


def read_tatoeba(archive: bytes) -> list[Pair]:
    """(English, German) pairs from the archive's tab-separated lines: English, German[, attribution]."""
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        text = z.read(TATOEBA_MEMBER).decode("utf-8")
    pairs = []
    # split("\n"), not splitlines(): a sentence may hold characters such as U+2028 that splitlines() breaks on
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        fields = line.rstrip("\r").split("\t")
        if len(fields) < 2:
            raise ValueError(f"{TATOEBA_MEMBER} line {number}: expected English<TAB>German, got {line!r}")
        pairs.append((fields[0].strip(), fields[1].strip()))
    return pairs


def split_by_english(pairs: list[Pair], held_out: int = TATOEBA_HELD_OUT, seed: int = TATOEBA_SEED) -> dict:
    """Train, val and test pairs, grouped by English sentence so that no English sentence is in two splits.

    The distinct English sentences are shuffled with a fixed seed; val and test take `held_out` of them each,
    with their first translation as the reference; train has every translation of all the others.
    """
    translations: dict[str, list[str]] = {}
    for en, de in pairs:
        translations.setdefault(en, []).append(de)
    english = list(translations)
    if len(english) <= 2 * held_out:
        raise ValueError(f"{len(english)} distinct English sentences: too few to hold out 2 x {held_out}")
    random.Random(seed).shuffle(english)
    val, test, train = english[:held_out], english[held_out : 2 * held_out], english[2 * held_out :]
    return {
        "train": [(en, de) for en in train for de in translations[en]],
        "val": [(en, translations[en][0]) for en in val],
        "test": [(en, translations[en][0]) for en in test],
    }


def write_gzip_lines(path: Path, lines: list[str]) -> None:
    """One line per string, gzipped (with a fixed timestamp, so the same text gives the same bytes)."""
    write_file(path, gzip.compress("".join(line + "\n" for line in lines).encode("utf-8"), mtime=0))


def download_tatoeba(out: Path, url: str = TATOEBA_URL) -> list[Path]:
    """Fetch deu-eng.zip, split it by English sentence and write `{split}.en.gz` and `{split}.de.gz`."""
    splits = split_by_english(read_tatoeba(fetch(f"{url}/{TATOEBA_ARCHIVE}")))
    paths = []
    for split, pairs in splits.items():
        for side, lang in enumerate(("en", "de")):
            paths.append(out / f"{split}.{lang}.gz")
            write_gzip_lines(paths[-1], [pair[side] for pair in pairs])
    return paths


DOWNLOADERS = {"multi30k": (download_multi30k, MULTI30K_URL), "tatoeba": (download_tatoeba, TATOEBA_URL)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("corpus", choices=DOWNLOADERS)
    p.add_argument("--out", type=Path, required=True, help="folder for the {split}.{lang}.gz files")
    p.add_argument("--url", help="base URL to fetch from instead of the corpus's own")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    download, default_url = DOWNLOADERS[args.corpus]
    args.out.mkdir(parents=True, exist_ok=True)
    for path in download(args.out, (args.url or default_url).rstrip("/")):
        print(f"{path}: {len(read_lines(path))} lines")


if __name__ == "__main__":
    main()
