"""service.worker.text: splitting request text into sentences and joining the translations back in the same layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from service.worker.text import (
    in_capitals,
    join_translations,
    ordinary_case,
    sentences_of,
    split_clauses,
    split_long,
    split_sentences,
)

TESTSET = json.loads((Path(__file__).parent / "data" / "sentences.en-de.json").read_text())
LABELLED = [pytest.param(lang, case, id=f"{lang}-{i}") for lang in ("en", "de") for i, case in enumerate(TESTSET[lang])]

# No deadline (a timing assertion) and no example database written into the checkout.
PROPERTY = settings(deadline=None, database=None, max_examples=200)
# Random text: letters, digits, sentence punctuation, quotes, brackets, and all kinds of whitespace.
TEXT = st.text(alphabet=st.sampled_from(list("aZü9 .!?…\"'()«»„“-:,\n\t\r\xa0")), max_size=120)
LANGUAGE = st.sampled_from(["en", "de", "fr", "cs", "pt-BR", "xx"])


def identity_round_trip(text: str, language: str) -> str:
    pieces = split_sentences(text, language)
    return join_translations(pieces, sentences_of(pieces))


def normalized(text: str) -> str:
    """Line breaks kept, every other run of whitespace one space, lines and the text stripped."""
    return "\n".join(" ".join(line.split()) for line in text.strip().split("\n"))


@pytest.mark.parametrize(
    "text,sentences",
    [
        ("One sentence.", ["One sentence."]),
        ("First one. Second one! Third one? Fourth", ["First one.", "Second one!", "Third one?", "Fourth"]),
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ("Line one\nLine two", ["Line one", "Line two"]),
        ("  Padded.  \n\n\n  Next.  ", ["Padded.", "Next."]),
        ("Version 2.5 is out.", ["Version 2.5 is out."]),
    ],
)
def test_split_sentences(text: str, sentences: list[str]):
    assert sentences_of(split_sentences(text, "en")) == sentences


@pytest.mark.parametrize(
    "text,language,joined",
    [
        ("One. Two!", "en", "<One.> <Two!>"),
        ("One.   Two.", "en", "<One.> <Two.>"),
        ("One.\n\nTwo.\nThree.", "en", "<One.>\n\n<Two.>\n<Three.>"),
        ("\n One. \n", "en", "<One.>"),
        # sentences written together get a space between their translations
        ("你好。我很好。", "zh", "<你好。> <我很好。>"),
        ("What?No!", "en", "<What?> <No!>"),
    ],
)
def test_join_keeps_the_layout(text: str, language: str, joined: str):
    pieces = split_sentences(text, language)
    assert join_translations(pieces, [f"<{s}>" for s in sentences_of(pieces)]) == joined


@pytest.mark.parametrize("lang,case", LABELLED)
def test_labelled_texts(lang: str, case: dict):
    """Every case of tests/data/sentences.en-de.json is split right, or is still a known miss."""
    got = sentences_of(split_sentences(case["text"], lang))
    if "known_miss" in case:
        assert got != case["sentences"], f"no longer a miss, drop its known_miss: {case['known_miss']}"
    else:
        assert got == case["sentences"]


@pytest.mark.parametrize("language", ["EN", "en-US", "pt-BR", "zh-Hant", "xx", ""])
def test_any_language_code_is_split(language: str):
    """Upper case and region tags are reduced to the base code; unknown codes get sentencex's default rules."""
    assert sentences_of(split_sentences("It rained. We stayed in.", language)) == ["It rained.", "We stayed in."]


@pytest.mark.parametrize("space", ["\xa0", "\u2009", "\u3000", "\u2028", "\x85"])
@pytest.mark.parametrize("language", ["en", "de", "fr"])
def test_a_capital_before_a_wide_space_and_a_period_is_split(space: str, language: str):
    """sentencex 1.0.32 panics on "Z\xa0." (a whitespace character of more than one byte after a capital and before
    a period); the line is still split, and every character kept."""
    text = f"Mr Z{space}. Smith came home. Then he left."
    pieces = split_sentences(text, language)
    assert "".join(pieces) == text
    assert pieces[-1] == "Then he left."


@pytest.mark.parametrize("text", ["", "   ", "\n\n", " \t\n "])
def test_a_blank_text_has_no_sentences(text: str):
    pieces = split_sentences(text, "en")
    assert sentences_of(pieces) == []
    assert join_translations(pieces, []) == ""


@PROPERTY
@given(TEXT, LANGUAGE)
def test_pieces_alternate_sentences_and_whitespace(text: str, language: str):
    pieces = split_sentences(text, language)
    assert len(pieces) % 2 == 1
    for sentence in pieces[::2]:
        assert sentence == sentence.strip() and "\n" not in sentence
    for separator in pieces[1::2]:
        assert separator.strip() == ""
    assert all(pieces[::2]) or pieces == [""]


@PROPERTY
@given(TEXT, LANGUAGE)
def test_identity_translations_keep_every_line_and_its_text(text: str, language: str):
    """Up to whitespace: sentences written together get a space between them (test_join_keeps_the_layout)."""

    def lines(text: str) -> list[str]:
        return ["".join(line.split()) for line in text.strip().split("\n")]

    assert lines(identity_round_trip(text, language)) == lines(text)


@PROPERTY
@given(TEXT, LANGUAGE)
def test_identity_translations_give_a_normalized_text_back_exactly(text: str, language: str):
    text = normalized(text)
    assume(all(split_sentences(text, language)[1::2]))  # whitespace between every two sentences
    assert identity_round_trip(text, language) == text


def test_a_long_sentence_is_split_at_clause_boundaries_into_parts_that_fit():
    sentence = ("The man, who lived in the old house near the river, walked slowly to the market; he bought apples, "
                "pears and bread – and then he went home.")
    parts = split_clauses(sentence, lambda s: len(s) > 50)
    assert " ".join(parts) == sentence and all(len(p) <= 50 for p in parts)
    assert all(p.endswith((",", ";")) for p in parts[:3])
    words = " ".join(["word"] * 300)  # no clause boundary: between words
    assert [len(p.split()) for p in split_clauses(words, lambda s: len(s.split()) > 40)] == [38, 37] * 4
    assert "".join(split_clauses("x" * 100, lambda s: len(s) > 30)) == "x" * 100  # no space: in the middle


def test_split_long_keeps_the_layout():
    pieces = split_sentences("One, two, three, four. Five six seven.\nEight.", "en")
    assert split_long(pieces, lambda s: len(s) > 12) == [
        "One, two,", " ", "three, four.", " ", "Five six", " ", "seven.", "\n", "Eight."]


@pytest.mark.parametrize(("sentence", "capitals"), [
    ("WARNING: DO NOT TOUCH.", True), ("PLEASE KEEP THIS DOOR CLOSED 24/7.", True), ("USA", False),
    ("The USA and the UK.", False), ("A B C", False), ("ÄRGER IM BÜRO", True),
])
def test_capitals(sentence: str, capitals: bool):
    assert in_capitals(sentence) == capitals
    if capitals:
        assert ordinary_case(sentence).upper() == sentence.upper() and ordinary_case(sentence)[0].isupper()
