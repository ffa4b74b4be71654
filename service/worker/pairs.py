"""The pairs an HTTP worker serves, as the engine stated them (service.protocol.PairInfo), with their tokenizers:
a worker turns texts into source ids and hypotheses back into texts; the engine sees ids only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.folder import FolderConfig
from core.tokenizer import AnyTokenizer, load_tokenizer
from core.translate import source_ids
from service.protocol import PairInfo

LANGUAGE_NAMES = {
    "en": "English", "de": "German", "fr": "French", "cs": "Czech", "es": "Spanish", "it": "Italian",
    "nl": "Dutch", "pt": "Portuguese", "pl": "Polish", "ru": "Russian", "zh": "Chinese", "ja": "Japanese",
}


def language_name(code: str) -> str:
    """A language's English name, as LibreTranslate's /languages gives it; the code where we know none."""
    return LANGUAGE_NAMES.get(code, code)


@dataclass
class Pair:
    info: PairInfo
    config: FolderConfig
    tokenizer: AnyTokenizer

    @classmethod
    def load(cls, info: PairInfo) -> Pair:
        """The pair's model folder's config and tokenizer (no graphs: those are the engine's)."""
        config = FolderConfig.load(Path(info.folder))
        return cls(info, config, load_tokenizer(Path(info.folder), config.tokenizer, config.model.case_tags))

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
        """What the encoder reads for these sentences (ModelConfig.source_ids into this pair's target)."""
        return source_ids(self.tokenizer, self.config.model, sentences, self.target)


class Pairs:
    """Lookups over the pairs served."""

    def __init__(self, pairs: list[Pair]):
        self.pairs = {(pair.source, pair.target): pair for pair in pairs}

    @classmethod
    def load(cls, infos: list[PairInfo]) -> Pairs:
        return cls([Pair.load(info) for info in infos])

    def pair(self, source: str, target: str) -> Pair | None:
        return self.pairs.get((source, target))

    def sources_into(self, target: str) -> list[str]:
        """The languages translated into `target`."""
        return sorted(source for source, t in self.pairs if t == target)

    def targets_of(self, source: str) -> list[str]:
        """The languages `source` translates into: its pairs', and itself (given back as it is), as LibreTranslate
        lists them."""
        return sorted({source, *(target for s, target in self.pairs if s == source)})

    @property
    def languages(self) -> list[str]:
        """Every language served, as a source or as a target."""
        return sorted({code for pair in self.pairs for code in pair})

    @property
    def names(self) -> str:
        return ", ".join(pair.name for pair in self.pairs.values())
