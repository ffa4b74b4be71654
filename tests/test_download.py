"""model.download against a local HTTP server serving small corpora written by the tests."""

from __future__ import annotations

import functools
import gzip
import threading
import urllib.error
import zipfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from core.corpus import read_lines, read_pairs
from model import download

SENTENCE = {  # one sentence per language, numbered to make each line of a file distinct
    "en": "A man rides his bicycle along the river.",
    "de": "Ein Mann fährt mit seinem Fahrrad am Fluss entlang.",
    "fr": "Un homme fait du vélo le long de la rivière.",
    "cs": "Muž jede na kole podél řeky.",
}


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:
        """Keep the test output free of request logs."""


@pytest.fixture
def server(tmp_path):
    """A folder served over HTTP on 127.0.0.1: yields (folder, its URL)."""
    root = tmp_path / "www"
    root.mkdir()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


# --- Multi30k ---------------------------------------------------------------------------------------


def serve_multi30k(folder: Path) -> dict[str, list[str]]:
    """Write every Multi30k file, gzipped, with 2 to 4 lines a split; returns the lines of each file name."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for size, split in enumerate(download.MULTI30K_SPLITS, start=2):
        for lang in download.MULTI30K_LANGS:
            name = f"{split}.{lang}.gz"
            files[name] = [f"{i}. {SENTENCE[lang]}" for i in range(size)]
            (folder / name).write_bytes(gzip.compress("".join(f"{line}\n" for line in files[name]).encode()))
    return files


def test_multi30k_is_fetched_file_by_file(server, tmp_path):
    root, url = server
    files = serve_multi30k(root / "data/task1/raw")
    download.main(["multi30k", "--out", str(tmp_path / "out"), "--url", f"{url}/data/task1/raw/"])
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(files)
    for name, lines in files.items():
        assert read_lines(tmp_path / "out" / name) == lines
    assert len(read_pairs(tmp_path / "out", "val", "en", "cs")) == 3


def test_multi30k_missing_file_fails_and_leaves_no_partial_file(server, tmp_path):
    root, url = server
    serve_multi30k(root)
    (root / "test_2016_flickr.fr.gz").unlink()
    with pytest.raises(urllib.error.HTTPError, match="404"):
        download.main(["multi30k", "--out", str(tmp_path / "out"), "--url", url])
    assert not list((tmp_path / "out").glob("*.tmp"))


def test_multi30k_misaligned_languages_are_rejected(server, tmp_path):
    root, url = server
    serve_multi30k(root)
    (root / "val.de.gz").write_bytes(gzip.compress(b"just one line\n"))
    with pytest.raises(ValueError, match="val"):
        download.main(["multi30k", "--out", str(tmp_path / "out"), "--url", url])


# --- Tatoeba ----------------------------------------------------------------------------------------


def tatoeba_pairs(distinct: int) -> list[tuple[str, str]]:
    """`distinct` English sentences, every third with a second translation further down the file."""
    first = [(f"I counted {n} birds.", f"Ich habe {n} Vögel gezählt.") for n in range(distinct)]
    second = [(f"I counted {n} birds.", f"Ich zählte {n} Vögel.") for n in range(0, distinct, 3)]
    return first + second


def serve_tatoeba(folder: Path, pairs: list[tuple[str, str]], attribution: bool) -> None:
    """deu-eng.zip as manythings.org packs it: deu.txt (English, German, attribution) and _about.txt."""
    folder.mkdir(parents=True, exist_ok=True)
    credit = "\tCC-BY 2.0 (France) Attribution: tatoeba.org" if attribution else ""
    with zipfile.ZipFile(folder / "deu-eng.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("deu.txt", "".join(f"{en}\t{de}{credit}\n" for en, de in pairs))
        z.writestr("_about.txt", "Sentence pairs from the Tatoeba Project.\n")


def read_split(directory: Path, split: str) -> list[tuple[str, str]]:
    en, de = (read_lines(directory / f"{split}.{lang}.gz") for lang in ("en", "de"))
    assert len(en) == len(de)
    return list(zip(en, de))


@pytest.mark.parametrize("attribution", [True, False], ids=["three-columns", "two-columns"])
def test_tatoeba_is_split_by_english_sentence(server, tmp_path, attribution):
    root, url = server
    pairs = tatoeba_pairs(4300)
    serve_tatoeba(root / "anki", pairs, attribution)
    download.main(["tatoeba", "--out", str(tmp_path / "out"), "--url", f"{url}/anki"])
    train, val, test = (read_split(tmp_path / "out", split) for split in ("train", "val", "test"))

    assert len(val) == len(test) == 2000
    val_en, test_en, train_en = ({en for en, _ in split} for split in (val, test, train))
    assert len(val_en) == len(test_en) == 2000 and len(train_en) == 300
    assert not val_en & test_en and not train_en & (val_en | test_en)
    first = {en: de for en, de in reversed(pairs)}  # the first translation of each English sentence
    assert all(de == first[en] for en, de in val + test)
    assert sorted(train) == sorted(p for p in pairs if p[0] in train_en)  # every translation of the rest


def test_tatoeba_split_is_reproducible(server, tmp_path):
    root, url = server
    serve_tatoeba(root, tatoeba_pairs(4100), attribution=True)
    for out in ("a", "b"):
        download.main(["tatoeba", "--out", str(tmp_path / out), "--url", url])
    for name in ("train.en.gz", "val.de.gz", "test.en.gz"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_tatoeba_with_too_few_sentences_is_refused():
    with pytest.raises(ValueError, match="too few"):
        download.split_by_english(tatoeba_pairs(10), held_out=5)
