"""Training-time augmentation, so that robustness is learned by the model rather than patched in the server.

casing:  a share of the pairs again with the source in UPPER, lower or Title case and the target as written (or
         recased alike), so that "A MAN IS RIDING" is translated as well as "A man is riding", into normally
         written German.
numbers: pairs whose source and target hold the same digit runs, again with other random numbers in their
         place, so that the model learns to copy digits (years, times, prices) rather than to guess them, and
         sometimes a date, a decimal or thousands, written as each language writes them ("3,5" in German is
         "3.5" in English).
number words: pairs where both sides spell the same small number ("two men" / "zwei Männer"), again with one
         random number in digits on both sides: most everyday corpora spell numbers, so this gives thousands of
         digit pairs where the corpus has hundreds.
placeholders: pairs again with the service's placeholders for protected spans (service.worker.spans) on both
         sides, so that the model copies each into the place its span belongs: a name or number written alike on
         both sides ("Tom", "Boston", "1984") becomes a placeholder where it stands; a pair without one gets a
         placeholder at its start, its end (as an emoji or a link often stands) or in between.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from service.worker.spans import placeholder_numbers

DIGITS = re.compile(r"\d+")
CASINGS = (str.upper, str.lower, str.title)
# The small numbers as words, per language: index i spells i + 2.
NUMBER_WORDS = {
    "en": ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"),
    "de": ("zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun", "zehn", "elf", "zwölf"),
    "fr": ("deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf", "dix", "onze", "douze"),
}


def casing_variants(
    pairs: list[tuple[str, str]], share: float, seed: int, target_too: bool = False
) -> list[tuple[str, str]]:
    """About `share` of the pairs, each once more with one casing applied to the source, and to the target as well
    when target_too. A target left as written teaches the model to read any casing and write the target language's
    own: an UPPER CASE target is spelled in pieces the model rarely writes, and came out misspelled ("KINATZE")."""
    rng = random.Random(seed)
    variants = []
    for src, tgt in pairs:
        if rng.random() < share:
            case = rng.choice(CASINGS)
            variants.append((case(src), case(tgt) if target_too else tgt))
    return variants


MAX_DIGITS = 6  # the longest new number: years, postcodes, prices


def random_number(rng: random.Random, like: str) -> str:
    """A number of 1 to MAX_DIGITS digits, no leading zero unless `like` has one: mostly of about the size of
    `like`, and one time in four of any width, so that 5- and 6-digit numbers are seen though corpora rarely hold
    them."""
    if like.startswith("0") and len(like) > 1:  # "05" in "10:05": keep the width
        return f"{rng.randrange(10 ** len(like)):0{len(like)}d}"
    if rng.random() < 0.25:
        width = rng.randint(1, MAX_DIGITS)
    else:
        width = max(1, min(MAX_DIGITS, len(like) + rng.choice((-1, 0, 0, 1))))
    return str(rng.randrange(10 ** (width - 1) if width > 1 else 0, 10**width))


@dataclass(frozen=True)
class NumberStyle:
    """How a language writes the parts of a number: "3.5" / "3,5", "2,000" / "2.000", "03/10/2024" / "03.10.2024"."""

    decimal: str
    thousands: str
    date: str


NUMBER_STYLES = {
    "en": NumberStyle(decimal=".", thousands=",", date="/"),
    "de": NumberStyle(decimal=",", thousands=".", date="."),
    "fr": NumberStyle(decimal=",", thousands=" ", date="/"),
}


def number_form(rng: random.Random, src_lang: str, tgt_lang: str) -> tuple[str, str]:
    """A number as everyday text writes it, in the source's and the target's style: a phone number in two groups, a
    date, a time, a code of letters and digits, a decimal, thousands; corpora hold few of them, and the model merged
    and cut them ("5,2" became "52"). Decimals have 1 to 3 digits after the point, as thousands have 3, so that
    only the languages' separators tell them apart. A language without a style writes them as English does."""
    src, tgt = (NUMBER_STYLES.get(lang, NUMBER_STYLES["en"]) for lang in (src_lang, tgt_lang))
    form = rng.randrange(6)
    if form == 0:
        phone = f"0{rng.randrange(10, 10_000)} {rng.randrange(10**5, 10**8)}"
        return phone, phone
    if form == 1:
        day, month, year = f"{rng.randrange(1, 32):02d}", f"{rng.randrange(1, 13):02d}", str(rng.randrange(1900, 2100))
        return src.date.join((day, month, year)), tgt.date.join((day, month, year))
    if form == 2:
        time = f"{rng.randrange(24)}:{rng.randrange(60):02d}"
        return time, time
    if form == 3:
        code = f"{rng.choice('ABCDEFGHKLMRSTX')}{rng.randrange(1, 1000)}"
        return code, code
    if form == 4:
        width = rng.randint(1, 3)
        whole, fraction = str(rng.randrange(1000)), f"{rng.randrange(10**width):0{width}d}"
        return f"{whole}{src.decimal}{fraction}", f"{whole}{tgt.decimal}{fraction}"
    thousands, rest = str(rng.randrange(1, 1000)), f"{rng.randrange(1000):03d}"
    return f"{thousands}{src.thousands}{rest}", f"{thousands}{tgt.thousands}{rest}"


LONE_NUMBER = re.compile(r"(?<![\w:/.,])\d+(?!\w|[:/.,]\w)")  # not part of a time, a date, a decimal or a code


def renumber(text: str, new: dict[str, str]) -> str:
    return DIGITS.sub(lambda match: new[match.group()], text)


