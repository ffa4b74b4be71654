"""LibreTranslate with a stand-in for its model: Python imports this module at start-up when its folder is on
PYTHONPATH (bench.serving.servers.running_libretranslate(stand_in=True)). CTranslate2's Translator is replaced by
one that gives every sentence back at once, its source tokens as its translation, so that a request costs everything
LibreTranslate does but the model's work: Flask, Argos Translate's sentence splitting, tokenizing and detokenizing.
"""

from __future__ import annotations

from dataclasses import dataclass

import ctranslate2


@dataclass
class EchoResult:
    """What Argos Translate reads of a ctranslate2.TranslationResult."""

    hypotheses: list[list[str]]
    scores: list[float]


class EchoTranslator:
    """ctranslate2.Translator's translate_batch, echoing."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        """No model is loaded."""

    def translate_batch(self, source: list[list[str]], num_hypotheses: int = 1, **options: object
                        ) -> list[EchoResult]:
        return [EchoResult([tokens] * num_hypotheses, [0.0] * num_hypotheses) for tokens in source]


ctranslate2.Translator = EchoTranslator
