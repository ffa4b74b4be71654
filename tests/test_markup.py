"""Inline markup as placeholders (service.worker.markup): with hand-written translations, each tag lands around the
words it wrapped, whatever the model did with its placeholder, and the nesting stays valid."""

from __future__ import annotations

import random
import sys

import pytest

from service.worker.markup import Atom, Close, Open, Unit, mark, unmark
from service.worker.spans import protect


def html(unit: Unit) -> str:
    """A unit written as HTML-like text, to compare with what a test expects."""
    out = []
    for piece in unit:
        if isinstance(piece, str):
            out.append(piece)
        elif isinstance(piece, Open):
            out.append(f"<{piece.element}>")
        elif isinstance(piece, Close):
            out.append(f"</{piece.element}>")
        else:
            out.append(f"<{piece.element}/>")
    return "".join(out)


def unit(*parts: str) -> Unit:
    """A unit from "<b>", "</b>", "<br/>" and text; an element's name (one string object) is its Open and Close
    element."""
    pieces: Unit = []
    for part in parts:
        if part.startswith("</"):
            pieces.append(Close(sys.intern(part[2:-1])))
        elif part.endswith("/>"):
            pieces.append(Atom(part[1:-2]))
        elif part.startswith("<"):
            pieces.append(Open(sys.intern(part[1:-1])))
        else:
            pieces.append(part)
    return pieces


BOLD_DOG = unit("The ", "<b>", "big", "</b>", " dog runs.")


def test_tags_become_placeholder_numbers_with_a_space_between_them_and_a_word():
    marked = mark(BOLD_DOG)
    assert marked.text == "The 7301 big 7318 dog runs."
    assert html(unmark(marked.text, marked)) == "The <b>big</b> dog runs."


@pytest.mark.parametrize(("translation", "expected"), [
    ("Der 7301 große 7318 Hund rennt.", "Der <b>große</b> Hund rennt."),  # copied
    ("Der Hund 7301 rennt 7318 schnell.", "Der Hund <b>rennt</b> schnell."),  # moved with its word
    ("Der 7318 große 7301 Hund rennt.", "Der <b>große</b> Hund rennt."),  # reversed: swapped
    ("Der 7301 7318 Hund rennt.", "<b>Der</b> Hund rennt."),  # wrapping nothing: the word before
    ("Der Hund 7301 7318 rennt.", "Der <b>Hund</b> rennt."),
    ("Der Hund 73018 rennt.", "Der <b>Hund</b> rennt."),  # run together: the two stand there
    ("7301 7318 Der Hund rennt.", "<b>Der</b> Hund rennt."),  # no word before: the next
    ("Der 7.301 große 7,318 Hund rennt.", "Der <b>große</b> Hund rennt."),  # thousands separators
    ("Der große Hund rennt.", "Der <b>große</b> Hund rennt."),  # both dropped: by place
    ("Der 7301 große Hund rennt.", "Der <b>große</b> Hund rennt."),  # close dropped: the next word's end
    ("Der große 7318 Hund rennt.", "Der <b>große</b> Hund rennt."),  # open dropped: the previous word's start
    ("Der 7301 große 7318 Hund 7301 rennt.", "Der <b>große</b> Hund rennt."),  # written twice: the first
    ("Der 7301 große 7318Hund rennt.", "Der <b>große</b> Hund rennt."),  # glued to the next word: kept apart
    ("Der 7301große 7318 Hund rennt.", "Der <b>große</b> Hund rennt."),
    ("Der 7301-große 7318 Hund rennt.", "Der <b>große</b> Hund rennt."),  # joined by a hyphen: it goes
    ("Der 7301 große-7318 Hund rennt.", "Der <b>große</b> Hund rennt."),
])
def test_each_tag_lands_around_the_words_it_wrapped(translation: str, expected: str):
    assert html(unmark(translation, mark(BOLD_DOG))) == expected


