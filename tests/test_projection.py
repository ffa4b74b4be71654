"""Inline markup projected onto the translation without it (service.worker.projection)."""

from __future__ import annotations

import pytest

from service.worker.projection import bare, markup_placeholders, plain_numbering, project
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
