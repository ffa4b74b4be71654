"""Inline markup as placeholders: a block's text is translated once, and each inline tag lands around the words it
wrapped.

A unit is a block's content in order: text, and the tags of the inline elements inside it: Open and Close around
the words an element wraps (a link, bold, a span), Atom for markup kept whole where it stands (a line break, an image,
inline code, a footnote mark). mark() gives the text with each tag replaced by a placeholder number, as
service.worker.spans does for protected spans (the shipped models copy a four-digit number best:
bench/results/placeholders.md); unmark() gives the unit again from the translation, each tag where the model put its
number. Whatever the model does, every tag comes back once and the nesting is valid:

- tags with no text between them share one placeholder ("<b><i>" is one number, "</i></b> <br>" two);
- tags around the whole unit (a paragraph that is one link) and the whitespace at its edges stay outside the text;
- a word with an element inside it (H<sub>2</sub>O, 1<sup>st</sup>) is kept as written, as one placeholder;
- a placeholder the model dropped is put back by place, as spans.py does: at the word boundary nearest to the same
  share of the text (a word's start for an opening tag, its end for a closing one); an element that wrapped words
  wraps at least one word again (an open/close pair is never broken), the word before where the model left the
  pair empty ("steht 7301 7318 bei"). Two placeholders that the model ran together into one number ("7301 an 7318"
  as "730118" or "73018", seen with the shipped models) stand where that number stood, and the number goes;
- an element the model moved out of its parent, or across a sibling, is brought back inside its parent, after its
  sibling (the nesting of the source).

Placeholders are numbers that the unit's text does not hold. Protected spans are taken out after mark(), and
spans.protect() picks numbers the marked text does not hold either, so the two never collide.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import regex

from service.worker.spans import CLOSING, OPENING, SEPARATOR, THOUSANDS, made_of_placeholders, placeholder_numbers


@dataclass(eq=False, slots=True)
class Open:
    """Where an inline element starts; `element` is what its format needs to write it again."""

    element: Any


@dataclass(eq=False, slots=True)
class Close:
    """Where the inline element opened with the same `element` ends."""

    element: Any


@dataclass(eq=False, slots=True)
class Atom:
    """Markup kept whole where it stands: a line break, an image, inline code, a footnote mark."""

    element: Any


Tag = Open | Close | Atom
Piece = str | Tag
Unit = list[Piece]

WORD = regex.compile(r"\w+")
# a placeholder as the model may write it (spans.copies, or run into a word): its digits are group 1 or
# 2, then 3; with a thousands separator only as one is written ("7 301", never "7318 365": two numbers)
NUMBER = regex.compile(rf"(?<![\d.,])(?:(\d{{1,3}}){SEPARATOR}|(\d+))(\d{{3}})(?!\d|[.,]\d)")
# no space is put between a placeholder and an opening bracket or quote before it, or punctuation after it
# (spans.OPENING, spans.CLOSING)
TIGHT = set(".,;:!?)]}…")  # punctuation that no space comes before
HYPHENED_BEFORE, HYPHENED_AFTER = regex.compile(r"(?<=\p{L})-$"), regex.compile(r"-(?=\p{L})")



@dataclass(eq=False, slots=True)
class Event:
    """A tag of the unit's body, or markup kept whole there (an Atom, a word with an element inside it)."""

    kind: Literal["open", "close", "point"]
    pieces: Unit
    order: int = 0  # in the source
    partner: Event | None = None  # an open's close, a close's open
    wraps_text: bool = False  # an open whose element wrapped text in the source
    children: list[Event] = field(default_factory=list)  # an open's: the opens and points inside it in the source


@dataclass(slots=True)
class Group:
    """The events that one placeholder stands for: tags with no text between them."""

    events: list[Event]
    share: float  # where it stood, as a share of the marked text's length
    spaced: tuple[bool, bool]  # whether mark() put a space before it, after it


@dataclass(slots=True)
class Marked:
    """A unit as text to translate, and what mark() took out of it."""

    text: str
    head: Unit  # kept before the translation: tags around the whole unit, leading whitespace
    tail: Unit  # kept after it
    groups: dict[str, Group]  # placeholder -> the tags it stands for
    top: list[Event]  # the opens and points of the body inside no element
    source: str  # the unit's text


def mark(unit: Unit) -> Marked:
    """`unit` as text to translate, its inline tags replaced by placeholder numbers that its text does not hold."""
    text, tags = flatten(unit)
    first, last = len(text) - len(text.lstrip()), len(text.rstrip())
    if first >= last:
        return Marked("", list(unit), [], {}, [], text)
    h, t = edges(tags, first, last)
    start = min(first, tags[h][0]) if h < len(tags) else first
    end = max(last, tags[t - 1][0]) if t > h else last
    head = pieces_of(text, tags[:h], 0, start)
    tail = pieces_of(text, tags[t:], end, len(text))
    body = freeze_words(text[start:end], [(at - start, tag) for at, tag in tags[h:t]])
    return assemble(body, head, tail, placeholder_numbers(text), text)


