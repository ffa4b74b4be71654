"""Inline markup projected onto the translation of the same sentence without it.

A placeholder in a sentence is a word the model has to place, and the shipped models sometimes drop a real word
next to one ("The 7301 red 7318 car is very fast." -> "Die 7301 rote 7318 ist sehr schnell."). So a sentence that
holds inline markup's placeholders (service.worker.markup) is translated twice: as marked, and bare (without them,
its other placeholders numbered as in the sentence without markup: exactly what that sentence reads, "The red car
is very fast."). The answer is the bare translation with each placeholder put where the marked translation put it:
the two translations are aligned word by word (difflib), and a placeholder goes after the bare translation's word
that the word before it aligns with (or before the one that the word after it aligns with). Its words are then the
words of the sentence without markup; a placeholder the marked translation lost stays lost here too, and is put
back by place afterwards (service.worker.spans).
"""

from __future__ import annotations

from collections.abc import Collection
from difflib import SequenceMatcher

import regex

from service.worker.spans import FIRST_PLACEHOLDER, HELD, PLACEHOLDER_STEP, Protected, placeholder_pattern, protect

TOKEN = regex.compile(r"\w+|[^\w\s]")
CLOSING = regex.compile(r"(?<=\d) (?=[.,;:!?)\]}»…])")


def markup_placeholders(protected: Protected) -> set[str]:
    """The placeholders of `protected` that stand for inline markup's own placeholders (markup.mark takes its numbers
    from spans.placeholder_numbers; a number of the text that happens to be one is projected as a tag is, by
    place, and comes back all the same)."""
    return {placeholder for placeholder, span in protected.spans.items() if span.isdigit()
            and int(span) >= FIRST_PLACEHOLDER and (int(span) - FIRST_PLACEHOLDER) % PLACEHOLDER_STEP == 0}


def plain_numbering(protected: Protected, tags: Collection[str]) -> dict[str, str]:
    """Each other placeholder of `protected` (not one of `tags`), and the placeholder its span gets in the text
    without markup (spans.protect of it), so that a bare sentence reads exactly what the sentence without markup
    reads; empty where the spans differ."""
    original = regex.sub("|".join(protected.spans), lambda m: protected.spans[m.group()], protected.text)
    again = protect(without(original, [protected.spans[tag] for tag in tags]))
    ours = [placeholder for placeholder in protected.spans if placeholder not in tags]
    if [protected.spans[placeholder] for placeholder in ours] != list(again.spans.values()):
        return {}
    return dict(zip(ours, again.spans))


def without(text: str, numbers: Collection[str]) -> str:
    """`text` without these numbers (standing alone), its spaces made single."""
    pattern = "|".join(numbers)
    return regex.sub(r"\s+", " ", regex.sub(rf" ?(?<!\d)(?:{pattern})(?!\d)", "", text)).strip()


def renamed(text: str, names: dict[str, str]) -> str:
    """`text` with each placeholder of `names` (standing alone) written as its new name, all at once."""
    if not names:
        return text
    return regex.sub(rf"(?<!\d)(?:{'|'.join(names)})(?!\d)", lambda m: names[m.group()], text)


def bare(sentence: str, tags: Collection[str], numbering: dict[str, str]) -> str:
    """The sentence without its markup's placeholders, its other placeholders numbered as plain_numbering says."""
    return renamed(without(sentence, tags), numbering)


def project(marked: str, plain: str, placeholders: Collection[str], numbering: dict[str, str]) -> str:
    """The translation `plain` (of bare(), its placeholders numbered by `numbering`) with each placeholder that the
    translation `marked` holds, where it holds it, and the other placeholders as `marked` numbers them."""
    plain = renamed(plain, {new: old for old, new in numbering.items()})
    found = []  # (where it stood in the marked translation without placeholders, placeholder)
    for placeholder in placeholders:
        if match := regex.search(placeholder_pattern(placeholder), marked):
            found.append((match.start(), placeholder))
            marked = f"{marked[: match.start()]}{HELD * len(match.group())}{marked[match.end() :]}"
    if not found:
        return plain
    clean = marked.replace(HELD, " ")  # placeholders out, offsets kept
    marked_tokens = [(m.start(), m.group().lower()) for m in TOKEN.finditer(clean)]
    plain_tokens = list(TOKEN.finditer(plain))
    opcodes = SequenceMatcher(None, [t for _, t in marked_tokens], [m.group().lower() for m in plain_tokens],
                              autojunk=False).get_opcodes()
    same = {i: j1 + i - i1 for tag, i1, i2, j1, _ in opcodes if tag == "equal" for i in range(i1, i2)}
    inserts = []
    for at, placeholder in found:
        i = sum(start < at for start, _ in marked_tokens)  # the marked tokens before it
        if i - 1 in same:  # after the word before it, where that word is the same in both
            j = same[i - 1] + 1
        elif i in same:  # else before the word after it
            j = same[i]
        else:  # else at the same place of the block of words that differ
            j = next(j1 + min(i - i1, j2 - j1) for _, i1, i2, j1, j2 in opcodes if i1 <= i <= i2)
        inserts.append((plain_tokens[j].start() if j < len(plain_tokens) else len(plain), placeholder))
    out, end = [], 0
    for offset, placeholder in sorted(inserts):
        out += [plain[end:offset].rstrip(), f" {placeholder} "]
        end = offset
    out.append(plain[end:].lstrip())
    return CLOSING.sub("", regex.sub(r" {2,}", " ", "".join(out))).strip()
