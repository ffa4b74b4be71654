"""Argos Translate packages, the models LibreTranslate serves, converted into model folders of ours.

    python -m model.convert ~/.local/share/argos-translate/packages --out models   # every installed package
    python -m model.convert translate-en_de-1_9.argosmodel --out models/en-de      # one package file
    python -m export models/en-de/model.pt --out models/en-de                      # then each folder, as any other

A package (argostranslate's package.py) is a folder holding metadata.json (from_code, to_code, type, ...), model/
(a CTranslate2 model), sentencepiece.model, and perhaps stanza/ (its sentence splitter; ours is sentencex, so it
is not needed). An .argosmodel file is a zip of that folder, which argostranslate extracts into its packages folder
(PACKAGES_DIR). A folder of packages converts into one model folder per package, named by its pair (en-de).

A model folder gets model.pt (model.ctranslate2_model: our Transformer with the CTranslate2 model's weights) and
the tokenizer files core.tokenizer.ARGOS_FILES: the package's sentencepiece.model, and vocabulary.json, the
CTranslate2 vocabulary with the ids of its special tokens. Argos Translate gives CTranslate2 a sentence's
SentencePiece pieces as its tokens (argostranslate/tokenizer.py, translate.py); core.tokenizer.ArgosTokenizer maps
the same pieces through that vocabulary. Packages that Locomotive makes from OPUS-MT models (CTranslate2's Marian
conversion: a zero start embedding) convert too (model.ctranslate2_model.zero_start), and so do packages whose
translations start with a target prefix (metadata.json's target_prefix: one token, which decoding is forced to
begin with and translations leave out, ModelConfig.target_prefix), and so do packages of a BPE tokenizer
(bpe.model in place of sentencepiece.model: Moses's tokenization and subword-nmt's merges, which Locomotive writes
for OPUS-MT's older models; the folder gets core.tokenizer.ARGOS_BPE_FILES, whose vocabulary.json names the two
languages that Moses reads and writes). Refused, with the reason: packages of another kind than "translate", and
models that ours cannot run (model.ctranslate2_model.unsupported).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from core.folder import ModelConfig, pair_name
from core.model_cache import replacing
from core.tokenizer import ARGOS_BPE_FILES, ARGOS_FILES
from model.ctranslate2_model import CTranslate2Model, read_model, to_transformer
from model.out_folder import export as export_graphs
from model.transformer import Transformer

PACKAGES_DIR = Path.home() / ".local/share/argos-translate/packages"  # where argostranslate installs them
METADATA = "metadata.json"
# the tokenizer's model: a package and a model folder name it alike; argostranslate reads BPE where a package has
# no SENTENCEPIECE
SENTENCEPIECE, BPE = ARGOS_FILES["sentencepiece"], ARGOS_BPE_FILES["bpe"]


def is_package(path: Path) -> bool:
    """An installed package (a folder with metadata.json) or a package file (a zip: .argosmodel)."""
    return (path / METADATA).is_file() or (path.is_file() and zipfile.is_zipfile(path))


def package_paths(path: Path) -> list[Path]:
    """The packages that `path` names: itself, or the packages directly in it (a folder of installed packages);
    empty for anything else."""
    if is_package(path):
        return [path]
    return sorted(p for p in path.iterdir() if is_package(p)) if path.is_dir() else []


@contextmanager
def opened(package: Path) -> Iterator[Path]:
    """The package's folder: `package` itself, or the folder that a package file holds, extracted for the while."""
    if package.is_dir():
        yield package
        return
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(package) as archive:
        archive.extractall(tmp)
        found = [f for f in [Path(tmp), *Path(tmp).iterdir()] if (f / METADATA).is_file()]
        if len(found) != 1:
            raise ValueError(f"{package} holds no package: no {METADATA} at its top or in one folder there")
        yield found[0]


def read_metadata(folder: Path) -> dict:
    """metadata.json, with argostranslate's default type ("translate"); a translation package names its languages."""
    metadata = {"type": "translate"} | json.loads((folder / METADATA).read_text(encoding="utf-8"))
    if metadata["type"] == "translate" and not (metadata.get("from_code") and metadata.get("to_code")):
        raise ValueError(f"{folder / METADATA} names no from_code and to_code")
    return metadata


