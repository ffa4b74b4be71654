"""Models by name: fetched, converted and exported into the model cache, ready to serve.

    python -m model.pull NAME... [--cache DIR]      each missing entry fetched, converted and exported
    python -m model.pull                            TRANSLATOR_MODELS's entries (compose's models service): exits
                                                    with 0 where some could not be made, unless
                                                    TRANSLATOR_MODELS_REQUIRED, so that the service starts with
                                                    the others
    python -m model.pull --list                     the cached models: name, pairs, source, licence, size
    python -m model.pull --remove NAME...           cached models deleted

A NAME (an entry of TRANSLATOR_MODELS, which the service pulls the same way at start) is
    en-de  or  argos:en-de                          Argos Translate's package of that pair (LibreTranslate's), from
                                                    its index (TRANSLATOR_ARGOS_INDEX) with its links and checksum
    Helsinki-NLP/opus-mt-en-de                      a Hugging Face model by repository: Marian (OPUS-MT), M2M100 or
    facebook/nllb-200-distilled-600M:en,de,fr       NLLB-200; after ':' the languages to serve (many-to-many
    Helsinki-NLP/opus-mt-en-ROMANCE:fr,es           models: every pair among them; multi-target Marian models: the
    Helsinki-NLP/opus-mt-en-de@<revision>           targets); after '@' a pinned revision (a commit, branch or tag)
The hub is reached through huggingface_hub: HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE apply (offline, the Argos
index is not read either). A model already in the cache is used as it is, without the network.

Each entry's licence is shown when it is fetched; free disk space is checked first; downloads resume and are
checked (huggingface_hub's ETags, the Argos index's SHA-256); the model folder is made in a hidden folder of the
cache and renamed into place once exported, under a lock that replicas sharing the cache wait on.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm

from core.folder import FolderConfig
from core.model_cache import GIB, HOW, PULLED_FILE, Entry, ModelCache, NoSpace, PullError
from model import argos_index
from model.argos_index import Progress
from model.out_folder import export as export_graphs

log = logging.getLogger("model.pull")

# Bytes of disk that one byte of download takes, about: the download, model.pt, the fp32 and int8 graphs. An Argos
# package holds int8 weights (a quarter of fp32), a hub model fp32 or fp16 ones.
SPACE_PER_BYTE = {"argos": 12, "hub": 4}
HUB_FILES = ["*.json", "*.spm", "*.model", "*.txt"]  # besides the weights: configuration and tokenizer files
CONVERTIBLE = {"marian": "Marian (OPUS-MT)", "m2m_100": "M2M100 or NLLB-200"}
FULL_BELOW = 2**20  # free bytes of a disk that is full (disk_full)


# --- fetching -------------------------------------------------------------------------------------------------------


def offline() -> bool:
    from huggingface_hub import constants

    return constants.HF_HUB_OFFLINE


def reporter(cache: ModelCache, entry: Entry, stage: str, unit: str):
    """A progress callback (done, total): a bar on a terminal, a log line each tenth, and the cache's progress file
    (the service's /health)."""
    bar = tqdm(desc=f"{entry.text}: {stage}", unit=unit, unit_scale=True, disable=not sys.stderr.isatty())
    logged = [-1]

    def report(done: int, total: int) -> None:
        bar.total = total or None
        bar.update(done - bar.n)
        cache.report(entry.text, stage, done, total)
        if total and (tenth := 10 * done // total) > logged[0]:
            logged[0] = tenth
            log.info("%s: %s %d %% of %.1f MiB", entry.text, stage, 10 * tenth, total / 2**20)

    return report


def fetch_argos(entry: Entry, cache: ModelCache, index_url: str) -> tuple[Path, dict]:
    """The entry's .argosmodel file, downloaded into the cache, and what pulled.json records of it."""
    if offline():
        raise PullError(f"{entry.text}: not in the cache {cache.root}, and HF_HUB_OFFLINE is set: pull it with the "
                        "network (python -m model.pull) and start again")
    try:
        index = argos_index.read_index(index_url)
    except OSError as e:
        raise PullError(f"{entry.text}: cannot read the Argos Translate index {index_url} ({getattr(e, 'reason', e)})"
                        ": check the network, or set TRANSLATOR_ARGOS_INDEX to a mirror") from None
    package = argos_index.find_package(index, entry.source, entry.target)
    if package is None:
        raise PullError(f"{entry.text}: the Argos Translate index has no package {entry.source}-{entry.target}; it "
                        f"has {', '.join(argos_index.pairs(index))}")
    licence = package.get("license") or "not stated in the index (see the package's README)"
    log.info("%s: Argos Translate package %s %s, licence: %s", entry.text, argos_index.file_name(package),
             package.get("package_version", ""), licence)
    cache.check_space(entry.text, SPACE_PER_BYTE["argos"] * argos_index.download_size(package))
    try:
        path = argos_index.download(package, cache.root / ".downloads", reporter(cache, entry, "download", "B"))
    except ConnectionError as e:
        raise PullError(f"{entry.text}: the download failed ({e}): check the network and start again (the "
                        "download resumes)") from None
    return path, {"source": "argos", "package": package, "licence": licence}


def hub_licence(info) -> str:
    card = getattr(info, "card_data", None)
    licence = card.get("license") if card else None
    tags = [tag.removeprefix("license:") for tag in info.tags or [] if tag.startswith("license:")]
    return licence or (tags[0] if tags else "not stated on the model card")


def weight_files(siblings: list) -> list:
    """The files of the weights to fetch: safetensors where the repository has them, else pytorch_model.bin."""
    safetensors = [s for s in siblings if s.rfilename.endswith(".safetensors")]
    return safetensors or [s for s in siblings if s.rfilename == "pytorch_model.bin"]


def full_disk(error: Exception) -> bool:
    return isinstance(error, OSError) and error.errno == errno.ENOSPC


def disk_full(folder: Path) -> bool:
    """Whether the disk of `folder` has no room left: where a write that failed gave no errno, what it is put down
    to. (A write fills a disk up to its last block before it fails.)"""
    return shutil.disk_usage(folder).free < FULL_BELOW


def network_errors() -> tuple[type[Exception], ...]:
    """What huggingface_hub raises when the network fails: OSError, and its HTTP client's transport errors (httpx's,
    or httpx2's in huggingface_hub 2)."""
    try:
        import httpx2 as client
    except ImportError:
        import httpx as client
    return OSError, client.TransportError


def fetch_hub(entry: Entry, cache: ModelCache) -> tuple[Path, dict]:
    """The entry's snapshot, downloaded through huggingface_hub into the cache, and what pulled.json records."""
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from huggingface_hub.utils import filter_repo_objects

    hub_cache = cache.root / ".hub"
    unreachable = network_errors()
    try:
        info = HfApi().model_info(entry.repo, revision=entry.revision, files_metadata=True)
        config = json.loads(Path(hf_hub_download(entry.repo, "config.json", revision=info.sha,
                                                 cache_dir=hub_cache)).read_text())
    except RepositoryNotFoundError:
        raise PullError(f"{entry.text}: no repository {entry.repo} on the hub (or a private one: set HF_TOKEN): "
                        f"{HOW}") from None
    except RevisionNotFoundError:
        raise PullError(f"{entry.text}: {entry.repo} has no revision {entry.revision}: name a commit, branch or tag "
                        "it has") from None
    except EntryNotFoundError:
        raise PullError(f"{entry.text}: {entry.repo} has no config.json: not a transformers model; {HOW}") from None
    except (OfflineModeIsEnabled, LocalEntryNotFoundError):
        raise PullError(f"{entry.text}: not in the cache {cache.root}, and the hub cannot be reached (offline, or "
                        "no network): pull it with the network (python -m model.pull) and start again") from None
    except unreachable as e:
        if full_disk(e):
            raise
        raise PullError(f"{entry.text}: the hub cannot be reached ({e}): check the network or HF_ENDPOINT, and start "
                        "again") from None
    kind = config.get("model_type")
    if kind not in CONVERTIBLE:
        raise PullError(f"{entry.text}: {entry.repo} is a {kind} model, not a translation model this service runs "
                        f"({', '.join(CONVERTIBLE.values())}): name one of those")
    weights = weight_files(info.siblings or [])
    if not weights:
        raise PullError(f"{entry.text}: {entry.repo} has no PyTorch weights (safetensors or pytorch_model.bin)")
    licence = hub_licence(info)
    log.info("%s: %s at %s, a %s model, licence: %s", entry.text, entry.repo, info.sha, CONVERTIBLE[kind], licence)
    cache.check_space(entry.text, SPACE_PER_BYTE["hub"] * sum(s.size or 0 for s in weights))
    files = list(filter_repo_objects(info.siblings or [], allow_patterns=HUB_FILES + [s.rfilename for s in weights],
                                     key=lambda s: s.rfilename))
    try:
        download_files(entry.repo, info.sha, files, hub_cache, reporter(cache, entry, "download", "B"))
        folder = snapshot_download(entry.repo, revision=info.sha, cache_dir=hub_cache, local_files_only=True,
                                   allow_patterns=[s.rfilename for s in files])
    except unreachable as e:
        if full_disk(e):
            raise
        raise PullError(f"{entry.text}: the download failed ({e}): check the network and start again (the download "
                        "resumes)") from None
    return Path(folder), {"source": "hub", "repo": entry.repo, "revision": info.sha, "licence": licence}


def download_files(repo: str, revision: str, files: list, hub_cache: Path, report: Progress) -> None:
    """Each file of the snapshot through huggingface_hub's hf_hub_download (resumed, checked by its ETag, kept in
    its cache), one after the other; the bytes of them all reported as they arrive (huggingface_hub's own bar of
    each file is not shown: `report` shows the whole)."""
    from huggingface_hub import hf_hub_download

    total = sum(s.size or 0 for s in files)
    finished = 0  # the bytes of the files done

    class FileBytes(tqdm):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **{**kwargs, "disable": True})
            report(finished + int(self.n), total)  # a resumed download starts at its .incomplete file's size

        def update(self, n: float | None = 1) -> bool | None:
            self.n += n or 0  # disabled, tqdm would not count
            report(finished + int(self.n), total)
            return None

    for sibling in files:
        hf_hub_download(repo, sibling.rfilename, revision=revision, cache_dir=hub_cache, tqdm_class=FileBytes)
        finished += sibling.size or 0
        report(finished, total)


# --- converting ---------------------------------------------------------------------------------------------------


def convert(entry: Entry, fetched: Path, out: Path) -> None:
    """Write model.pt and the tokenizer files of what was fetched into `out` (model.argos, model.convert)."""
    from model import argos
    from model.convert import convert as convert_marian
    from model.convert import convert_many_to_many, model_type

    if entry.kind == "argos":
        with argos.opened(fetched) as folder:
            argos.convert_package(folder, argos.read_metadata(folder), out)
    elif model_type(fetched) == "m2m_100":
        convert_many_to_many(fetched, out, entry.languages or None)
    else:
        convert_marian(fetched, out, tgt_langs=entry.languages or None)


def make(entry: Entry, cache: ModelCache, variants: list[str], index_url: str) -> Path:
    """Fetch, convert and export the entry into its cache folder (see ModelCache.building)."""
    fetched, pulled = fetch_argos(entry, cache, index_url) if entry.kind == "argos" else fetch_hub(entry, cache)
    with cache.building(entry.name) as out:
        cache.report(entry.text, "convert")
        log.info("%s: converting", entry.text)
        try:
            convert(entry, fetched, out)
        except ValueError as e:
            raise PullError(f"{entry.text}: cannot be served: {e}") from None
        except RuntimeError:  # torch.save's, which says only that its stream failed: a full disk, or else
            if disk_full(out):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(out)) from None
            raise
        cache.report(entry.text, "export")
        log.info("%s: exporting %s", entry.text, " ".join(variants))
        try:
            export_graphs(out, variants)
        except subprocess.CalledProcessError:
            raise PullError(f"{entry.text}: the export failed (the lines above say why)") from None
        (out / "model.pt").unlink()  # serving reads the graphs; `--export` of model.convert keeps it
        pulled |= {"entry": entry.text, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (out / PULLED_FILE).write_text(json.dumps(pulled, indent=2) + "\n")
    return cache.folder(entry.name)


def pull(text: str, cache: ModelCache, variants: list[str], index_url: str) -> Path:
    """The model folder of one entry: from the cache, or made (once, under the cache's lock)."""
    entry = Entry.parse(text)
    if folder := cache.ready(entry.name):
        return folder
    with cache.lock():
        if folder := cache.ready(entry.name):  # another replica made it while this one waited
            return folder
        try:
            return make(entry, cache, variants, index_url)
        except ImportError as e:
            raise PullError(f"{entry.text}: converting it needs {e.name}: pip install '.[pull]' (or pull it where "
                            "that is installed, python -m model.pull, into the same TRANSLATOR_MODEL_CACHE)") from None
        except OSError as e:
            if full_disk(e):
                raise PullError(f"{entry.text}: the disk of {cache.root} is full: free some space (python -m "
                                "model.pull --remove NAME) or point TRANSLATOR_MODEL_CACHE at a larger disk") from None
            raise
        except NoSpace as e:
            raise PullError(str(e)) from None
        finally:
            cache.done()


def pull_all(texts: list[str], cache: ModelCache, variants: list[str], index_url: str,
             required: bool = False) -> list[Path]:
    """The model folders of the entries that could be made, in order; each one that could not is logged in one line
    (PullError: the entry and what to do), or raised when `required`."""
    folders = []
    for text in texts:
        try:
            folders.append(pull(text, cache, variants, index_url))
        except PullError as e:
            if required:
                raise
            log.error("%s", e)
    return folders


# --- the command --------------------------------------------------------------------------------------------------


def folder_size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def list_models(cache: ModelCache) -> None:
    for folder in cache.models():
        pulled, config = cache.pulled(folder), FolderConfig.load(folder)
        pairs = config.pairs
        shown = ", ".join(f"{s}-{t}" for s, t in pairs[:6]) + (f" and {len(pairs) - 6} more" if len(pairs) > 6 else "")
        print(f"{folder.name}\t{pulled.get('entry', '(not pulled)')}\t{shown}\tlicence: "
              f"{pulled.get('licence', 'unknown')}\t{folder_size(folder) / GIB:.2f} GiB")


def main(argv: list[str] | None = None) -> None:
    from service.models import exported_precisions
    from service.settings import Settings

    settings = Settings()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help="the models to pull (see above); none: TRANSLATOR_MODELS's")
    p.add_argument("--cache", type=Path, default=settings.model_cache, help="the model cache (default: "
                   "TRANSLATOR_MODEL_CACHE's)")
    p.add_argument("--variants", nargs="+", choices=["fp32", "int8", "fp16"], default=exported_precisions(settings),
                   help="the precisions to export (default: fp32, int8 and TRANSLATOR_PRECISION's)")
    p.add_argument("--index", default=settings.argos_index, help="the Argos Translate package index (default: "
                   "TRANSLATOR_ARGOS_INDEX's)")
    p.add_argument("--list", action="store_true", help="list the cached models")
    p.add_argument("--remove", nargs="+", metavar="NAME", help="delete cached models (by entry or folder name)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cache = ModelCache(args.cache)
    if args.list:
        return list_models(cache)
    if args.remove:
        for name in args.remove:
            folder_name = name if cache.folder(name).is_dir() else Entry.parse(name).name
            print(f"{name}: removed" if cache.remove(folder_name) else f"{name}: not in {cache.root}")
        return
    named = args.names or settings.models
    if "fp32" not in args.variants:
        args.variants.insert(0, "fp32")
    folders = pull_all(named, cache, args.variants, args.index)
    for folder in folders:
        print(f"{folder}: ready ({', '.join(f'{s}-{t}' for s, t in FolderConfig.load(folder).pairs[:6])})")
    if not named:
        print("no models named: give NAME..., or set TRANSLATOR_MODELS")
    if len(folders) < len(named) and (args.names or settings.models_required):
        p.exit(2)


if __name__ == "__main__":
    main()
