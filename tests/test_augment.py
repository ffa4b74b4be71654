"""Training-time augmentation (model.augment): casing, number and placeholder variants of sentence pairs."""

from __future__ import annotations

import re
from collections import Counter
from itertools import islice

import pytest

from model.augment import (
    CASINGS,
    LONE_NUMBER,
    MAX_DIGITS,
    MAX_PLACEHOLDERS,
    casing_variants,
    number_variants,
    number_word_variants,
    placeholder_variants,
    replace_words,
    shared_names,
)
from service.worker.spans import placeholder_numbers

DIGITS = re.compile(r"\d+")

# Mixed case on both sides, so that upper, lower and title case each give another text.
MIXED_CASE = [(f"Anna's dog plays in the park, {i}.", f"Annas Hund spielt im Park, {i}.") for i in range(1000)]
TIME = ("The train leaves at 10:05 from platform 7.", "Der Zug fährt um 10:05 von Gleis 7 ab.")
REORDERED = ("3 dogs and 12 cats sleep.", "12 Katzen und 3 Hunde schlafen.")


def digit_runs(text: str) -> list[str]:
    return DIGITS.findall(text)


def without_digits(text: str) -> str:
    return DIGITS.sub("#", text)


# --- casing -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("target_too", [False, True])
def test_a_casing_variant_recases_its_source_and_the_target_when_asked(target_too: bool):
    variants = casing_variants(MIXED_CASE, share=0.1, seed=1, target_too=target_too)
    assert variants
    for src, tgt in variants:
        matching = [
            case for case in CASINGS for pair in MIXED_CASE
            if (src, tgt) == (case(pair[0]), case(pair[1]) if target_too else pair[1])
        ]
        assert len(matching) == 1, (src, tgt)
    used = {case for case in CASINGS for src, _ in variants if case(src) == src}  # a casing leaves its own alone
    assert used == set(CASINGS)


def test_casing_variants_cover_about_the_share_asked():
    assert 70 <= len(casing_variants(MIXED_CASE, share=0.1, seed=1)) <= 130
    assert 400 <= len(casing_variants(MIXED_CASE, share=0.5, seed=1)) <= 600
    assert casing_variants(MIXED_CASE, share=0.0, seed=1) == []
    assert len(casing_variants(MIXED_CASE, share=1.0, seed=1)) == len(MIXED_CASE)


def test_casing_variants_are_the_same_for_a_seed_and_differ_across_seeds():
    first = casing_variants(MIXED_CASE, share=0.1, seed=7)
    assert casing_variants(MIXED_CASE, share=0.1, seed=7) == first
    assert casing_variants(MIXED_CASE, share=0.1, seed=8) != first


# --- numbers ----------------------------------------------------------------------------------------


def test_number_variants_change_the_numbers_and_only_them():
    variants = number_variants([TIME], "en", "de", copies=50, seed=1)
    assert len(variants) == 50
    for src, tgt in variants:
        assert (without_digits(src), without_digits(tgt)) == (without_digits(TIME[0]), without_digits(TIME[1]))
    new_numbers = {tuple(digit_runs(src)) for src, _ in variants}
    assert len(new_numbers) > 40, "new random numbers, not the original ones again"


def test_number_variants_keep_the_same_numbers_on_both_sides():
    variants = number_variants([TIME, REORDERED], "en", "de", copies=20, seed=1)
    assert len(variants) == 40
    for src, tgt in variants:
        if src.endswith("sleep."):  # "3 dogs and 12 cats" against "12 Katzen und 3 Hunde"
            dogs, cats = digit_runs(src)
            assert digit_runs(tgt) == [cats, dogs]
        else:
            assert digit_runs(tgt) == digit_runs(src)


def test_number_variants_keep_zero_padded_widths():
    variants = number_variants([TIME], "en", "de", copies=50, seed=1)
    minutes = [digit_runs(src)[1] for src, _ in variants]
    assert all(len(minute) == 2 for minute in minutes)  # 10:05 never becomes 10:5
    assert any(minute.startswith("0") for minute in minutes)
    for src, _ in variants:  # numbers without a leading zero do not get one
        hour, _, platform = digit_runs(src)
        assert not hour.startswith("0") or hour == "0"
        assert not platform.startswith("0") or platform == "0"


