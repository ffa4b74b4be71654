"""Tokenization: text to token ids and back; a model folder's config.json names its tokenizer (core.folder).

The layouts, config.json's "tokenizer":
    "spm.model"                                  one SentencePiece model and its own ids (our models)
    {"source": "source.spm", "target": "target.spm", "vocab": "vocab.json"}
                                                 Marian / OPUS-MT: SentencePiece pieces, ids of vocab.json
    {"sentencepiece": "sentencepiece.bpe.model"} fairseq's NLLB-200: SentencePiece's ids moved up by fairseq's offset
    {"sentencepiece": "sentencepiece.bpe.model", "vocab": "vocab.json"}
                                                 fairseq's M2M100: SentencePiece pieces, ids of vocab.json
    {"sentencepiece": "sentencepiece.model", "vocabulary": "vocabulary.json"}
                                                 an Argos Translate package's: SentencePiece pieces, ids of its
                                                 CTranslate2 vocabulary (model.argos)
    {"bpe": "bpe.model", "vocabulary": "vocabulary.json"}
                                                 an Argos Translate package's of a BPE tokenizer: Moses and
                                                 subword-nmt's tokens, ids of its CTranslate2 vocabulary
"""

from __future__ import annotations

import json
from pathlib import Path

import sentencepiece as spm

SPM_FILE = "spm.model"
MARIAN_FILES = {"source": "source.spm", "target": "target.spm", "vocab": "vocab.json"}
FAIRSEQ_FILES = {"sentencepiece": "sentencepiece.bpe.model", "vocab": "vocab.json"}  # vocab.json: M2M100's alone
ARGOS_FILES = {"sentencepiece": "sentencepiece.model", "vocabulary": "vocabulary.json"}  # ArgosTokenizer
ARGOS_BPE_FILES = {"bpe": "bpe.model", "vocabulary": "vocabulary.json"}  # ArgosBpeTokenizer
Layout = str | dict[str, str]  # config.json's "tokenizer": SPM_FILE, MARIAN_FILES, or FAIRSEQ_FILES (NLLB: less vocab)


UPPER, TITLE = "upper", "title"


def word_case(word: str) -> str | None:
    """UPPER for a word of two or more letters, all capitals; TITLE for a capital and then lower case letters (one
    capital alone too: "A", "I"); None for the rest: lower case, no letters, or mixed case (iPhone, McDonald)."""
    if word.islower():  # most words: no capital at all, so no capital first
        return None
    letters = [c for c in word if c.isalpha()]
    if not letters or not letters[0].isupper():
        return None
    if len(letters) > 1 and all(c.isupper() for c in letters):
        return UPPER
    return TITLE if all(c.islower() for c in letters[1:]) else None


