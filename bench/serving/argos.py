"""LibreTranslate's side of bench.serving.servers: its virtual environment, our model as Argos Translate packages,
and the environment that lets it run offline.

- The venv is bench/.envs/libretranslate (git-ignored), made here on first use: LibreTranslate 1.9.6
  (CTranslate2, argos-translate-lt, MiniSBD; no torch) plus spaCy.
- An .argosmodel is a zip of one folder holding metadata.json, the CTranslate2 model in model/ and the
  SentencePiece model as sentencepiece.model (argostranslate/package.py). We package the same
  conversion twice, en->de and de->en: LibreTranslate started with fewer than two packages installed
  tries to download the package index.
- Sentence splitting: argos-translate-lt picks its splitter with ARGOS_CHUNK_TYPE; the default
  (ARGOSTRANSLATE, = MINISBD) downloads a MiniSBD model on first use, STANZA needs downloaded Stanza
  models, and NONE is not implemented (PackageTranslation raises NotImplementedError). SPACY loads a spaCy
  pipeline shipped inside the package (folder spacy/) and adds spaCy's rule-based sentencizer to it, so
  each package carries a blank multilingual spaCy pipeline: rule-based splitting like our service's, and
  nothing to download. One thing is left: with SPACY, importing argostranslate.sbd calls cache_spacy(),
  which downloads xx_sent_ud_sm unless ARGOS cache/spacy/senter/model exists; we create that folder
  (the cached pipeline is then never loaded, the packaged one is used).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from bench.common.ct2_engine import CASE_TAG_TOKENS
from bench.common.defaults import LIBRETRANSLATE_VERSION, REPO

VENV = REPO / "bench" / ".envs" / "libretranslate"
HOME = REPO / "bench" / ".envs" / "libretranslate-home"  # XDG dirs and Argos packages of the benchmark's server
# rich<13: flask-limiter 2.6 (LibreTranslate) needs it; spaCy would upgrade it.
REQUIREMENTS = [f"libretranslate=={LIBRETRANSLATE_VERSION}", "spacy==3.8.18", "rich>=12,<13"]
LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "cs": "Czech"}


def python() -> Path:
    return VENV / "bin" / "python"


def run_python(script: str, *argv: str, env: dict[str, str] | None = None) -> str:
    """Run a script with the LibreTranslate venv's python; its standard output."""
    command = [str(python()), "-W", "ignore", "-c", script, *argv]
    return subprocess.run(command, check=True, env=env, stdout=subprocess.PIPE, text=True).stdout


def ensure_venv() -> Path:
    """Create bench/.envs/libretranslate with LibreTranslate and spaCy unless it is there; its python."""
    if not (VENV / "bin" / "libretranslate").exists():
        subprocess.run(["python3", "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python()), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
        subprocess.run([str(python()), "-m", "pip", "install", "-q", *REQUIREMENTS], check=True)
    return python()


def versions() -> dict[str, str]:
    """Versions of what the LibreTranslate server runs, read in its venv."""
    script = (
        "import json; from importlib import metadata as m; "
        "print(json.dumps({n: m.version(n) for n in ['libretranslate', 'argos-translate-lt', 'ctranslate2', "
        "'sentencepiece', 'spacy', 'minisbd']}))"
    )
    return json.loads(run_python(script))


def environment(threads: int, compute_type: str, beam_size: int) -> dict[str, str]:
    """The server's environment: isolated XDG dirs and packages, offline sentence splitting, CTranslate2 settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARGOS_", "XDG_", "LT_"))}
    env.update(
        {
            "XDG_DATA_HOME": str(HOME / "data"),
            "XDG_CONFIG_HOME": str(HOME / "config"),
            "XDG_CACHE_HOME": str(HOME / "cache"),
            "ARGOS_PACKAGES_DIR": str(HOME / "packages"),
            "ARGOS_CHUNK_TYPE": "SPACY",
            "ARGOS_DEVICE_TYPE": "cpu",
            "ARGOS_INTER_THREADS": "1",
            "ARGOS_INTRA_THREADS": str(threads),
            "ARGOS_COMPUTE_TYPE": compute_type,
            "ARGOS_BEAM_SIZE": str(beam_size),
        }
    )
    return env


def write_spacy_pipeline(folder: Path) -> None:
    """A blank multilingual spaCy pipeline (tokenizer only), written by the LibreTranslate venv's spaCy."""
    run_python("import sys, spacy; spacy.blank('xx').to_disk(sys.argv[1])", str(folder))


def build_package(ct2_dir: Path, out_dir: Path, from_code: str, to_code: str, version: str = "1.0") -> Path:
    """An .argosmodel of the CTranslate2 conversion ct2_dir (with its spm.model) for from_code -> to_code."""
    if json.loads((ct2_dir / "shared_vocabulary.json").read_text(encoding="utf-8"))[-1] in CASE_TAG_TOKENS:
        print(f"warning: {ct2_dir} reads case tags (core.tokenizer), which Argos Translate's SentencePiece-only "
              "tokenization does not add: LibreTranslate gets the same weights and sources without their tags, so "
              "its translations of capitalized words differ from ours", file=sys.stderr)
    name = f"translate-{from_code}_{to_code}-{version.replace('.', '_')}"
    metadata = {
        "package_version": version,
        "argos_version": "1.9",
        "from_code": from_code,
        "from_name": LANGUAGE_NAMES.get(from_code, from_code),
        "to_code": to_code,
        "to_name": LANGUAGE_NAMES.get(to_code, to_code),
        "type": "translate",
        "links": [],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.argosmodel"
    with tempfile.TemporaryDirectory() as tmp:
        spacy_dir = Path(tmp) / "spacy"
        write_spacy_pipeline(spacy_dir)
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(f"{name}/metadata.json", json.dumps(metadata, indent=2))
            zf.write(ct2_dir / "spm.model", f"{name}/sentencepiece.model")
            for file in sorted(ct2_dir.iterdir()):
                zf.write(file, f"{name}/model/{file.name}")
            for file in sorted(p for p in spacy_dir.rglob("*") if p.is_file()):
                zf.write(file, f"{name}/spacy/{file.relative_to(spacy_dir)}")
    return path


def install_packages(ct2_dir: Path, source: str, target: str, out_dir: Path) -> list[Path]:
    """Fresh HOME with our model installed as source->target and target->source Argos packages."""
    shutil.rmtree(HOME, ignore_errors=True)
    (HOME / "cache" / "argos-translate" / "spacy" / "senter" / "model").mkdir(parents=True)  # see the docstring
    packages = [build_package(ct2_dir, out_dir, source, target), build_package(ct2_dir, out_dir, target, source)]
    script = "import sys; from argostranslate import package; [package.install_from_path(p) for p in sys.argv[1:]]"
    run_python(script, *map(str, packages), env=environment(threads=1, compute_type="auto", beam_size=1))
    return packages