def test_new_numbers_take_every_width_up_to_six_digits():
    variants = number_variants([("Room 12 is free.", "Zimmer 12 ist frei.")], "en", "de", copies=400, seed=1)
    widths = Counter(len(digit_runs(src)[0]) for src, _ in variants)
    assert set(widths) == set(range(1, MAX_DIGITS + 1))
    assert widths[2] > widths[5], "mostly of about the original's size"


def test_a_lone_number_is_sometimes_written_as_a_phone_number_date_time_code_decimal_or_thousands():
    room = ("Room 12 is free.", "Zimmer 12 ist frei.")
    variants = number_variants([room], "en", "de", copies=600, seed=1)
    forms = [(src[len("Room ") : -len(" is free.")], tgt[len("Zimmer ") : -len(" ist frei.")]) for src, tgt in variants]
    patterns = {  # English form, German form of the same number
        (r"0\d+ \d+", r"0\d+ \d+"): 0,
        (r"\d\d/\d\d/\d{4}", r"\d\d\.\d\d\.\d{4}"): 0,
        (r"\d+:\d\d", r"\d+:\d\d"): 0,
        (r"[A-Z]\d+", r"[A-Z]\d+"): 0,
        (r"\d+\.\d{1,3}", r"\d+,\d{1,3}"): 0,
        (r"\d+,\d{3}", r"\d+\.\d{3}"): 0,
        (r"\d+", r"\d+"): 0,
    }
    for en, de in forms:
        assert digit_runs(en) == digit_runs(de), (en, de)
        patterns[next(p for p in patterns if re.fullmatch(p[0], en) and re.fullmatch(p[1], de))] += 1
    assert all(patterns.values()), patterns
    assert 150 < len(forms) - patterns[(r"\d+", r"\d+")] < 250, "about one in three"


def test_a_language_without_a_number_style_writes_forms_as_english_does():
    variants = number_variants([("Room 12 is free.", "Zimmer 12 ist frei.")], "en", "xx", copies=200, seed=1)
    forms = [tgt[len("Zimmer ") : -len(" ist frei.")] for _, tgt in variants]
    assert forms == [src[len("Room ") : -len(" is free.")] for src, _ in variants]
    assert any(re.fullmatch(r"\d\d/\d\d/\d{4}", form) for form in forms)  # dates with slashes, as English
    assert any(re.fullmatch(r"\d+,\d{3}", form) for form in forms)  # thousands with a comma
    assert not [form for form in forms if re.fullmatch(r"\d\d\.\d\d\.\d{4}|\d+,\d{1,2}", form)]  # German


def test_numbers_in_times_dates_and_decimals_are_not_lone():
    assert LONE_NUMBER.findall("at 10:05 from 7, B12, 3.5 or 03/10/2024 and 12.") == ["7", "12"]
    for src, _ in number_variants([TIME], "en", "de", copies=50, seed=1):  # three runs: never a form
        assert re.fullmatch(r"\d+:\d+", src.split()[4]) and DIGITS.fullmatch(src.split()[-1][:-1]), src


def test_pairs_whose_sides_hold_other_numbers_are_skipped():
    spelled = ("I am 30 years old.", "Ich bin dreißig Jahre alt.")
    different = ("Room 12 is free.", "Zimmer 21 ist frei.")
    more = ("Take bus 5 or 6.", "Nimm den Bus 5.")
    assert number_variants([spelled, different, more], "en", "de", copies=3, seed=1) == []


def test_pairs_without_digits_are_left_alone():
    no_digits = ("A dog runs.", "Ein Hund läuft.")
    assert number_variants([no_digits], "en", "de", copies=3, seed=1) == []
    variants = number_variants([no_digits, TIME], "en", "de", copies=3, seed=1)
    assert len(variants) == 3 and all(without_digits(src) == without_digits(TIME[0]) for src, _ in variants)


def test_number_variants_are_the_same_for_a_seed():
    first = number_variants([TIME, REORDERED], "en", "de", 3, seed=4)
    assert number_variants([TIME, REORDERED], "en", "de", 3, seed=4) == first
    assert number_variants([TIME, REORDERED], "en", "de", 3, seed=5) != first


# --- number words -----------------------------------------------------------------------------------------


SPELLED = ("Two dogs play in the snow.", "Zwei Hunde spielen im Schnee.")


