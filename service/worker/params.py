"""A request's parameters as LibreTranslate reads them: the query string, then a JSON or form body, merged.

Clients send them every way: libretranslatepy as a form body, deep-translator as query parameters of a POST,
browsers and curl as JSON. Whatever the body, reading it never ends in a 500: malformed JSON, JSON nested too
deep, integers too long to parse, a JSON or form body that is not UTF-8 (whatever charset it names), text that
holds lone surrogates are all a 400. A key given twice in JSON keeps its last value, as Python's json reads it. With
API keys set, the key is checked before anything else is said about the request (403 first), but for what is too
large to read (service.worker.middleware.BodyLimit), whose key cannot be read without reading it.
"""

from __future__ import annotations

import functools
import json
import sys
import unicodedata
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import parse_qsl

from fastapi import Request
from python_multipart.multipart import parse_options_header
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from service.worker.errors import InvalidRequest
from service.worker.spans import EMOJI_SEQUENCE

JSON = "application/json"
URLENCODED = "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data"
MAX_FIELDS = 1000  # parameters of a query string (middleware.BodyLimit), fields of a form (as Starlette allows)


def media_type(request: Request) -> str:
    """The Content-Type without its parameters, in lower case ("Application/JSON; charset=utf-8" -> json)."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def merged(items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """Key/value pairs as a dict; a key given more than once (q=a&q=b) becomes a list. Linear in the pairs."""
    values: dict[str, list[Any]] = {}
    for key, value in items:
        values.setdefault(key, []).append(value)
    return {key: found[0] if len(found) == 1 else found for key, found in values.items()}


class Utf8MultiPartParser(MultiPartParser):
    """Starlette's multipart parser, but a field's name or value, or a file's name, that is not UTF-8 is an error
    (Starlette reads it as latin-1)."""

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self._current_part.content_disposition)
        for value in options.values():
            utf8(value, "a part's name or file name")
        super().on_headers_finished()

    def on_part_end(self) -> None:
        if self._current_part.file is None:
            utf8(self._current_part.data, f"the value of {self._current_part.field_name}")
        super().on_part_end()


def utf8(raw: bytes | bytearray, what: str) -> None:
    """MultiPartException unless `raw` is UTF-8 (`what` names it)."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MultiPartException(f"{what} is not UTF-8") from None


async def read_body(request: Request) -> tuple[dict[str, Any], str | None]:
    """The body's parameters, and what is wrong with the body (None if nothing)."""
    kind = media_type(request)
    if kind == JSON:
        raw = await request.body()
        if not raw.strip():
            return {}, None
        try:
            body = json.loads(raw.decode("utf-8-sig"))  # UTF-8, with or without a byte order mark
        except UnicodeDecodeError:
            return {}, "the JSON body is not UTF-8"
        except (ValueError, RecursionError) as error:  # JSONDecodeError, 5,000-digit ints, deep nesting
            return {}, f"malformed JSON ({str(error)[:120]})"
        if not isinstance(body, dict):
            return {}, "the JSON body must be an object"
        return body, None
    if kind == URLENCODED:
        try:
            text = (await request.body()).decode("utf-8")
            items = parse_qsl(text, keep_blank_values=True, errors="strict", max_num_fields=MAX_FIELDS)
        except UnicodeDecodeError:
            return {}, "the form is not UTF-8"
        except ValueError:
            return {}, f"more than {MAX_FIELDS} form fields"
        return merged(items), None
    if kind == MULTIPART:
        try:
            form = await Utf8MultiPartParser(request.headers, request.stream(), max_fields=MAX_FIELDS).parse()
        except MultiPartException as error:
            return {}, error.message
        return merged(form.multi_items()), None
    if await request.body():
        return {}, f"unsupported Content-Type {kind!r}: send JSON ({JSON}) or a form"
    return {}, None


async def read_params(request: Request, admit: Callable[[dict[str, Any]], Awaitable[None]]) -> dict[str, Any]:
    """Query string and body parameters merged (the body wins); `admit` checks them first (a key's 403, a limit's
    429), then 400 for a body that cannot be read or text that is not valid Unicode."""
    body, problem = await read_body(request)
    query = merged(request.query_params.multi_items()) if request.scope["query_string"] else {}
    params = {**query, **body}
    await admit(params)
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
    """NFC, without invisible characters (invisible_characters()) but those inside an emoji (the joiners of
    "👩‍💻", the tags of a subdivision flag), which spans.py then protects whole."""
    text, pieces, end = unicodedata.normalize("NFC", text), [], 0
    for emoji in EMOJI_SEQUENCE.finditer(text):
        pieces += [text[end : emoji.start()].translate(invisible_characters()), emoji.group()]
        end = emoji.end()
    pieces.append(text[end:].translate(invisible_characters()))
    return "".join(pieces)
