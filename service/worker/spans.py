"""Protected spans: what must come back exactly as written is taken out before translation and put back after.

URLs, email addresses, @mentions, #hashtags, file paths, `inline code`, emoji, codes that mix letters and digits
("A-77321", "B2B") and numbers of every kind (service.worker.numbers: prices, dates, times, phone numbers, ...) are
replaced by placeholders that the model copies into the place where its translation puts them; afterwards each
placeholder becomes its span again (a number written in the target language's style: numbers.localize). Whatever
the model does, a span is never lost or changed: a placeholder the model dropped (or rewrote) is put back at the
place in the translation that matches its place in the source (the same share of its sentence, put_back, or of the
text, restore; at a word boundary), and counted (translator_placeholders_total{how}).

Every digit of the text belongs to a span, so the model reads no digit but the placeholders', and no user text can
be taken for a placeholder: a digit of the translation that is not a placeholder the model copied is one it made
up (a second copy, two run together, "748" of "7301"), and is taken out. No number is ever invented.

The placeholders are numbers (7301, 7318, ...) that the text does not hold, even with thousands separators: of the
forms tried, the shipped models copy a four-digit number best (brackets, angle brackets and underscores they never
copied), and were then fine-tuned on them (model.augment.placeholder_variants): most real spans are copied into
place, the rest put back (BENCHMARKS.md#placeholders). Inline markup's placeholders (service.worker.markup) are
numbers in the text given to protect(), so they are held as spans too and come back exactly once. A glossary's
terms (service.worker.deepl.glossary) are held the same way, each given back as its target term.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import count
from typing import Protocol

import regex

from service.worker.numbers import NUMBER

# Each kind of span, as a pattern; the first that matches at a place wins (a URL before the path inside it).
# an emoji with its modifiers, its joined emoji (ZWJ sequences: 👩‍💻) and its tags (subdivision flags: 🏴󠁧󠁢󠁳󠁣󠁴󠁿)
EMOJI = r"(?:\p{Regional_Indicator}{2}|[#*0-9]\uFE0F?\u20E3|\p{Extended_Pictographic}(?:\p{Emoji_Modifier}|\uFE0F|" \
        r"\u200D\p{Extended_Pictographic}|[\U000E0020-\U000E007F])*)"
EMOJI_SEQUENCE = regex.compile(EMOJI, regex.V1)
KINDS = {
    # a URL ends before punctuation that follows it, and holds parentheses only in pairs ("Mercury_(planet)")
    "url": r"(?:\b(?:https?|ftp)://|\bwww\.)(?:\([^\s<>\"'()]*\)|[^\s<>\"'()])*(?:\([^\s<>\"'()]*\)|[^\s<>\"'.,;:!?()\]}])",
    "email": r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b",
    "code": r"`[^`\n]+`",
    "mention": r"(?<![\w@/])@\w+(?:[.-]\w+)*",
    "hashtag": r"(?<![\w#&/])#\w*[^\W\d_]\w*",
    "path": r"(?<![\w/])(?:~|\.{1,2})?(?:/[\w.-]+){2,}/?|\b[A-Za-z]:\\(?:[\w .-]+\\)*[\w.-]+",
    "emoji": EMOJI,
    # a code mixing letters and digits, its parts joined by hyphens or dots ("A-77321", "v2.3.1"), but not an ordinal
    # or a number with its unit (3rd, 10am, 5km)
    "number": NUMBER,
    "mixed": r"\b(?!\d+(?:st|nd|rd|th|[a-z]{1,3})\b)(?=[\w-]*\d)(?=[\w-]*[^\W\d_])[^\W_]+(?:[-.][^\W_]+)*\b",
    "digits": r"\d+",  # any digit the kinds before left: no digit of the text reaches the model
}
SPANS = regex.compile("|".join(f"(?P<{kind}>{pattern})" for kind, pattern in KINDS.items()), regex.V1)
# what every span holds one of at least (a digit, @ # / \ `, "www.", an emoji's character): a text with none holds no
# span, and searching for these costs a fraction of searching for every kind
SIGNS = regex.compile(r"[\d@#/\\`\u20E3\p{Regional_Indicator}\p{Extended_Pictographic}]|www\.", regex.V1)
FIRST_PLACEHOLDER, PLACEHOLDER_STEP = 7301, 17
SEPARATOR = "[.,\u00a0\u202f ]"  # a thousands separator the model may write into a placeholder (7.301, 7 301)
THOUSANDS = regex.compile(rf"(?<=\d){SEPARATOR}(?=\d{{3}})")
DIGITS = regex.compile(r"[0-9]+")
STRAYS = regex.compile(r" ?\d+(?:[.,:/-]\d+)*")  # digits the model made up, outside the found placeholders
# a placeholder as the model may write it (copies): where one may begin, and its two forms
NUMBER_START = regex.compile(r"(?<![\w.,])\d")
ALONE = regex.compile(r"\d+(?![\w]|[.,]\d)")
SEPARATED = regex.compile(rf"(\d+){SEPARATOR}(\d{{3}})(?![\w]|[.,]\d)")
# private-use characters: a found placeholder is held as HELD, a character of its own, HELD while strays are taken out
HELD, HELD_FIRST = "\ue000", 0xF0000
MARK = regex.compile(f"{HELD}.{HELD}", regex.DOTALL)  # a found placeholder's mark in restore()
# no space is put between a placeholder and an opening bracket or quote before it, or punctuation after it
OPENING = set("([{«‹„‚“‘\"'¿¡")
CLOSING = set(".,;:!?)]}»›“”‘’\"'…")
# a number standing as service.worker.markup writes its placeholders: between spaces, or beside such marks
STANDING = regex.compile(rf"(?<![^\s{regex.escape(''.join(OPENING))}])\d{{4,}}"
                         rf"(?![^\s{regex.escape(''.join(CLOSING))}]|[.,]\d)")


@dataclass
class Protected:
    """A text with its spans replaced by placeholders, and what each placeholder stands for."""

    text: str
    spans: dict[str, str]  # placeholder -> the span as written (a term: its replacement)
    places: dict[str, float]  # placeholder -> where it stood, as a share of the text's length
    numbers: set[str] = field(default_factory=set)  # the placeholders of numbers (the kind "number")
    held: bool = True  # whether the text's spans were taken out (False: TRANSLATOR_PROTECT_SPANS=false)
    terms: dict[str, str] = field(default_factory=dict)  # a term's placeholder -> the term as the text wrote it

    def restore(self, translation: str, localize: Callable[[str], str] | None = None) -> tuple[str, int]:
        """The translation with each placeholder's span back (a number's as `localize` writes it); how many had to be
        put back by place. Digits the model made up (a second copy of a placeholder, two run together: "73018", a
        number of its own) are taken out first."""
        if not self.held and not self.spans:
            return translation, 0
        translation = translation.replace(HELD, "")
        found = first_copies(translation, self.spans)  # each placeholder's first copy, held by a digit-free mark
        marks = {placeholder: f"{HELD}{chr(HELD_FIRST + i)}{HELD}" for i, placeholder in enumerate(self.spans)}
        translation = replaced(translation, {found[p]: marks[p] for p in found})
        if self.held:  # every digit of the text is in a span (with only terms held, its own digits are still there)
            translation = self.without_strays(translation)
        missing, spans = 0, {}  # spans: the marks not yet replaced by their spans
        for placeholder, span in self.spans.items():
            if localize and placeholder in self.numbers:
                span = localize(span)
            if placeholder in found:
                spans[marks[placeholder]] = span
            else:  # the marks before it are replaced first: its place is a share of the text as it stands then
                translation = insert_at_word_boundary(MARK.sub(lambda m: spans.pop(m[0], m[0]), translation), span,
                                                      self.places[placeholder])
                missing += 1
        return MARK.sub(lambda m: spans.pop(m[0], m[0]), translation), missing

    def without_strays(self, translation: str) -> str:
        """The translation less every run of digits outside the found placeholders: the text's own digits are all
        in spans, so the model made these up."""
        return STRAYS.sub("", translation)


def placeholder_numbers(text: str) -> Iterator[str]:
    """Placeholder numbers, in order, that `text` does not hold, as written or without its thousands separators
    ("7,301" holds 7301): spans and inline markup take theirs from here."""
    digits = DIGITS.findall(f"{text} {THOUSANDS.sub('', text)}")
    held: dict[int, set[str]] = {}  # by length: the placeholder numbers the digits hold
    for number in map(str, count(FIRST_PLACEHOLDER, PLACEHOLDER_STEP)):
        if len(number) not in held:
            held[len(number)] = {part for part in parts(digits, len(number)) if is_placeholder_number(part)}
        if number not in held[len(number)]:
            yield number


def parts(digits: Iterable[str], length: int) -> Iterator[str]:
    """Each string of `length` digits inside these runs of digits: what `number in text` finds, for every number of
    that length at once."""
    for run in digits:
        for start in range(len(run) - length + 1):
            yield run[start : start + length]


def held_in(texts: Iterable[str], placeholders: Collection[str]) -> list[set[str]]:
    """For each text, the placeholders it holds (`placeholder in text`), found in one pass over its digits."""
    wanted = set(placeholders)
    lengths = {len(placeholder) for placeholder in wanted}
    held = []
    for text in texts:
        digits = DIGITS.findall(text)
        held.append({part for length in lengths for part in parts(digits, length) if part in wanted})
    return held


def made_of_placeholders(number: str, placeholders: Iterable[str], source: str) -> bool:
    """Whether a number of a translation is what the model made of placeholders (a second copy, two run together:
    "7301 an 7318" as "730118"): it begins as a placeholder does, and the source (thousands separators and
    placeholders aside) does not hold it."""
    return number[:2] in {placeholder[:2] for placeholder in placeholders} and number not in source


def copies(text: str) -> Iterator[tuple[str, tuple[int, int]]]:
    """Each number of `text` that may be a placeholder as the model writes one: its digits, and where it stands. A
    placeholder is written as it is or with a thousands separator (7.301, 7,301, 7 301), after no word character,
    point or comma, before none nor a decimal part. Where both forms begin ("7301 318": 7301 or 7301318), both."""
    for start in NUMBER_START.finditer(text):
        if alone := ALONE.match(text, start.start()):
            yield alone[0], alone.span()
        if separated := SEPARATED.match(text, start.start()):
            yield separated[1] + separated[2], separated.span()


def copied(text: str) -> set[str]:
    """The digits of each number of `text` that may be a placeholder's copy (copies)."""
    return {digits for digits, _ in copies(text)}