def unmark(translation: str, marked: Marked) -> Unit:
    """The unit again: the translation with each tag where the model put its placeholder, or put back by place."""
    if not marked.groups:
        return merged([*marked.head, translation, *marked.tail])
    clean, places = take_out(translation, marked.groups, marked.source)
    found = set(places)
    starts = [m.start() for m in WORD.finditer(clean)] or [0]
    ends = [m.end() for m in WORD.finditer(clean)] or [len(clean)]
    boundaries = sorted(starts + ends)
    spaced_points = []  # dropped markup with text of its own that stood between spaces: it gets one of its own
    for group in marked.groups.values():
        if group.events[0] not in found:
            kinds = {event.kind for event in group.events}
            if "point" in kinds and group.spaced == (False, False) and clean:
                spaced_points.append((nearest(ends, group.share * len(clean)), group))
                continue
            candidates = starts if kinds == {"open"} else ends if kinds == {"close"} else boundaries
            at = nearest(candidates, group.share * len(clean))
            places.update({event: at for event in group.events})
    for at, group in sorted(spaced_points, key=lambda item: -item[0]):  # "Firma wurde" -> "Firma <span/> wurde"
        clean = f"{clean[:at]} {clean[at:]}"
        places.update({event: place + 1 for event, place in places.items() if place > at})
        places.update({event: at + 1 for event in group.events})
    if spaced_points:
        starts = [m.start() for m in WORD.finditer(clean)] or [0]
        ends = [m.end() for m in WORD.finditer(clean)] or [len(clean)]
    keep_pairs_whole(places, found, clean, starts, ends)
    body = render(marked.top, places, clean, 0, len(clean))
    return merged([*marked.head, *body, *marked.tail])


def has_text(unit: Unit) -> bool:
    """Whether a unit holds any text but whitespace."""
    return any(isinstance(piece, str) and piece.strip() for piece in unit)


def flatten(unit: Unit) -> tuple[str, list[tuple[int, Tag]]]:
    """The unit's text, and each tag with its place in that text; checks that opens and closes pair up."""
    text: list[str] = []
    tags: list[tuple[int, Tag]] = []
    opened: list[Open] = []
    length = 0
    for piece in unit:
        if isinstance(piece, str):
            text.append(piece)
            length += len(piece)
            continue
        if isinstance(piece, Open):
            opened.append(piece)
        elif isinstance(piece, Close) and (not opened or opened.pop().element is not piece.element):
            raise ValueError("a Close that does not close the last Open")
        tags.append((length, piece))
    if opened:
        raise ValueError("an Open that is never closed")
    return "".join(text), tags


def partners(tags: list[tuple[int, Tag]]) -> dict[int, int]:
    """Index of each Open or Close in `tags` -> index of its partner."""
    found: dict[int, int] = {}
    stack: list[int] = []
    for i, (_, tag) in enumerate(tags):
        if isinstance(tag, Open):
            stack.append(i)
        elif isinstance(tag, Close):
            found[i] = stack.pop()
            found[found[i]] = i
    return found


def edges(tags: list[tuple[int, Tag]], first: int, last: int) -> tuple[int, int]:
    """(h, t): tags[:h] stay before the text, tags[t:] after it. They are atoms at the edges, and the outermost
    elements that wrap the whole text (opens before its first word, closes after its last), as many as can go."""
    partner = partners(tags)
    h = 0
    while h < len(tags) and tags[h][0] <= first and not isinstance(tags[h][1], Close):
        h += 1
    while True:
        opened = {i for i in range(h) if isinstance(tags[i][1], Open)}
        t = len(tags)
        while t > h and tags[t - 1][0] >= last and (isinstance(tags[t - 1][1], Atom) or partner.get(t - 1) in opened):
            t -= 1
        unclosed = [i for i in opened if partner[i] < t]
        if not unclosed:
            return h, t
        h = min(unclosed)  # an element whose close is not after the text stays in it, and what follows it


def pieces_of(text: str, tags: list[tuple[int, Tag]], start: int, end: int) -> Unit:
    """text[start:end] with `tags` (their places in `text`) where they stand."""
    pieces: Unit = []
    at = start
    for place, tag in tags:
        pieces += [text[at:place], tag]
        at = place
    pieces.append(text[at:end])
    return [piece for piece in pieces if piece != ""]


