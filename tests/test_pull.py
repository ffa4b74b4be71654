"""Models by name (model.pull, model.cache, model.argos_index): fetched from a local stand-in for the Hugging Face hub
and Argos Translate's index (tests/model_server.py) by the real clients (huggingface_hub, urllib), converted,
exported and cached.

The hub holds a tiny random-weight Marian model (tests/test_convert.py's) and a model of another kind; the index an
Argos Translate package of random weights (bench.common.argos_package, as tests/test_argos.py builds it).
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import logging
import re
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pytest
import sentencepiece as spm
from conftest import MIXED_SENTENCES

pytest.importorskip("ctranslate2")

from model_server import ModelServer, Repo  # noqa: E402
from test_convert import write_marian, write_tokenizer  # noqa: E402
from test_deploy import ROOT, answers_ready, running, wait_until  # noqa: E402

from bench.common.argos_package import opennmt_vocabulary, random_spec, write_package, zip_package  # noqa: E402
from core import model_cache as cache_module  # noqa: E402
from core.folder import FolderConfig  # noqa: E402
from core.model_cache import PULLED_FILE, Entry, ModelCache, PullError  # noqa: E402
from model.pull import main as pull_main  # noqa: E402
from model.pull import pull, pull_all  # noqa: E402
from service import launch  # noqa: E402
from service import models as service_models  # noqa: E402
from service.settings import SHIPPED_MODELS, Settings  # noqa: E402
from service.translator import Translator  # noqa: E402

VARIANTS = ["fp32"]
MARIAN_REPO = "tiny/opus-mt-en-de"
PACKAGE = "translate-en_de-1_0.argosmodel"


@pytest.fixture(scope="module")
def argos_package(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    folder = tmp_path_factory.mktemp("argos")
    spm.SentencePieceTrainer.train(sentence_iterator=iter(MIXED_SENTENCES * 20), model_writer=(buffer := io.BytesIO()),
                                   vocab_size=90, character_coverage=1.0, minloglevel=2)
    (folder / "sentencepiece.model").write_bytes(buffer.getvalue())
    spec = random_spec(opennmt_vocabulary(folder / "sentencepiece.model"))
    package = write_package(folder / "translate-en_de-1_0", spec, folder / "sentencepiece.model")
    return zip_package(package).read_bytes()


@pytest.fixture(scope="module")
def marian_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tokenizer = tmp_path_factory.mktemp("tokenizer")
    write_tokenizer(tokenizer)
    return write_marian(tmp_path_factory.mktemp("hub") / "opus-mt-en-de", tokenizer)


@pytest.fixture
def server(argos_package: bytes, marian_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The stand-in, running; huggingface_hub pointed at it (HF_ENDPOINT), with a cache of its own."""
    model_server = ModelServer()
    model_server.repos[MARIAN_REPO] = Repo(marian_repo, licence="cc-by-4.0")
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (bert / "model.safetensors").write_bytes(b"0" * 64)
    model_server.repos["tiny/bert"] = Repo(bert)
    model_server.files[PACKAGE] = argos_package
    index = [{"from_code": "en", "to_code": "de", "package_version": "1.0", "type": "translate",
              "links": [f"{model_server.url}/files/{PACKAGE}"], "checksum": hashlib.sha256(argos_package).hexdigest(),
              "license": "CC0"},
             {"from_code": "de", "to_code": "en", "package_version": "1.0", "links": [f"{model_server.url}/files/x"]}]
    model_server.files["index.json"] = json.dumps(index).encode()
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", model_server.url)
    monkeypatch.setattr("huggingface_hub.constants.HUGGINGFACE_CO_URL_TEMPLATE",
                        model_server.url + "/{repo_id}/resolve/{revision}/{filename}")
    with model_server.running():
        yield model_server


@pytest.fixture
def cache(tmp_path: Path) -> ModelCache:
    return ModelCache(tmp_path / "cache")


def index_url(server: ModelServer) -> str:
    return f"{server.url}/files/index.json"


def translates(folder: Path) -> list[str]:
    """The folder serves: it loads and translates."""
    return Translator(folder, provider="cpu", threads=1).translate(["the house is small"])