def test_a_spelled_number_becomes_the_same_digits_on_both_sides():
    variants = number_word_variants([SPELLED], "en", "de", copies=20, seed=1)
    assert len(variants) == 20
    for src, tgt in variants:
        (number,) = digit_runs(src)
        assert digit_runs(tgt) == [number]
        assert (src.replace(number, "#"), tgt.replace(number, "#")) == ("# dogs play in the snow.",
                                                                          "# Hunde spielen im Schnee.")
    assert len({digit_runs(src)[0] for src, _ in variants}) > 5  # not one number again and again


def test_only_pairs_that_spell_one_and_the_same_number_are_used():
    pairs = [
        ("Two dogs and three cats.", "Zwei Hunde und drei Katzen."),  # two numbers
        ("Two dogs play.", "Drei Hunde spielen."),  # not the same number
        ("A dog plays.", "Ein Hund spielt."),  # none
        ("The network is down.", "Das Netzwerk ist ausgefallen."),  # "two" inside a word is no number
    ]
    assert number_word_variants(pairs, "en", "de", copies=3, seed=1) == []
    assert number_word_variants([SPELLED], "en", "xx", copies=3, seed=1) == []  # a language without a table


# --- placeholders -----------------------------------------------------------------------------------

NAMED = [
    ("Tom met Mary in Boston in 1984.", "Tom traf Maria 1984 in Boston."),
    ("I gave Tom the book.", "Ich gab Tom das Buch."),
    ("In the morning we left.", "In der Früh sind wir gegangen."),
]
UNNAMED = [(f"The dog sleeps, {'again ' * (i % 3)}quietly.", "Der Hund schläft ruhig.") for i in range(300)]
PLACEHOLDER = re.compile(r"\b7\d{3}\b")


def test_shared_names_are_the_names_and_numbers_both_sides_hold_as_often():
    assert shared_names(*NAMED[0]) == ["Tom", "Boston", "1984"]  # Mary is Maria in German
    assert shared_names(*NAMED[1]) == ["Tom"]
    assert shared_names(*NAMED[2]) == []  # a first word written alike is not a name ("In")
    assert shared_names("Tom saw Tom.", "Tom sah ihn.") == []  # not as often on both sides


def test_a_named_pair_gets_placeholders_where_its_names_stand_numbered_as_the_service_numbers_them():
    firsts = set()
    for seed in range(40):
        src, tgt = placeholder_variants(NAMED[:1], share=0.0, seed=seed)[0]
        used = PLACEHOLDER.findall(src)
        assert 1 <= len(used) <= MAX_PLACEHOLDERS
        numbers = list(islice(placeholder_numbers(" ".join(NAMED[0])), 12))
        assert used == numbers[numbers.index(used[0]) :][: len(used)]  # consecutive, in the source's order
        firsts.add(used[0])
        assert sorted(PLACEHOLDER.findall(tgt)) == sorted(used)
        assert "Mary" in src and "Maria" in tgt
        # each placeholder stands for one name, the same on both sides: putting the names back gives the pair
        names = dict(zip(used, [w for w in shared_names(*NAMED[0]) if w not in src]))
        assert [replace_words(side, names) for side in (src, tgt)] == list(NAMED[0])
    assert "7301" in firsts and len(firsts) > 2  # mostly from the first placeholder, sometimes from a later one


def test_pairs_without_a_name_get_one_placeholder_at_the_same_share_of_both_sides():
    variants = placeholder_variants(UNNAMED, share=0.2, seed=3)
    assert 40 <= len(variants) <= 80
    places = Counter()
    for src, tgt in variants:
        (placeholder,) = PLACEHOLDER.findall(src)
        assert PLACEHOLDER.findall(tgt) == [placeholder]
        assert re.sub(rf"\s*{placeholder}\s*", " ", tgt).strip().replace(" .", ".") == "Der Hund schläft ruhig."
        words = tgt.split()
        places["start" if words[0] == placeholder else "after" if words[-1] == placeholder else
               "end" if words[-1] == f"{placeholder}." else "between"] += 1
    assert set(places) == {"start", "end", "after", "between"}
    assert placeholder_variants(UNNAMED, share=0.0, seed=3) == []


def test_a_placeholder_is_never_a_number_the_pair_already_holds():
    pair = ("Tom paid 7301 euros.", "Tom zahlte 7301 Euro.")
    for seed in range(10):
        src, tgt = placeholder_variants([pair], share=0.0, seed=seed)[0]
        assert src.count("7301") == tgt.count("7301") <= 1  # the pair's 7301 kept or replaced, never reused
