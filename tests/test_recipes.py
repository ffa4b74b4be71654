"""README's conversion recipes, run as written on small random-weight models: none overwrites a folder, each leaves
folders ready to serve, and the service's start takes them all.

The commands are read from the ```bash blocks of README.md's sections on serving other models (every
`python -m model.convert`, `model.pull` and `export` line, and the `python -m service` lines, whose start is checked
by service.models.served_folders without serving), and run by bash in a folder holding a copy of the shipped
models/ and small models under the names the README downloads them as: OPUS-MT (tests/test_convert.py's), OPUS-MT
models of several targets, an NLLB-200 model of its 202 languages (tests/test_convert_m2m.py's tokenizer) and Argos
Translate packages (bench.common.argos_package), installed in ~/.local/share/argos-translate/packages and as an
.argosmodel file. The models that the README names (`python -m model.pull`, TRANSLATOR_MODELS) come from
tests/model_server.py's stand-in for the hub and the Argos index, which holds the same small models under the
README's names.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sentencepiece as spm
import torch
from conftest import MIXED_SENTENCES

pytest.importorskip("ctranslate2")

from model_server import ModelServer, Repo  # noqa: E402
from test_convert import write_marian, write_tokenizer  # noqa: E402
from test_convert_m2m import TINY as M2M_TINY  # noqa: E402
from test_convert_m2m import nllb_tokenizer  # noqa: E402
from transformers import M2M100Config, M2M100ForConditionalGeneration  # noqa: E402

from bench.common.argos_package import opennmt_vocabulary, random_spec, write_package, zip_package  # noqa: E402
from core.folder import model_folders  # noqa: E402
from service.settings import SHIPPED_MODELS  # noqa: E402

README = Path(__file__).resolve().parent.parent / "README.md"
RECIPE = re.compile(r"^(?:\S+=\S+ )*python -m (?:model\.convert|model\.pull|export|service)(?:\s|$)")
SERVICE_START = ("python -c 'from service.models import served_folders; from service.settings import Settings; "
                 "print(*served_folders(Settings()))'")


def recipes() -> list[str]:
    """The conversion, export and start lines of README's "### Serve ..." sections, in order, without their
    comments."""
    sections = re.split(r"^#+ ", README.read_text(), flags=re.M)
    blocks = [block for section in sections if section.startswith("Serve ")
              for block in re.findall(r"```bash\n(.*?)```", section, re.S)]
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if RECIPE.match(line)]


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def write_nllb(folder: Path, sentencepiece_model: Path) -> None:
    folder.mkdir()
    tokenizer = nllb_tokenizer(folder, sentencepiece_model)
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    M2M100ForConditionalGeneration(M2M100Config(vocab_size=len(tokenizer), **M2M_TINY)).save_pretrained(folder)


def write_argos(home: Path, work: Path, sentencepiece_model: Path) -> None:
    installed = home / ".local/share/argos-translate/packages"
    vocabulary = opennmt_vocabulary(sentencepiece_model)
    for seed, (source, target) in enumerate([("en", "de"), ("fr", "en")]):
        write_package(installed / f"translate-{source}_{target}-1_0", random_spec(vocabulary, seed),
                      sentencepiece_model, from_code=source, to_code=target)
    package = write_package(work / "package" / "translate-en_de-1_0", random_spec(vocabulary, 5), sentencepiece_model)
    zip_package(package).rename(work / "translate-en_de-1_0.argosmodel")


@pytest.fixture(scope="module")
def workplace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("recipes")
    shutil.copytree(SHIPPED_MODELS, work / "models")
    tokenizers = tmp_path_factory.mktemp("tokenizers")
    for name, target, tokens in [("fr", "fr", ()), ("romance", "mul", (">>fra<<", ">>spa<<", ">>ita<<")),
                                 ("zh", "zh", (">>cmn_Hans<<", ">>cmn_Hant<<"))]:
        (tokenizers / name).mkdir()
        write_tokenizer(tokenizers / name, tokens, target_lang=target)
    write_marian(work / "opus-mt-en-fr", tokenizers / "fr")
    write_marian(work / "opus-mt-en-ROMANCE", tokenizers / "romance")
    write_marian(work / "opus-mt-en-zh", tokenizers / "zh")
    spm.SentencePieceTrainer.train(sentence_iterator=iter(MIXED_SENTENCES * 20), model_writer=(buffer := io.BytesIO()),
                                   model_type="bpe", vocab_size=150, character_coverage=1.0, minloglevel=2)
    (tokenizers / "sentencepiece.bpe.model").write_bytes(buffer.getvalue())
    write_nllb(work / "nllb-200-distilled-600M", tokenizers / "sentencepiece.bpe.model")
    (tokenizers / "argos.model").write_bytes(buffer.getvalue())
    write_argos(work / "home", work, tokenizers / "argos.model")
    (work / "bin").mkdir()
    (work / "bin" / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (work / "bin" / "python").chmod(0o755)
    return work


@pytest.fixture(scope="module")
def server(workplace: Path) -> Iterator[ModelServer]:
    """The README's named models: Helsinki-NLP/opus-mt-en-es, facebook/nllb-200-distilled-600M, Argos en-fr."""
    model_server = ModelServer()
    model_server.repos["Helsinki-NLP/opus-mt-en-es"] = Repo(workplace / "opus-mt-en-fr")
    model_server.repos["facebook/nllb-200-distilled-600M"] = Repo(workplace / "nllb-200-distilled-600M",
                                                                  licence="cc-by-nc-4.0")
    package = (workplace / "translate-en_de-1_0.argosmodel").read_bytes()
    model_server.files["translate-en_fr-1_0.argosmodel"] = package
    model_server.files["index.json"] = json.dumps([{
        "from_code": "en", "to_code": "fr", "package_version": "1.0", "checksum": hashlib.sha256(package).hexdigest(),
        "links": [f"{model_server.url}/files/translate-en_fr-1_0.argosmodel"]}]).encode()
    with model_server.running():
        yield model_server