# --- entries --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, name", [
    ("en-de", "argos-en-de"), ("argos:zt-en", "argos-zt-en"),
    ("Helsinki-NLP/opus-mt-en-de", "Helsinki-NLP--opus-mt-en-de"),
    ("facebook/nllb-200-distilled-600M:en,de,fr", "facebook--nllb-200-distilled-600M--en-de-fr"),
    ("Helsinki-NLP/opus-mt-en-de@v1.0", "Helsinki-NLP--opus-mt-en-de@v1.0"),
])
def test_entries_name_their_cache_folders(text: str, name: str):
    assert Entry.parse(text).name == name


def test_a_name_that_is_no_model_says_what_to_name():
    with pytest.raises(PullError, match="not a model name: name an Argos Translate pair"):
        Entry.parse("english to german")


# --- Argos Translate packages --------------------------------------------------------------------------------------


def test_an_argos_pair_is_fetched_converted_and_cached(server: ModelServer, cache: ModelCache,
                                                        caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, "model.pull")
    folder = pull("en-de", cache, VARIANTS, index_url(server))
    assert folder == cache.folder("argos-en-de") and FolderConfig.load(folder).pairs == [("en", "de")]
    assert translates(folder)
    assert cache.pulled(folder)["licence"] == "CC0" and "licence: CC0" in caplog.text
    assert [p.name for p in cache.root.iterdir() if p.name.endswith(".partial")] == []
    assert cache.progress() is None
    fetched = len(server.requests)
    assert pull("en-de", cache, VARIANTS, index_url(server)) == folder
    assert len(server.requests) == fetched, "a cached model touches no network"


def test_an_unknown_pair_names_the_pairs_there_are(server: ModelServer, cache: ModelCache):
    with pytest.raises(PullError, match="en-xx: the Argos Translate index has no package en-xx; it has de-en, en-de"):
        pull("en-xx", cache, VARIANTS, index_url(server))


def test_a_package_that_ours_cannot_run_says_why(server: ModelServer, cache: ModelCache, tmp_path: Path):
    """A package of relative positions, in the index as en-fr: one line with the reason, and no folder."""
    with zipfile.ZipFile(io.BytesIO(server.files[PACKAGE])) as archive:
        (tmp_path / "sentencepiece.model").write_bytes(archive.read("translate-en_de-1_0/sentencepiece.model"))
    spec = random_spec(opennmt_vocabulary(tmp_path / "sentencepiece.model"), with_relative_position=True, table=False)
    package = write_package(tmp_path / "translate-en_fr-1_0", spec, tmp_path / "sentencepiece.model", to_code="fr")
    server.files["fr.argosmodel"] = zip_package(package).read_bytes()
    index = json.loads(server.files["index.json"])
    index.append({"from_code": "en", "to_code": "fr", "links": [f"{server.url}/files/fr.argosmodel"]})
    server.files["index.json"] = json.dumps(index).encode()
    with pytest.raises(PullError, match="^en-fr: cannot be served: .* cannot be converted: it has relative positions"):
        pull("en-fr", cache, VARIANTS, index_url(server))
    assert cache.models() == [] and [p.name for p in cache.root.iterdir() if p.name.endswith(".partial")] == []


def test_a_bad_checksum_is_refused_and_nothing_is_kept(server: ModelServer, cache: ModelCache):
    server.files[PACKAGE] = server.files[PACKAGE][:-1] + b"!"
    with pytest.raises(PullError, match="en-de: the download failed .*SHA-256"):
        pull("en-de", cache, VARIANTS, index_url(server))
    assert cache.models() == [] and list((cache.root / ".downloads").iterdir()) == []


def test_an_interrupted_download_resumes(server: ModelServer, cache: ModelCache):
    path = f"/files/{PACKAGE}"
    server.cut(path)
    with pytest.raises(PullError, match="en-de: the download failed .*start again \\(the download resumes\\)"):
        pull("en-de", cache, VARIANTS, index_url(server))
    part = cache.root / ".downloads" / f"{PACKAGE}.part"
    assert 0 < part.stat().st_size < len(server.files[PACKAGE]) and cache.models() == []
    folder = pull("en-de", cache, VARIANTS, index_url(server))
    assert ("GET", path, f"bytes={len(server.files[PACKAGE]) // 2}-") in server.requests
    assert translates(folder)


def test_no_network_says_what_to_do(cache: ModelCache):
    with pytest.raises(PullError, match="en-de: cannot read the Argos Translate index .*check the network"):
        pull("en-de", cache, VARIANTS, "http://127.0.0.1:9/index.json")