def number_variants(
    pairs: list[tuple[str, str]], src_lang: str, tgt_lang: str, copies: int, seed: int
) -> list[tuple[str, str]]:
    """`copies` variants of each pair whose sides hold the same digit runs, with new numbers in both; where both
    sides hold one number standing alone, one variant in three writes it as a phone number, date, time, code,
    decimal or thousands, each side in its language's style."""
    rng = random.Random(seed)
    variants = []
    for src, tgt in pairs:
        runs = DIGITS.findall(src)
        if not runs or sorted(runs) != sorted(DIGITS.findall(tgt)):
            continue
        lone = len(runs) == 1 and len(LONE_NUMBER.findall(src)) == len(LONE_NUMBER.findall(tgt)) == 1
        for _ in range(copies):
            if lone and rng.random() < 1 / 3:
                src_form, tgt_form = number_form(rng, src_lang, tgt_lang)
                variants.append((renumber(src, {runs[0]: src_form}), renumber(tgt, {runs[0]: tgt_form})))
            else:
                new = {run: random_number(rng, run) for run in runs}
                variants.append((renumber(src, new), renumber(tgt, new)))
    return variants


def spelled_numbers(text: str, words: tuple[str, ...]) -> list[tuple[int, re.Match]]:
    """The (value, match) of every number word of `words` in `text`, case-insensitive, whole words only."""
    pattern = re.compile(r"\b(" + "|".join(words) + r")\b", re.IGNORECASE)
    return [(words.index(m.group().lower()), m) for m in pattern.finditer(text)]


def number_word_variants(
    pairs: list[tuple[str, str]], src_lang: str, tgt_lang: str, copies: int, seed: int
) -> list[tuple[str, str]]:
    """`copies` variants of each pair whose sides spell exactly one number, the same one, with digits instead."""
    if src_lang not in NUMBER_WORDS or tgt_lang not in NUMBER_WORDS:
        return []
    rng = random.Random(seed)
    variants = []
    for src, tgt in pairs:
        src_numbers = spelled_numbers(src, NUMBER_WORDS[src_lang])
        tgt_numbers = spelled_numbers(tgt, NUMBER_WORDS[tgt_lang])
        if len(src_numbers) != 1 or len(tgt_numbers) != 1 or src_numbers[0][0] != tgt_numbers[0][0]:
            continue
        (_, s), (_, t) = src_numbers[0], tgt_numbers[0]
        for _ in range(copies):
            number = random_number(rng, str(rng.randrange(2, 100)))
            variants.append((src[: s.start()] + number + src[s.end() :], tgt[: t.start()] + number + tgt[t.end() :]))
    return variants


# A name or a number: a word that a translation writes as the source does, where it stands.
NAME_OR_NUMBER = re.compile(r"(?<![\w'-])(?:[A-Z][\w'-]*[\w]|\d+)(?![\w'-])")
MAX_PLACEHOLDERS = 3
TRAILING_PUNCTUATION = re.compile(r"[.!?…\"'“”»«)]*$")


def shared_names(src: str, tgt: str) -> list[str]:
    """The names and numbers that both sides hold as often, in the source's order; a sentence's first word only
    where it starts both sides and is three letters or more ("Tom", not "In")."""
    src_words, tgt_words = NAME_OR_NUMBER.findall(src), NAME_OR_NUMBER.findall(tgt)
    shared = []
    for word in dict.fromkeys(src_words):
        if src_words.count(word) != tgt_words.count(word):
            continue
        initial = src.startswith(word) or tgt.startswith(word)
        if initial and not (src.startswith(word) and tgt.startswith(word) and len(word) >= 3):
            continue
        shared.append(word)
    return shared


def replace_words(text: str, new: dict[str, str]) -> str:
    """`text` with each of the whole words that `new` names replaced by its value."""
    pattern = re.compile(r"(?<![\w'-])(?:" + "|".join(map(re.escape, new)) + r")(?![\w'-])")
    return pattern.sub(lambda match: new[match.group()], text)


def at_share(text: str, placeholder: str, share: float) -> str:
    """`placeholder` at the word boundary of `text` nearest to `share` of its words: 0 its start, 1 its end (before
    the final punctuation)."""
    if share == 0:
        return f"{placeholder} {text}"
    trailing = TRAILING_PUNCTUATION.search(text).start()
    words = text[:trailing].split()
    at = round(share * len(words))
    return " ".join([*words[:at], placeholder, *words[at:]]) + text[trailing:]


def placeholder_variants(pairs: list[tuple[str, str]], share: float, seed: int) -> list[tuple[str, str]]:
    """Every pair whose sides hold the same names or numbers once more with up to MAX_PLACEHOLDERS of them replaced
    by placeholders where they stand, and about `share` of the other pairs once more with a placeholder at the same
    share of both sides' words: the start, the end, after the final punctuation, or in between (where the target's
    words need not match: the model learns never to drop one). Placeholders are numbered as the service numbers
    them, from the first or, one time in two, from a later one (a text holding spans and markup uses several)."""
    rng = random.Random(seed)
    variants = []
    for src, tgt in pairs:
        numbers = placeholder_numbers(src + " " + tgt)
        for _ in range(rng.choice((0, 0, 0, 0, 1, 2, 3, 5))):
            next(numbers)
        if names := shared_names(src, tgt):
            chosen = set(rng.sample(names, rng.randint(1, min(MAX_PLACEHOLDERS, len(names)))))
            new = {name: next(numbers) for name in names if name in chosen}  # numbered in the source's order
            variants.append((replace_words(src, new), replace_words(tgt, new)))
        elif share and rng.random() < share:
            placeholder = next(numbers)
            if rng.random() < 0.2:
                variants.append((f"{src} {placeholder}", f"{tgt} {placeholder}"))
            else:
                where = rng.choice((0.0, 1.0, rng.random()))
                variants.append((at_share(src, placeholder, where), at_share(tgt, placeholder, where)))
    return variants
