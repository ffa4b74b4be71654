"""Conformance with LibreTranslate: each behaviour that LibreTranslate's own code defines, with the default settings.

Each test names what it follows: libretranslate/app.py (its /translate, /detect and CORS code), language.py
(iso2model, detect_languages), or its test suite (libretranslate/tests/test_api/). The server serves the tiny
random-weight en-de and de-en models (tests/conftest.py) with every setting at its default; the real clients are
libretranslatepy and deep-translator.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from client import TIMEOUT, assert_error
from deep_translator import LibreTranslator
from libretranslatepy import LibreTranslateAPI

from service.launch import running_service

ENGLISH = "The cat sleeps on the sofa."
GERMAN = "Die Katze schläft auf dem Sofa."
NOTHING_DETECTED = {"confidence": 0.0, "language": "en"}  # language.py's answer when nothing can be detected


@pytest.fixture(scope="module")
def url(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """en-de and de-en with the default settings."""
    log = tmp_path_factory.mktemp("libretranslate") / "service.log"
    with running_service(tiny_models_dir, log, threads=1, log_level="warning") as service:
        yield service.url


def post(url: str, path: str = "/translate", **request: object) -> httpx.Response:
    return httpx.post(url + path, timeout=TIMEOUT, **request)


def translated(url: str, **fields: object) -> object:
    response = post(url, json=fields)
    assert response.status_code == 200, response.text
    return response.json()["translatedText"]


# --- language codes ------------------------------------------------------------------------------------------


def test_codes_in_upper_case_are_read_in_lower_case(url: str):
    """language.py iso2model: lang.lower()."""
    assert translated(url, q=ENGLISH, source="EN", target="DE") == translated(url, q=ENGLISH, source="en",
                                                                             target="de")
    assert post(url, data={"q": ENGLISH, "source": "En", "target": "De"}).status_code == 200


def test_a_language_translates_into_itself_unchanged(url: str):
    """Every language is among its own targets (argostranslate's identity translation): same source and target
    give the text back, and /languages lists it."""
    assert translated(url, q=ENGLISH, source="en", target="en") == ENGLISH
    assert translated(url, q=[GERMAN, ENGLISH], source="de", target="de") == [GERMAN, ENGLISH]
    languages = httpx.get(url + "/languages", timeout=TIMEOUT).json()
    assert all(language["code"] in language["targets"] for language in languages)


@pytest.mark.parametrize("code", ["zz", "ZZ"])
def test_a_language_not_served_is_not_supported(url: str, code: str):
    """app.py: abort(400, "%(lang)s is not supported"); its test_api_translate_unsupported_language."""
    response = post(url, data={"q": "Hello", "source": "en", "target": code, "format": "text"})
    assert assert_error(response, 400) == "zz is not supported"
    response = post(url, json={"q": "Hello", "source": code, "target": "de"})
    assert assert_error(response, 400) == "zz is not supported"


# --- parameters ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["q", "target"])
def test_a_missing_parameter_is_named(url: str, name: str):
    """app.py: abort(400, "Invalid request: missing %(name)s parameter"); test_api_translate_missing_parameter.
    An empty one is a missing one (`if not q`). A missing source is "auto" here (a deliberate difference)."""
    fields = {"q": ENGLISH, "source": "en", "target": "de", "format": "text"}
    message = f"Invalid request: missing {name} parameter"
    assert assert_error(post(url, data={k: v for k, v in fields.items() if k != name}), 400) == message
    assert assert_error(post(url, json={**fields, name: ""}), 400) == message


def test_a_missing_source_is_auto(url: str):
    answer = post(url, json={"q": GERMAN, "target": "en"}).json()
    assert answer["detectedLanguage"]["language"] == "de"


@pytest.mark.parametrize("request_args", [{"data": {"format": ""}}, {"json": {"format": None}}], ids=["form", "json"])
def test_an_empty_format_is_text(url: str, request_args: dict):
    """app.py: `if not text_format: text_format = "text"`."""
    kind, fields = next(iter(request_args.items()))
    response = post(url, **{kind: {"q": ENGLISH, "source": "en", "target": "de", **fields}})
    assert response.status_code == 200, response.text
    assert response.json()["translatedText"] == translated(url, q=ENGLISH, source="en", target="de")


def test_negative_alternatives_are_none(url: str):
    """app.py: num_alternatives = max(0, int(num_alternatives)); alternatives are returned only when asked."""
    answer = post(url, json={"q": ENGLISH, "source": "en", "target": "de", "alternatives": -1}).json()
    assert answer == {"translatedText": translated(url, q=ENGLISH, source="en", target="de")}


def test_alternatives_that_are_no_number_are_named(url: str):
    """app.py: abort(400, "Invalid request: %(name)s parameter is not a number")."""
    response = post(url, data={"q": ENGLISH, "source": "en", "target": "de", "alternatives": "two"})
    assert assert_error(response, 400) == "Invalid request: alternatives parameter is not a number"


# --- nothing to translate ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["   ", "😀👍", "12345 - 678 / 90", "…!?"])
def test_text_with_nothing_to_translate_comes_back_as_it_is(url: str, text: str):
    """app.py detect_translatable: text of emoji only is given back (`translated_text = q`), with the detected
    language {"confidence": 0.0, "language": "en"}; here also blank text, digits, punctuation and symbols."""
    assert translated(url, q=text, source="en", target="de") == text
    answer = post(url, json={"q": text, "source": "auto", "target": "de"}).json()
    assert answer == {"translatedText": text, "detectedLanguage": NOTHING_DETECTED}


def test_an_empty_text_of_a_list_comes_back_empty(url: str):
    answer = translated(url, q=["", ENGLISH, "🎵"], source="en", target="de")
    assert answer == ["", translated(url, q=ENGLISH, source="en", target="de"), "🎵"]


# --- many sentences ----------------------------------------------------------------------------------------------


def test_seventy_sentences_under_the_character_limit_are_translated(url: str):
    """LibreTranslate has no limit on sentences, and its web UI enforces only charLimit: a request is batched
    inside the service, never refused for a count of sentences (TRANSLATOR_MAX_SENTENCES is 64)."""
    texts = [f"The cat number {i} sleeps." for i in range(70)]
    whole = translated(url, q=texts, source="en", target="de")
    halves = translated(url, q=texts[:35], source="en", target="de") + translated(url, q=texts[35:], source="en",
                                                                                 target="de")
    assert whole == halves and len(whole) == 70
    one_text = translated(url, q=" ".join(texts), source="en", target="de")
    assert isinstance(one_text, str) and len(one_text) > 70
    limit = httpx.get(url + "/frontend/settings", timeout=TIMEOUT).json()["charLimit"]
    assert len(" ".join(texts)) < limit


# --- /detect -----------------------------------------------------------------------------------------------------


def test_detect_takes_a_list(url: str):
    """language.py detect_languages: a list is detected text by text, the confidences averaged by text length."""
    response = post(url, "/detect", json={"q": [GERMAN, "Ein Hund läuft durch den Park."]})
    assert response.status_code == 200, response.text
    detected = response.json()
    assert detected[0]["language"] == "de" and set(detected[0]) == {"confidence", "language"}


def test_detect_of_blank_text_is_english_with_no_confidence(url: str):
    """language.py detect_languages: no candidate -> [{"confidence": 0.0, "language": "en"}]."""
    assert post(url, "/detect", json={"q": "   "}).json() == [NOTHING_DETECTED]


def test_detect_without_q_names_it(url: str):
    """app.py detect: abort(400, "Invalid request: missing q parameter"); test_api_detect_language_must_fail_*."""
    assert assert_error(post(url, "/detect"), 400) == "Invalid request: missing q parameter"
    assert httpx.get(url + "/detect", timeout=TIMEOUT).status_code == 405


# --- CORS, /spec, the routes' methods ------------------------------------------------------------------------------


def test_any_page_may_call_the_api_by_default(url: str):
    """app.py after_request: Access-Control-Allow-Origin "*" on every response; the preflight is answered."""
    page = "http://page.example"
    response = post(url, json={"q": ENGLISH, "source": "en", "target": "de"}, headers={"Origin": page})
    assert response.headers["access-control-allow-origin"] == "*"
    headers = {"Origin": page, "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "content-type"}
    preflight = httpx.options(url + "/translate", headers=headers, timeout=TIMEOUT)
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == "*"
    assert "POST" in preflight.headers["access-control-allow-methods"]


def test_spec_serves_the_openapi_document(url: str):
    """test_api_spec: GET /spec is 200, POST /spec 405."""
    spec = httpx.get(url + "/spec", timeout=TIMEOUT)
    assert spec.status_code == 200 and "/translate" in spec.json()["paths"]
    assert httpx.post(url + "/spec", timeout=TIMEOUT).status_code == 405
    assert httpx.post(url + "/languages", timeout=TIMEOUT).status_code == 405  # test_api_get_languages


def test_the_openapi_document_describes_the_api(url: str):
    """/translate's 200 answer and its errors, /detect's answer, /translate_file's upload: what /docs shows."""
    spec = httpx.get(url + "/spec", timeout=TIMEOUT).json()

    def schema(ref_or_schema: dict) -> dict:
        name = ref_or_schema.get("$ref", "").rsplit("/", 1)[-1]
        return spec["components"]["schemas"][name] if name else ref_or_schema

    translate = spec["paths"]["/translate"]["post"]
    answer = schema(translate["responses"]["200"]["content"]["application/json"]["schema"])
    assert {"translatedText", "alternatives", "detectedLanguage"} <= set(answer["properties"])
    assert {"400", "403", "413", "503"} <= set(translate["responses"])
    assert "error" in schema(translate["responses"]["400"]["content"]["application/json"]["schema"])["properties"]
    upload = spec["paths"]["/translate_file"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert upload["properties"]["file"]["format"] == "binary" and "file" in upload["required"]
    detect = spec["paths"]["/detect"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert detect["type"] == "array"


# --- the real clients ----------------------------------------------------------------------------------------------


def web_ui(url: str, q: str, source: str, target: str) -> dict:
    """What LibreTranslate's web UI sends (templates/app.js.template): multipart FormData with three alternatives
    and an empty api_key."""
    fields = {"q": q, "source": source, "target": target, "format": "text", "alternatives": "3", "api_key": ""}
    response = post(url, files=[(name, (None, value)) for name, value in fields.items()])
    assert response.status_code == 200, response.text
    return response.json()


SEVENTY = " ".join(f"The dog number {i} runs." for i in range(70))


@pytest.mark.parametrize(("text", "source", "target", "unchanged"), [
    ("   ", "en", "de", True), ("😀👍", "en", "de", True), (ENGLISH, "EN", "DE", False), (ENGLISH, "en", "en", True),
    (SEVENTY, "en", "de", False),
], ids=["blank", "emoji", "upper-case", "same-language", "seventy-sentences"])
def test_libretranslatepy_and_the_web_ui(url: str, text: str, source: str, target: str, unchanged: bool):
    def expected(**fields: object) -> object:
        return text if unchanged else translated(url, q=text, source=source.lower(), target=target.lower(), **fields)

    assert LibreTranslateAPI(url + "/").translate(text, source, target) == expected()
    assert web_ui(url, text, source, target)["translatedText"] == expected(alternatives=3)  # beam 4


@pytest.mark.parametrize("text", ["😀👍", SEVENTY], ids=["emoji", "seventy-sentences"])
def test_deep_translator(url: str, text: str):
    """deep-translator answers blank text and the same language itself, without asking the server."""
    expected = text if text == "😀👍" else translated(url, q=text, source="en", target="de")
    assert LibreTranslator(source="en", target="de", custom_url=url + "/", api_key="-").translate(text) == expected
