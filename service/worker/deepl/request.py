"""The fields of DeepL's POST /v2/translate, read from its parameters (JSON or form: service.worker.params), each
with DeepL's 400 message when it is wrong; and what preserve_formatting does to a translation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from service.worker.errors import RequestError
from service.worker.html_units import INLINE, UNTRANSLATED_ELEMENTS, Tags

SPLITS = ("0", "1", "nonewlines")
FORMALITIES = ("default", "more", "less", "prefer_more", "prefer_less")
# One model serves each pair: the one DeepL calls latency_optimized (its classic models). quality_optimized asks for
# a model that is not here, which DeepL refuses for a language pair without it; prefer_ falls back to the classic one.
MODEL_TYPES = {"latency_optimized": "latency_optimized", "prefer_quality_optimized": "latency_optimized"}
TRUE, FALSE = ("1", "true", "on"), ("0", "false", "off")


class DeepLError(RequestError):
    """A request DeepL answers 400, in its words."""


@dataclass(frozen=True)
class TranslateFields:
    texts: list[str]
    target_lang: str
    source_lang: str | None
    tag_handling: str | None
    split: str
    preserve_formatting: bool
    tags: Tags
    glossary_id: str | None
    model_type_used: str | None
    show_billed_characters: bool


def read_translate(params: dict[str, Any]) -> TranslateFields:
    """TranslateFields from the request's parameters, or DeepLError. `context` is read and not used: the models
    translate one sentence at a time."""
    texts = params.get("text")
    texts = [texts] if isinstance(texts, str) else texts
    if not texts or not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise DeepLError("Parameter 'text' not specified.")
    target = text_field(params, "target_lang")
    if not target:
        raise DeepLError("Parameter 'target_lang' not specified.")
    tag_handling = text_field(params, "tag_handling") or None
    if tag_handling not in (None, "xml", "html"):
        raise DeepLError("Value for 'tag_handling' not supported.")
    split = text_field(params, "split_sentences") or ("nonewlines" if tag_handling else "1")
    if split not in SPLITS:
        raise DeepLError("Value for 'split_sentences' not supported.")
    check_formality(params)
    model_type = text_field(params, "model_type")
    if model_type and model_type not in MODEL_TYPES:
        raise DeepLError("Value for 'model_type' not supported." if model_type != "quality_optimized" else
                         "'model_type' quality_optimized is not supported for given language pair.")
    return TranslateFields(
        texts=texts,
        target_lang=target,
        source_lang=text_field(params, "source_lang") or None,
        tag_handling=tag_handling,
        split=split,
        preserve_formatting=flag(params, "preserve_formatting"),
        tags=tags(params),
        glossary_id=glossary_field(params),
        model_type_used=MODEL_TYPES.get(model_type) if model_type else None,
        show_billed_characters=flag(params, "show_billed_characters"),
    )


def check_formality(params: dict[str, Any]) -> None:
    """DeepL's answers for a formality, for target languages without the feature (every model here): default and
    prefer_ are taken, more and less refused."""
    if (formality := text_field(params, "formality") or "default") not in FORMALITIES:
        raise DeepLError("Value for 'formality' not supported.")
    if formality in ("more", "less"):
        raise DeepLError("'formality' is not supported for given 'target_lang'.")


def glossary_field(params: dict[str, Any]) -> str | None:
    """The glossary a request names: glossary_id, or glossary_ids (a JSON list, or comma-separated in a form) naming
    the same one; DeepLError for several, which the pipeline does not combine."""
    named = {text_field(params, "glossary_id")} - {""}
    if (ids := params.get("glossary_ids")) is not None:
        ids = ids if isinstance(ids, list) else [ids]
        if not all(isinstance(one, str) for one in ids):
            raise DeepLError("Value for 'glossary_ids' not supported.")
        named |= {one.strip() for many in ids for one in many.split(",") if one.strip()}
    if len(named) > 1:
        raise DeepLError("Value for 'glossary_ids' not supported: one glossary a request is served here")
    return next(iter(named), None)


def text_field(params: dict[str, Any], name: str) -> str:
    value = params.get(name, "")
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise DeepLError(f"Value for '{name}' not supported.")
    return str(value).strip()


def flag(params: dict[str, Any], name: str) -> bool:
    """A boolean field as DeepL takes it: JSON true/false, or 0/1 (true/false) in a form."""
    value = params.get(name, False)
    if isinstance(value, bool):
        return value
    if (text := str(value).strip().lower()) in TRUE + FALSE:
        return text in TRUE
    raise DeepLError(f"Value for '{name}' not supported.")


def tag_list(params: dict[str, Any], name: str) -> set[str]:
    """A list of tag names: a JSON list, repeated form fields, or comma-separated."""
    value = params.get(name, [])
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, str) for v in values):
        raise DeepLError(f"Value for '{name}' not supported.")
    return {tag.strip().lower() for v in values for tag in v.split(",") if tag.strip()}


def tags(params: dict[str, Any]) -> Tags:
    """ignore_tags are not translated; non_splitting_tags are part of their sentence; splitting_tags bound one."""
    inline = (INLINE | tag_list(params, "non_splitting_tags")) - tag_list(params, "splitting_tags")
    return Tags(inline=frozenset(inline), untranslated=UNTRANSLATED_ELEMENTS | tag_list(params, "ignore_tags"))


def preserve_formatting(source: str, translation: str) -> str:
    """The translation with the source's formatting (preserve_formatting=1): its whitespace at the edges, the case
    of its first letter, and no final punctuation where the source ends without any."""
    core = source.strip()
    if not core or not translation.strip():
        return translation
    out = translation.strip()
    if core[0].isalpha() and out[0].isalpha():
        out = (out[0].lower() if core[0].islower() else out[0].upper()) + out[1:]
    if core[-1].isalnum():
        out = out.rstrip(".!?。")
    lead, trail = source[: len(source) - len(source.lstrip())], source[len(source.rstrip()):]
    return f"{lead}{out}{trail}"
