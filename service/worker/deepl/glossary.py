"""Glossaries without their storage (service.worker.deepl.glossaries): their entries read from TSV or CSV as DeepL
validates them, and their source terms found in a text (service.worker.spans.Terms), so that the pipeline holds each
as a protected span and puts the target term in its place.

A source term is found as a whole word (not inside a longer word), as written or, where the glossary asks
(ignore_case), in any case; where terms overlap the longest wins; a term inside a protected span (a URL, an email
address) is left alone. A sentence with terms is translated twice, with each term held as a placeholder and with the
terms as written; the second keeps its grammar (the article of the term's gender) and takes the placeholder where
its own words for the term are (placed()); where those words cannot be told, the first is taken. The target term
stands as given: where German needs an inflected form the glossary does not give, the sentence has the form given.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import UTC, datetime
from difflib import SequenceMatcher

import regex

from service.worker.errors import RequestError

FORMATS = ("tsv", "csv")
MAX_TERM_CHARS = 1024  # DeepL's bound on one term, in characters


class GlossaryError(RequestError):
    """Entries DeepL would refuse: its 400 with a message that names the line."""


@dataclass(frozen=True)
class Dictionary:
    """One language pair of a glossary (a v2 glossary has one, a v3 glossary one or more)."""

    source_lang: str  # DeepL's base code in lower case, as DeepL answers it ("en")
    target_lang: str
    entries: dict[str, str]  # source term -> target term, in the order given

    def as_tsv(self) -> str:
        return "\n".join(f"{source}\t{target}" for source, target in self.entries.items())

    @classmethod
    def from_tsv(cls, source_lang: str, target_lang: str, tsv: str) -> Dictionary:
        """The dictionary of as_tsv()'s text (a term holds no tab or line feed: check_term)."""
        return cls(source_lang, target_lang, dict(line.split("\t", 1) for line in tsv.split("\n")))


@dataclass(frozen=True)
class Glossary:
    glossary_id: str
    name: str
    dictionaries: list[Dictionary]
    creation_time: str  # as DeepL writes it (deepl_time)
    ignore_case: bool  # an extension: match source terms in any case

    def dictionary(self, source_lang: str, target_lang: str) -> Dictionary | None:
        """The dictionary from one base language into another (lower case)."""
        return next((d for d in self.dictionaries if (d.source_lang, d.target_lang) == (source_lang, target_lang)),
                    None)


def deepl_time(moment: datetime) -> str:
    """A moment as DeepL writes a creation_time (ISO 8601 in UTC, microseconds, Z)."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_entries(text: str, entries_format: str, source_lang: str, target_lang: str) -> dict[str, str]:
    """The entries of a TSV (source<TAB>target a line) or CSV (source,target[,source_lang,target_lang] a row) text;
    empty lines are skipped, terms are stripped of the whitespace at their edges. GlossaryError names the line of a
    duplicate source term, an empty term, a tab inside a CSV term, a row in other languages than the glossary's."""
    if entries_format not in FORMATS:
        raise GlossaryError(f"Value for 'entries_format' not supported: {entries_format!r} (tsv or csv)")
    entries: dict[str, str] = {}
    for number, fields in rows(text, entries_format):
        if not any(f.strip() for f in fields):
            continue
        if len(fields) not in (2, 4):
            raise GlossaryError(f"Invalid glossary entry on line {number}: expected a source and a target term"
                                + (" separated by one tab" if entries_format == "tsv" else ""))
        if len(fields) == 4 and (fields[2].strip().lower(), fields[3].strip().lower()) != (source_lang, target_lang):
            raise GlossaryError(f"Invalid glossary entry on line {number}: its languages {fields[2]}, {fields[3]} "
                                f"are not the glossary's ({source_lang}, {target_lang})")
        source, target = (term.strip() for term in fields[:2])
        check_term(source, number, "source")
        check_term(target, number, "target")
        if source in entries:
            raise GlossaryError(f"Invalid glossary entry on line {number}: duplicate source term {source!r}")
        entries[source] = target
    if not entries:
        raise GlossaryError("Invalid glossary entries: no entry given")
    return entries


