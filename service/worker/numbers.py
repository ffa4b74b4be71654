"""Numbers as protected spans, and the rule that writes them in the target language's style.

Every digit of a text belongs to some protected span (service.worker.spans): a URL, a code, or one of the numbers
below. So the model never reads a digit the user wrote, only placeholders, and a digit in its translation that is
no placeholder is one it invented (spans.Protected.restore takes it out).

The localization rule (TRANSLATOR_LOCALIZE_NUMBERS, on by default): a plain number written with the source
language's decimal mark or thousands separator ("1,299.99" and "2.5" in English, "1.299,99" and "2,5" in German) is
written with the target language's (1.299,99 and 2,5 in German; 1,299.99 and 2.5 in English). The currency sign,
the percent sign and everything else in the span stay where they are. English ordinals become German ones (3rd ->
3.). Dates, times, versions, phone numbers, numbers glued to a word (5km, 10am) and integers without separators are
kept exactly as written: their reading depends on conventions (12/03/2024 is March or December) the text does not
tell. Languages missing from SEPARATORS keep every number as written.
"""

from __future__ import annotations

import regex

CURRENCY = r"[$€£¥₹₽₩₺]"
# (thousands separator, decimal mark) of each language whose numbers are localized
SEPARATORS = {"en": (",", "."), "de": (".", ",")}
# a plain number: digit groups with a separator, or digits with a decimal part
PLAIN = r"\d{1,3}(?:[,.]\d{3})+(?:[.,]\d+)?|\d+(?:[.,]\d+)?"
KINDS = {
    "phone": r"\+\d{1,3}(?:[ /-]?\(?\d{1,5}\)?){2,5}\d|\(\d{2,5}\)[ -]?\d{3,}(?:[ -]\d{2,})*|\d{3}-\d{3}-\d{4}",
    "date": r"\d{4}-\d{2}-\d{2}|\d{1,2}[./-]\d{1,2}[./-]\d{2,4}(?![\d])",
    "time": r"\d{1,2}:\d{2}(?::\d{2})?(?:\s?[ap]\.?m\.?(?!\w))?",
    "version": r"\d+(?:\.\d+){2,}",
    "price": rf"{CURRENCY}\s?(?:{PLAIN})|(?:{PLAIN})\s?{CURRENCY}",
    "ordinal": r"\d+(?:st|nd|rd|th)(?!\w)",
    "glued": r"\d[\d.,]*\p{L}[\p{L}\d]*",  # a number with its unit, a code: 5km, 10am, 3x
    "percent": rf"(?:{PLAIN})\s?%",
    "plain": PLAIN,
    "series": r"\d+(?:,\d+)+",  # 1,2,3
}
# a number is not part of a longer run of digits or a word
NUMBER = rf"(?<![\w.,]|[.,]\d)(?:{'|'.join(f'(?:{pattern})' for pattern in KINDS.values())})(?![\d]|[.,]\d)"
# the kinds whose numbers the rule localizes (the rest are kept as written)
KIND = regex.compile(rf"(?:{KINDS['price']})|(?:{KINDS['percent']})|(?:{PLAIN})")
LOCALIZED = regex.compile(rf"(?<!\d)(?:{PLAIN})(?!\d)")
ORDINAL = regex.compile(r"^(\d+)(?:st|nd|rd|th)$")
DIGITS = regex.compile(r"\d")


def localize(number: str, source: str, target: str) -> str:
    """A number span (service.worker.spans' kind "number") as the target language writes it (the rule above)."""
    source, target = source.split("-")[0], target.split("-")[0]
    if source == target or source not in SEPARATORS or target not in SEPARATORS:
        return number
    if (ordinal := ORDINAL.match(number)) and source == "en":
        return f"{ordinal.group(1)}."
    if KIND.fullmatch(number) is None:
        return number
    return LOCALIZED.sub(lambda m: restyle(m.group(), SEPARATORS[source], SEPARATORS[target]), number)


def restyle(number: str, written: tuple[str, str], wanted: tuple[str, str]) -> str:
    """A plain number written with `written`'s (thousands separator, decimal mark) in `wanted`'s; a number that does
    not follow `written` (a German "1.5" read as English) stays as it is."""
    group, mark = written
    pattern = rf"\d{{1,3}}(?:{regex.escape(group)}\d{{3}})+(?:{regex.escape(mark)}\d+)?|\d+(?:{regex.escape(mark)}\d+)?"
    if not regex.fullmatch(pattern, number):
        return number
    return number.translate(str.maketrans({group: wanted[0], mark: wanted[1]}))


