"""Inline markup projected onto the translation of the same sentence without it.

A placeholder in a sentence is a word the model has to place, and the shipped models sometimes drop a real word
next to one ("The 7301 red 7318 car is very fast." -> "Die 7301 rote 7318 ist sehr schnell."). So a sentence that
holds inline markup's placeholders (service.worker.markup) is translated twice: as marked, and bare (without them,
its other placeholders numbered as in the sentence without markup: exactly what that sentence reads, "The red car
is very fast."). The answer is the bare translation with each placeholder put where the marked translation put it:
the two translations are aligned word by word (difflib), and a placeholder goes after the bare translation's word
that the word before it aligns with (or before the one that the word after it aligns with). Its words are then the
words of the sentence without markup.

The marked translation does not always place a pair: the model drops a placeholder, runs the two together
("Ball im Garten 73352"), leaves the pair around no word, or around more words than it wrapped ("7352 das blaue
7369" for "blue"). So the words each pair of placeholders wraps (the first and second of the sentence, the third
and fourth, ...: an element's open and close, where elements neither nest nor touch) are translated a third time,
alone (wrapped()), and where the marked translation did not wrap words with the pair, it goes around the words of
the bare translation that match that translation (window()): "ball" -> "Ball" puts "<strong>" around "Ball"
wherever the bare translation has it; where it wrapped more words than the source, around those of them that
match, if some do. A placeholder placed neither way stays lost, and is put back by place afterwards
(service.worker.spans).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher

import regex

from service.worker.markup import OPENING, TIGHT
from service.worker.spans import DIGITS, HELD, Protected, first_copies, is_placeholder_number, protect, replaced

TOKEN = regex.compile(r"\w+|[^\w\s]")
STANDING = regex.compile(r"(?<!\d)\d+(?!\d)")  # a number standing alone, as a placeholder of `names` is matched
SPACED = regex.compile(r" ?(?<!\d)\d+(?!\d)")  # the same, with the space before it
WORDS = regex.compile(r"[^\W\d_]+")
CLOSING = regex.compile(r"(?<=\d) (?=[.,;:!?)\]}»…])")


def markup_placeholders(protected: Protected) -> set[str]:
    """The placeholders of `protected` that stand for inline markup's own placeholders (markup.mark takes its numbers
    from spans.placeholder_numbers; a number of the text that happens to be one is projected as a tag is, by
    place, and comes back all the same)."""
    return {placeholder for placeholder, span in protected.spans.items() if is_placeholder_number(span)}


def plain_numbering(protected: Protected, tags: Collection[str]) -> dict[str, str]:
    """Each other placeholder of `protected` (not one of `tags`), and the placeholder its span gets in the text
    without markup (spans.protect of it), so that a bare sentence reads exactly what the sentence without markup
    reads; empty where the spans differ."""
    original = spans_back(protected)
    again = protect(without(original, [protected.spans[tag] for tag in tags]))
    ours = [placeholder for placeholder in protected.spans if placeholder not in tags]
    if [protected.spans[placeholder] for placeholder in ours] != list(again.spans.values()):
        return {}
    return dict(zip(ours, again.spans))


def spans_back(protected: Protected) -> str:
    """The text of `protected` with each placeholder as its span again, found as the alternation of them all would
    find it: in each run of digits, from left to right, the first of protected.spans that begins at a place."""
    order = {placeholder: k for k, placeholder in enumerate(protected.spans)}
    lengths = sorted({len(placeholder) for placeholder in order})

    def back(run: regex.Match) -> str:
        digits, pieces, at = run[0], [], 0
        while at < len(digits):
            here = [digits[at : at + n] for n in lengths if at + n <= len(digits) and digits[at : at + n] in order]
            found = min(here, key=order.__getitem__, default=digits[at])
            pieces.append(protected.spans.get(found, found))
            at += len(found)
        return "".join(pieces)

    return DIGITS.sub(back, protected.text)


def without(text: str, numbers: Collection[str]) -> str:
    """`text` without these numbers (standing alone), its spaces made single."""
    gone = set(numbers)
    return regex.sub(r"\s+", " ", SPACED.sub(lambda m: "" if m[0].lstrip(" ") in gone else m[0], text)).strip()


def renamed(text: str, names: dict[str, str]) -> str:
    """`text` with each placeholder of `names` (standing alone) written as its new name, all at once."""
    return STANDING.sub(lambda m: names.get(m[0], m[0]), text)


def bare(sentence: str, tags: Collection[str], numbering: dict[str, str]) -> str:
    """The sentence without its markup's placeholders, its other placeholders numbered as plain_numbering says."""
    return renamed(without(sentence, tags), numbering)


@dataclass(frozen=True)
class Wrapped:
    """A pair of markup placeholders of a sentence, and the words between them."""

    open: str
    close: str
    words: str
    share: float  # where the pair stood, as a share of the sentence's length


def wrapped(sentence: str, tags: Collection[str]) -> list[Wrapped]:
    """The first and second of the sentence's markup placeholders, the third and fourth, ..., each pair with the
    words between them (other placeholders left out), where there are some."""
    places = [m for m in STANDING.finditer(sentence) if m[0] in tags]
    pairs = []
    for first, second in zip(places[::2], places[1::2]):
        words = " ".join(WORDS.findall(sentence[first.end() : second.start()]))
        if words:
            pairs.append(Wrapped(first.group(), second.group(), words, first.start() / len(sentence)))
    return pairs


