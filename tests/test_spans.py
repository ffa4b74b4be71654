"""Protected spans (service.worker.spans): found, replaced by placeholders, and always given back as written."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.worker.params import clean_text
from service.worker.spans import SIGNS, SPANS, protect, put_back, spans_of

SPANS_FOUND = [
    ("Visit https://example.com/docs/setup?lang=en&v=2 for the details.", "https://example.com/docs/setup?lang=en&v=2"),
    ("Please write to anna.schmidt@example.org today.", "anna.schmidt@example.org"),
    ("Thanks @maria_k for the help.", "@maria_k"),
    ("We love #MachineLearning here.", "#MachineLearning"),
    ("The file is /etc/nginx/nginx.conf on the server.", "/etc/nginx/nginx.conf"),
    ("Open C:\\Users\\anna\\notes.txt now.", "C:\\Users\\anna\\notes.txt"),
    ("Run `pip install mt-service` first.", "`pip install mt-service`"),
    ("I love this song 🎵 so much!", "🎵"),
    ("Well done 👍🏽 team.", "👍🏽"),
    ("Order A-77321 has shipped.", "A-77321"),
    ("See www.example.org.", "www.example.org"),
    ("Read https://en.wikipedia.org/wiki/Mercury_(planet) first.", "https://en.wikipedia.org/wiki/Mercury_(planet)"),
    ("(Details: https://example.com/a_b) follow.", "https://example.com/a_b"),  # a bracket around it stays out
    ("Release v2.3.1 is ready.", "v2.3.1"),
    ("My sister 👩\u200d💻 codes.", "👩\u200d💻"),  # joined emoji, one span
    ("Go 🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f now!",
     "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"),  # a subdivision flag and its tags
]


@pytest.mark.parametrize(("text", "span"), SPANS_FOUND)
def test_each_kind_of_span_is_taken_out_whole(text: str, span: str):
    protected = protect(text)
    assert list(protected.spans.values()) == [span]
    placeholder = next(iter(protected.spans))
    assert placeholder in protected.text and span not in protected.text
    assert protected.restore(protected.text) == (text, 0)


def test_cleaning_keeps_the_joiners_and_tags_inside_an_emoji_and_drops_the_others():
    family, flag = "👨\u200d👩\u200d👧", "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"
    assert clean_text(f"A {family} and a {flag}\u200b here\u200d.\ufeff") == f"A {family} and a {flag} here."


def test_every_digit_of_the_text_is_in_a_span():
    """The model reads no digit but the placeholders' (service.worker.numbers)."""
    protected = protect("On the 3rd day at 10am, 2,000 people, room #1, list 1,2,3 and 25 years, B2B, v2.3.1.")
    assert protected.spans
    assert "".join(sorted(c for c in protected.text if c.isdigit())) == "".join(sorted("".join(protected.spans)))


def test_placeholders_are_numbers_the_text_does_not_hold_even_with_separators():
    protected = protect("Call 7301 or 7,318 or write to a@b.de or c@d.de.")
    assert not {"7301", "7318"} & set(protected.spans)
    assert set(protected.spans.values()) == {"7301", "7,318", "a@b.de", "c@d.de"}


def test_a_placeholder_written_with_a_thousands_separator_is_still_found():
    protected = protect("Mail a@b.de now.")
    (placeholder,) = protected.spans
    german = f"Schreib jetzt an {placeholder[0]}.{placeholder[1:]}."
    assert protected.restore(german) == ("Schreib jetzt an a@b.de.", 0)


@pytest.mark.parametrize("translation", ["", "Besuchen Sie die Seite.", "Seite"])
def test_a_dropped_placeholder_is_put_back_whole_and_counted(translation: str):
    protected = protect("Visit https://example.com/a for the details.")
    restored, put_back = protected.restore(translation)
    assert put_back == 1 and restored.count("https://example.com/a") == 1
    assert restored.replace("https://example.com/a", "").split() == translation.split()


def test_numbers_the_model_made_of_placeholders_or_made_up_are_taken_out():
    """A second copy of a placeholder, two run together (seen with the shipped models: "73018", "73352") or a number
    of the model's own ("Geh 748.") is not left in the translation; the text's own numbers are."""
    protected = protect("Run `make test` in 7301 steps, thanks @maria, 2024.")
    code, steps, mention, year = protected.spans
    translation = f"Führe {code} in {steps} Schritten aus {code}{mention[-1]} {year}, danke {mention} {mention} 748."
    restored, put_back = protected.restore(translation)
    assert restored == "Führe `make test` in 7301 Schritten aus 2024, danke @maria."
    assert put_back == 0


def test_a_placeholder_a_sentence_lost_is_put_back_into_that_sentence_and_counted():
    sentence = "She ran the 7301 kilometres in 7318 minutes."
    assert put_back(sentence, "Sie lief 7301 Kilometer in Minuten.", ["7301", "7318"]) == (
        "Sie lief 7301 Kilometer in 7318 Minuten.", 1)
    assert put_back(sentence, "Sie lief 7.301 Kilometer in 7318 Minuten.", ["7301", "7318"]) == (
        "Sie lief 7.301 Kilometer in 7318 Minuten.", 0)  # found as the model may write it
    assert put_back(sentence, "Sie lief.", ["7335"]) == ("Sie lief.", 0)  # not a placeholder of this sentence


def test_no_span_reaches_over_a_placeholder_number_of_inline_markup():
    """A phone number written with spaces would take in the markup placeholder after it, and the tag would go where
    the number goes."""
    protected = protect("Call +49 30 1234567 7301 now 7318 or (555) 123-4567 7335 today.")
    assert list(protected.spans.values()) == ["+49 30 1234567", "7301", "7318", "(555) 123-4567", "7335"]
    assert list(protect("Call +49 30 1234567 07301.").spans.values()) == ["+49 30 1234567 07301"]  # no placeholder
    assert list(protect("Etwa 7301 40 7318 % mehr.").spans.values()) == ["7301", "40", "7318 %"]  # begins with it
    assert list(protect("Certified ISO-9001 today.").spans.values()) == ["ISO-9001"]  # 9001 is in the series


# texts near spans: mostly letters, spaces and punctuation, with the characters that begin or join spans, "www.",
# digits of several scripts, emoji and their joiners here and there
NEAR_SPANS = st.lists(st.sampled_from([*"aaaaZZZZéß     .,:;-_+~()[]\"'$€%&!?wWw", "www.", "://", "@", "#", "/", "\\",
                                      "`", "0", "7", "٣", "१", "🎵", "👍", "🏽", "\u200d", "\ufe0f", "\u20e3", "🇩",
                                      "©", "\U000e0067"])).map("".join)


@settings(deadline=None, database=None, max_examples=500)
@given(NEAR_SPANS)
def test_a_text_without_any_sign_of_a_span_holds_none(text: str):
    """spans_of searches for every kind of span only where SIGNS finds one of their characters: elsewhere that
    search finds nothing."""
    if SIGNS.search(text) is None:
        assert SPANS.search(text) is None
        assert spans_of(text) == []
