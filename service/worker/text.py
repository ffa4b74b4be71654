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


# where a clause ends: after , ; : or a dash, before the next word
CLAUSE_END = re.compile(r"(?<=[,;:\u2013\u2014])\s+|\s+(?=[\u2013\u2014-]\s)")
SPACES = re.compile(r"\s+")


def split_clauses(sentence: str, too_long: Callable[[str], bool]) -> list[str]:
    """`sentence` in parts none of which is too_long: cut in two at the clause boundary nearest its middle, else at
    the space nearest it, else in the middle (a text without spaces), and so on while a part is too long."""
    if not too_long(sentence) or len(sentence) < 2:
        return [sentence]
    middle = len(sentence) / 2
    cuts = [m.span() for m in CLAUSE_END.finditer(sentence)] or [m.span() for m in SPACES.finditer(sentence)]
    start, end = min(cuts, key=lambda span: abs(span[0] - middle)) if cuts else (len(sentence) // 2,) * 2
    if start == 0 or end == len(sentence):
        start = end = len(sentence) // 2
    return split_clauses(sentence[:start], too_long) + split_clauses(sentence[end:], too_long)


def in_capitals(sentence: str) -> bool:
    """Whether a sentence is written in capitals: two words or more of two letters or more, and no lowercase
    letter (an acronym alone is not)."""
    return not any(c.islower() for c in sentence) and len(re.findall(r"[^\W\d_]{2,}", sentence)) >= 2


def ordinary_case(sentence: str) -> str:
    """A sentence in capitals as a sentence in ordinary case: lowercase, its first letter a capital."""
    lower = sentence.lower()
    first = next((i for i, c in enumerate(lower) if c.isalpha()), None)
    return lower if first is None else lower[:first] + lower[first].upper() + lower[first + 1 :]


def split_long(pieces: list[str], too_long: Callable[[str], bool]) -> list[str]:
    """A split_sentences() layout with each too_long sentence split_clauses()'d, its parts one space apart."""
    out: list[str] = []
    for i, piece in enumerate(pieces):
        if i % 2:
            out.append(piece)
            continue
        first, *rest = split_clauses(piece, too_long)
        out.append(first)
        for part in rest:
            out += [" ", part]
    return out