def freeze_words(text: str, tags: list[tuple[int, Tag]]) -> list[str | Event]:
    """The body as text and events. A word with an element inside it (H<sub>2</sub>O) becomes one point event that
    keeps it as written; an atom inside a word, or an element reaching out of it, leaves the word as it is."""
    partner = partners(tags)
    places = [place for place, _ in tags]
    words = [(m.start(), m.end()) for m in WORD.finditer(text)]
    word_starts = [start for start, _ in words]
    split = sorted({words[bisect_right(word_starts, place) - 1] for place in places
                    if 0 < place < len(text) and WORD.match(text[place - 1]) and WORD.match(text[place])})
    items: list[str | Event] = []
    at = i = 0
    for start, end in split:
        low, high = bisect_left(places, start), bisect_right(places, end)
        inside = [j for j in range(low, high) if start < places[j] < end]
        taken = [j for j in range(low, high) if low <= partner.get(j, -1) < high]
        if not taken or taken != list(range(taken[0], taken[-1] + 1)) or not set(inside) <= set(taken):
            continue
        items += events_of(text, tags[i : taken[0]], at, start)
        items.append(Event("point", pieces_of(text, tags[taken[0] : taken[-1] + 1], start, end)))
        at, i = end, taken[-1] + 1
    items += events_of(text, tags[i:], at, len(text))
    return items


def events_of(text: str, tags: list[tuple[int, Tag]], start: int, end: int) -> list[str | Event]:
    """text[start:end] with an event for each of `tags`."""
    kinds: dict[type, Literal["open", "close", "point"]] = {Open: "open", Close: "close", Atom: "point"}
    return [piece if isinstance(piece, str) else Event(kinds[type(piece)], [piece])
            for piece in pieces_of(text, tags, start, end)]


def assemble(items: list[str | Event], head: Unit, tail: Unit, placeholders: Iterator[str], source: str) -> Marked:
    """The marked text: one placeholder for each run of events with no text between them, with a space between it
    and a word; the events linked as they nest in the source."""
    text_length = sum(len(item) for item in items if isinstance(item, str))
    out: list[str] = []
    length = 0  # of the text in `out`, placeholders aside
    groups: dict[str, Group] = {}
    top: list[Event] = []
    opened: list[tuple[Event, int]] = []  # open events, and how much text came before each
    run: list[Event] = []
    for order, item in enumerate([*items, ""]):
        if isinstance(item, Event):
            item.order = order
            link(item, opened, top, length)
            run.append(item)
            continue
        if run:
            before, after = (out[-1][-1:] if out else ""), item[:1]
            spaced = (before != "" and not before.isspace() and before not in OPENING,
                      after != "" and not after.isspace() and after not in CLOSING)
            placeholder = next(placeholders)
            groups[placeholder] = Group(run, length / max(text_length, 1), spaced)
            out.append(" " * spaced[0] + placeholder + " " * spaced[1])
            run = []
        if item:
            out.append(item)
            length += len(item)
    return Marked("".join(out), head, tail, groups, top, source)


def link(event: Event, opened: list[tuple[Event, int]], top: list[Event], length: int) -> None:
    """Put `event` where it nests in the source: in the element open around it."""
    if event.kind == "close":
        open_event, before = opened.pop()
        open_event.partner, event.partner = event, open_event
        open_event.wraps_text = length > before
        return
    (opened[-1][0].children if opened else top).append(event)
    if event.kind == "open":
        opened.append((event, length))


