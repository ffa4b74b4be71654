"""Glossaries without a server (service.worker.deepl.glossary): DeepL's validation of entries, and where terms are
found and held through translation as protected spans."""

from __future__ import annotations

import pytest

from service.worker.deepl.glossary import GlossaryError, Matcher, parse_entries, placed, written
from service.worker.spans import protect


def entries(text: str, entries_format: str = "tsv") -> dict[str, str]:
    return parse_entries(text, entries_format, "en", "de")


def test_tsv_and_csv_entries_are_read_with_their_terms_stripped():
    assert entries("sofa\tCouch\n\n  cat \t Katze\r\n") == {"sofa": "Couch", "cat": "Katze"}
    assert entries('sofa,Couch\n"New York, NY",New York\ncat,Katze,en,de\n', "csv") == {
        "sofa": "Couch", "New York, NY": "New York", "cat": "Katze"}


@pytest.mark.parametrize(("text", "entries_format", "line", "what"), [
    ("sofa\tCouch\ncat\tKatze\nsofa\tSofa\n", "tsv", 3, "duplicate source term"),
    ("sofa\tCouch\n\tKatze\n", "tsv", 2, "empty source term"),
    ("sofa\t \n", "tsv", 1, "empty target term"),
    ("sofa\tCouch\ncat\tKatze\tKater\n", "tsv", 2, "separated by one tab"),
    ('sofa,Couch\n"c\tat",Katze\n', "csv", 2, "tab or line break"),
    ("sofa,Couch\ncat,Katze,fr,de\n", "csv", 2, "are not the glossary's"),
    ("sofa\n", "tsv", 1, "expected a source and a target term"),
])
def test_malformed_entries_name_their_line(text: str, entries_format: str, line: int, what: str):
    with pytest.raises(GlossaryError) as error:
        entries(text, entries_format)
    assert f"line {line}" in error.value.message and what in error.value.message
    assert error.value.status == 400


def test_an_unknown_format_and_no_entries_are_refused():
    with pytest.raises(GlossaryError, match="entries_format"):
        entries("a\tb", "xlsx")
    with pytest.raises(GlossaryError, match="no entry"):
        entries("\n\n")


def found(matcher: Matcher, text: str) -> list[tuple[str, str]]:
    return [(text[start:end], target) for start, end, target in matcher.find(text, [])]


def test_terms_are_whole_words_and_the_longest_wins():
    matcher = Matcher({"York": "York", "New York": "New York", "New York City": "NYC", "cat": "Katze"})
    assert found(matcher, "New York City has a cat, not a category.") == [("New York City", "NYC"), ("cat", "Katze")]
    assert found(matcher, "Old York and New York") == [("York", "York"), ("New York", "New York")]
    assert found(matcher, "concatenate cats") == []


def test_overlapping_terms_keep_the_longest_even_when_it_starts_later():
    matcher = Matcher({"black cat": "Rappe", "cat food bowl": "Katzennapf"})
    assert found(matcher, "a black cat food bowl") == [("cat food bowl", "Katzennapf")]
    assert found(matcher, "a black cat food") == [("black cat", "Rappe")]


def test_case_is_matched_as_written_unless_the_glossary_ignores_it():
    assert found(Matcher({"Sofa": "Couch"}), "The sofa and the Sofa.") == [("Sofa", "Couch")]
    assert found(Matcher({"Sofa": "Couch"}, ignore_case=True), "The SOFA and the sofa.") == [
        ("SOFA", "Couch"), ("sofa", "Couch")]


def test_a_term_inside_protected_text_is_left_alone():
    protected = protect("See https://example.com/cat or the cat @cat.", Matcher({"cat": "Katze"}))
    assert sorted(protected.spans.values()) == ["@cat", "Katze", "https://example.com/cat"]
    assert protected.restore(protected.text)[0] == "See https://example.com/cat or the Katze @cat."


def test_a_dropped_term_is_put_back_by_place():
    protected = protect("The cat sleeps.", Matcher({"cat": "Katze"}))
    assert protected.restore("Das Tier schläft.") == ("Das Katze Tier schläft.", 1)


def test_the_models_own_grammar_is_kept_and_its_word_for_the_term_replaced():
    """glossary.placed: the article of the model's own word stays; the placeholder takes the word's place."""
    assert placed("Die 7301 ist vor dem Haus.", "Das Fahrrad ist vor dem Haus.", {"7301": "Velo"}) == \
        "Das 7301 ist vor dem Haus."
    assert placed("Eine Frau mit 7301 geht.", "Eine Frau mit einem Fahrrad geht.", {"7301": "Velo"}) == \
        "Eine Frau mit einem 7301 geht."
    # the model wrote the target term itself: that word, wherever the two translations differ
    assert placed("7301 dem Gras ist ein Baum.", "Auf dem Gras ist ein Baum.", {"7301": "Baum"}) == \
        "Auf dem Gras ist ein 7301."
    # the placeholder is not in the held translation: nothing to align, the held one is kept
    assert placed("Ein Mann schläft.", "Ein Mann schläft auf dem Rad.", {"7301": "Velo"}) == "Ein Mann schläft."
    assert written("Ein 7301 und 7318.", {"7301": "dog", "7318": "New York"}) == "Ein dog und New York."