class Tokenizer:
    """One SentencePiece model for both languages, with its own ids.

    With case tags (ModelConfig.case_tags), a source word in UPPER CASE or Title Case is read in lower case after a
    tag that says which, so "BICYCLE", "Bicycle" and "bicycle" share their pieces: the model sees the same words
    whatever the casing, and the casing beside them. The two tags take the ids after SentencePiece's own. Targets
    are read as written.
    """

    def __init__(self, model_file: str | Path, case_tags: bool = False):
        self.sp = spm.SentencePieceProcessor(model_file=str(model_file))
        self.pad_id = self.sp.pad_id()
        self.unk_id = self.sp.unk_id()
        self.bos_id = self.sp.bos_id()
        self.eos_id = self.sp.eos_id()
        self.pieces = self.sp.get_piece_size()
        self.case_tags = {UPPER: self.pieces, TITLE: self.pieces + 1} if case_tags else {}
        # which pieces begin a word; only case tags need it
        self.word_starts = [self.sp.id_to_piece(i).startswith("▁") for i in range(self.pieces)] if case_tags else []

    @property
    def vocab_size(self) -> int:
        return self.pieces + len(self.case_tags)

    # One call per text: SentencePiece's list calls start a thread pool each time, which on a busy server's
    # saturated cores waits to be scheduled (under load, longer than the work itself).

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each source text, without special tokens; with case tags where the model has them."""
        if self.case_tags:
            return [self._with_case_tags(text) for text in texts]
        return [self.sp.encode(text) for text in texts]

    def encode_targets(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each target text as written, without special tokens."""
        return [self.sp.encode(text) for text in texts]

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Text of each id sequence; special tokens and case tags are dropped."""
        if self.case_tags:
            ids = [[i for i in sequence if i < self.pieces] for sequence in ids]
        return [self.sp.decode(sequence) for sequence in ids]

    def _with_case_tags(self, text: str) -> list[int]:
        """The pieces of text with its UPPER and Title Case words in lower case, each after its tag."""
        words = text.split()
        cases = [word_case(word) for word in words]
        ids = self.sp.encode(" ".join(word.lower() if case else word for word, case in zip(words, cases)))
        starts = [i for i, piece in enumerate(ids) if self.word_starts[piece]]
        if len(starts) != len(words):  # SentencePiece's normalization joined or split words: read it as written
            return self.sp.encode(text)
        for start, case in reversed([(start, case) for start, case in zip(starts, cases) if case]):
            ids.insert(start, self.case_tags[case])  # from the last: each tag goes before its word's first piece
        return ids


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


class FairseqTokenizer:
    """fairseq's, as NLLB-200 and M2M100 have it: the pieces of one SentencePiece model as ids of fairseq's
    dictionary, which begins <s> 0, <pad> 1, </s> 2, <unk> 3 and ends with the language tokens
    (ModelConfig.language_tokens). The dictionary is vocab.json where the model has one (M2M100); else (NLLB-200) it
    is the SentencePiece model's own order moved up by fairseq's offset: SentencePiece's <unk>, <s>, </s> are 0, 1, 2
    and its pieces from 3 on, fairseq's from 4 on. As transformers' M2M100Tokenizer and NllbTokenizer do it."""

    OFFSET = 1  # NLLB-200: SentencePiece's piece i is fairseq's i + 1
    SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's ids 0-3

    def __init__(self, sentencepiece: str | Path, vocab: str | Path | None = None):
        self.sp = spm.SentencePieceProcessor(model_file=str(sentencepiece))
        self.unk_id = self.SPECIALS.index("<unk>")
        self.ids: dict[str, int] = json.loads(Path(vocab).read_text(encoding="utf-8")) if vocab else {}
        self.pieces = {i: piece for piece, i in self.ids.items() if piece not in self.SPECIALS}

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens; a piece the dictionary lacks is <unk>."""
        if self.ids:
            pieces = [self.sp.encode(text, out_type=str) for text in texts]
            return [[self.ids.get(piece, self.unk_id) for piece in text_pieces] for text_pieces in pieces]
        return [[i + self.OFFSET if i else self.unk_id for i in self.sp.encode(text)] for text in texts]

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Text of each id sequence; special and language tokens are dropped."""
        if self.ids:
            return [self.sp.decode([self.pieces[i] for i in sequence if i in self.pieces]).strip() for sequence in ids]
        first, end = len(self.SPECIALS), self.sp.get_piece_size() + self.OFFSET  # the ids of pieces
        return [self.sp.decode([i - self.OFFSET for i in sequence if first <= i < end]) for sequence in ids]


class ArgosVocabulary:
    """An Argos Translate package's CTranslate2 vocabulary: vocabulary.json holds its tokens in id order
    ("tokens"), the id of the unknown token ("unk_id") and the ids that decode drops ("special_ids": the unknown,
    start, end and padding tokens). The package's tokenizer gives the tokens (ArgosTokenizer, ArgosBpeTokenizer)."""

    def __init__(self, vocabulary: str | Path):
        self.vocabulary = json.loads(Path(vocabulary).read_text(encoding="utf-8"))
        self.tokens: list[str] = self.vocabulary["tokens"]
        self.ids = {token: i for i, token in reversed(list(enumerate(self.tokens)))}  # a repeated token: its first id
        self.unk_id: int = self.vocabulary["unk_id"]
        self.special_ids = set(self.vocabulary["special_ids"])

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def token_ids(self, tokens: list[str]) -> list[int]:
        """The id of each token, <unk>'s where the vocabulary lacks it."""
        return [self.ids.get(token, self.unk_id) for token in tokens]

    def kept_tokens(self, ids: list[int]) -> list[str]:
        """The tokens of the ids, special tokens dropped: an unknown token, which CTranslate2 replaces with a source
        token for Argos Translate (replace_unknowns), leaves nothing."""
        return [self.tokens[i] for i in ids if i not in self.special_ids]


