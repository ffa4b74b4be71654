"""DeepL's API v2 (and v3's glossaries) over the same pipeline, batching and models as LibreTranslate's API: what
its official clients (deepl for Python, deepl-node) and the tools built on them call. Every endpoint takes the key
as DeepL sends it (service.worker.dependencies.deepl_key), admitted as LibreTranslate's API admits a
request (service.worker.access: the same keys and limits), and answers errors in DeepL's shape
(service.worker.errors)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import re
from datetime import UTC, datetime
from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse

from service.store.keys import usage as days_used
from service.worker.deepl.glossaries import Glossaries, GlossaryNotFound, matcher
from service.worker.deepl.glossary import Dictionary, Glossary, GlossaryError, parse_entries
from service.worker.deepl.languages import name, served_code, source_code, target_codes
from service.worker.deepl.request import DeepLError, flag, preserve_formatting, read_translate, text_field
from service.worker.dependencies import (
    DeepLParams,
    EarlyDeepLParams,
    ServingPipeline,
    client,
    glossary_owner,
    once_admitted,
    settled,
    state,
    unless_disconnected,
)
from service.worker.middleware import observe_pair
from service.worker.pipeline import Options, Pipeline
from service.worker.schemas import TranslateRequest

# DeepL's character_limit of an account without one (a key without a monthly limit, or keys off)
NO_LIMIT = 1_000_000_000_000

router = APIRouter(tags=["DeepL"], include_in_schema=True)


def glossaries(request: Request) -> Glossaries:
    return state(request).glossaries


def served(p: Pipeline, code: str, field: str) -> str:
    """The served language that a DeepL code names, or DeepL's 400 for `field`."""
    if (found := served_code(code, p.pairs.languages)) is None:
        raise DeepLError(f"Value for '{field}' not supported.")
    return found


# --- translation ---------------------------------------------------------------------------------------------


@router.post("/v2/translate")
async def translate(request: Request, p: ServingPipeline, params: EarlyDeepLParams) -> dict:
    """DeepL's /v2/translate: repeated text, source_lang (detected when absent), target_lang, and its options."""
    work = functools.partial(translated, request, params, p)
    answer, billed = await unless_disconnected(request, once_admitted(request, work))
    state(request).metrics.billed_characters.inc(billed)
    return answer


async def translated(request: Request, params: dict, p: Pipeline) -> tuple[dict, int]:
    """/v2/translate's answer, and the characters it bills."""
    fields = read_translate(params)
    target = served(p, fields.target_lang, "target_lang")
    source = served(p, fields.source_lang, "source_lang") if fields.source_lang else "auto"
    terms = None
    if fields.glossary_id:
        if source == "auto":
            raise DeepLError("Use of a glossary requires the source_lang parameter to be specified.")
        await settled(request)  # whose glossaries
        terms = await asyncio.to_thread(matcher, glossaries(request), glossary_owner(request), fields.glossary_id,
                                        source, target)
    req = TranslateRequest(q=fields.texts, source=source, target=target,
                           format="html" if fields.tag_handling else "text")
    observe_pair(request, p.pair_label(req))
    answer = await p.translate(req, Options(fields.split, terms, fields.tags))
    detected = answer.detectedLanguage or []
    billed = [len(text) for text in fields.texts]
    translations = []
    for i, (text, translation) in enumerate(zip(fields.texts, answer.translatedText)):
        language = detected[i].language if source == "auto" else source
        one = {"detected_source_language": source_code(language),
               "text": preserve_formatting(text, translation) if fields.preserve_formatting else translation}
        if fields.show_billed_characters:
            one["billed_characters"] = billed[i]
        if fields.model_type_used:
            one["model_type_used"] = fields.model_type_used
        translations.append(one)
    return {"translations": translations}, sum(billed)


# --- what is served ------------------------------------------------------------------------------------------


@router.api_route("/v2/languages", methods=["GET", "POST"])
async def languages(params: DeepLParams, p: ServingPipeline) -> list[dict]:
    """The source languages (type=source, the default) or target languages (type=target) of the pairs served."""
    kind = text_field(params, "type") or "source"
    if kind == "source":
        codes = sorted({source_code(source) for source, _ in p.pairs.pairs})
        return [{"language": code, "name": name(code)} for code in codes]
    if kind == "target":
        codes = sorted({code for _, target in p.pairs.pairs for code in target_codes(target)})
        return [{"language": code, "name": name(code), "supports_formality": False} for code in codes]
    raise DeepLError("Value for 'type' not supported.")


