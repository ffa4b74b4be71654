"""The pairs an HTTP worker serves, as the engine stated them (service.protocol.PairInfo), with their tokenizers:
a worker turns texts into source ids and hypotheses back into texts; the engine sees ids only."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from core.folder import FolderConfig
from core.search import SearchOptions
from core.tokenizer import AnyTokenizer, load_tokenizer
from core.translate import pair_options
from service.protocol import PairInfo

LANGUAGE_NAMES = {
    "en": "English", "de": "German", "fr": "French", "cs": "Czech", "es": "Spanish", "it": "Italian",
    "nl": "Dutch", "pt": "Portuguese", "pl": "Polish", "ru": "Russian", "zh": "Chinese", "ja": "Japanese",
}


TOKENIZED_KEPT = 256  # the sentences whose token ids a model folder's tokenizer keeps, the last ones it read
REMEMBERED_CHARS = 1000  # a longer text (one that split_long cuts in parts) is tokenized each time, never kept
Tokenized = Callable[[str], Sequence[int]]


def remembered(tokenizer: AnyTokenizer) -> Tokenized:
    """The tokenizer's ids of one sentence, the last TOKENIZED_KEPT sentences of at most REMEMBERED_CHARS kept: a
    request reads each sentence twice, to split it where it is too long and as its model input."""

    @lru_cache(maxsize=TOKENIZED_KEPT)
    def kept(sentence: str) -> tuple[int, ...]:
        return tuple(tokenizer.encode([sentence])[0])

    return lambda sentence: kept(sentence) if len(sentence) <= REMEMBERED_CHARS else tokenizer.encode([sentence])[0]


def language_name(code: str) -> str:
    """A language's English name, as LibreTranslate's /languages gives it; the code where we know none."""
    return LANGUAGE_NAMES.get(code, code)


@dataclass
class Pair:
    info: PairInfo
    config: FolderConfig
    tokenizer: AnyTokenizer
    tokenized: Tokenized  # the folder's tokenizer's ids of a sentence (remembered)

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def source(self) -> str:
        return self.info.source

    @property
    def target(self) -> str:
        return self.info.target

    def source_ids(self, sentences: list[str]) -> list[list[int]]:
        """What the encoder reads for these sentences (ModelConfig.source_ids of this pair)."""
        return self.config.model.source_ids([self.tokenized(s) for s in sentences], self.source, self.target)

    def search_options(self, opts: SearchOptions) -> SearchOptions:
        """opts for this pair's target (core.translate.pair_options: a many-to-many model's forced token)."""
        return pair_options(self.config.model, opts, self.target)


class Pairs:
    """Lookups over the pairs served."""

    def __init__(self, pairs: list[Pair]):
        self.pairs = {(pair.source, pair.target): pair for pair in pairs}
        self.sources: dict[str, list[str]] = {}  # target -> the languages translated into it
        self.targets: dict[str, list[str]] = {}  # source -> the languages it translates into
        for source, target in sorted(self.pairs):
            self.sources.setdefault(target, []).append(source)
            self.targets.setdefault(source, []).append(target)

    @classmethod
    def load(cls, infos: list[PairInfo]) -> Pairs:
        """The pairs with their model folders' configs and tokenizers (no graphs: those are the engine's), each folder
        read once: the pairs of a multi-target or many-to-many folder share them (NLLB-200 serves 40,602 pairs)."""
        folders: dict[str, tuple[FolderConfig, AnyTokenizer, Tokenized]] = {}
        for folder in {info.folder for info in infos}:
            config = FolderConfig.load(Path(folder))
            tokenizer = load_tokenizer(Path(folder), config.tokenizer, config.model.case_tags)
            folders[folder] = config, tokenizer, remembered(tokenizer)
        return cls([Pair(info, *folders[info.folder]) for info in infos])

    def pair(self, source: str, target: str) -> Pair | None:
        return self.pairs.get((source, target))

    def sources_into(self, target: str) -> list[str]:
        """The languages translated into `target`."""
        return self.sources.get(target, [])

    def targets_of(self, source: str) -> list[str]:
        """The languages `source` translates into: its pairs', and itself (given back as it is), as LibreTranslate
        lists them."""
        return sorted({source, *self.targets.get(source, [])})

    @property
    def languages(self) -> list[str]:
        """Every language served, as a source or as a target."""
        return sorted(self.sources.keys() | self.targets.keys())

    @property
    def names(self) -> str:
        return ", ".join(pair.name for pair in self.pairs.values())
