"""The real-world probe sets (tests/data/real_world, written for it) through the real service: `python -m service` with
its default settings serving the shipped models, over HTTP. The checks are about behaviour, never a model's wording:
numbers come back (localized by the rule), a 300-word sentence is translated without a loop, capitals come back in
capitals, an unserved language with auto gets 400 naming it, and inline markup does not change the words.
bench/studies/real_world.py measures the same on more text (the test sets, BLEU, collisions)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from bs4 import BeautifulSoup
from client import TIMEOUT

from service.launch import running_service

DATA = Path(__file__).parent / "data" / "real_world"
MODELS = Path(__file__).resolve().parents[1] / "models"
OTHER = {"en": "de", "de": "en"}


def lines(name: str) -> list[str]:
    return [line for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_service(MODELS, tmp_path_factory.mktemp("real-world") / "service.log") as service:
        yield service.url


def post(url: str, q: str | list[str], source: str, target: str, **fields: str) -> httpx.Response:
    return httpx.post(url + "/translate", json={"q": q, "source": source, "target": target, **fields},
                      timeout=TIMEOUT)


def translated(url: str, q: list[str], source: str, target: str, **fields: str) -> list[str]:
    out = []
    for begin in range(0, len(q), 32):
        response = post(url, q[begin : begin + 32], source, target, **fields)
        assert response.status_code == 200, response.text
        out += response.json()["translatedText"]
    return out


def digit_runs(text: str) -> Counter:
    return Counter(re.findall(r"\d+", text))


@pytest.mark.parametrize("source", ["en", "de"])
def test_every_number_comes_back_and_none_is_made_up(url: str, source: str):
    """The localization rule changes separators only: the runs of digits are the source's."""
    sentences = lines(f"{source}.txt")
    assert len(sentences) >= 100
    outputs = translated(url, sentences, source, OTHER[source])
    assert [(s, o) for s, o in zip(sentences, outputs) if digit_runs(s) != digit_runs(o)] == []


def test_numbers_follow_the_rule_or_stay_as_written(url: str):
    (german,) = translated(url, ["It costs $1,299.99 and ships on 12/03/2024 at 10:45."], "en", "de")
    assert "$1.299,99" in german and "12/03/2024" in german and "10:45" in german
    (english,) = translated(url, ["Es kostet 1.299,99 € und kommt am 12.03.2024."], "de", "en")
    assert "1,299.99 €" in english and "12.03.2024" in english


def word_4grams(text: str) -> Counter:
    words = re.findall(r"\w+", text.lower())
    return Counter(tuple(words[i : i + 4]) for i in range(len(words) - 3))


@pytest.mark.parametrize("source", ["en", "de"])
def test_a_300_word_sentence_is_translated_without_a_loop(url: str, source: str):
    parts = [s.rstrip(".") for s in lines(f"{source}.txt")[:40]]
    sentence = " ".join(", ".join(parts).split()[:300]) + "."
    response = post(url, sentence, source, OTHER[source])
    assert response.status_code == 200, response.text
    output = response.json()["translatedText"]
    assert len(output.split()) > 150
    assert max((word_4grams(output) - word_4grams(sentence)).values(), default=0) <= 2


def test_capitals_come_back_in_capitals(url: str):
    sentences = ["WARNING: DO NOT TOUCH THE MACHINE WHILE IT IS RUNNING.", "PLEASE KEEP THIS DOOR CLOSED."]
    upper = translated(url, sentences, "en", "de")
    ordinary = translated(url, [s.capitalize() for s in sentences], "en", "de")
    assert upper == [o.upper() for o in ordinary]


def test_an_unserved_language_with_auto_gets_a_400_naming_it(url: str):
    rows = [line.split("\t") for line in lines("unserved.tsv")]
    assert len(rows) >= 200 and len({language for language, _ in rows}) == 10
    refused = []
    for _, text in rows:
        response = post(url, text, "auto", "de")
        refused.append(response.status_code == 400 and "not served" in response.json()["error"])
    assert sum(refused) >= 0.95 * len(rows)


def test_served_languages_and_short_texts_are_never_refused_for_it(url: str):
    asked = [("Merci beaucoup !", "de"), ("Hola amigo", "de")]
    asked += [(s, "de") for s in lines("en.txt")] + [(s, "en") for s in lines("de.txt")]
    assert [text for text, target in asked if post(url, text, "auto", target).status_code != 200] == []


def test_detect_keeps_libretranslates_answer_for_a_language_not_served(url: str):
    """/detect ranks the served languages and never refuses, where /translate with auto refuses the same text."""
    text = "Je voudrais réserver une table pour deux personnes ce soir, s'il vous plaît."
    assert post(url, text, "auto", "de").status_code == 400
    answer = httpx.post(url + "/detect", json={"q": text}, timeout=TIMEOUT)
    assert answer.status_code == 200, answer.text
    assert answer.json() and {d["language"] for d in answer.json()} <= {"en", "de"}


@pytest.mark.parametrize("source", ["en", "de"])
def test_inline_markup_does_not_change_the_words(url: str, source: str):
    sentences = [s for s in lines(f"{source}.txt") if len(s.split()) >= 4]
    marked = []
    for i, sentence in enumerate(sentences):  # a <b> around the second word or the two after it
        words = sentence.split(" ")
        at = 1 + i % 2
        marked.append(f"<p>{' '.join(words[:at])} <b>{' '.join(words[at : at + 1 + i % 2])}</b> "
                      f"{' '.join(words[at + 1 + i % 2 :])}</p>")
    plain = translated(url, sentences, source, OTHER[source])
    html = translated(url, marked, source, OTHER[source], format="html")
    same = [" ".join(BeautifulSoup(h, "html.parser").get_text().split()) == " ".join(p.split())
            for h, p in zip(html, plain)]
    assert sum(same) >= 0.95 * len(same)
    assert all(h.count("<b>") == 1 and h.count("</b>") == 1 for h in html)