@pytest.mark.parametrize("translation", ["Der 730118 Hund rennt.", "Der 73018 Hund rennt."])
def test_placeholders_the_model_ran_together_go_and_are_put_back_by_place(translation: str):
    result = html(unmark(translation, mark(BOLD_DOG)))
    assert result.count("<b>") == 1 and result.replace("<b>", "").replace("</b>", "") == "Der Hund rennt."


def test_a_number_of_the_source_is_never_taken_for_a_placeholder():
    marked = mark(unit("In 7342 the ", "<b>", "big", "</b>", " dog ran."))
    assert html(unmark("Im Jahr 7342 rannte der 7301 große 7318 Hund.", marked)) == \
        "Im Jahr 7342 rannte der <b>große</b> Hund."


def test_tags_with_no_text_between_them_share_one_placeholder():
    marked = mark(unit("A ", "<a>", "<b>", "link", "</b>", "</a>", " here."))
    assert marked.text == "A 7301 link 7318 here."
    assert html(unmark("Ein 7301 Verweis 7318 hier.", marked)) == "Ein <a><b>Verweis</b></a> hier."


def test_tags_around_the_whole_unit_and_its_edge_whitespace_stay_outside_the_text():
    marked = mark(unit("  ", "<a>", "<b>", "Home page", "</b>", "</a>", "<br/>", "\n"))
    assert marked.text == "Home page"
    assert html(unmark("Startseite", marked)) == "  <a><b>Startseite</b></a><br/>\n"


def test_an_element_that_wraps_only_the_start_stays_inside():
    marked = mark(unit("<b>", "Hello", "</b>", " world"))
    assert marked.text == "7301 Hello 7318 world"
    assert html(unmark("Welt 7301 hallo 7318", marked)) == "Welt <b>hallo</b>"


def test_a_word_with_an_element_inside_it_is_kept_as_written():
    marked = mark(unit("Water is H", "<sub>", "2", "</sub>", "O and the 1", "<sup>", "st", "</sup>", " one."))
    assert marked.text == "Water is 7301 and the 7318 one."
    assert html(unmark("Wasser ist 7301 und der 7318 eine.", marked)) == \
        "Wasser ist H<sub>2</sub>O und der 1<sup>st</sup> eine."


def test_atoms_keep_their_place_or_are_put_back_by_place():
    marked = mark(unit("Line one", "<br/>", "line two and", "<img/>", " more"))
    assert marked.text == "Line one 7301 line two and 7318 more"
    assert html(unmark("Zeile eins 7301 Zeile zwei und 7318 mehr", marked)) == \
        "Zeile eins<br/>Zeile zwei und<img/> mehr"
    assert html(unmark("Zeile eins Zeile zwei und mehr", marked)).count("<br/>") == 1


def test_markup_with_text_of_its_own_keeps_the_spaces_the_source_had_beside_it():
    marked = mark(unit("Our firm ", "<br/>", " was founded here."))
    assert html(unmark("Unsere Firma 7301wurde hier gegründet.", marked)) == "Unsere Firma <br/> wurde hier gegründet."
    assert html(unmark("Unsere Firma7301 wurde hier gegründet.", marked)) == "Unsere Firma <br/> wurde hier gegründet."
    assert html(unmark("Unsere Firma wurde hier gegründet.", marked)) == "Unsere Firma <br/> wurde hier gegründet."


def test_punctuation_next_to_a_placeholder_gets_no_space():
    marked = mark(unit("See (", "<i>", "this", "</i>", "), ok"))
    assert marked.text == "See (7301 this 7318), ok"
    assert html(unmark("Siehe (7301 dies 7318), gut", marked)) == "Siehe (<i>dies</i>), gut"


def test_a_child_moved_out_of_its_parent_is_brought_back_inside():
    marked = mark(unit("A ", "<b>", "x ", "<i>", "y", "</i>", " z", "</b>", " end"))
    assert marked.text == "A 7301 x 7318 y 7335 z 7352 end"
    assert html(unmark("A 7301 x 7318 y 7352 z 7335 end", marked)) == "A <b>x <i>y</i></b> z end"
    assert html(unmark("7318 A 7301 x y 7335 z 7352 end", marked)) == "A <b><i>x y</i> z</b> end"