class ArgosTokenizer(ArgosVocabulary):
    """Argos Translate's for a package with a SentencePiece model: its pieces as tokens of the vocabulary."""

    def __init__(self, sentencepiece: str | Path, vocabulary: str | Path):
        super().__init__(vocabulary)
        self.sp = spm.SentencePieceProcessor(model_file=str(sentencepiece))

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens: its pieces, as argostranslate's SentencePieceTokenizer
        gives them to CTranslate2."""
        return [self.token_ids(self.sp.encode(text, out_type=str)) for text in texts]

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Text of each id sequence, as argostranslate's SentencePieceTokenizer decodes the pieces (any ▁ left
        becomes a space), special tokens dropped. argostranslate 1.10's replacing every _ with a space is not
        done."""
        return [self.sp.decode_pieces(self.kept_tokens(sequence)).replace("▁", " ").strip() for sequence in ids]


class ArgosBpeTokenizer(ArgosVocabulary):
    """Argos Translate's for a package with a BPE model (bpe.model, subword-nmt's merges; OPUS-MT's older models, as
    Locomotive packages them), as argostranslate's BPETokenizer does it with the same libraries: Moses's punctuation
    normalization and tokenization of the source language (sacremoses, escaping & < > ' " [ ] | as XML entities),
    then subword-nmt's segmentation, whose pieces end with @@ where the word goes on; back, the pieces joined and
    Moses's detokenization of the target language. vocabulary.json names the two ("languages")."""

    def __init__(self, bpe: str | Path, vocabulary: str | Path):
        from sacremoses import MosesDetokenizer, MosesPunctNormalizer, MosesTokenizer
        from subword_nmt.apply_bpe import BPE

        super().__init__(vocabulary)
        source, target = self.vocabulary["languages"]
        self.normalizer, self.moses = MosesPunctNormalizer(source), MosesTokenizer(source)
        self.detokenizer = MosesDetokenizer(target)
        with open(bpe, encoding="utf-8") as codes:
            self.bpe = BPE(codes)

    def pieces(self, text: str) -> list[str]:
        """The tokens argostranslate's BPETokenizer gives CTranslate2."""
        words = " ".join(self.moses.tokenize(self.normalizer.normalize(text)))
        return self.bpe.segment_tokens(words.strip("\r\n ").split(" "))

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens."""
        return [self.token_ids(self.pieces(text)) for text in texts]

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Text of each id sequence, special tokens dropped."""
        return [self.detokenizer.detokenize(" ".join(self.kept_tokens(sequence)).replace("@@ ", "").split(" "))
                for sequence in ids]


def find_layout(folder: Path) -> Layout:
    """The tokenizer files in a folder: spm.model, or else Marian's three files, or else fairseq's."""
    if (folder / SPM_FILE).is_file():
        return SPM_FILE
    if all((folder / name).is_file() for name in MARIAN_FILES.values()):
        return dict(MARIAN_FILES)
    if (folder / FAIRSEQ_FILES["sentencepiece"]).is_file():
        return {part: name for part, name in FAIRSEQ_FILES.items() if (folder / name).is_file()}
    for argos in (ARGOS_FILES, ARGOS_BPE_FILES):
        if all((folder / name).is_file() for name in argos.values()):
            return dict(argos)
    raise FileNotFoundError(f"no tokenizer in {folder}: neither {SPM_FILE} nor {', '.join(MARIAN_FILES.values())} "
                            f"nor {FAIRSEQ_FILES['sentencepiece']}")


def layout_files(layout: Layout) -> list[str]:
    return [layout] if isinstance(layout, str) else list(layout.values())


AnyTokenizer = Tokenizer | MarianTokenizer | FairseqTokenizer | ArgosTokenizer | ArgosBpeTokenizer


def load_tokenizer(folder: Path, layout: Layout, case_tags: bool = False) -> AnyTokenizer:
    """The tokenizer of a model folder, from config.json's "tokenizer" (and the model's case_tags)."""
    if isinstance(layout, str):
        return Tokenizer(folder / layout, case_tags)
    files = {part: folder / name for part, name in layout.items()}
    if "vocabulary" in layout:
        return ArgosBpeTokenizer(**files) if "bpe" in layout else ArgosTokenizer(**files)
    return MarianTokenizer(**files) if "source" in layout else FairseqTokenizer(**files)