def first_copies(text: str, placeholders: Iterable[str]) -> dict[str, tuple[int, int]]:
    """Where the first copy of each placeholder stands in `text`, taken in order: a copy overlapping one taken
    before it is not there any more (as if each copy found were replaced before the next placeholder is looked
    for)."""
    found: dict[str, list[tuple[int, int]]] = {}
    for digits, span in copies(text):
        found.setdefault(digits, []).append(span)
    taken: set[int] = set()  # the characters of the copies taken
    first = {}
    for placeholder in placeholders:
        for start, end in found.get(placeholder, ()):
            if taken.isdisjoint(range(start, end)):
                first[placeholder] = start, end
                taken.update(range(start, end))
                break
    return first


def replaced(text: str, spans: dict[tuple[int, int], str]) -> str:
    """`text` with each (start, end) of `spans` (none overlapping) replaced by its string."""
    pieces, end = [], 0
    for (start, stop), replacement in sorted(spans.items()):
        pieces += [text[end:start], replacement]
        end = stop
    pieces.append(text[end:])
    return "".join(pieces)


class Terms(Protocol):
    """Words held through translation like protected spans, each given back as another text (a glossary's terms:
    service.worker.deepl.glossary)."""

    def find(self, text: str, taken: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
        """(start, end, what to put in its place) of each term in `text`, none overlapping a `taken` range."""
        ...


def protect(text: str, terms: Terms | None = None, spans: bool = True) -> Protected:
    """Replace every protected span of `text` (with `spans`: TRANSLATOR_PROTECT_SPANS) and every one of `terms` by a
    placeholder number that `text` does not hold; a term's placeholder is given back as its replacement."""
    found = spans_of(text) if spans else []
    found_terms = [(*term, "term") for term in terms.find(text, [(start, end) for start, end, *_ in found])
                   ] if terms else []
    held, places, numbers, written, pieces, end = {}, {}, set(), {}, [], 0
    free = placeholder_numbers(text)
    for start, stop, replacement, kind in sorted(found + found_terms):
        placeholder = next(free)
        held[placeholder] = replacement
        if kind == "number":
            numbers.add(placeholder)
        elif kind == "term":
            written[placeholder] = text[start:stop]
        places[placeholder] = start / max(len(text), 1)
        pieces += [text[end:start], placeholder]
        end = stop
    pieces.append(text[end:])
    return Protected("".join(pieces), held, places, numbers, spans, written)


def put_back(sentence: str, translation: str, placeholders: Collection[str]) -> tuple[str, int]:
    """The translation of one sentence with each of its `placeholders` that the model lost (copies() finds
    no copy of it) inserted as restore() would, at the place matching its place in the sentence; and how many. Done
    for each sentence as its translation comes (service.worker.pipeline): a span goes back into its own sentence,
    and lands alike in the translation of a sentence with inline markup and without it (service.worker.projection
    projects the markup onto the latter)."""
    there = copied(translation)
    lost = sorted((at, placeholder) for placeholder in placeholders if (at := sentence.find(placeholder)) >= 0
                  and placeholder not in there)
    for at, placeholder in lost:
        translation = insert_at_word_boundary(translation, placeholder, at / max(len(sentence), 1))
    return translation, len(lost)


def spans_of(text: str) -> list[tuple[int, int, str, str]]:
    """(start, end, span, kind) of each span of `text`. No span reaches over a placeholder number standing alone
    (inline markup's: service.worker.markup) that it did not begin with: a phone number written with spaces would
    take the tag after it in ("+49 30 1234567 7301"), and the tag would go where the number goes. Such a span ends
    before the placeholder, and the search goes on from it."""
    if not SIGNS.search(text):
        return []
    found, at = [], 0
    while match := SPANS.search(text, at):
        inside = (m for m in STANDING.finditer(text, match.start() + 1, match.end()) if is_placeholder_number(m[0]))
        if cut := next(inside, None):
            before = SPANS.finditer(text, match.start(), cut.start())
            found += [(m.start(), m.end(), m.group(), m.lastgroup) for m in before]
            at = cut.start()
        else:
            found.append((match.start(), match.end(), match.group(), match.lastgroup))
            at = match.end()
    return found


def is_placeholder_number(text: str) -> bool:
    """Whether a text is a number placeholder_numbers() gives."""
    return (text.isdigit() and not text.startswith("0") and int(text) >= FIRST_PLACEHOLDER
            and (int(text) - FIRST_PLACEHOLDER) % PLACEHOLDER_STEP == 0)


def insert_at_word_boundary(text: str, span: str, share: float) -> str:
    """`span` inserted into `text` at the word boundary nearest to `share` of its length."""
    if not text:
        return span
    target = round(share * len(text))
    boundaries = [0, len(text), *(m.start() for m in regex.finditer(r"(?<=\S)\s", text))]
    at = min(boundaries, key=lambda b: abs(b - target))
    if at == 0:
        return f"{span} {text}"
    if at == len(text):
        trailing = regex.search(r"[\p{P}\s]*$", text).start()  # before the final punctuation
        return f"{text[:trailing]} {span}{text[trailing:]}" if trailing else f"{span} {text}"
    return f"{text[:at]} {span}{text[at:]}"
