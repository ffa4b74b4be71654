"""Source-language detection among the served languages, for LibreTranslate's /detect and `source: "auto"`.

Backed by py3langid (a naive Bayes model over byte n-grams, shipped inside the wheel, BSD-3-Clause), restricted
to the served languages: it was the most accurate of the offline detectors that bench.studies.detect measured on short
sentences, and among the fastest (BENCHMARKS.md#language-detection).
"""

from __future__ import annotations

import copy
import functools

from py3langid.langid import MODEL_FILE, LanguageIdentifier


@functools.cache
def every_language() -> LanguageIdentifier:
    """py3langid's model over all its languages, read once a process: it is LZMA-compressed, slow to read."""
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


class LanguageDetector:
    """Ranks the served languages by how likely a text is written in each.

    Safe to share between threads and to call from async code: the model is only read after construction,
    and a call's time grows with the text's length.
    """

    def __init__(self, languages: list[str], skip_unknown: bool = False):
        """languages: ISO 639-1 codes (en, de, fr, cs, ...); a code the model lacks is a ValueError, or with
        skip_unknown left out, never to be detected (NLLB-200 serves 202 languages, py3langid knows 115 of them).
        ValueError for no language left."""
        self._identifier = copy.copy(every_language())  # set_languages() below narrows this copy alone
        served = list(dict.fromkeys(languages))  # served order, duplicates dropped
        unknown = [code for code in served if code not in self._identifier.labels]
        if unknown and not skip_unknown:
            raise ValueError(f"language detection does not know {', '.join(unknown)}")
        self.languages = tuple(code for code in served if code not in unknown)
        if not self.languages:
            raise ValueError("no languages to detect among")
        self._identifier.set_languages(list(self.languages))

    def detect(self, text: str) -> list[tuple[str, float]]:
        """Every served language with its confidence (a percentage, 0-100, summing to 100), most likely first.

        Ties keep the served order. A text without letters (empty, digits, punctuation) has no language: it
        gives every served language in order, with confidence 0.
        """
        if not any(char.isalpha() for char in text):
            return [(code, 0.0) for code in self.languages]
        scores = dict(self._identifier.rank(text))
        ranked = sorted(self.languages, key=lambda code: -scores[code])  # stable: ties keep the served order
        return [(code, 100 * scores[code]) for code in ranked]


def unserved_language(text: str, served: list[str]) -> tuple[str, float]:
    """The likeliest language of `text` among those py3langid knows that are not `served`, and how likely (in
    percent) the text is in any language not served: the share of the detector's probability outside the served
    ones (closely related languages, es/gl or cs/sk, share what is not served among them)."""
    ranked = [(code, p) for code, p in every_language().rank(text) if code not in served]
    return ranked[0][0], 100 * float(sum(p for _, p in ranked))
