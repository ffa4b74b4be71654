"""A request's parameters as LibreTranslate reads them: the query string, then a JSON or form body, merged.

Clients send them every way: libretranslatepy as a form body, deep-translator as query parameters of a POST,
browsers and curl as JSON. Whatever the body, reading it never ends in a 500: malformed JSON, JSON nested too
deep, integers too long to parse, text that is not UTF-8 or holds lone surrogates are all a 400. With API keys
set, the key is checked before anything else is said about the request (403 first).
"""

from __future__ import annotations

import functools
import json
import sys
import unicodedata
from typing import Any

from fastapi import Request
from starlette.datastructures import UploadFile

from service.worker.errors import Forbidden, InvalidRequest

JSON = "application/json"
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


def media_type(request: Request) -> str:
    """The Content-Type without its parameters, in lower case ("Application/JSON; charset=utf-8" -> json)."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def merged(items: list[tuple[str, Any]]) -> dict[str, Any]:
    """Key/value pairs as a dict; a key given more than once (q=a&q=b) becomes a list."""
    params: dict[str, Any] = {}
    for key, value in items:
        if key in params:
            params[key] = [*params[key], value] if isinstance(params[key], list) else [params[key], value]
        else:
            params[key] = value
    return params


async def read_body(request: Request) -> tuple[dict[str, Any], str | None]:
    """The body's parameters, and what is wrong with the body (None if nothing)."""
    kind = media_type(request)
    if kind == JSON:
        raw = await request.body()
        if not raw.strip():
            return {}, None
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as error:  # JSONDecodeError, non-UTF-8, 5,000-digit ints, deep nesting
            return {}, f"malformed JSON ({str(error)[:120]})"
        if not isinstance(body, dict):
            return {}, "the JSON body must be an object"
        return body, None
    if kind in FORMS:
        form = await request.form()
        return merged(list(form.multi_items())), None
    if await request.body():
        return {}, f"unsupported Content-Type {kind!r}: send JSON ({JSON}) or a form"
    return {}, None


async def read_params(request: Request, api_keys: list[str]) -> dict[str, Any]:
    """Query string and body parameters merged (the body wins); 403 for a missing or wrong key when keys are set,
    then 400 for a body that cannot be read or text that is not valid Unicode."""
    body, problem = await read_body(request)
    params = {**merged(list(request.query_params.multi_items())), **body}
    if api_keys and params.get("api_key") not in api_keys:
        raise Forbidden("Invalid API key")
    if problem:
        raise InvalidRequest(problem)
    for key, value in params.items():
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and not is_unicode(text):
                raise InvalidRequest(f"{key} holds a lone surrogate, which is not Unicode text")
    return params


def is_unicode(text: str) -> bool:
    """Whether text can be encoded as UTF-8 (JSON's \\ud800 escapes decode to lone surrogates, which cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def upload(params: dict[str, Any], name: str) -> UploadFile:
    if not isinstance(file := params.get(name), UploadFile):
        raise InvalidRequest(f"missing {name} (a multipart/form-data file)")
    return file


@functools.cache
def invisible_characters() -> dict[int, str | None]:
    """str.translate's table: format characters (Cf: zero-width spaces and joiners, BOMs, bidi marks, soft
    hyphens) are removed, control characters (Cc) other than newlines and tabs become spaces."""
    table: dict[int, str | None] = {}
    for code in range(sys.maxunicode + 1):
        category = unicodedata.category(chr(code))
        if category == "Cf":
            table[code] = None
        elif category == "Cc" and chr(code) not in "\n\t":
            table[code] = " "
    return table


def clean_text(text: str) -> str:
    """NFC, without invisible characters (invisible_characters())."""
    return unicodedata.normalize("NFC", text).translate(invisible_characters())