def test_too_little_disk_is_found_before_the_download(server: ModelServer, cache: ModelCache,
                                                      monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(cache_module.shutil, "disk_usage", lambda path: type("usage", (), {"free": 1000})())
    with pytest.raises(PullError, match="en-de: needs about .* GiB free: free some space"):
        pull("en-de", cache, VARIANTS, index_url(server))
    assert not any(method == "GET" and path.endswith(PACKAGE) for method, path, _ in server.requests)


def test_replicas_sharing_the_cache_make_a_model_once(server: ModelServer, cache: ModelCache):
    folders = []
    threads = [threading.Thread(target=lambda: folders.append(pull("en-de", cache, VARIANTS, index_url(server))))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert folders == [cache.folder("argos-en-de")] * 2
    assert sum(method == "GET" and path.endswith(PACKAGE) for method, path, _ in server.requests) == 1


# --- Hugging Face models ----------------------------------------------------------------------------------------


def test_a_hub_model_is_fetched_by_huggingface_hub_and_served(server: ModelServer, cache: ModelCache,
                                                               caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, "model.pull")
    folder = pull(MARIAN_REPO, cache, VARIANTS, index_url(server))
    repo = server.repos[MARIAN_REPO]
    assert cache.pulled(folder) | {"time": None} == {"source": "hub", "repo": MARIAN_REPO, "revision": repo.sha,
                                                     "licence": "cc-by-4.0", "entry": MARIAN_REPO, "time": None}
    assert "licence: cc-by-4.0" in caplog.text
    assert any(path.endswith("/model.safetensors") for _, path, _ in server.requests)
    assert translates(folder)


def test_hub_downloads_report_their_bytes(server: ModelServer, cache: ModelCache, caplog: pytest.LogCaptureFixture,
                                         monkeypatch: pytest.MonkeyPatch):
    """The download's progress (the bar's, the log's tenths, /health's through the cache's progress file) counts the
    bytes of every file fetched, a dropped and retried one once."""
    caplog.set_level(logging.INFO, "model.pull")
    reports = []
    report = ModelCache.report
    monkeypatch.setattr(ModelCache, "report", lambda self, entry, stage, done=0, total=0: (
        reports.append((stage, done, total)), report(self, entry, stage, done, total)))
    repo = server.repos[MARIAN_REPO]
    weights = f"/{MARIAN_REPO}/resolve/{repo.sha}/model.safetensors"
    server.cut(weights)
    monkeypatch.setattr("huggingface_hub.constants.DOWNLOAD_CHUNK_SIZE", 2**16)  # the hub's files come in chunks
    pull(MARIAN_REPO, cache, VARIANTS, index_url(server))
    assert sum(method == "GET" and path == weights for method, path, _ in server.requests) == 2  # dropped, retried
    fetched = {path.rsplit("/", 1)[-1] for method, path, _ in server.requests
               if method == "GET" and "/resolve/" in path}
    total = sum(len(repo.files[name]) for name in fetched)
    downloads = [(done, all_) for stage, done, all_ in reports if stage == "download"]
    assert {all_ for _, all_ in downloads} == {total} and downloads[-1][0] == total
    dones = [done for done, _ in downloads]
    assert dones == sorted(dones) and len(set(dones)) > len(fetched)  # each file's chunks, not only whole files
    assert f"{MARIAN_REPO}: download 100 % of {total / 2**20:.1f} MiB" in caplog.text


def test_a_token_reaches_the_hub(server: ModelServer, cache: ModelCache, monkeypatch: pytest.MonkeyPatch):
    """HF_TOKEN, as huggingface_hub reads it: every request to the hub carries it (private and gated models)."""
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    pull(MARIAN_REPO, cache, VARIANTS, index_url(server))
    hub = [auth for (_, path, _), auth in zip(server.requests, server.authorizations) if MARIAN_REPO in path]
    assert hub and set(hub) == {"Bearer hf_test_token"}


def test_a_pinned_revision_and_an_unknown_one(server: ModelServer, cache: ModelCache):
    sha = server.repos[MARIAN_REPO].sha
    assert pull(f"{MARIAN_REPO}@{sha}", cache, VARIANTS, index_url(server)).is_dir()
    with pytest.raises(PullError, match="has no revision nope: name a commit, branch or tag"):
        pull(f"{MARIAN_REPO}@nope", cache, VARIANTS, index_url(server))


def test_an_unknown_repository_and_one_of_another_kind(server: ModelServer, cache: ModelCache):
    with pytest.raises(PullError, match="tiny/none: no repository tiny/none on the hub"):
        pull("tiny/none", cache, VARIANTS, index_url(server))
    with pytest.raises(PullError, match="tiny/bert: tiny/bert is a bert model, not a translation model"):
        pull("tiny/bert", cache, VARIANTS, index_url(server))
    assert not any(path.endswith("model.safetensors") for _, path, _ in server.requests)


def test_offline_the_cache_serves_and_a_missing_model_says_what_to_do(server: ModelServer, cache: ModelCache,
                                                                      monkeypatch: pytest.MonkeyPatch):
    folder = pull(MARIAN_REPO, cache, VARIANTS, index_url(server))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    assert pull(MARIAN_REPO, cache, VARIANTS, index_url(server)) == folder
    with pytest.raises(PullError, match="en-de: not in the cache .*HF_HUB_OFFLINE is set"):
        pull("en-de", cache, VARIANTS, index_url(server))
    with pytest.raises(PullError, match="tiny/bert: not in the cache .*cannot be reached"):
        pull("tiny/bert", cache, VARIANTS, index_url(server))


def test_the_models_that_work_are_served_unless_all_are_required(server: ModelServer, cache: ModelCache,
                                                                 caplog: pytest.LogCaptureFixture):
    names = ["en-xx", "en-de"]
    assert pull_all(names, cache, VARIANTS, index_url(server)) == [cache.folder("argos-en-de")]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith("en-xx: ")
    with pytest.raises(PullError, match="en-xx"):
        pull_all(names, cache, VARIANTS, index_url(server), required=True)


# --- the command ------------------------------------------------------------------------------------------------


def test_the_command_pulls_lists_and_removes(server: ModelServer, cache: ModelCache, capsys: pytest.CaptureFixture,
                                             monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TRANSLATOR_ARGOS_INDEX", index_url(server))
    pull_main(["en-de", "--cache", str(cache.root), "--variants", "fp32"])
    assert "argos-en-de: ready (en-de)" in capsys.readouterr().out
    pull_main(["--list", "--cache", str(cache.root)])
    listed = capsys.readouterr().out.split("\t")
    assert listed[:4] == ["argos-en-de", "en-de", "en-de", "licence: CC0"]
    pull_main(["--remove", "en-de", "--cache", str(cache.root)])
    assert "en-de: removed" in capsys.readouterr().out and cache.models() == []
    with pytest.raises(SystemExit) as exit_:
        pull_main(["en-xx", "en-de", "--cache", str(cache.root), "--variants", "fp32"])
    assert exit_.value.code == 2 and cache.models() == [cache.folder("argos-en-de")]


def test_the_command_without_names_pulls_the_setting_s_as_the_service_would(
        server: ModelServer, cache: ModelCache, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch):
    """compose's models service: TRANSLATOR_MODELS pulled; one that fails exits 2 only with
    TRANSLATOR_MODELS_REQUIRED, so that the translator, which waits for it to succeed, starts with the others."""
    monkeypatch.setenv("TRANSLATOR_ARGOS_INDEX", index_url(server))
    monkeypatch.setenv("TRANSLATOR_MODELS", "en-xx,en-de")
    pull_main(["--cache", str(cache.root), "--variants", "fp32"])
    assert "argos-en-de: ready (en-de)" in capsys.readouterr().out
    monkeypatch.setenv("TRANSLATOR_MODELS_REQUIRED", "true")
    with pytest.raises(SystemExit) as exit_:
        pull_main(["--cache", str(cache.root), "--variants", "fp32"])
    assert exit_.value.code == 2
    monkeypatch.setenv("TRANSLATOR_MODELS", "")
    pull_main(["--cache", str(cache.root)])
    assert "no models named" in capsys.readouterr().out


def test_weights_are_unchanged_by_the_cache(server: ModelServer, cache: ModelCache, marian_repo: Path):
    """The hub's snapshot is the repository's files, byte for byte."""
    pull(MARIAN_REPO, cache, VARIANTS, index_url(server))
    snapshots = list((cache.root / ".hub").rglob("model.safetensors"))
    assert snapshots and np.array_equal(np.frombuffer(snapshots[0].read_bytes(), np.uint8),
                                        np.frombuffer((marian_repo / "model.safetensors").read_bytes(), np.uint8))
    assert json.loads((cache.folder(Entry.parse(MARIAN_REPO).name) / PULLED_FILE).read_text())["source"] == "hub"


# --- the service's start ------------------------------------------------------------------------------------------


def start_log(tmp_path: Path, server: ModelServer, monkeypatch: pytest.MonkeyPatch, **settings: object):
    """`python -m service` with the shipped models and TRANSLATOR_MODELS from the stand-in: the /health bodies seen
    while it starts (each with the status /ready answered just after), and its log once ready."""
    port = launch.free_port()
    monkeypatch.setattr(launch, "free_port", lambda: port)
    seen, ready = [], threading.Event()

    def poll() -> None:
        while not ready.is_set():
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).json()
                seen.append(health | {"ready": httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code})
            except httpx.HTTPError:
                pass
            time.sleep(0.05)

    thread = threading.Thread(target=poll)
    thread.start()
    log = tmp_path / "service.log"
    try:
        with launch.running_service(SHIPPED_MODELS, log, ready_timeout=300, http_workers=1, provider="cpu",
                                    model_cache=tmp_path / "cache", argos_index=index_url(server), **settings) as s:
            ready.set()
            languages = httpx.get(f"{s.url}/languages").json()
    finally:
        ready.set()
        thread.join()
    return seen, log.read_text(), languages


def test_named_models_are_served_at_the_first_start(tmp_path: Path, server: ModelServer,
                                                     monkeypatch: pytest.MonkeyPatch):
    """The Argos pair is pulled while /health reports it; the unknown pair gets one line and the service starts
    with the rest; the pulled en-de serves en-de, and the line names the shipped folder that also has it."""
    seen, log, languages = start_log(tmp_path, server, monkeypatch, models="en-xx,en-de")
    pulling = [body for body in seen if body.get("pulling")]
    assert {"download", "convert", "export"} & {body["pulling"]["stage"] for body in pulling}, seen[-5:]
    assert {body["ready"] for body in pulling} == {503}
    downloads = [body["pulling"] for body in pulling if body["pulling"]["stage"] == "download"]
    assert all(0 <= d["done"] <= d["total"] == len(server.files[PACKAGE]) for d in downloads), downloads
    assert [line for line in log.splitlines() if "en-xx: the Argos Translate index has no package en-xx" in line]
    cached = tmp_path / "cache" / "argos-en-de"
    assert re.search(f"{cached} serves en-de, which {SHIPPED_MODELS / 'en-de'} also translates", log), log[-3000:]
    assert {language["code"] for language in languages} >= {"en", "de"}


def test_a_second_start_uses_the_cache_without_the_network(tmp_path: Path, server: ModelServer,
                                                           monkeypatch: pytest.MonkeyPatch):
    pull("en-de", ModelCache(tmp_path / "cache"), ["fp32", "int8"], index_url(server))
    fetched = len(server.requests)
    _, log, _ = start_log(tmp_path, server, monkeypatch, models="en-de")
    assert len(server.requests) == fetched and "argos-en-de" in log


def test_required_models_refuse_to_start(tmp_path: Path, server: ModelServer):
    env = launch.service_env(SHIPPED_MODELS, launch.free_port(), {
        "models": "en-xx", "models_required": "true", "model_cache": tmp_path / "cache",
        "argos_index": index_url(server), "http_workers": 1, "provider": "cpu"})
    done = subprocess.run([sys.executable, "-m", "service"], env=env, capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "en-xx: the Argos Translate index has no package en-xx; it has de-en, en-de" in output
    assert "TRANSLATOR_MODELS: en-xx not served (the lines above say why); TRANSLATOR_MODELS_REQUIRED: the service " \
        "does not start" in output


def test_without_the_converters_a_missing_model_says_where_to_pull_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture):
    """The serving image has no torch: there a named model missing from the cache is not pulled (the models service
    of compose pulls it first); one line names it and says where to pull it."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == "torch" else find_spec(name))
    monkeypatch.setattr(service_models.subprocess, "run", lambda *args, **kwargs: pytest.fail("model.pull was run"))
    settings = Settings(models=["en-de"], model_cache=tmp_path / "cache")
    assert service_models.named_folders(settings) == []
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors[0].startswith(f"en-de: not in the model cache {tmp_path / 'cache'}, and this installation cannot "
                                "make it (no torch): pull it where '.[pull]' is installed"), errors
    assert errors[1].startswith("TRANSLATOR_MODELS: en-de not served")


def test_an_unreachable_hub_says_what_to_do(cache: ModelCache, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(PullError, match=f"{MARIAN_REPO}: the hub cannot be reached .*check the network or HF_ENDPOINT"):
        pull(MARIAN_REPO, cache, VARIANTS, "http://127.0.0.1:9/index.json")


# --- a disk that fills during a pull ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_disk() -> Callable[..., list[str]]:
    """The command line that runs a shell script on a disk of `size` bytes mounted at `folder`: a tmpfs in a mount
    namespace of the script's own (unshare), so that writes past its size fail with the kernel's ENOSPC."""
    def command(size: int, folder: Path, script: str) -> list[str]:
        folder.mkdir(parents=True, exist_ok=True)
        return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                f"mount -t tmpfs -o size={size} tmpfs {folder} && {script}"]

    probe = subprocess.run(command(2**16, Path(tempfile.mkdtemp()), "true"), capture_output=True, text=True)
    if probe.returncode:
        pytest.skip(f"no small disk can be made here (unshare and mount of a tmpfs): {probe.stderr.strip()}")
    return command


def full_disk_line(entry: str, cache: Path) -> str:
    return (f"{entry}: the disk of {cache} is full: free some space (python -m model.pull --remove NAME) or point "
            "TRANSLATOR_MODEL_CACHE at a larger disk")


# The room left beside the package's download: none (the download itself fills the disk), less than model.pt
# (the conversion does), less than model.pt and the first graph (the export does).
ROOM = {"download": None, "convert": 2**19, "export": 3 * 2**19}


@pytest.mark.parametrize("stage", list(ROOM))
def test_a_disk_that_fills_during_a_pull_leaves_no_half_folder(stage: str, server: ModelServer, tmp_path: Path,
                                                              small_disk: Callable[..., list[str]]):
    """The index's server gives no size, so the check of free space cannot see it coming; the disk fills at each
    stage in turn: one line names the entry and what to do, and the cache holds no folder of it."""
    package = server.files[PACKAGE]
    server.sizeless.add(f"/files/{PACKAGE}")
    room = ROOM[stage]
    cache = tmp_path / "cache"
    script = (f"{sys.executable} -m model.pull en-de --cache {cache} --index {index_url(server)} --variants fp32 int8;"
              f" echo exit $?; ls -A {cache}; ls -l {cache}/.downloads")
    done = subprocess.run(small_disk(len(package) // 2 if room is None else len(package) + room, cache, script),
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    out, err = done.stdout, done.stderr
    assert "exit 2" in out, out + err
    assert [line for line in err.splitlines() if "full" in line] == [full_disk_line("en-de", cache)], err
    assert "Traceback" not in err, err
    assert ("en-de: converting" in err) == (stage != "download") and ("exporting" in err) == (stage == "export"), err
    listed = out.split("exit 2", 1)[1].split()
    assert "argos-en-de" not in listed and ".argos-en-de.partial" not in listed, out
    if stage == "download":  # the part that was written stays, for the download to resume once there is room
        assert f"{PACKAGE}.part" in out
    else:
        assert f" {len(package)} " in out and PACKAGE in out  # the download, whole and checked


def test_on_a_full_disk_the_service_starts_with_the_others_or_refuses(server: ModelServer, tmp_path: Path,
                                                                       small_disk: Callable[..., list[str]]):
    server.sizeless.add(f"/files/{PACKAGE}")
    cache = tmp_path / "cache"
    settings = {"models": "en-de", "model_cache": cache, "argos_index": index_url(server), "http_workers": 1,
                "provider": "cpu", "threads": 1, "data_dir": tmp_path / "data"}
    size = len(server.files[PACKAGE]) // 2

    env = launch.service_env(SHIPPED_MODELS, launch.free_port(), settings | {"models_required": "true"})
    done = subprocess.run(small_disk(size, cache, f"exec {sys.executable} -m service"), env=env, capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode != 0 and full_disk_line("en-de", cache) in done.stdout + done.stderr
    assert "TRANSLATOR_MODELS_REQUIRED: the service does not start" in done.stdout + done.stderr

    port = launch.free_port()
    log = tmp_path / "service.log"
    command = small_disk(size, cache, f"exec {sys.executable} -m service")
    with running(command, launch.service_env(SHIPPED_MODELS, port, settings), log) as proc:
        wait_until(lambda: answers_ready(f"http://127.0.0.1:{port}/ready"), proc, log, "the start", timeout=300)
        languages = {language["code"] for language in httpx.get(f"http://127.0.0.1:{port}/languages").json()}
    assert languages >= {"en", "de"} and full_disk_line("en-de", cache) in log.read_text()