def package_problems(folder: Path, metadata: dict) -> list[str]:
    """Why the package cannot be converted, before its model is read; empty if it can."""
    checks = {
        f"type {metadata['type']!r}: not a translation package": metadata["type"] != "translate",
        f"no tokenizer: neither {SENTENCEPIECE} nor {BPE}": tokenizer_files(folder) is None,
    }
    return [reason for reason, applies in checks.items() if applies]


def tokenizer_files(folder: Path) -> dict[str, str] | None:
    """The model folder's tokenizer files (core.tokenizer's layout) for the package's tokenizer, as argostranslate
    picks it: its SentencePiece model, else its BPE model; None where it has neither."""
    if (folder / SENTENCEPIECE).is_file():
        return ARGOS_FILES
    return ARGOS_BPE_FILES if (folder / BPE).is_file() else None


def vocabulary(ct2: CTranslate2Model, cfg: ModelConfig, bpe: bool) -> dict:
    """vocabulary.json (core.tokenizer.ArgosVocabulary): the tokens in id order, <unk>'s id, and the ids of the
    special tokens, which translations leave out (a target prefix too, as Argos Translate drops it); for a BPE
    tokenizer, the languages that Moses tokenizes and detokenizes."""
    tokens = ct2.target_vocabulary
    bos = ct2.config.get("bos_token")
    special = {cfg.pad_id, cfg.unk_id, cfg.bos_id, cfg.eos_id} | ({tokens.index(bos)} if bos in tokens else set())
    special |= set() if cfg.target_prefix is None else {cfg.target_prefix}
    languages = {"languages": [cfg.src_lang, cfg.tgt_lang]} if bpe else {}
    return {"tokens": tokens, "unk_id": cfg.unk_id, "special_ids": sorted(special)} | languages


def convert_package(folder: Path, metadata: dict, out: Path) -> Transformer:
    """Write the model folder `out` (model.pt and its tokenizer_files) of the package in `folder`; returns our model.
    Nothing is written for a package that is refused (ValueError, with the reasons)."""
    if problems := package_problems(folder, metadata):
        raise ValueError(f"{folder} cannot be converted: it has " + "; ".join(problems))
    ct2 = read_model(folder / "model")
    model = to_transformer(ct2, metadata["from_code"], metadata["to_code"])
    if prefix := metadata.get("target_prefix"):
        if prefix not in ct2.target_vocabulary:
            raise ValueError(f"{folder} cannot be converted: it has a target prefix {prefix!r} that is not a token "
                             "of its vocabulary")
        model.cfg.target_prefix = ct2.target_vocabulary.index(prefix)
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"config": model.cfg.to_dict(), "model": model.state_dict()}, out / "model.pt")
    files = tokenizer_files(folder)
    bpe = files is ARGOS_BPE_FILES
    shutil.copy(folder / (BPE if bpe else SENTENCEPIECE), out)
    text = json.dumps(vocabulary(ct2, model.cfg, bpe), ensure_ascii=False)
    (out / files["vocabulary"]).write_text(text, encoding="utf-8")
    return model


def convert_packages(path: Path, out: Path, force: bool = False, export: list[str] | None = None) -> int:
    """python -m model.convert for Argos Translate: the package `path` into the model folder `out`, or every
    translation package of the folder `path` into out/<from>-<to> (a folder that holds another model is refused
    unless `force`; each exported in the precisions of `export`, if given); prints each result, and the reasons of
    those refused. Returns the exit status: 0, or 2 where a package was refused."""
    packages = package_paths(path)
    one = packages == [path]
    written: set[Path] = set()
    refused = 0
    for package in packages:
        try:
            with opened(package) as folder:
                metadata = read_metadata(folder)
                if not one and metadata["type"] != "translate":
                    print(f"{package}: skipped, a package of type {metadata['type']!r}, not a translation package")
                    continue
                target = out if one else out / pair_name(metadata["from_code"], metadata["to_code"])
                if target in written:
                    raise ValueError(f"{package} cannot be converted: {target} was written from another package")
                with replacing(target, force) as partial:
                    model = convert_package(folder, metadata, partial)
                    if export:
                        export_graphs(partial, export)
        except ValueError as e:
            print(f"model.convert: {e}", file=sys.stderr)
            refused += 1
            continue
        written.add(target)
        print(f"{package} -> {target}: {model.num_parameters():,} parameters, {model.cfg}")
    if written and not export:
        print("next, for each model folder: python -m export MODEL_DIR/model.pt --out MODEL_DIR")
    return 2 if refused else 0
