"""quality.robustness: its measures on hand-made input, the test sets in tests/data/robustness/, and the shipped
models against the floors stored beside the sets (floors.json), which their model cards cite.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from core.translate import Translation
from quality.robustness import (
    CATEGORIES,
    DIGIT_CATEGORIES,
    ROWS,
    Example,
    Row,
    copies_digits,
    digit_runs,
    is_degenerate,
    measure,
    read_set,
    title_case,
)
from service.translator import Translator

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "robustness"
SETS = sorted(DATA.glob("*.tsv"))
FLOORS = json.loads((DATA / "floors.json").read_text())
TWELVE_HOUR_TIME = re.compile(r"\d\s*(am|pm)\b")


# --- the measures ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,runs",
    [
        ("Ich habe 12 Katzen und 3 Hunde.", ["12", "3"]),
        ("No digits here.", []),
        ("Flug LH 456 von Gate B12", ["456", "12"]),
        ("1.5 litres, 1,5 Liter", ["1", "5", "1", "5"]),  # a decimal separator splits runs
        ("2,000 and 2.000 and 2000 and 1,200,000", ["2000", "2000", "2000", "1200000"]),  # thousands separators go
        ("at 10:30, at 20:00, 3.00 euros", ["10", "30", "20", "3"]),  # zero minutes and cents go
        ("am 03.10.2024", ["03", "10", "2024"]),
        ("0171 2345678", ["0171", "2345678"]),
    ],
)
def test_digit_runs(text: str, runs: list[str]) -> None:
    assert digit_runs(text) == runs


@pytest.mark.parametrize(
    "source,output",
    [
        ("I have 12 cats and 3 dogs.", "Ich habe 12 Katzen und 3 Hunde."),
        ("The letter is dated 10/3/2024.", "Der Brief ist auf den 3.10.2024 datiert."),  # reordered
        ("It costs 3.50 euros.", "Es kostet 3,50 Euro."),
        ("The company has 1,200 employees.", "Das Unternehmen hat 1.200 Mitarbeiter."),
        ("We meet at 20:00.", "Wir treffen uns um 20 Uhr."),
        ("Hello!", "Hallo!"),  # nothing to copy
    ],
)
def test_copies_digits_accepts_a_correct_copy(source: str, output: str) -> None:
    assert copies_digits(source, output)


@pytest.mark.parametrize(
    "source,output",
    [
        ("12 cats were born in 2024.", "124 Katzen wurden 202 geboren."),  # "124" is not "12"
        ("My room number is 214.", "Mein Zimmer ist 24."),  # a digit dropped
        ("Call me at 0171 2345678.", "Ruf mich an."),  # a number dropped
        ("It costs 3.50 euros.", "Es kostet 350 Euro."),  # runs merged
        ("I have 12 cats and 3 dogs.", "Ich habe 12 Katzen und drei Hunde."),  # spelled out
        ("12 cats and 12 dogs.", "12 Katzen und Hunde."),  # a repeated number must appear as often
        ("The meeting starts at 10:30.", "Die Sitzung beginnt um 10 Uhr."),  # minutes lost
    ],
)
def test_copies_digits_rejects_a_change(source: str, output: str) -> None:
    assert not copies_digits(source, output)


@pytest.mark.parametrize(
    "text,source",
    [
        ("Erllollollollo.", "Hello"),
        ("Ein MAANIIIIIIIIIIIIIIIICEN.", "A MAN IS RIDING A BICYCLE."),
        ("Ein Mann, der ich Athleleleleleley-Schwalle.", "A Man Is Riding A Bicycle."),
        ("Fahrrad, Fahrrad Fahrrad Fahrrad.", "Bicycle."),  # a word 4 times
        ("Ein Mann fährt Fahrrad, und er fährt und fährt und fährt weiter.", "A man rides."),  # over 3x the source
    ],
)
def test_is_degenerate_finds_repetition_and_runaway_length(text: str, source: str) -> None:
    assert is_degenerate(text, source)


@pytest.mark.parametrize(
    "text,source",
    [
        ("Hallo!", "Hello!"),
        ("In Ordnung.", "OK."),  # short sources count as 10 characters
        ("Die Postleitzahl ist 10000.", "The postcode is 10000."),  # repeated digits are a number
        ("Das Schifffahrtsmuseum öffnet um 10:00 Uhr.", "The shipping museum opens at 10:00."),
        ("Lalala, singt das Kind.", "Lalala, sings the child."),  # 3 times is not yet absurd
    ],
)
def test_is_degenerate_passes_ordinary_output(text: str, source: str) -> None:
    assert not is_degenerate(text, source)


def test_title_case() -> None:
    assert title_case("a man in a café, I'm sure.") == "A Man In A Café, I'm Sure."


def test_read_set_rejects_a_bad_line(tmp_path: Path) -> None:
    good = "category\tsource\treference\ndigits\tI have 2 cats.\tIch habe 2 Katzen.\n"
    (tmp_path / "good.tsv").write_text(good)
    assert read_set(tmp_path / "good.tsv") == [Example("digits", "I have 2 cats.", "Ich habe 2 Katzen.")]
    for bad in ["numbers\tI have 2 cats.\tIch habe 2 Katzen.", "digits\tI have 2 cats.\t ", "digits\tI have 2 cats."]:
        (tmp_path / "bad.tsv").write_text(good + bad + "\n")
        with pytest.raises(ValueError, match="bad.tsv:3"):
            read_set(tmp_path / "bad.tsv")


class EchoTranslator:
    """Stands in for service.translator.Translator: 'translates' every text into itself."""

    name = "echo"

    def translate(self, texts: list[str], opts: object) -> list[list[Translation]]:
        return [[Translation(text, 0.0)] for text in texts]


def test_measure_rows_variants_and_exemptions() -> None:
    examples = [
        Example("digits", "I have 12 cats.", "Ich habe 12 Katzen."),
        Example("times", "Dinner is at 7 pm.", "Das Abendessen ist um 19 Uhr."),  # the reference changes 7
        Example("casing", "A man is riding a bicycle.", "Ein Mann fährt Fahrrad."),
        Example("greetings", "Hello", "Hallo"),
    ]
    result = measure(EchoTranslator(), examples, beam=1)  # type: ignore[arg-type]
    rows = result["rows"]
    assert list(rows) == [r for r in ROWS if r not in ("dates", "everyday")]  # rows of absent categories are left out
    assert [rows[r]["sentences"] for r in ("digits", "times", "casing", "casing:upper", "all")] == [1, 1, 1, 1, 4]
    assert rows["digits"]["digits_copied"] == 100.0 and rows["times"]["digit_sentences"] == 0
    assert rows["all"]["digit_sentences"] == 1 and rows["greetings"]["digits_copied"] is None
    assert rows["casing:upper"]["chrf"] is None and rows["casing"]["chrf"] is not None
    assert [t["source"] for t in result["translations"] if t["row"].startswith("casing:")] == [
        "A MAN IS RIDING A BICYCLE.",
        "a man is riding a bicycle.",
        "A Man Is Riding A Bicycle.",
    ]
    [exempt] = result["exempt_from_digits_copied"]
    assert exempt["source"] == "Dinner is at 7 pm." and not exempt["has_reference_digits"]


# --- the test sets ------------------------------------------------------------------------------------------


def test_both_directions_are_there() -> None:
    assert [s.name for s in SETS] == ["de-en.tsv", "en-de.tsv"]


@pytest.mark.parametrize("path", SETS, ids=lambda p: p.name)
def test_set_is_well_formed(path: Path) -> None:
    examples = read_set(path)  # checks the header, three non-empty fields and a known category on every line
    assert 140 <= len(examples) <= 200
    by_category = {c: [e for e in examples if e.category == c] for c in CATEGORIES}
    assert all(len(found) >= 15 for found in by_category.values()), {c: len(f) for c, f in by_category.items()}
    sources = [e.source for e in examples]
    assert len(set(sources)) == len(sources), "a source is there twice"
    assert all(e.source == e.source.strip() and e.reference == e.reference.strip() for e in examples)
    for e in (e for c in DIGIT_CATEGORIES for e in by_category[c]):
        assert digit_runs(e.source), f"{e.category} sentence without digits: {e.source!r}"
    for e in by_category["casing"]:
        variants = {e.source.upper(), e.source.lower(), title_case(e.source)}
        assert len(variants) == 3 and e.source not in variants, f"a casing variant is the sentence itself: {e}"


@pytest.mark.parametrize("path", SETS, ids=lambda p: p.name)
def test_only_twelve_hour_times_are_kept_out_of_the_digit_figure(path: Path) -> None:
    """A reference that changes the source's digits must be a 12-hour time, not a typo hiding a sentence."""
    examples = [e for e in read_set(path) if e.category in DIGIT_CATEGORIES]
    kept_out = [e for e in examples if not copies_digits(e.source, e.reference)]
    assert all(TWELVE_HOUR_TIME.search(f"{e.source} {e.reference}") for e in kept_out), kept_out
    assert len(kept_out) <= 0.1 * len(examples)


