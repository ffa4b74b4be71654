"""service.worker.detect: the real detection model, on sentences written for these tests."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from service.worker.detect import LanguageDetector

ENGLISH = (
    "I forgot my umbrella at the office yesterday.",
    "Could you please close the window?",
    "The train to the airport leaves every twenty minutes.",
    "My grandmother grows tomatoes in her garden.",
)
GERMAN = (
    "Ich habe gestern meinen Regenschirm im Büro vergessen.",
    "Könntest du bitte das Fenster schließen?",
    "Der Zug zum Flughafen fährt alle zwanzig Minuten.",
    "Meine Großmutter baut in ihrem Garten Tomaten an.",
)
FRENCH = "J'ai oublié mon parapluie au bureau hier soir."


@pytest.fixture(scope="module")
def en_de() -> LanguageDetector:
    return LanguageDetector(["en", "de"])


@pytest.mark.parametrize(("language", "sentences"), [("en", ENGLISH), ("de", GERMAN)])
def test_detects_english_and_german(en_de: LanguageDetector, language: str, sentences: tuple[str, ...]):
    for text in sentences:
        ranked = en_de.detect(text)
        assert ranked[0][0] == language, text
        assert ranked[0][1] > 90


def test_every_served_language_ranked_with_percentages(en_de: LanguageDetector):
    ranked = en_de.detect(GERMAN[0])
    assert sorted(code for code, _ in ranked) == ["de", "en"]
    confidences = [confidence for _, confidence in ranked]
    assert confidences == sorted(confidences, reverse=True)
    assert all(0 <= c <= 100 for c in confidences)
    assert sum(confidences) == pytest.approx(100)


def test_french_with_three_languages():
    ranked = LanguageDetector(["en", "de", "fr"]).detect(FRENCH)
    assert [code for code, _ in ranked][0] == "fr"
    assert sorted(code for code, _ in ranked) == ["de", "en", "fr"]


def test_answers_only_served_languages(en_de: LanguageDetector):
    ranked = en_de.detect(FRENCH)
    assert sorted(code for code, _ in ranked) == ["de", "en"]


@pytest.mark.parametrize("text", ["", "   ", "12345", "3.14 + 2 = 5.14 !?", "--- :-) ---"])
def test_text_without_letters_gives_served_order_with_zero(text: str):
    assert LanguageDetector(["de", "en"]).detect(text) == [("de", 0.0), ("en", 0.0)]


def test_one_served_language_is_certain():
    assert LanguageDetector(["de"]).detect(ENGLISH[0]) == [("de", 100.0)]


def test_duplicate_codes_are_served_once():
    detector = LanguageDetector(["en", "de", "en"])
    assert detector.languages == ("en", "de")
    assert len(detector.detect(ENGLISH[0])) == 2


@pytest.mark.parametrize("languages", [["en", "xx"], ["en", "EN"], ["eng"], []])
def test_unknown_or_missing_codes_are_refused(languages: list[str]):
    with pytest.raises(ValueError):
        LanguageDetector(languages)


def test_unknown_codes_may_be_left_out():
    """A many-to-many model serves languages that py3langid does not know (Banjar, LibreTranslate's zt): they are
    never detected, the others are."""
    detector = LanguageDetector(["bjn", "de", "zt", "en"], skip_unknown=True)
    assert detector.languages == ("de", "en")
    assert detector.detect(ENGLISH[0])[0][0] == "en"
    with pytest.raises(ValueError, match="no languages"):
        LanguageDetector(["bjn", "zt"], skip_unknown=True)


def test_detectors_of_one_process_keep_their_own_languages():
    """The model is read once a process and each detector narrows its own copy: a later detector over other
    languages changes nothing in an earlier one."""
    en_fr = LanguageDetector(["en", "fr"])
    de_only = LanguageDetector(["de"])
    assert [code for code, _ in en_fr.detect(FRENCH)] == ["fr", "en"]
    assert de_only.detect(FRENCH) == [("de", 100.0)]
    assert LanguageDetector(["de", "en", "fr"]).detect(ENGLISH[0])[0][0] == "en"


def test_unknown_code_is_named():
    with pytest.raises(ValueError, match="xx"):
        LanguageDetector(["en", "de", "xx"])


def test_same_answers_from_many_threads(en_de: LanguageDetector):
    texts = list(ENGLISH + GERMAN) * 50
    expected = [en_de.detect(text) for text in texts]
    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(en_de.detect, texts)) == expected