def same_word(a: str, b: str) -> bool:
    """Whether two words (lower case) are one word in other forms: equal, or one begins as the other does for four
    letters, or for the whole of a shorter one ("rot", "rote"; "flug", "fluges")."""
    common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return a == b or common >= min(4, len(a), len(b)) and min(len(a), len(b)) >= 3


def window(plain: list[str], words: list[str], size: int, near: float) -> tuple[int, int] | None:
    """The run of at most `size` of the `plain` words (lower case) that begins and ends with one of `words`: the most
    of them matched, the earliest of `words` among them, beginning nearest to `near` (a share of the words); None
    if no plain word matches."""
    matched = [min((k for k, word in enumerate(words) if same_word(p, word)), default=None) for p in plain]
    best, found = None, None
    for i in (i for i, first in enumerate(matched) if first is not None):
        for j in (j for j in range(i, min(i + size, len(plain))) if matched[j] is not None):
            inside = [m for m in matched[i : j + 1] if m is not None]
            key = (len(inside), -min(inside), -abs(i / len(plain) - near))
            if best is None or key > best:
                best, found = key, (i, j + 1)
    return found


def touches(tokens: list[regex.Match], j: int) -> bool:
    """Whether tokens[j] follows the token before it with no space between them."""
    return 0 < j < len(tokens) and tokens[j].start() == tokens[j - 1].end()


def glued(tokens: list[regex.Match], j: int) -> bool:
    """Whether the place before tokens[j] is inside a run of tokens with no space between them (beside punctuation
    that takes no space there aside)."""
    return touches(tokens, j) and tokens[j].group() not in TIGHT and tokens[j - 1].group() not in OPENING


def project(marked: str, plain: str, placeholders: Collection[str], numbering: dict[str, str],
            pairs: Sequence[tuple[Wrapped, str]] = ()) -> str:
    """The translation `plain` (of bare(), its placeholders numbered by `numbering`) with each placeholder that the
    translation `marked` holds, where it holds it, and the other placeholders as `marked` numbers them; a pair that
    `marked` wraps no word with goes around the words of `plain` that match its words' translation alone (`pairs`:
    each with that translation)."""
    plain = renamed(plain, {new: old for old, new in numbering.items()})
    first = first_copies(marked, placeholders)
    found = [(start, placeholder) for placeholder, (start, _) in first.items()]  # where each stood, placeholder
    clean = replaced(marked, {(start, end): " " * (end - start) for start, end in first.values()}
                     ).replace(HELD, " ")  # placeholders out, offsets kept
    marked_tokens = [(m.start(), m.group().lower()) for m in TOKEN.finditer(clean)]
    plain_tokens = list(TOKEN.finditer(plain))
    opcodes = SequenceMatcher(None, [t for _, t in marked_tokens], [m.group().lower() for m in plain_tokens],
                              autojunk=False).get_opcodes()
    same = {i: j1 + i - i1 for tag, i1, i2, j1, _ in opcodes if tag == "equal" for i in range(i1, i2)}
    places = {}  # placeholder -> the plain token it goes before
    for at, placeholder in found:
        i = sum(start < at for start, _ in marked_tokens)  # the marked tokens before it
        if i - 1 in same:  # after the word before it, where that word is the same in both
            places[placeholder] = same[i - 1] + 1
        elif i in same:  # else before the word after it
            places[placeholder] = same[i]
        else:  # else at the same place of the block of words that differ
            places[placeholder] = next((j1 + min(i - i1, j2 - j1) for _, i1, i2, j1, j2 in opcodes if i1 <= i <= i2),
                                       0)  # no words on either side: at the start
    words = [j for j, m in enumerate(plain_tokens) if WORDS.fullmatch(m.group())]
    for pair, translation in pairs:
        start, end, size = places.get(pair.open), places.get(pair.close), len(pair.words.split())
        inside = [j for j in words if start <= j < end] if start is not None and end is not None else []
        if inside and len(inside) <= size:  # around words, no more than it wraps in the source
            continue
        among = inside or words  # around more: narrowed to those of them that match, if some do
        near = pair.share if start is None else sum(j < start for j in among) / max(len(among), 1)
        if run := window([plain_tokens[j].group().lower() for j in among], WORDS.findall(translation.lower()),
                         size, near):
            places[pair.open], places[pair.close] = among[run[0]], among[run[1] - 1] + 1
    for pair, _ in pairs:  # an element begins after punctuation that ends the words before it ("030, <a>wenn")
        last = min(places.get(pair.close, len(plain_tokens)), len(plain_tokens)) - 1
        while (start := places.get(pair.open)) is not None and 0 < start < last \
                and plain_tokens[start].group() in TIGHT and touches(plain_tokens, start):
            places[pair.open] = start + 1
    if not places:
        return plain
    opens = {pair.open for pair, _ in pairs}
    for placeholder, j in places.items():  # never inside a word joined to the next ("Flug-S-Sch"): before or after it
        while glued(plain_tokens, j):
            j += -1 if placeholder in opens else 1
        places[placeholder] = j
    out, end = [], 0
    for offset, placeholder in sorted((plain_tokens[j].start() if j < len(plain_tokens) else len(plain), p)
                                      for p, j in places.items()):
        out += [plain[end:offset].rstrip(), f" {placeholder} "]
        end = offset
    out.append(plain[end:].lstrip())
    return CLOSING.sub("", regex.sub(r" {2,}", " ", "".join(out))).strip()