# --- the models against their floors ------------------------------------------------------------------------


def test_floors_name_real_figures() -> None:
    figures = set(Row.__dataclass_fields__)
    for name, floors in FLOORS.items():
        assert (DATA / f"{name}.tsv").exists(), f"floors.json has {name} but there is no {name}.tsv"
        for key in [*floors["at_least"], *floors["at_most"]]:
            row, _, figure = key.partition(".")
            assert row in ROWS and figure in figures, f"{name}: {key} is no ROW.FIGURE"


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_model_keeps_its_floors(name: str) -> None:
    model_dir = REPO / "models" / name
    if not (model_dir / "config.json").exists():
        pytest.fail(f"floors.json has {name} but {model_dir} holds no exported model", pytrace=False)
    floors = FLOORS[name]
    translator = Translator(model_dir, provider="cpu", threads=1)
    rows = measure(translator, read_set(DATA / f"{name}.tsv"), beam=floors["beam"])["rows"]

    def figure(key: str) -> float:
        row, _, figure_name = key.partition(".")
        return rows[row][figure_name]

    below = {key: round(figure(key), 2) for key, floor in floors["at_least"].items() if figure(key) < floor}
    above = {key: round(figure(key), 2) for key, ceiling in floors["at_most"].items() if figure(key) > ceiling}
    assert not below and not above, f"{name} fell below its floors {below} or rose above its ceilings {above}"
