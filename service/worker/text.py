"""Splitting request text into sentences and joining the translations back in the same layout.

A line break always ends a sentence; within a line, sentencex (Wikimedia's rule-based segmenter: abbreviation lists
for ~300 languages, each falling back to related ones and then to a default) finds the sentence ends. It was picked
by `python -m bench.studies.splitters` (bench/results/splitters.md). There is no splitter object to make and cache
per language: sentencex builds its rules for a language once, inside the library, on first use.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import sentencex

LINE_BREAKS = re.compile(r"(\s*\n\s*)")
# "1." or "a)" opening a line is a list item's number, not a sentence of its own (sentencex splits it off)
LIST_MARKER = re.compile(r"(?:\d+|[A-Za-z])[.)]")
NON_ASCII_SPACE = re.compile(r"[^\S\x00-\x7f]")  # whitespace other than ASCII's: no-break space, \u2028, ...
# where a clause ends: after a comma, semicolon, colon or dash (or a sentence's end) and before whitespace
CLAUSE_END = re.compile(r"(?<=[,;:.!?\u2013\u2014\u3001\u3002])(\s+)")


def split_sentences(text: str, language: str) -> list[str]:
    """Alternating pieces: sentence, separator, sentence, ...; `language` is the text's code (en, de, pt-BR...).

    Separators are the line breaks and the whitespace between sentences; an empty text gives [''].
    """
    pieces: list[str] = []
    for i, part in enumerate(LINE_BREAKS.split(text.strip())):
        pieces += [part] if i % 2 else split_line(part, language)
    return pieces


def split_line(line: str, language: str) -> list[str]:
    """split_sentences of a stripped text without line breaks.

    sentencex 1.0.32 panics on a capital, a whitespace character outside ASCII and a period ("Z\xa0."): it slices
    at a byte inside that character. A Rust panic is no Exception in Python, and it failed the request. So sentencex
    reads a copy with those characters made plain spaces, the same length, and the line is cut where the copy is.
    """
    plain = NON_ASCII_SPACE.sub(" ", line)
    segments = list(sentencex.segment(language.split("-")[0].lower(), plain))  # they add up to the line
    if len(segments) > 1 and LIST_MARKER.fullmatch(segments[0].strip()):
        segments[:2] = [segments[0] + segments[1]]
    pieces: list[str] = []
    end = 0
    for sentence in (s.strip() for s in segments if s.strip()):
        start = plain.index(sentence, end)  # only whitespace lies between the previous sentence and this one
        if pieces:
            pieces.append(line[end:start])
        end = start + len(sentence)
        pieces.append(line[start:end])
    return pieces or [line]


def split_bounded(text: str, language: str, fits: Callable[[str], bool]) -> list[str]:
    """split_sentences()'s layout of a text translated as one sentence (DeepL's split_sentences=0): the whole text
    where it `fits`, else cut at clause boundaries (service.worker.text.CLAUSE_END, and line breaks) into pieces each
    as long as `fits` allows; a clause that does not fit alone stays whole (the pipeline's bound then refuses it)."""
    text = text.strip()
    if fits(text):
        return [text]
    parts = CLAUSE_END.split(text)  # clause, separator, clause, ...
    layout = [parts[0]]
    for separator, clause in zip(parts[1::2], parts[2::2]):
        if fits(joined := f"{layout[-1]}{separator}{clause}"):
            layout[-1] = joined
        else:
            layout += [separator, clause]
    return layout


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
