"""Training the joint SentencePiece model over source and target training text."""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

from core.folder import BOS_ID, EOS_ID, PAD_ID, UNK_ID

BYTE_FALLBACK_MIN_VOCAB = 1024  # byte fallback takes 256 pieces: only vocabularies this large afford it


def train_sentencepiece(texts: Iterable[str], model_prefix: Path, vocab_size: int) -> Path:
    """Train one unigram SentencePiece model on `texts`; returns the path of the .model file."""
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=(buffer := io.BytesIO()),
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        split_digits=True,  # numbers are spelled digit by digit, so any number can be copied
        byte_fallback=vocab_size >= BYTE_FALLBACK_MIN_VOCAB,  # an unseen character becomes UTF-8 bytes, not <unk>
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        input_sentence_size=2_000_000,
        shuffle_input_sentence=True,
        num_threads=2,
        minloglevel=2,
    )
    path = Path(f"{model_prefix}.model")
    path.write_bytes(buffer.getvalue())
    return path
