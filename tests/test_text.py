"""service.worker.text: splitting request text into sentences and joining the translations back in the same layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from service.worker.text import join_translations, sentences_of, split_bounded, split_sentences

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


def test_split_bounded_keeps_a_text_that_fits_whole_and_cuts_a_longer_one_at_clauses():
    """DeepL's split_sentences=0: one sentence, unless it is past the bound (here 30 characters)."""
    def fits(piece: str) -> bool:
        return len(piece) <= 30

    assert split_bounded(" A dog runs. A man sleeps. ", "en", fits) == ["A dog runs. A man sleeps."]
    text = "a dog runs in the park, a man sleeps; two cats play:\na bird sings loudly today"
    layout = split_bounded(text, "en", fits)
    assert layout == ["a dog runs in the park,", " ", "a man sleeps; two cats play:", "\n",
                      "a bird sings loudly today"]
    assert "".join(layout) == text
