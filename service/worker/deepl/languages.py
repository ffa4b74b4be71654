"""Language codes as DeepL writes them (EN, EN-GB, PT-BR, ZH-HANS), mapped onto the codes of the pairs served.

A source is a base language in upper case (EN, DE). A target may name a variety: a served language with varieties
in DeepL's list is offered as each of them (en as EN-GB and EN-US), since the model writes one text for all; a
served code that names its variety (pt-BR, zh-Hant) is offered as that variety alone. Plain EN and PT, which DeepL
still reads as targets, are read too.
"""

from __future__ import annotations

from service.worker.pairs import language_name

VARIETIES = {"en": ("EN-GB", "EN-US"), "pt": ("PT-BR", "PT-PT"), "zh": ("ZH", "ZH-HANS")}
VARIETY_NAMES = {
    "EN-GB": "English (British)", "EN-US": "English (American)", "PT-BR": "Portuguese (Brazilian)",
    "PT-PT": "Portuguese (European)", "ZH": "Chinese (simplified)", "ZH-HANS": "Chinese (simplified)",
    "ZH-HANT": "Chinese (traditional)",
}


def source_code(code: str) -> str:
    """A served code as a DeepL source: its base language in upper case (pt-BR -> PT)."""
    return code.split("-")[0].upper()


def target_codes(code: str) -> tuple[str, ...]:
    """A served code as DeepL's targets: the varieties of a base language (en -> EN-GB, EN-US), or the code itself
    in upper case (de -> DE, pt-BR -> PT-BR)."""
    return VARIETIES.get(code, (code.upper(),))


def name(deepl_code: str) -> str:
    """DeepL's English name of a language or variety."""
    return VARIETY_NAMES.get(deepl_code) or language_name(deepl_code.lower())


def served_code(deepl_code: str, served: list[str]) -> str | None:
    """The served code that a DeepL code names (EN-GB -> en, pt-br -> pt-BR), or None."""
    wanted = deepl_code.strip().upper()
    exact = [code for code in served if code.upper() == wanted]
    return next(iter(exact), None) or next(
        (code for code in served if wanted in target_codes(code) or wanted == source_code(code)), None
    )
