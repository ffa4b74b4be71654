"""Numbers (service.worker.numbers): every kind held whole as a span, and the localization rule, with its setting."""

from __future__ import annotations

from pathlib import Path

import pytest
from client import translate

from service.launch import running_service
from service.worker.numbers import localize
from service.worker.spans import protect

NUMBERS = [
    ("It costs $1,299.99 today.", ["$1,299.99"]),
    ("Es kostet 1.299,99 € heute.", ["1.299,99 €"]),
    ("Ships on 12/03/2024 and 2024-06-14.", ["12/03/2024", "2024-06-14"]),
    ("Am 12.03.2024 um 10:45 Uhr.", ["12.03.2024", "10:45"]),
    ("Leaves at 10:45 am from platform 7.", ["10:45 am", "7"]),
    ("Call +49 30 1234567 or (555) 123-4567 or 555-123-4567.", ["+49 30 1234567", "(555) 123-4567", "555-123-4567"]),
    ("Version 2.3.1 on the 3rd floor, 5km away.", ["2.3.1", "3rd", "5km"]),
    ("Growth was 4.5% and 12 %.", ["4.5%", "12 %"]),
    ("In 2024 we moved, and in 1999 she was born.", ["2024", "1999"]),
    ("Pick 1,2,3 or 7,301.", ["1,2,3", "7,301"]),
]


@pytest.mark.parametrize(("text", "numbers"), NUMBERS)
def test_each_number_is_one_span_and_comes_back_as_written(text: str, numbers: list[str]):
    protected = protect(text)
    assert list(protected.spans.values()) == numbers
    assert set(protected.numbers) == set(protected.spans)
    assert protected.restore(protected.text) == (text, 0)


@pytest.mark.parametrize(("number", "source", "target", "written"), [
    ("1,299.99", "en", "de", "1.299,99"),
    ("$1,299.99", "en", "de", "$1.299,99"),
    ("2.5", "en", "de", "2,5"),
    ("4.5%", "en", "de", "4,5%"),
    ("1.299,99 €", "de", "en", "1,299.99 €"),
    ("2,5", "de", "en", "2.5"),
    ("1.000.000", "de", "en", "1,000,000"),
    ("3rd", "en", "de", "3."),
    # kept as written: dates, times, versions, phone numbers, units, integers, a number the source does not write so
    ("12/03/2024", "en", "de", "12/03/2024"),
    ("12.03.2024", "de", "en", "12.03.2024"),
    ("10:45", "en", "de", "10:45"),
    ("2.3.1", "en", "de", "2.3.1"),
    ("+49 30 1234567", "de", "en", "+49 30 1234567"),
    ("5km", "en", "de", "5km"),
    ("2024", "en", "de", "2024"),
    ("1,5", "en", "de", "1,5"),
    ("1,299.99", "en", "fr", "1,299.99"),  # a language without a rule
    ("1,299.99", "en", "en", "1,299.99"),
])
def test_the_localization_rule(number: str, source: str, target: str, written: str):
    assert localize(number, source, target) == written


def test_a_number_the_model_dropped_is_put_back_localized_and_a_made_up_one_is_taken_out():
    protected = protect("The train costs 1,299.99 dollars.")
    (placeholder,) = protected.spans
    restored, put_back = protected.restore("Der Zug kostet 748 Dollar.", lambda n: localize(n, "en", "de"))
    assert restored.count("1.299,99") == 1 and "748" not in restored and put_back == 1
    restored, put_back = protected.restore(f"Der Zug kostet {placeholder} Dollar.")
    assert (restored, put_back) == ("Der Zug kostet 1,299.99 Dollar.", 0)


def test_the_setting_off_keeps_every_number_as_written(tiny_model_dir: Path, tmp_path: Path):
    """TRANSLATOR_LOCALIZE_NUMBERS=false through the service (the tiny model: whatever its words, every number comes
    back; with the rule on, tests/test_real_world.py's "$1.299,99")."""
    with running_service(tiny_model_dir, tmp_path / "service.log", threads=1, localize_numbers=False,
                         log_level="warning") as service:
        german = translate(service.url, "It costs $1,299.99 and ships on 12/03/2024.")
    assert german.count("$1,299.99") == 1 and german.count("12/03/2024") == 1 and "1.299,99" not in german