@router.api_route("/v2/usage", methods=["GET", "POST"])
async def usage(request: Request, params: DeepLParams) -> dict:
    """With keys on: the key's characters this calendar month (UTC, service.store) and its monthly limit. With keys
    off: the characters translated through this API since the service started, by everyone, and no limit."""
    s, whose = state(request), client(request)
    if whose.key_id is None:
        return {"character_count": s.metrics.billed(), "character_limit": NO_LIMIT}

    def this_month() -> int:
        with s.store.transaction() as session:
            first = datetime.now(UTC).date().replace(day=1)
            return sum(day.characters for day in days_used(session, whose.key_id, first))

    return {"character_count": await asyncio.to_thread(this_month),
            "character_limit": whose.limits.monthly_char_limit or NO_LIMIT}


@router.get("/v2/glossary-language-pairs")
async def glossary_language_pairs(params: DeepLParams, p: ServingPipeline) -> dict:
    """A glossary is made for any pair served."""
    pairs = sorted({(source_code(s).lower(), source_code(t).lower()) for s, t in p.pairs.pairs})
    return {"supported_languages": [{"source_lang": s, "target_lang": t} for s, t in pairs]}


# --- glossaries ----------------------------------------------------------------------------------------------


def dictionary(p: Pipeline, values: dict[str, Any]) -> Dictionary:
    """A dictionary from its source_lang, target_lang, entries and entries_format (tsv by default), or DeepL's 400."""
    source, target = text_field(values, "source_lang"), text_field(values, "target_lang")
    found = served_code(source, p.pairs.languages), served_code(target, p.pairs.languages)
    if None in found or not p.pairs.pair(*found):
        raise GlossaryError(f"Unsupported glossary language pair: {source or '?'} to {target or '?'} is not served")
    if not isinstance(entries := values.get("entries"), str):
        raise GlossaryError("Parameter 'entries' not specified.")
    source, target = (source_code(code).lower() for code in found)
    return Dictionary(source, target, parse_entries(entries, text_field(values, "entries_format") or "tsv",
                                                    source, target))


def glossary_name(params: dict[str, Any]) -> str:
    if not (text := text_field(params, "name")):
        raise GlossaryError("Parameter 'name' not specified.")
    return text


def v2_info(glossary: Glossary) -> dict:
    first = glossary.dictionaries[0]
    return {"glossary_id": glossary.glossary_id, "name": glossary.name, "ready": True,
            "source_lang": first.source_lang, "target_lang": first.target_lang,
            "creation_time": glossary.creation_time, "entry_count": len(first.entries)}


def v3_info(glossary: Glossary) -> dict:
    return {"glossary_id": glossary.glossary_id, "name": glossary.name, "creation_time": glossary.creation_time,
            "dictionaries": [{"source_lang": d.source_lang, "target_lang": d.target_lang,
                              "entry_count": len(d.entries)} for d in glossary.dictionaries]}


@router.post("/v2/glossaries", status_code=201)
async def create_glossary(request: Request, params: DeepLParams, p: ServingPipeline) -> dict:
    """A glossary of one language pair; ignore_case (an extension) matches its source terms in any case."""
    made = await asyncio.to_thread(glossaries(request).create, glossary_owner(request), glossary_name(params),
                                   [dictionary(p, params)], flag(params, "ignore_case"))
    return v2_info(made)


INFO = {"v2": v2_info, "v3": v3_info}  # a glossary as each version of the API describes it


@router.get("/{version}/glossaries")
async def list_glossaries(version: Literal["v2", "v3"], request: Request, params: DeepLParams) -> dict:
    found = await asyncio.to_thread(glossaries(request).list, glossary_owner(request))
    return {"glossaries": [INFO[version](g) for g in found]}


@router.get("/{version}/glossaries/{glossary_id}")
async def get_glossary(version: Literal["v2", "v3"], glossary_id: str, request: Request, params: DeepLParams) -> dict:
    return INFO[version](await asyncio.to_thread(glossaries(request).get, glossary_owner(request), glossary_id))


@router.get("/v2/glossaries/{glossary_id}/entries")
async def glossary_entries(glossary_id: str, request: Request, params: DeepLParams) -> Response:
    """The entries as TSV (text/tab-separated-values, the one format DeepL gives them in)."""
    glossary = await asyncio.to_thread(glossaries(request).get, glossary_owner(request), glossary_id)
    return PlainTextResponse(glossary.dictionaries[0].as_tsv(), media_type="text/tab-separated-values")


@router.delete("/v2/glossaries/{glossary_id}", status_code=204)
@router.delete("/v3/glossaries/{glossary_id}", status_code=204)
async def delete_glossary(glossary_id: str, request: Request, params: DeepLParams) -> Response:
    await asyncio.to_thread(glossaries(request).delete, glossary_owner(request), glossary_id)
    return Response(status_code=204)


@router.post("/v3/glossaries", status_code=201)
async def create_multilingual(request: Request, params: DeepLParams, p: ServingPipeline) -> dict:
    """A glossary of one or more dictionaries (language pairs)."""
    dictionaries = dictionaries_of(p, params)
    made = await asyncio.to_thread(glossaries(request).create, glossary_owner(request), glossary_name(params),
                                   dictionaries, flag(params, "ignore_case"))
    return v3_info(made)


