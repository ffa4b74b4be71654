"""Documents through the service and through `python -m service.cli`: a .docx translated whole, in one request, its
structure kept; a hostile one refused with a 4xx while the service goes on; the command in this process and
through a running server giving the same file."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import docx
import httpx
import pytest
from client import TIMEOUT, assert_error, translate

from service.launch import RunningService, running_service

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    log = tmp_path_factory.mktemp("files") / "service.log"
    with running_service(tiny_model_dir, log, threads=1, log_level="warning") as service:
        yield service


def word_document(paragraphs: int = 3) -> bytes:
    """Paragraphs with a bold word inside a sentence, and a table."""
    document = docx.Document()
    for i in range(paragraphs):
        paragraph = document.add_paragraph(f"The cat number {i} sleeps on a ")
        paragraph.add_run("green").bold = True
        paragraph.add_run(" sofa.")
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "A dog runs.", "Where is the station?"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def upload(server: RunningService, name: str, data: bytes) -> httpx.Response:
    return httpx.post(server.url + "/translate_file", data={"source": "en", "target": "de"},
                      files={"file": (name, data)}, timeout=TIMEOUT)


def test_a_word_document_is_translated_whole_with_its_structure(server: RunningService):
    response = upload(server, "story.docx", word_document())
    assert response.status_code == 200, response.text
    download = httpx.get(response.json()["translatedFileUrl"], timeout=TIMEOUT)
    assert download.headers["content-type"].startswith("application/vnd.openxmlformats")
    result = docx.Document(io.BytesIO(download.content))
    assert len(result.paragraphs) == 3 and len(result.tables) == 1
    for paragraph in result.paragraphs:
        bold = [run.text for run in paragraph.runs if run.bold]
        assert len(bold) == 1 and bold[0].strip(), paragraph.text  # the bold run is still there, with words
    assert result.tables[0].cell(0, 1).text == translate(server.url, "Where is the station?")


@pytest.mark.parametrize(("name", "data"), [
    ("broken.docx", b"PK\x03\x04 not really a zip"),
    ("empty.odt", b""),
    ("report.pdf", b"%PDF-1.7\n"),
    ("binary.txt", b"\x00\x01\x02binary\x00"),
], ids=["broken-zip", "empty", "pdf", "binary-text"])
def test_a_hostile_or_unknown_document_gets_a_400_and_the_service_goes_on(server: RunningService, name: str,
                                                                           data: bytes):
    assert_error(upload(server, name, data), 400)
    assert translate(server.url, "A dog runs.")


def run_cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "service.cli", *args], cwd=REPO, input=stdin, capture_output=True,
                          timeout=300, check=False)


def test_the_command_translates_a_file_in_process_and_through_a_server_alike(
    server: RunningService, tiny_model_dir: Path, tmp_path: Path
):
    source = tmp_path / "story.docx"
    source.write_bytes(word_document(paragraphs=70))  # more than one batch, with its progress bar
    local, remote = tmp_path / "local.docx", tmp_path / "remote.docx"
    done = run_cli(str(source), "--source", "en", "--target", "de", "--model-dir", str(tiny_model_dir),
                   "--out", str(local))
    assert done.returncode == 0, done.stderr.decode()
    done = run_cli(str(source), "--source", "en", "--target", "de", "--url", server.url, "--out", str(remote))
    assert done.returncode == 0, done.stderr.decode()
    texts = [[p.text for p in docx.Document(path).paragraphs] for path in (local, remote)]
    assert texts[0] == texts[1] and len(texts[0]) == 70
    assert texts[0][0] != docx.Document(source).paragraphs[0].text


def test_the_command_reads_standard_input(tiny_model_dir: Path, server: RunningService):
    done = run_cli("-", "--source", "en", "--target", "de", "--model-dir", str(tiny_model_dir),
                   stdin=b"A dog runs.\nWhere is the station?\n")
    assert done.returncode == 0, done.stderr.decode()
    expected = [translate(server.url, "A dog runs."), translate(server.url, "Where is the station?")]
    assert done.stdout.decode().splitlines() == expected


def test_the_command_says_what_is_wrong_with_a_file(tmp_path: Path, tiny_model_dir: Path):
    bad = tmp_path / "broken.docx"
    bad.write_bytes(b"not a zip")
    done = run_cli(str(bad), "--target", "de", "--model-dir", str(tiny_model_dir))
    assert done.returncode != 0 and b"broken.docx" in done.stderr and b"Traceback" not in done.stderr
