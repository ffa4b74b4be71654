"""Tokenization: text to token ids and back; a model folder's config.json names its tokenizer (core.folder).

Two layouts, config.json's "tokenizer":
    "spm.model"                                  one SentencePiece model and its own ids (our models)
    {"source": "source.spm", "target": "target.spm", "vocab": "vocab.json"}
                                                 Marian / OPUS-MT: SentencePiece pieces, ids of vocab.json
"""

from __future__ import annotations

import json
from pathlib import Path

import sentencepiece as spm

SPM_FILE = "spm.model"
MARIAN_FILES = {"source": "source.spm", "target": "target.spm", "vocab": "vocab.json"}
Layout = str | dict[str, str]  # config.json's "tokenizer": SPM_FILE, or MARIAN_FILES


class Tokenizer:
    """One SentencePiece model for both languages, with its own ids."""

    def __init__(self, model_file: str | Path):
        self.sp = spm.SentencePieceProcessor(model_file=str(model_file))
        self.pad_id = self.sp.pad_id()
        self.unk_id = self.sp.unk_id()
        self.bos_id = self.sp.bos_id()
        self.eos_id = self.sp.eos_id()

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    # One call per text: SentencePiece's list calls start a thread pool each time, which on a busy server's
    # saturated cores waits to be scheduled (10% of the event loop's time under load, 10x the work itself).

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens."""
        return [self.sp.encode(text) for text in texts]

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Text of each id sequence; special tokens are dropped."""
        return [self.sp.decode(sequence) for sequence in ids]


class MarianTokenizer:
    """Marian's: pieces of the source SentencePiece model, as ids of a vocabulary shared by both sides (piece -> id);
    ids back to pieces of the target SentencePiece model. As transformers' MarianTokenizer does it."""

    def __init__(self, source: str | Path, target: str | Path, vocab: str | Path):
        self.source = spm.SentencePieceProcessor(model_file=str(source))
        self.target = spm.SentencePieceProcessor(model_file=str(target))
        self.ids: dict[str, int] = json.loads(Path(vocab).read_text(encoding="utf-8"))
        self.pieces = {i: piece for piece, i in self.ids.items()}
        self.pad_id, self.unk_id, self.eos_id = self.ids["<pad>"], self.ids["<unk>"], self.ids["</s>"]
        self.special_ids = {self.pad_id, self.unk_id, self.eos_id}

    @property
    def vocab_size(self) -> int:
        return len(self.ids)

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens; a piece the vocabulary lacks is <unk>."""
        pieces = [self.source.encode(text, out_type=str) for text in texts]
        return [[self.ids.get(piece, self.unk_id) for piece in text_pieces] for text_pieces in pieces]

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Text of each id sequence; special tokens are dropped. A piece that the target model lacks comes back
        as it is, so its word boundaries ▁ become spaces here."""
        return [
            self.target.decode_pieces([self.pieces[i] for i in sequence if i not in self.special_ids])
            .replace("▁", " ")
            .strip()
            for sequence in ids
        ]


def find_layout(folder: Path) -> Layout:
    """The tokenizer files in a folder: spm.model, or else Marian's three files."""
    if (folder / SPM_FILE).is_file():
        return SPM_FILE
    if all((folder / name).is_file() for name in MARIAN_FILES.values()):
        return dict(MARIAN_FILES)
    raise FileNotFoundError(f"no tokenizer in {folder}: neither {SPM_FILE} nor {', '.join(MARIAN_FILES.values())}")


def layout_files(layout: Layout) -> list[str]:
    return [layout] if isinstance(layout, str) else list(layout.values())


AnyTokenizer = Tokenizer | MarianTokenizer


def load_tokenizer(folder: Path, layout: Layout) -> AnyTokenizer:
    """The tokenizer of a model folder, from config.json's "tokenizer"."""
    if isinstance(layout, str):
        return Tokenizer(folder / layout)
    return MarianTokenizer(**{part: folder / name for part, name in layout.items()})