def take_out(translation: str, groups: dict[str, Group], source: str) -> tuple[str, dict[Event, int]]:
    """The translation without placeholders (nor the spaces mark() put beside them), and where each event of a
    placeholder found stands in it. A placeholder the model wrote twice stands at its first; a number the source
    does not hold that begins as a placeholder does is two placeholders the model ran together ("7301 an 7318" as
    "730118"): it goes, and those of them not found elsewhere stand where it stood (run_together)."""
    pieces: list[str] = []
    places: dict[Event, int] = {}
    length = at = 0
    last = ""  # the last character of the text so far
    source = THOUSANDS.sub("", source)
    for m in NUMBER.finditer(translation):
        number = (m[1] or m[2]) + m[3]
        group = groups.get(number)
        if group is None and not made_of_placeholders(number, groups, source):
            continue
        gap = translation[at : m.start()]
        at = m.end()
        # a hyphen the model joined a placeholder to a word with ("7301-Ball", "Ball-7318") goes
        gap = gap[:-1] if HYPHENED_BEFORE.search(gap) else gap
        at += bool(HYPHENED_AFTER.match(translation, at))
        first = group is not None and group.events[0] not in places
        before = first and group.spaced[0] and gap.endswith(" ")
        after = first and group.spaced[1] and translation[at : at + 1] == " "
        gap = gap[:-1] if before else gap
        at += after
        pieces.append(gap)
        length += len(gap)
        last = gap[-1:] or last
        # the space before tags that end up before punctuation goes with them ("liegt 214 7301 7318." -> "liegt 214.",
        # "an 030 7301, wenn" -> "an 030, wenn")
        point = group is not None and any(event.kind == "point" for event in group.events)
        if last == " " and translation[at : at + 1] in TIGHT and not point:
            pieces[:] = ["".join(pieces)[:-1]]
            length -= 1
            places.update({event: min(place, length) for event, place in places.items()})
            last = pieces[0][-1:]
        # a copy written twice, or placed where mark() put no space: of the two spaces around it one goes, and a
        # space it leaves at the start
        if (not first or group.spaced != (before, after)) and last in (" ", "") and translation[at : at + 1] == " ":
            at += 1
        # a space the source had beside the tags, the model left out ("Bibliothek 7335öffnet"): it comes back where
        # it keeps two words apart (on the side the source had it), and beside markup with text of its own (a kept
        # "<span translate=no>", a word with an element inside) wherever a word touches it
        after = translation[at : at + 1]
        visible = first and any(event.kind == "point" for event in group.events)
        glued = first and last.isalnum() and after.isalnum()
        space_before = first and not group.spaced[0] and last.isalnum() and (visible or glued)
        space_after = first and not group.spaced[1] and after.isalnum() and (visible or glued and not space_before)
        if space_before:
            pieces.append(" ")
            length, last = length + 1, " "
        if first:
            places.update({event: length for event in group.events})
        elif group is None:  # run together: the placeholders it stands for stand here
            places.update({event: length for run in run_together(number, groups, places) for event in run.events})
        if space_after:
            pieces.append(" ")
            length, last = length + 1, " "
    pieces.append(translation[at:])
    return "".join(pieces), places


def run_together(number: str, groups: dict[str, Group], places: dict[Event, int]) -> list[Group]:
    """The groups of the placeholders that a number the model ran together stands for, those not placed yet: the one
    it starts with and the next, if the rest of the number ends that one ("73018": 7301 and 7318)."""
    order = list(groups)
    for i, placeholder in enumerate(order):
        if number.startswith(placeholder) and len(number) > len(placeholder):
            rest = number[len(placeholder) :]
            after = order[i + 1 : i + 2]
            run = [groups[placeholder], *(groups[p] for p in after if p.endswith(rest))]
            return [group for group in run if group.events[0] not in places]
    return []


def nearest(candidates: list[int], target: float) -> int:
    """The candidate (a sorted list) nearest to `target`."""
    i = bisect_left(candidates, target)
    return min(candidates[max(i - 1, 0) : i + 1], key=lambda c: abs(c - target))


def keep_pairs_whole(
    places: dict[Event, int], found: set[Event], text: str, starts: list[int], ends: list[int]
) -> None:
    """Each element's close after its open (swapped if the model reversed them), and an element that wrapped text
    wrapping at least a word again: the open moves to the previous word's start where the model placed the close
    (the fine-tuned models write a pair they leave empty, or run together, right after the word they translated:
    "steht 7301 7318 bei", "genießen 73018"; bench.studies.placeholders' markup units), else the close to the next
    word's end."""
    for event in [event for event in places if event.kind == "open"]:
        close = event.partner
        if places[event] > places[close]:
            places[event], places[close] = places[close], places[event]
        if event.wraps_text and not WORD.search(text, places[event], places[close]):
            later = bisect_right(ends, places[event])
            earlier = bisect_left(starts, places[close]) - 1
            if earlier >= 0 and (close in found or later == len(ends)):
                places[event] = starts[earlier]
            elif later < len(ends):
                places[close] = ends[later]


def render(events: list[Event], places: dict[Event, int], text: str, low: int, high: int) -> Unit:
    """text[low:high] with `events` (siblings in the source) and what is inside them: each within [low, high],
    after the sibling before it, and whitespace at an element's edges left outside it."""
    pieces: Unit = []
    at = low
    for event in sorted(events, key=lambda e: (min(max(places[e], low), high), e.order)):
        start = min(max(places[event], at), high)
        if event.kind == "point":
            pieces += [text[at:start], *event.pieces]
            at = start
            continue
        close = event.partner
        end = min(max(places[close], start), high)
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        pieces += [text[at:start], *event.pieces, *render(event.children, places, text, start, end), *close.pieces]
        at = end
    pieces.append(text[at:high])
    return pieces


def merged(pieces: Unit) -> Unit:
    """Adjacent strings joined, empty ones left out."""
    out: Unit = []
    for piece in pieces:
        if isinstance(piece, str) and out and isinstance(out[-1], str):
            out[-1] += piece
        elif piece != "":
            out.append(piece)
    return out
