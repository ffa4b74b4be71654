"""LibreTranslate's API as its real clients use it, against the real service (`python -m service` in a subprocess).

"Every call that LibreTranslate's API documents and its two Python clients make works unchanged": libretranslatepy
(a form body), deep-translator (query parameters of a POST), and raw HTTP (query string, forms, JSON), with errors
always LibreTranslate's {"error": message}.

Three servers, each started once for this module, serve tiny random-weight models (tests/conftest.py), which
translate into garbage that depends on the input and on the model:
    `url`        both pairs, en-de and de-en, with CORS for PAGE only;
    `keyed_url`  en-de alone, with the API keys k1 and k2, and no CORS (TRANSLATOR_CORS_ORIGINS empty);
    `de_en_url`  de-en alone, with the default settings (CORS for any page, as LibreTranslate; no keys).
tests/test_libretranslate.py checks the behaviours that LibreTranslate's own code defines.
A pair served alone translates as the same pair does next to another, which is how routing is checked.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys
import tomllib
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from client import TIMEOUT, assert_error
from deep_translator import LibreTranslator
from deep_translator.exceptions import AuthorizationException
from libretranslatepy import LibreTranslateAPI

from service.launch import running_service

PAGE = "http://page.example"  # the origin allowed by CORS on `url`
OTHER_PAGE = "http://other.example"

ENGLISH = "The cat sleeps on the sofa."
ENGLISH_2 = "A dog runs through the park."
GERMAN = "Die Katze schläft auf dem Sofa."
GERMAN_2 = "Ein Hund läuft durch den Park."


# --- servers --------------------------------------------------------------------------------------------


def serve(model_dir: Path, tmp_path_factory: pytest.TempPathFactory, **settings: object) -> Iterator[str]:
    """The service on model_dir with these settings (TRANSLATOR_* variables), ready; yields its URL."""
    log = tmp_path_factory.mktemp("api") / "service.log"
    with running_service(model_dir, log, threads=1, log_level="warning", **settings) as service:
        yield service.url


@pytest.fixture(scope="module")
def url(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """en-de and de-en, with CORS for PAGE."""
    yield from serve(tiny_models_dir, tmp_path_factory, cors_origins=PAGE)


@pytest.fixture(scope="module")
def keyed_url(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """en-de alone, with API keys and no CORS."""
    yield from serve(tiny_models_dir / "en-de", tmp_path_factory, api_keys="k1,k2", cors_origins="")


@pytest.fixture(scope="module")
def de_en_url(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """de-en alone, with the default settings."""
    yield from serve(tiny_models_dir / "de-en", tmp_path_factory)


# --- talking to a server --------------------------------------------------------------------------------


def translate_json(url: str, q: str | list[str], source: str, target: str, **fields: object) -> dict[str, Any]:
    """POST /translate with a JSON body; the 200 answer's JSON."""
    response = httpx.post(url + "/translate", json={"q": q, "source": source, "target": target, **fields},
                          timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return response.json()


def translated(url: str, q: str | list[str], source: str, target: str, **fields: object) -> Any:
    """The translatedText of a JSON request: the reference every other way of asking is compared with."""
    return translate_json(url, q, source, target, **fields)["translatedText"]


def multipart(fields: dict[str, str | list[str]]) -> list[tuple[str, tuple[None, str]]]:
    """httpx's `files` argument that sends fields as multipart/form-data parts without a file name."""
    return [(name, (None, value)) for name, values in fields.items()
            for value in (values if isinstance(values, list) else [values])]


def cors_headers(response: httpx.Response) -> dict[str, str]:
    return {name: value for name, value in response.headers.items() if name.lower().startswith("access-control-")}


def preflight(url: str, origin: str) -> httpx.Response:
    """What a browser asks before a page on `origin` POSTs JSON to /translate."""
    headers = {"Origin": origin, "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "content-type"}
    return httpx.options(url + "/translate", headers=headers, timeout=TIMEOUT)


# --- libretranslatepy (a form body) ---------------------------------------------------------------------


def test_libretranslatepy_translates(url: str):
    result = LibreTranslateAPI(url + "/").translate(ENGLISH, "en", "de")
    assert result == translated(url, ENGLISH, "en", "de")
    assert result and result != ENGLISH


def test_libretranslatepy_translates_from_auto(url: str):
    client = LibreTranslateAPI(url + "/")
    assert client.translate(GERMAN, "auto", "en") == translated(url, GERMAN, "de", "en")
    assert client.translate(ENGLISH, "auto", "de") == translated(url, ENGLISH, "en", "de")


@pytest.mark.parametrize(("text", "language"), [(ENGLISH, "en"), (GERMAN, "de")])
def test_libretranslatepy_detects_the_language(url: str, text: str, language: str):
    ranked = LibreTranslateAPI(url + "/").detect(text)
    assert all(set(guess) == {"confidence", "language"} for guess in ranked)
    assert sorted(guess["language"] for guess in ranked) == ["de", "en"]
    confidences = [guess["confidence"] for guess in ranked]
    assert confidences == sorted(confidences, reverse=True)
    assert ranked[0]["language"] == language


def test_libretranslatepy_lists_the_languages_with_their_targets(url: str):
    languages = LibreTranslateAPI(url + "/").languages()
    assert {language["code"]: language["targets"] for language in languages} == {"en": ["de", "en"],
                                                                                       "de": ["de", "en"]}
    assert all(isinstance(language["name"], str) and language["name"] for language in languages)


def test_libretranslatepy_with_an_api_key(keyed_url: str, url: str):
    client = LibreTranslateAPI(keyed_url + "/", api_key="k2")
    assert client.translate(ENGLISH, "en", "de") == translated(url, ENGLISH, "en", "de")
    assert client.detect(ENGLISH)[0]["language"] == "en"
    assert [language["code"] for language in client.languages()] == ["de", "en"]


@pytest.mark.parametrize("key", [None, "k3"], ids=["no-key", "wrong-key"])
def test_libretranslatepy_without_a_valid_key_gets_403(keyed_url: str, key: str | None):
    client = LibreTranslateAPI(keyed_url + "/", api_key=key)
    for call in (lambda: client.translate(ENGLISH, "en", "de"), lambda: client.detect(ENGLISH)):
        with pytest.raises(urllib.error.HTTPError) as refused:
            call()
        assert refused.value.code == 403
        assert list(json.loads(refused.value.read())) == ["error"]


# --- deep-translator (query parameters of a POST) -------------------------------------------------------


@pytest.mark.parametrize(("source", "target", "texts"), [("en", "de", [ENGLISH, ENGLISH_2]),
                                                         ("de", "en", [GERMAN, GERMAN_2])])
def test_deep_translator_translates_both_pairs(url: str, source: str, target: str, texts: list[str]):
    translator = LibreTranslator(source=source, target=target, custom_url=url + "/", api_key="anything")
    expected = translated(url, texts, source, target)
    assert translator.translate(texts[0]) == expected[0]
    assert translator.translate_batch(texts) == expected
    assert expected[0] != expected[1]


def test_deep_translator_with_api_keys(keyed_url: str, url: str):
    def translator(key: str) -> LibreTranslator:
        return LibreTranslator(source="en", target="de", custom_url=keyed_url + "/", api_key=key)

    assert translator("k1").translate(ENGLISH) == translated(url, ENGLISH, "en", "de")
    with pytest.raises(AuthorizationException):
        translator("k3").translate(ENGLISH)


# --- raw HTTP: where the parameters are -----------------------------------------------------------------


FIELDS = {"q": ENGLISH, "source": "en", "target": "de"}
EVERY_PLACE = [
    pytest.param({"params": FIELDS}, id="query-string"),
    pytest.param({"data": FIELDS}, id="urlencoded-form"),
    pytest.param({"files": multipart(FIELDS)}, id="multipart-form"),
    pytest.param({"json": FIELDS}, id="json"),
    pytest.param({"params": {"source": "en", "target": "de"}, "data": {"q": ENGLISH}}, id="query-and-form"),
    pytest.param({"params": {"q": ENGLISH}, "json": {"source": "en", "target": "de"}}, id="query-and-json"),
]


@pytest.mark.parametrize("request_args", EVERY_PLACE)
def test_parameters_are_read_from_anywhere(url: str, request_args: dict[str, Any]):
    response = httpx.post(url + "/translate", timeout=TIMEOUT, **request_args)
    assert response.status_code == 200, response.text
    assert response.json() == {"translatedText": translated(url, ENGLISH, "en", "de")}


@pytest.mark.parametrize("body", ["json", "data", "files"])
def test_the_body_wins_over_the_query_string(url: str, body: str):
    """The query string asks for an unserved target and another text; the body's values are the ones used."""
    fields = {"q": ENGLISH, "target": "de"}
    response = httpx.post(url + "/translate", params={"q": ENGLISH_2, "source": "en", "target": "fr"},
                          timeout=TIMEOUT, **{body: multipart(fields) if body == "files" else fields})
    assert response.status_code == 200, response.text
    assert response.json()["translatedText"] == translated(url, ENGLISH, "en", "de")


def test_a_list_in_json_is_answered_as_a_list_in_order(url: str):
    one, two = translated(url, ENGLISH, "en", "de"), translated(url, ENGLISH_2, "en", "de")
    assert one != two
    assert translated(url, [ENGLISH_2, ENGLISH, ENGLISH_2], "en", "de") == [two, one, two]


@pytest.mark.parametrize("place", ["params", "data", "files"])
def test_repeated_fields_are_a_list_in_order(url: str, place: str):
    fields = {"q": [ENGLISH_2, ENGLISH], "source": "en", "target": "de"}
    response = httpx.post(url + "/translate", timeout=TIMEOUT, **{place: multipart(fields) if place == "files"
                                                                 else fields})
    assert response.status_code == 200, response.text
    assert response.json()["translatedText"] == translated(url, [ENGLISH_2, ENGLISH], "en", "de")


def test_alternatives_are_a_list_of_strings(url: str):
    answer = translate_json(url, ENGLISH, "en", "de", alternatives=2)
    assert isinstance(answer["translatedText"], str) and answer["translatedText"]
    assert len(answer["alternatives"]) == 2 and all(isinstance(a, str) and a for a in answer["alternatives"])


def test_alternatives_of_a_list_are_a_list_per_text(url: str):
    answer = translate_json(url, [ENGLISH, ENGLISH_2], "en", "de", alternatives=1)
    assert len(answer["translatedText"]) == 2
    assert len(answer["alternatives"]) == 2 and all(len(a) == 1 for a in answer["alternatives"])
    assert answer["alternatives"][0] == translate_json(url, ENGLISH, "en", "de", alternatives=1)["alternatives"]


def test_alternatives_in_the_query_string(url: str):
    """deep-translator's way: every value a string, "2" included."""
    fields = {"q": ENGLISH, "source": "en", "target": "de", "alternatives": "2"}
    response = httpx.post(url + "/translate", params=fields, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert response.json() == translate_json(url, ENGLISH, "en", "de", alternatives=2)


# --- raw HTTP: HTML and files ---------------------------------------------------------------------------


def fragment(paragraph: str, link: str) -> str:
    """HTML with two texts to translate, attributes that are not translated, and a script that is not."""
    return (f'<p class="intro" id="first">{paragraph}</p>\n'
            f'<a href="/park?x=1&amp;y=2" data-kind="walk"><b>{link}</b></a>\n'
            f'<script>const greeting = "{ENGLISH}";</script>')


def test_html_keeps_its_markup_and_translates_its_text(url: str):
    answer = translated(url, fragment(ENGLISH, ENGLISH_2), "en", "de", format="html")
    texts = [html.escape(t, quote=False) for t in translated(url, [ENGLISH, ENGLISH_2], "en", "de")]
    assert answer == fragment(*texts)
    assert answer != fragment(ENGLISH, ENGLISH_2)


def download(file_url: str) -> httpx.Response:
    response = httpx.get(file_url, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return response


def test_translate_file_txt(url: str):
    text = f"{ENGLISH}\n{ENGLISH_2}\n"
    response = httpx.post(url + "/translate_file", data={"source": "en", "target": "de"},
                          files={"file": ("story.txt", text.encode(), "text/plain")}, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert list(response.json()) == ["translatedFileUrl"]
    lines = translated(url, [ENGLISH, ENGLISH_2], "en", "de")  # each line of a .txt file is a unit
    assert download(response.json()["translatedFileUrl"]).text == "\n".join(lines) + "\n"


def test_translate_file_html(url: str):
    page = fragment(GERMAN, GERMAN_2)
    response = httpx.post(url + "/translate_file", data={"source": "de", "target": "en"},
                          files={"file": ("page.html", page.encode(), "text/html")}, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    translation = download(response.json()["translatedFileUrl"])
    assert translation.text == translated(url, page, "de", "en", format="html")
    assert translation.headers["content-type"].startswith("text/html")


@pytest.mark.parametrize("name", ["my story.txt", "Grüße.txt", "what?.txt", "notes #1.txt"])
def test_the_translated_file_url_works_whatever_the_file_name(url: str, name: str):
    """The URL is followed as given, so a name's spaces, "?" and "#" must come percent-encoded in it."""
    response = httpx.post(url + "/translate_file", data={"source": "en", "target": "de"},
                          files={"file": (name, ENGLISH.encode(), "text/plain")}, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    file_url = response.json()["translatedFileUrl"]
    assert " " not in file_url
    assert download(file_url).text == translated(url, ENGLISH, "en", "de")


def test_translate_file_refuses_an_unsupported_extension(url: str):
    response = httpx.post(url + "/translate_file", data={"source": "en", "target": "de"},
                          files={"file": ("report.pdf", b"%PDF-1.4", "application/pdf")}, timeout=TIMEOUT)
    assert_error(response, 400)


# --- raw HTTP: the rest of LibreTranslate's endpoints ---------------------------------------------------


def test_suggest_is_refused(url: str):
    response = httpx.post(url + "/suggest", json={"q": ENGLISH, "s": "Besser.", "source": "en", "target": "de"},
                          timeout=TIMEOUT)
    assert_error(response, 403)


def test_frontend_settings_has_libretranslates_keys(url: str):
    response = httpx.get(url + "/frontend/settings", timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    settings = response.json()
    assert {"charLimit", "apiKeys", "keyRequired", "suggestions", "filesTranslation", "supportedFilesFormat",
            "language"} <= set(settings)
    assert settings["apiKeys"] is False and settings["keyRequired"] is False and settings["suggestions"] is False
    assert settings["filesTranslation"] is True and {".txt", ".html"} <= set(settings["supportedFilesFormat"])
    assert isinstance(settings["charLimit"], int) and settings["charLimit"] > 0
    source, target = settings["language"]["source"], settings["language"]["target"]
    assert source == {"code": "auto", "name": "Auto Detect"}  # LibreTranslate's default
    assert target == {"code": "de", "name": "German"}  # into what English translates: the page starts there


def test_frontend_settings_says_when_keys_are_required(keyed_url: str):
    settings = httpx.get(keyed_url + "/frontend/settings", timeout=TIMEOUT).json()
    assert settings["apiKeys"] is True and settings["keyRequired"] is True


def test_languages_lists_both_pairs(url: str):
    response = httpx.get(url + "/languages", timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert sorted((language["code"], language["targets"]) for language in response.json()) == [
        ("de", ["de", "en"]), ("en", ["de", "en"])]  # every language also into itself, as in LibreTranslate


def test_detect_with_json(url: str):
    response = httpx.post(url + "/detect", json={"q": GERMAN}, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert response.json()[0]["language"] == "de"


def test_docs_and_openapi_answer(url: str):
    assert httpx.get(url + "/docs", timeout=TIMEOUT).status_code == 200
    openapi = httpx.get(url + "/openapi.json", timeout=TIMEOUT)
    assert openapi.status_code == 200 and "/translate" in openapi.json()["paths"]


# --- routing between the pairs --------------------------------------------------------------------------


def test_each_pair_translates_with_its_own_model(url: str, keyed_url: str, de_en_url: str):
    """The same text through en->de and de->en comes out differently, each as its pair's server alone says."""
    en_de, de_en = translated(url, ENGLISH, "en", "de"), translated(url, ENGLISH, "de", "en")
    assert en_de != de_en
    assert de_en == translated(de_en_url, ENGLISH, "de", "en")
    assert en_de == translated(keyed_url, ENGLISH, "en", "de", api_key="k1")


@pytest.mark.parametrize(("source", "target", "unknown"), [("en", "fr", "fr"), ("fr", "de", "fr"), ("auto", "fr", "fr"),
                                                         ("xx", "yy", "xx")])
def test_a_language_not_served_gets_400_naming_it(url: str, source: str, target: str, unknown: str):
    """LibreTranslate's words (app.py: "%(lang)s is not supported"), the source checked first."""
    response = httpx.post(url + "/translate", json={"q": ENGLISH, "source": source, "target": target},
                          timeout=TIMEOUT)
    assert assert_error(response, 400) == f"{unknown} is not supported"


def test_two_languages_served_but_not_as_a_pair_get_400_saying_so(keyed_url: str):
    """en-de alone serves en and de, and de into itself, but not de-en (LibreTranslate's "is not available as a
    target language from")."""
    response = httpx.post(keyed_url + "/translate", json={"q": GERMAN, "source": "de", "target": "en",
                                                          "api_key": "k1"}, timeout=TIMEOUT)
    assert assert_error(response, 400) == "English (en) is not available as a target language from German (de)"


def test_auto_routes_german_to_de_en_and_says_what_it_detected(url: str):
    answer = translate_json(url, GERMAN, "auto", "en")
    assert answer["translatedText"] == translated(url, GERMAN, "de", "en")
    assert answer["detectedLanguage"]["language"] == "de"
    assert set(answer["detectedLanguage"]) == {"language", "confidence"}
    assert 50 < answer["detectedLanguage"]["confidence"] <= 100


def test_auto_leaves_text_already_in_the_target_language(url: str):
    answer = translate_json(url, GERMAN, "auto", "de")
    assert answer["translatedText"] == GERMAN
    assert answer["detectedLanguage"]["language"] == "de"


@pytest.mark.parametrize("target", ["en", "de"])
def test_auto_routes_each_text_of_a_list(url: str, target: str):
    """English and German texts in one request: each goes through its own pair, or comes back as it is."""
    answer = translate_json(url, [ENGLISH, GERMAN, ENGLISH_2], "auto", target)
    assert [detected["language"] for detected in answer["detectedLanguage"]] == ["en", "de", "en"]
    if target == "en":
        assert answer["translatedText"] == [ENGLISH, translated(url, GERMAN, "de", "en"), ENGLISH_2]
    else:
        english = translated(url, [ENGLISH, ENGLISH_2], "en", "de")
        assert answer["translatedText"] == [english[0], GERMAN, english[1]]


# --- CORS -----------------------------------------------------------------------------------------------


def test_cors_preflight_from_the_allowed_origin(url: str):
    response = preflight(url, PAGE)
    assert response.status_code == 200, response.text
    assert response.headers["access-control-allow-origin"] == PAGE
    assert "POST" in response.headers["access-control-allow-methods"]
    assert "content-type" in response.headers["access-control-allow-headers"].lower()


def test_cors_post_from_the_allowed_origin(url: str):
    response = httpx.post(url + "/translate", json=FIELDS, headers={"Origin": PAGE}, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert response.headers["access-control-allow-origin"] == PAGE


def test_cors_refuses_another_origin(url: str):
    assert "access-control-allow-origin" not in preflight(url, OTHER_PAGE).headers
    response = httpx.post(url + "/translate", json=FIELDS, headers={"Origin": OTHER_PAGE}, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert "access-control-allow-origin" not in response.headers


def test_cors_errors_reach_the_allowed_page(url: str):
    """A page can read why its request failed: the error carries the CORS header too."""
    response = httpx.post(url + "/translate", json={**FIELDS, "target": "fr"}, headers={"Origin": PAGE},
                          timeout=TIMEOUT)
    assert_error(response, 400)
    assert response.headers["access-control-allow-origin"] == PAGE


def test_no_cors_headers_when_the_setting_is_empty(keyed_url: str):
    assert cors_headers(preflight(keyed_url, PAGE)) == {}
    fields = {"q": ENGLISH, "source": "en", "target": "de", "api_key": "k1"}
    response = httpx.post(keyed_url + "/translate", json=fields, headers={"Origin": PAGE}, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert cors_headers(response) == {}


# --- errors ---------------------------------------------------------------------------------------------


BAD_REQUESTS = [
    pytest.param("POST", "/translate", {"json": {"q": ENGLISH, "source": "en"}}, 400, id="no-target"),
    pytest.param("POST", "/translate", {"json": {"source": "en", "target": "de"}}, 400, id="no-q"),
    pytest.param("POST", "/translate", {"json": {**FIELDS, "format": "pdf"}}, 400, id="bad-format"),
    pytest.param("POST", "/translate", {"content": b"{", "headers": {"content-type": "application/json"}}, 400,
                 id="malformed-json"),
    pytest.param("POST", "/detect", {"data": {}}, 400, id="detect-without-q"),
    pytest.param("POST", "/translate_file", {"data": {"source": "en", "target": "de"}}, 400, id="file-without-file"),
    pytest.param("GET", "/translate", {}, 405, id="get-translate"),
    pytest.param("GET", "/download_file/0123/story.txt", {}, 404, id="unknown-file"),
    pytest.param("GET", "/no/such/path", {}, 404, id="unknown-path"),
]


@pytest.mark.parametrize(("method", "path", "request_args", "status"), BAD_REQUESTS)
def test_errors_are_json(url: str, method: str, path: str, request_args: dict[str, Any], status: int):
    assert_error(httpx.request(method, url + path, timeout=TIMEOUT, **request_args), status)


def test_keys_are_checked_before_the_request(keyed_url: str):
    """With keys set, a request that is wrong in other ways too is told 403 first."""
    response = httpx.post(keyed_url + "/translate", json={"q": ENGLISH, "source": "en", "target": "fr"},
                          timeout=TIMEOUT)
    assert_error(response, 403)


def test_the_release_is_named_by_version_health_and_metrics(url: str):
    """pyproject.toml's version, in `python -m service --version`, /health and the build-info gauge of /metrics."""
    version = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["version"]
    shown = subprocess.run([sys.executable, "-m", "service", "--version"], capture_output=True, text=True, check=True)
    assert shown.stdout.split() == ["mt-service", version]
    assert httpx.get(f"{url}/health", timeout=TIMEOUT).json() == {"status": "ok", "version": version}
    assert f'translator_build_info{{version="{version}"}} 1.0' in httpx.get(f"{url}/metrics", timeout=TIMEOUT).text