FORM_DICTIONARY = re.compile(r"dictionaries\[(\d+)\]\.(\w+)")  # deepl-node's form fields: dictionaries[0].entries


def dictionaries_of(p: Pipeline, params: dict[str, Any]) -> list[Dictionary]:
    """The dictionaries of a v3 request (a JSON list, or a form's dictionaries[i].field), one per language pair."""
    values = params.get("dictionaries")
    if values is None:
        fields: dict[int, dict[str, Any]] = {}
        for key, value in params.items():
            if found := FORM_DICTIONARY.fullmatch(key):
                fields.setdefault(int(found[1]), {})[found[2]] = value
        values = [fields[i] for i in sorted(fields)] or None
    if not isinstance(values, list) or not values or not all(isinstance(v, dict) for v in values):
        raise GlossaryError("Parameter 'dictionaries' not specified.")
    dictionaries = [dictionary(p, v) for v in values]
    if len({(d.source_lang, d.target_lang) for d in dictionaries}) < len(dictionaries):
        raise GlossaryError("Invalid glossary: two dictionaries of one language pair")
    return dictionaries


@router.patch("/v3/glossaries/{glossary_id}")
async def update_multilingual(glossary_id: str, request: Request, params: DeepLParams, p: ServingPipeline) -> dict:
    """A new name, and/or entries merged into the dictionaries of their language pairs (added where it has none)."""
    renamed = "name" in params or not any(k.startswith("dictionaries") for k in params)
    name = glossary_name(params) if renamed else None
    new = dictionaries_of(p, params) if any(k.startswith("dictionaries") for k in params) else []

    def update(glossary: Glossary) -> Glossary:
        merged = {(d.source_lang, d.target_lang): d for d in glossary.dictionaries}
        for one in new:
            old = merged.get((one.source_lang, one.target_lang))
            merged[one.source_lang, one.target_lang] = dataclasses.replace(
                one, entries={**(old.entries if old else {}), **one.entries})
        return dataclasses.replace(glossary, name=name or glossary.name, dictionaries=list(merged.values()))

    changed = await asyncio.to_thread(glossaries(request).change, glossary_owner(request), glossary_id, update)
    return v3_info(changed)


@router.put("/v3/glossaries/{glossary_id}/dictionaries")
async def replace_dictionary(glossary_id: str, request: Request, params: DeepLParams, p: ServingPipeline) -> dict:
    """The dictionary of one language pair replaced (or added)."""
    new = dictionary(p, params)

    def replace(glossary: Glossary) -> Glossary:
        kept = [d for d in glossary.dictionaries if (d.source_lang, d.target_lang) != (new.source_lang,
                                                                                        new.target_lang)]
        return dataclasses.replace(glossary, dictionaries=[*kept, new])

    await asyncio.to_thread(glossaries(request).change, glossary_owner(request), glossary_id, replace)
    return {"source_lang": new.source_lang, "target_lang": new.target_lang, "entry_count": len(new.entries)}


@router.delete("/v3/glossaries/{glossary_id}/dictionaries", status_code=204)
async def delete_dictionary(glossary_id: str, request: Request, params: DeepLParams) -> Response:
    """The dictionary of the language pair that source_lang and target_lang name taken out (a glossary keeps one)."""
    pair = text_field(params, "source_lang").lower(), text_field(params, "target_lang").lower()

    def take_out(glossary: Glossary) -> Glossary:
        kept = [d for d in glossary.dictionaries if (d.source_lang, d.target_lang) != pair]
        if len(kept) == len(glossary.dictionaries):
            raise GlossaryNotFound()
        if not kept:
            raise GlossaryError("A glossary keeps at least one dictionary: delete the glossary instead")
        return dataclasses.replace(glossary, dictionaries=kept)

    await asyncio.to_thread(glossaries(request).change, glossary_owner(request), glossary_id, take_out)
    return Response(status_code=204)


@router.get("/v3/glossaries/{glossary_id}/entries")
async def multilingual_entries(glossary_id: str, request: Request, params: DeepLParams) -> dict:
    """The entries of the dictionary that source_lang and target_lang name."""
    glossary = await asyncio.to_thread(glossaries(request).get, glossary_owner(request), glossary_id)
    found = glossary.dictionary(text_field(params, "source_lang").lower(), text_field(params, "target_lang").lower())
    if found is None:
        raise GlossaryError("The glossary has no dictionary of that language pair")
    return {"dictionaries": [{"source_lang": found.source_lang, "target_lang": found.target_lang,
                              "entries": found.as_tsv(), "entries_format": "tsv"}]}