def rows(text: str, entries_format: str) -> list[tuple[int, list[str]]]:
    """(line number, fields) of each row."""
    if entries_format == "tsv":
        return [(number, line.split("\t")) for number, line in enumerate(text.splitlines(), 1)]
    reader = csv.reader(text.splitlines(keepends=True))
    try:
        return [(reader.line_num, row) for row in reader]
    except csv.Error as error:
        raise GlossaryError(f"Invalid glossary entries on line {reader.line_num}: {error}") from None


def check_term(term: str, number: int, which: str) -> None:
    if not term:
        raise GlossaryError(f"Invalid glossary entry on line {number}: empty {which} term")
    if "\t" in term or "\n" in term or "\r" in term:
        raise GlossaryError(f"Invalid glossary entry on line {number}: the {which} term holds a tab or line break")
    if len(term) > MAX_TERM_CHARS:
        raise GlossaryError(f"Invalid glossary entry on line {number}: the {which} term is longer than "
                            f"{MAX_TERM_CHARS} characters")
    if any(not char.isprintable() and not char.isspace() for char in term):
        raise GlossaryError(f"Invalid glossary entry on line {number}: the {which} term holds a control character")


class Matcher:
    """The source terms of a dictionary, found in texts (service.worker.spans.Terms)."""

    def __init__(self, entries: dict[str, str], ignore_case: bool = False):
        self.ignore_case = ignore_case
        self.targets = {self.key(source): target for source, target in entries.items()}
        terms = sorted(entries, key=len, reverse=True)  # at one place the longest term is tried first
        flags = regex.V1 | (regex.IGNORECASE | regex.FULLCASE if ignore_case else 0)
        self.pattern = regex.compile(r"(?<!\w)(?:" + "|".join(regex.escape(t) for t in terms) + r")(?!\w)", flags)

    def key(self, term: str) -> str:
        return term.casefold() if self.ignore_case else term

    def find(self, text: str, taken: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
        """Each term found in `text` with its target term: longest first where terms overlap, none overlapping a
        `taken` range (a protected span)."""
        found = sorted(regex.finditer(self.pattern, text, overlapped=True), key=lambda m: (-len(m.group()), m.start()))
        chosen: list[tuple[int, int, str]] = []
        for match in found:
            start, end = match.span()
            if not any(start < e and s < end for s, e in [*taken, *((s, e) for s, e, _ in chosen)]):
                chosen.append((start, end, self.targets[self.key(match.group())]))
        return sorted(chosen)


def written(sentence: str, terms: dict[str, str]) -> str:
    """A sentence with its terms' placeholders back as the terms were written (the model translates them itself)."""
    for placeholder, term in terms.items():
        sentence = sentence.replace(placeholder, term)
    return sentence


def placed(held: str, own: str, targets: dict[str, str]) -> str:
    """The model's own translation of a sentence (`own`: its terms as written) with its words for each term replaced
    by the term's placeholder (`targets`: placeholder -> target term), or `held` (the translation of the sentence
    with the placeholders) where they cannot be told. The words for a term are the target term itself where the
    model wrote it; else they are found by aligning the two translations word by word: in the stretch where they
    differ around the placeholder, the word of `own` at the same relative place, among those `held` does not have.
    So the sentence keeps the model's own grammar around the term (the article of its gender), which the placeholder
    alone does not give."""
    held_words, own_words = held.split(), own.split()
    opcodes = SequenceMatcher(a=held_words, b=own_words, autojunk=False).get_opcodes()
    out, taken = list(own_words), set()
    for placeholder, target in targets.items():
        at = next((i for i, word in enumerate(held_words) if core(word) == placeholder), None)
        if at is None:
            return held
        tag, i1, i2, j1, j2 = next(op for op in opcodes if op[1] <= at < op[2])
        written_as = [j for j, word in enumerate(own_words) if j not in taken and core(word) == target]
        candidates = written_as or [j for j in range(j1, j2) if j not in taken and own_words[j] not in held_words]
        if not written_as and (tag != "replace" or not candidates):
            return held
        aim = j1 + (at - i1 + 0.5) * (j2 - j1) / (i2 - i1) - 0.5  # the same relative place, by word centres
        j = min(candidates, key=lambda c: (abs(c - aim), -c))  # a tie: the later word (an article comes before)
        taken.add(j)
        out[j] = own_words[j].replace(core(own_words[j]), placeholder) if core(own_words[j]) else placeholder
    return " ".join(out)


def core(word: str) -> str:
    """A word without the punctuation at its edges."""
    return regex.sub(r"^[^\w]+|[^\w]+$", "", word)
