"""Inline markup projected onto the translation without it (service.worker.projection)."""

from __future__ import annotations

import pytest

from service.worker.projection import Wrapped, bare, markup_placeholders, plain_numbering, project, same_word, wrapped
from service.worker.spans import protect


def test_markup_placeholders_are_the_spans_that_stand_for_markup_numbers():
    protected = protect("The 7301 red 7318 car costs 2024 dollars at https://example.com/a.")
    kinds = {protected.spans[p] for p in markup_placeholders(protected)}
    assert kinds == {"7301", "7318"}


def test_bare_is_the_sentence_without_its_markup_as_the_sentence_without_markup_reads():
    assert bare("The 7335 red 7352 car is very fast.", ["7335", "7352"], {}) == "The red car is very fast."
    assert bare("7335 Hello 7352, world 7369.", ["7335", "7352", "7369"], {}) == "Hello, world."
    marked = protect("In 7301 2024 7318 we moved, see https://example.com/a.")  # <b>2024</b>
    tags = markup_placeholders(marked)
    numbering = plain_numbering(marked, tags)
    plain = protect("In 2024 we moved, see https://example.com/a.")
    assert bare(marked.text, tags, numbering) == plain.text


@pytest.mark.parametrize(("marked", "plain", "expected"), [
    # the marked translation dropped "Auto": the bare one keeps it, the tags wrap the same word
    ("Die 7335 rote 7352 ist sehr schnell.", "Das rote Auto ist sehr schnell.",
     "Das 7335 rote 7352 Auto ist sehr schnell."),
    ("Klicken Sie 7335 hier 7352, dann warten.", "Klicken Sie hier, dann warten Sie.",
     "Klicken Sie 7335 hier 7352, dann warten Sie."),
    ("7335 Hallo 7352", "Hallo Welt!", "7335 Hallo 7352 Welt!"),
    ("Nichts hier.", "Gar nichts.", "Gar nichts."),  # both lost: put back by place later (spans.restore)
])
def test_each_placeholder_goes_where_the_marked_translation_put_it(marked: str, plain: str, expected: str):
    placeholders = ["7335", "7352"]
    projected = project(marked, plain, placeholders, {})
    assert projected == expected
    assert bare(projected, placeholders, {}) == plain


def test_the_bare_translation_gets_the_marked_numbering_back():
    numbering = {"7352": "7301"}  # the span 7352 of the marked sentence is 7301 without markup
    assert project("Im 7335 Jahr 7369 7352.", "Im Jahr 7301.", ["7335", "7369"], numbering) == "Im 7335 Jahr 7369 7352."


def test_each_pair_of_markup_placeholders_comes_with_the_words_it_wraps():
    sentence = "The 7335 big 7352 dog and the 7369 cat of 7386 Anna 7403 7420 sleep."
    pairs = wrapped(sentence, {"7335", "7352", "7369", "7403", "7420"})
    assert [(p.open, p.close, p.words) for p in pairs] == [("7335", "7352", "big"), ("7369", "7403", "cat of Anna")]
    assert pairs[0].share == sentence.index("7335") / len(sentence)
    assert wrapped("Hello 7335 7386 7352 world.", {"7335", "7352"}) == []  # no word between: nothing to translate


@pytest.mark.parametrize(("a", "b", "same"), [
    ("ball", "ball", True), ("rot", "rote", True), ("flug", "fluges", True), ("kosten", "kostet", True),
    ("a", "a", True), ("in", "im", False), ("die", "der", False), ("garten", "gartenbetrieb", True),
    ("ist", "im", False),
])
def test_same_word_is_the_word_in_another_form(a: str, b: str, same: bool):
    assert same_word(a, b) is same and same_word(b, a) is same


# what the shipped models answered for the probes en-strong-noun and de-italic-adjective: the marked translation ran
# the pair together after the wrong word, or lost its close; the words alone find the word
@pytest.mark.parametrize(("marked", "plain", "alone", "expected"), [
    ("Zwei Kinder spielen mit einem Ball im Garten 73352.", "Zwei Kinder spielen im Garten mit einem Ball.",
     "Ball ist", "Zwei Kinder spielen im Garten mit einem 7335 Ball 7352."),
    ("A woman is wearing a 7335 red hat.", "A woman is wearing a red hat.", "Red.",
     "A woman is wearing a 7335 red 7352 hat."),
    # two matches: the one nearest to where the open placeholder stands
    ("Der Hund sieht 7335 den Hund.", "Der Hund sieht den Hund.", "Hund", "Der Hund sieht den 7335 Hund 7352."),
    # nothing matches: the placeholder the marked translation placed stays, the other is put back later
    ("Er 7335 geht.", "Er geht heim.", "Ist ist sinnig.", "Er 7335 geht heim."),
    ("Er geht. 7335", "Er geht.", "Ist", "Er geht. 7335"),  # at the very end
])
def test_a_pair_the_marked_translation_did_not_place_goes_around_its_words_translated_alone(
        marked: str, plain: str, alone: str, expected: str):
    pair = Wrapped("7335", "7352", "ball", 0.5)
    projected = project(marked, plain, ["7335", "7352"], {}, [(pair, alone)])
    assert projected == expected
    assert bare(projected, ["7335", "7352"], {}) == plain


def test_a_pair_the_marked_translation_placed_around_words_stays_where_it_put_it():
    pair = Wrapped("7335", "7352", "dog", 0.2)
    assert project("Der 7335 große 7352 Hund.", "Der große Hund.", ["7335", "7352"], {}, [(pair, "Hund")]) \
        == "Der 7335 große 7352 Hund."
    # around more words than the source's: those of them that match, where some do
    pair = Wrapped("7335", "7352", "blue", 0.5)
    assert project("Das 7335 blaue Rad 7352 fährt.", "Das blaue Rad fährt.", ["7335", "7352"], {},
                   [(pair, "Blau")]) == "Das 7335 blaue 7352 Rad fährt."
    assert project("Das 7335 blaue Rad 7352 fährt.", "Das blaue Rad fährt.", ["7335", "7352"], {},
                   [(pair, "Grün")]) == "Das 7335 blaue Rad 7352 fährt."


@pytest.mark.parametrize(("marked", "plain", "expected"), [
    # a word joined to the next by a hyphen is wrapped whole, never cut (a space would change the words)
    ("Mein 7335 Flug 7352 ist da.", "Meine Flug-S-Sch ist da.", "Meine 7335 Flug-S-Sch 7352 ist da."),
    # an element begins after the punctuation that ends the words before it
    ("Rufen Sie an 7335, wenn es 7352 klemmt.", "Rufen Sie an, wenn es klemmt.",
     "Rufen Sie an, 7335 wenn es 7352 klemmt."),
])
def test_placeholders_keep_the_spaces_of_the_translation_without_markup(marked: str, plain: str, expected: str):
    pair = Wrapped("7335", "7352", "words", 0.3)
    projected = project(marked, plain, ["7335", "7352"], {}, [(pair, "")])
    assert projected == expected
    assert bare(projected, ["7335", "7352"], {}) == plain


def test_a_placeholder_of_a_translation_without_words_stands_alone():
    """Neither translation has a word to align (the model gave nothing for the bare sentence)."""
    assert project("7,318", "", ["7318"], {}) == "7318"
    assert project("7301 7318", "", ["7301", "7318"], {}) == "7301 7318"
