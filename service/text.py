"""Splitting request text into sentences and joining the translations back in the same layout."""

from __future__ import annotations

import re

# A separator is a run of newlines, or the spaces after a sentence-final . ! ? (with closing quotes).
SEPARATOR = re.compile(r"(\s*\n\s*|(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+)")


def split_sentences(text: str) -> list[str]:
    """Alternating pieces: sentence, separator, sentence, ...; empty sentences are kept as ''."""
    return SEPARATOR.split(text.strip())


def sentences_of(pieces: list[str]) -> list[str]:
    return [p for p in pieces[::2] if p.strip()]


def join_translations(pieces: list[str], translations: list[str]) -> str:
    """Put translations in place of the non-empty sentences; newlines are kept, other separators become one space."""
    out, it = [], iter(translations)
    for i, piece in enumerate(pieces):
        if i % 2:
            out.append("\n" * piece.count("\n") if "\n" in piece else " ")
        elif piece.strip():
            out.append(next(it))
    return "".join(out).strip()