def test_the_readme_recipes_run_as_written(workplace: Path, server: ModelServer):
    lines = recipes()
    assert sum("model.convert" in line for line in lines) >= 6 and any("python -m service" in line for line in lines)
    assert any("python -m model.pull" in line for line in lines)
    shipped = digest(workplace / "models")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRANSLATOR_", "HF_"))} | {
        "HOME": str(workplace / "home"), "PATH": f"{workplace / 'bin'}:{os.environ['PATH']}",
        "PYTHONPATH": str(README.parent), "TRANSLATOR_MODEL_CACHE": str(workplace / "cache"),
        "HF_ENDPOINT": server.url, "TRANSLATOR_ARGOS_INDEX": f"{server.url}/files/index.json"}
    for line in lines:
        command = line.replace("python -m service", SERVICE_START)
        done = subprocess.run(["bash", "-c", command], cwd=workplace, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        assert "ERROR" not in done.stderr and " not served" not in done.stderr, f"{line}\n{done.stderr[-3000:]}"
    after = digest(workplace / "models")
    assert {name: after.get(name) for name in shipped} == shipped, "the shipped models are unchanged"
    for folder in model_folders(workplace / "models") + model_folders(workplace / "models/argos"):
        assert (folder / "encoder.onnx").is_file(), f"{folder} is not ready to serve"
    assert not list(workplace.glob("**/*.partial")) and not (workplace / "models" / "*").exists()


def test_a_recipe_that_would_overwrite_a_model_is_refused(workplace: Path, tmp_path: Path):
    """A package converted into the shipped en-de's folder: refused, the folder untouched; --force replaces it."""
    target = tmp_path / "en-de"
    shutil.copytree(SHIPPED_MODELS / "en-de", target)
    before = digest(target)
    command = [sys.executable, "-m", "model.convert", str(workplace / "translate-en_de-1_0.argosmodel"), "--out",
               str(target), "--export", "fp32"]
    done = subprocess.run(command, cwd=README.parent, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and f"{target} holds another model" in done.stderr and "--force" in done.stderr
    assert digest(target) == before
    done = subprocess.run([*command, "--force"], cwd=README.parent, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert (target / "vocabulary.json").is_file() and not (target / "spm.model").exists()
