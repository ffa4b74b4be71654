"""`from service.translator import Translator`: the offline translator's public name (service.engine.translator)."""

from service.engine.translator import Translator

__all__ = ["Translator"]