def test_siblings_the_model_made_overlap_are_kept_apart():
    marked = mark(unit("<b>", "one", "</b>", " and ", "<i>", "two", "</i>", " three"))
    assert html(unmark("7301 eins 7335 und 7318 zwei 7352 drei", marked)) == "<b>eins und</b> <i>zwei</i> drei"


def test_placeholders_are_numbers_the_text_does_not_hold_and_spans_pick_others():
    marked = mark(unit("Room 7301 is ", "<b>", "free", "</b>", ", mail a@b.de"))
    assert "7318" in marked.text and marked.text.count("7301") == 1
    protected = protect(marked.text)
    assert set(protected.spans).isdisjoint(marked.groups)
    translated, _ = protected.restore(protected.text.replace("is", "ist"))
    assert html(unmark(translated, marked)) == "Room 7301 ist <b>free</b>, mail a@b.de"


@pytest.mark.parametrize(("translation", "expected"), [
    ("Im ersten Stock liegt 214 7301 7318.", "Im ersten Stock liegt <b>214</b>."),  # the pair left empty at the end
    ("Zimmer 214 7301 ist 7318, oben.", "Zimmer 214 <b>ist</b>, oben."),
    ("Zimmer 214 7301, 7318 oben.", "Zimmer <b>214,</b> oben."),  # around the comma, and a word
])
def test_tags_before_punctuation_leave_no_space_before_it(translation: str, expected: str):
    marked = mark(unit("Room 214 ", "<b>", "is", "</b>", " on the second floor."))
    assert html(unmark(translation, marked)) == expected


def test_a_unit_without_text_or_tags_comes_back_as_it_is():
    assert html(unmark("", mark(unit("  ", "<br/>")))) == "  <br/>"
    assert html(unmark("Hallo", mark(["Hello"]))) == "Hallo"


def test_tags_that_do_not_pair_up_are_refused():
    with pytest.raises(ValueError):
        mark(unit("<b>", "x"))
    with pytest.raises(ValueError):
        mark(unit("<b>", "x", "</i>"))


def valid(pieces: Unit, source: Unit) -> bool:
    """Every tag of the source once, opens and closes nested."""
    stack = []
    for piece in pieces:
        if isinstance(piece, Open):
            stack.append(piece.element)
        elif isinstance(piece, Close) and (not stack or stack.pop() is not piece.element):
            return False
    tags = [id(piece) for piece in pieces if not isinstance(piece, str)]
    return not stack and sorted(tags) == sorted(id(piece) for piece in source if not isinstance(piece, str))


def random_unit(rng: random.Random) -> Unit:
    words = ["alpha", "beta", "gamma", "delta", "x2", "end."]
    pieces: Unit = []
    opened: list[object] = []
    for _ in range(rng.randint(1, 14)):
        choice = rng.random()
        if choice < 0.2:
            opened.append(object())
            pieces.append(Open(opened[-1]))
        elif choice < 0.35 and opened:
            pieces.append(Close(opened.pop()))
        elif choice < 0.45:
            pieces.append(Atom(object()))
        else:
            pieces.append(rng.choice(["", " "]) + rng.choice(words) + rng.choice(["", " "]))
    return pieces + [Close(element) for element in reversed(opened)]


def test_whatever_the_model_does_every_tag_comes_back_once_and_nested():
    rng = random.Random(25)
    for _ in range(3000):
        source = random_unit(rng)
        marked = mark(source)
        tokens = marked.text.split()
        rng.shuffle(tokens)
        tokens = [token for token in tokens if rng.random() > 0.3]
        result = unmark(" ".join(tokens), marked)
        assert valid(result, source), (html(source), marked.text, tokens, html(result))
