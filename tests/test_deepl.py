"""DeepL's API with its official Python client (deepl) against `python -m service` serving the shipped en-de and
de-en models, with API keys set and two HTTP workers (a glossary made through one is used through the other):
texts, languages, tags, sentence splitting, formatting, glossaries (v2 and v3), usage, keys and errors."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import deepl
import httpx
import pytest
from client import TIMEOUT
from deepl.api_data import MultilingualGlossaryDictionaryEntries as Entries
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.launch import REPO, running_service

KEY, OTHER_KEY = "deepl-test-key", "another-key"
AUTH = {"Authorization": f"DeepL-Auth-Key {KEY}"}
SHIPPED = REPO / "models"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("deepl") / "service.log"
    with running_service(SHIPPED, log, threads=1, http_workers=2, log_level="warning",
                         api_keys=f"{KEY},{OTHER_KEY}") as service:
        yield service.url


@pytest.fixture(scope="module")
def client(url: str) -> deepl.DeepLClient:
    return deepl.DeepLClient(KEY, server_url=url, send_platform_info=False)


def post(url: str, path: str, headers: dict | None = AUTH, **request: object) -> httpx.Response:
    return httpx.post(url + path, headers=headers, timeout=TIMEOUT, **request)


def deepl_error(response: httpx.Response, status: int) -> str:
    """DeepL's error shape: the status and {"message": ...}; returns the message."""
    assert response.status_code == status, response.text
    assert list(response.json()) == ["message"] and response.json()["message"], response.text
    return response.json()["message"]


# --- languages and texts -------------------------------------------------------------------------------------


def test_languages_are_the_pairs_served_in_deepl_codes(client: deepl.DeepLClient):
    assert [(lang.code, lang.name) for lang in client.get_source_languages()] == [("DE", "German"),
                                                                                 ("EN", "English")]
    targets = {lang.code: lang for lang in client.get_target_languages()}
    assert sorted(targets) == ["DE", "EN-GB", "EN-US"]
    assert not any(lang.supports_formality for lang in targets.values())
    pairs = {(p.source_lang, p.target_lang) for p in client.get_glossary_languages()}
    assert pairs == {("en", "de"), ("de", "en")}


def test_texts_are_translated_with_the_source_given_or_detected(client: deepl.DeepLClient, url: str):
    one = client.translate_text("A dog runs in the park.", source_lang="EN", target_lang="DE")
    assert one.detected_source_lang == "EN" and one.text and one.text != "A dog runs in the park."
    assert one.billed_characters == len("A dog runs in the park.")
    many = client.translate_text(["A dog runs in the park.", "Ein Mann fährt Fahrrad."], target_lang="EN-US")
    assert [r.detected_source_lang for r in many] == ["EN", "DE"]
    assert many[0].text == "A dog runs in the park."  # already English: given back as it is
    libre = httpx.post(url + "/translate", json={"q": "Ein Mann fährt Fahrrad.", "source": "de", "target": "en",
                                                 "api_key": KEY}, timeout=TIMEOUT).json()["translatedText"]
    assert many[1].text == libre == client.translate_text("Ein Mann fährt Fahrrad.", target_lang="EN-GB").text


def test_a_form_with_repeated_text_is_read_as_json_is(url: str):
    texts = ["A dog runs.", "Two men are talking."]
    form = post(url, "/v2/translate", data={"text": texts, "target_lang": "DE", "source_lang": "EN"})
    json = post(url, "/v2/translate", json={"text": texts, "target_lang": "de", "source_lang": "en"})
    assert form.status_code == json.status_code == 200, form.text
    assert form.json() == json.json() and len(form.json()["translations"]) == 2


def test_html_markup_is_kept_and_ignore_tags_are_not_translated(client: deepl.DeepLClient):
    html = "<p>A dog runs in the <b>park</b>.</p><p><x>A dog runs.</x> A man sleeps.</p>"
    result = client.translate_text(html, source_lang="EN", target_lang="DE", tag_handling="html",
                                   ignore_tags="x").text
    assert result.count("<b>") == result.count("</b>") == 1 and result.startswith("<p>")
    assert "<x>A dog runs.</x>" in result and "A man sleeps" not in result


def test_splitting_tags_split_and_non_splitting_tags_do_not(url: str):
    def units(**fields: object) -> str:
        response = post(url, "/v2/translate", json={"text": ["<p>A dog <y>runs</y> in the park.</p>"],
                                                    "source_lang": "EN", "target_lang": "DE",
                                                    "tag_handling": "xml", **fields})
        assert response.status_code == 200, response.text
        return response.json()["translations"][0]["text"]

    # <y> is no inline element: alone it bounds a unit; as a non-splitting tag it is part of the sentence
    assert units() != units(non_splitting_tags=["y"])
    assert units(non_splitting_tags="y,z") == units(non_splitting_tags=["y"])
    assert units(splitting_tags=["b"]) == units()


def test_split_sentences_0_still_splits_a_text_past_the_sentence_bound(url: str):
    long = ", ".join(["a dog runs in the green park with a small red ball"] * 40) + "."
    response = post(url, "/v2/translate", json={"text": [long], "source_lang": "EN", "target_lang": "DE",
                                                "split_sentences": "0"})
    assert response.status_code == 200, response.text
    # one sentence past TRANSLATOR_SPLIT_TOKENS: cut at its clauses (split_long: tests/test_text.py) as with "1"
    by_sentence = post(url, "/v2/translate", json={"text": [long], "source_lang": "EN", "target_lang": "DE"})
    assert "Hund" in response.json()["translations"][0]["text"]
    assert response.json() == by_sentence.json()
    two = "A dog runs. A man sleeps."
    joined = post(url, "/v2/translate", json={"text": [two], "source_lang": "EN", "target_lang": "DE",
                                              "split_sentences": "0"}).json()["translations"][0]["text"]
    split = post(url, "/v2/translate", json={"text": [two], "source_lang": "EN", "target_lang": "DE"}
                 ).json()["translations"][0]["text"]
    assert joined and split  # both answered; with 0 the model reads both sentences at once
    lines = post(url, "/v2/translate", json={"text": ["A dog runs.\nA man sleeps."], "source_lang": "EN",
                                             "target_lang": "DE", "split_sentences": "nonewlines"})
    assert "\n" not in lines.json()["translations"][0]["text"]


def test_preserve_formatting_keeps_the_case_and_the_missing_period(client: deepl.DeepLClient):
    plain = client.translate_text("a dog runs in the park", source_lang="EN", target_lang="DE").text
    kept = client.translate_text("a dog runs in the park", source_lang="EN", target_lang="DE",
                                 preserve_formatting=True).text
    assert kept[0].islower() and not kept.endswith(".")
    assert kept.lower().rstrip(".") == plain.lower().rstrip(".")


def test_formality_and_model_type_get_deepls_answers(client: deepl.DeepLClient, url: str):
    text = "A dog runs."
    assert client.translate_text(text, source_lang="EN", target_lang="DE", formality="prefer_more").text
    with pytest.raises(deepl.DeepLException, match="'formality' is not supported for given 'target_lang'"):
        client.translate_text(text, source_lang="EN", target_lang="DE", formality="more")
    assert client.translate_text(text, source_lang="EN", target_lang="DE",
                                 model_type="prefer_quality_optimized").model_type_used == "latency_optimized"
    message = deepl_error(post(url, "/v2/translate", json={"text": [text], "target_lang": "DE",
                                                           "model_type": "quality_optimized"}), 400)
    assert "quality_optimized" in message


# --- errors and keys -----------------------------------------------------------------------------------------


def test_a_wrong_or_missing_key_is_403(url: str):
    with pytest.raises(deepl.AuthorizationException):
        deepl.DeepLClient("wrong", server_url=url, send_platform_info=False).get_usage()
    assert deepl_error(post(url, "/v2/usage", headers=None), 403)
    assert post(url, "/v2/usage", headers=None, data={"auth_key": KEY}).status_code == 200  # the legacy field


@pytest.mark.parametrize(("fields", "words"), [
    ({"text": ["A dog."]}, "Parameter 'target_lang' not specified."),
    ({"target_lang": "DE"}, "Parameter 'text' not specified."),
    ({"text": ["A dog."], "target_lang": "FR"}, "Value for 'target_lang' not supported."),
    ({"text": ["A dog."], "target_lang": "DE", "source_lang": "XX"}, "Value for 'source_lang' not supported."),
    ({"text": ["A dog."], "target_lang": "DE", "tag_handling": "json"}, "Value for 'tag_handling' not supported."),
    ({"text": ["A dog."], "target_lang": "DE", "split_sentences": "2"}, "not supported"),
])
def test_bad_requests_are_400_in_deepls_words(url: str, fields: dict, words: str):
    assert words in deepl_error(post(url, "/v2/translate", json=fields), 400)


def test_a_body_too_large_is_413_in_deepls_shape(url: str):
    deepl_error(post(url, "/v2/translate", content=b"x" * 2_000_000, headers={**AUTH,
                                                                             "content-type": "application/json"}), 413)


def test_usage_counts_the_characters_translated(client: deepl.DeepLClient):
    before = client.get_usage().character
    client.translate_text(["A dog runs.", "Ein Hund."], target_lang="DE")
    after = client.get_usage().character
    assert after.count - before.count == len("A dog runs.") + len("Ein Hund.")
    assert after.limit and not after.limit_reached


# --- glossaries ----------------------------------------------------------------------------------------------


def test_a_glossary_is_made_listed_read_used_and_deleted(client: deepl.DeepLClient, url: str):
    entries = {"dog": "Köter", "park": "Stadtpark"}
    glossary = client.create_glossary("pets", source_lang="EN", target_lang="DE", entries=entries)
    assert (glossary.source_lang, glossary.target_lang, glossary.entry_count, glossary.ready) == ("EN", "DE", 2,
                                                                                                   True)
    assert glossary.glossary_id in [g.glossary_id for g in client.list_glossaries()]
    assert client.get_glossary(glossary.glossary_id).name == "pets"
    assert client.get_glossary_entries(glossary) == entries
    for _ in range(4):  # through both HTTP workers
        text = client.translate_text("A dog runs in the park.", source_lang="EN", target_lang="DE",
                                     glossary=glossary).text
        assert "Köter" in text and "Stadtpark" in text
    libre = httpx.post(url + "/translate", json={"q": "The dog sleeps.", "source": "en", "target": "de",
                                                 "api_key": KEY, "glossary_id": glossary.glossary_id},
                       timeout=TIMEOUT)
    assert "Köter" in libre.json()["translatedText"]
    other = deepl.DeepLClient(OTHER_KEY, server_url=url, send_platform_info=False)
    with pytest.raises(deepl.GlossaryNotFoundException):
        other.get_glossary(glossary.glossary_id)  # another key's glossary
    client.delete_glossary(glossary)
    with pytest.raises(deepl.GlossaryNotFoundException):
        client.get_glossary(glossary.glossary_id)
    with pytest.raises(deepl.DeepLException, match="Glossary not found"):
        client.translate_text("A dog.", source_lang="EN", target_lang="DE", glossary=glossary.glossary_id)


def test_glossary_ids_naming_one_glossary_is_its_glossary_id_and_several_are_refused(client: deepl.DeepLClient):
    glossary = client.create_glossary("ids", source_lang="EN", target_lang="DE", entries={"dog": "Köter"})
    other = client.create_glossary("other", source_lang="EN", target_lang="DE", entries={"park": "Stadtpark"})
    text = client.translate_text("A dog runs.", source_lang="EN", target_lang="DE", glossary_ids=[glossary]).text
    assert "Köter" in text
    with pytest.raises(deepl.DeepLException, match="glossary_ids"):
        client.translate_text("A dog runs.", source_lang="EN", target_lang="DE", glossary_ids=[glossary, other])
    with pytest.raises(deepl.DeepLException, match="glossary_ids"):
        client.translate_document_upload(b"A dog.", source_lang="EN", target_lang="DE", filename="a.txt",
                                         glossary_ids=[glossary, other])
    for made in (glossary, other):
        client.delete_glossary(made)


def test_a_glossary_needs_a_source_language(client: deepl.DeepLClient, url: str):
    """(The client refuses it before it asks, so the request is sent as it is.)"""
    glossary = client.create_glossary("g", source_lang="EN", target_lang="DE", entries={"dog": "Köter"})
    request = {"text": ["A dog."], "target_lang": "DE", "glossary_id": glossary.glossary_id}
    assert "source_lang" in deepl_error(post(url, "/v2/translate", json=request), 400)
    wrong_way = {**request, "source_lang": "DE", "target_lang": "EN-GB"}
    assert "no dictionary from DE to EN" in deepl_error(post(url, "/v2/translate", json=wrong_way), 400)


@pytest.mark.parametrize(("fields", "words"), [
    ({"entries": "dog\tHund\ndog\tKöter", "entries_format": "tsv"}, "line 2: duplicate source term"),
    ({"entries": "dog,Hund\n,Katze", "entries_format": "csv"}, "line 2: empty source term"),
    ({"entries": "dog\tHund", "entries_format": "xlsx"}, "entries_format"),
    ({"entries": "dog\tHund", "target_lang": "fr"}, "Unsupported glossary language pair"),
])
def test_a_malformed_glossary_is_400_and_nothing_is_kept(url: str, client: deepl.DeepLClient, fields: dict,
                                                         words: str):
    before = len(client.list_glossaries())
    request = {"name": "bad", "source_lang": "en", "target_lang": "de", **fields}
    assert words in deepl_error(post(url, "/v2/glossaries", json=request), 400)
    assert len(client.list_glossaries()) == before


def test_a_multilingual_glossary_through_v3(client: deepl.DeepLClient):
    dictionaries = [Entries("EN", "DE", {"dog": "Köter"}),
                    Entries("DE", "EN", {"Hund": "hound"})]
    glossary = client.create_multilingual_glossary("both ways", dictionaries)
    assert sorted((d.source_lang, d.target_lang, d.entry_count) for d in glossary.dictionaries) == [
        ("DE", "EN", 1), ("EN", "DE", 1)]
    assert glossary.glossary_id in [g.glossary_id for g in client.list_multilingual_glossaries()]
    assert client.get_multilingual_glossary(glossary.glossary_id).name == "both ways"
    read = client.get_multilingual_glossary_entries(glossary, "DE", "EN").dictionaries
    assert deepl.util.convert_tsv_to_dict(read[0].entries) == {"Hund": "hound"}
    assert "hound" in client.translate_text("Der Hund schläft.", source_lang="DE", target_lang="EN-GB",
                                            glossary=glossary).text
    client.delete_multilingual_glossary(glossary)
    with pytest.raises(deepl.GlossaryNotFoundException):
        client.get_multilingual_glossary(glossary.glossary_id)


def test_an_unknown_path_is_deepls_404(url: str):
    deepl_error(httpx.get(url + "/v2/nothing", headers=AUTH, timeout=TIMEOUT), 404)



# --- whatever comes in ---------------------------------------------------------------------------------------

FIELDS = ["text", "source_lang", "target_lang", "tag_handling", "split_sentences", "preserve_formatting",
          "formality", "model_type", "glossary_id", "context", "ignore_tags", "non_splitting_tags", "splitting_tags",
          "show_billed_characters", "name", "entries", "entries_format", "dictionaries", "type"]
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from(["EN", "de", "EN-GB", "html", "0", "tsv", "csv"])
    | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(FIELDS), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(path=st.sampled_from(["/v2/translate", "/v2/glossaries", "/v3/glossaries", "/v2/languages"]),
       fields=st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=8), form=st.booleans())
def test_any_fields_get_an_answer_never_a_500(url: str, path: str, fields: dict, form: bool):
    if form:  # a form carries strings only: the rest as JSON text
        request = {"data": {k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()}}
    else:
        request = {"json": fields}
    response = post(url, path, **request)
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        deepl_error(response, response.status_code)


def test_a_full_queue_is_deepls_429_with_retry_after_and_libretranslates_503():
    """The mapping of service.worker.errors, on an app whose routes raise QueueFull as the engine does."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from service.protocol import QueueFull
    from service.worker import errors

    app = FastAPI()
    errors.install(app)

    @app.post("/v2/translate")
    @app.post("/translate")
    async def full() -> None:
        raise QueueFull("full")

    client = TestClient(app)
    deepl_answer, libre_answer = client.post("/v2/translate"), client.post("/translate")
    assert deepl_error(deepl_answer, 429) and deepl_answer.headers["retry-after"] == "1"
    assert libre_answer.status_code == 503 and list(libre_answer.json()) == ["error"]
    assert libre_answer.headers["retry-after"] == "1"


# --- documents -----------------------------------------------------------------------------------------------


def test_a_document_is_translated_in_the_background_and_given_once(client: deepl.DeepLClient, url: str,
                                                                   tmp_path):
    source, out = tmp_path / "story.txt", tmp_path / "story.de.txt"
    source.write_text("A dog runs in the park.\n\nTwo men are talking.\n")
    status = client.translate_document_from_filepath(source, out, source_lang="EN", target_lang="DE")
    assert status.done and status.billed_characters == len("A dog runs in the park.") + len("Two men are talking.")
    lines = [line for line in out.read_text().splitlines() if line.strip()]
    assert len(lines) == 2 and "Hund" in lines[0]
    handle = client.translate_document_upload(source.read_bytes(), target_lang="DE", filename="story.txt")
    while not (status := client.translate_document_get_status(handle)).done:
        assert status.ok and status.status.value in ("queued", "translating")
        time.sleep(0.1)
    with open(tmp_path / "again.txt", "wb") as again:
        client.translate_document_download(handle, again)
    assert (tmp_path / "again.txt").read_bytes() == out.read_bytes()
    key = {"document_key": handle.document_key}
    twice = post(url, f"/v2/document/{handle.document_id}/result", data=key)
    assert "already downloaded" in deepl_error(twice, 400)
    wrong_key = post(url, f"/v2/document/{handle.document_id}", data={"document_key": "0" * 64})
    assert "not found" in deepl_error(wrong_key, 400)
    foreign = post(url, f"/v2/document/{handle.document_id}", data=key,
                   headers={"Authorization": f"DeepL-Auth-Key {OTHER_KEY}"})
    assert "not found" in deepl_error(foreign, 400)
    assert "not found" in deepl_error(post(url, "/v2/document/nothing", data=key), 400)


def test_a_document_of_an_unknown_format_or_unreadable_is_refused_or_ends_in_error(client: deepl.DeepLClient,
                                                                                  url: str):
    pdf = post(url, "/v2/document", data={"target_lang": "DE"}, files={"file": ("a.pdf", b"%PDF-1.4")})
    assert "Invalid file" in deepl_error(pdf, 400)
    broken = post(url, "/v2/document", data={"target_lang": "DE"}, files={"file": ("a.docx", b"not a zip")})
    assert broken.status_code == 200, broken.text
    handle = deepl.DocumentHandle(**broken.json())
    while (status := client.translate_document_get_status(handle)).status.value in ("queued", "translating"):
        time.sleep(0.1)
    assert status.status.value == "error" and status.error_message


def test_a_document_takes_a_glossary_a_formality_and_its_own_output_format(client: deepl.DeepLClient, url: str,
                                                                           tmp_path):
    source, out = tmp_path / "pets.txt", tmp_path / "pets.de.txt"
    source.write_text("A dog runs in the park.\n")
    glossary = client.create_glossary("document", source_lang="EN", target_lang="DE", entries={"dog": "Köter"})
    status = client.translate_document_from_filepath(source, out, source_lang="EN", target_lang="DE",
                                                     glossary=glossary, formality="prefer_less")
    assert status.done and "Köter" in out.read_text()
    with pytest.raises(deepl.DeepLException, match="'formality' is not supported"):
        client.translate_document_upload(b"A dog.", target_lang="DE", filename="a.txt", formality="more")
    with pytest.raises(deepl.DeepLException, match="output_format"):
        client.translate_document_upload(b"A dog.", target_lang="DE", filename="a.txt", output_format="pdf")
    without_source = post(url, "/v2/document", data={"target_lang": "DE", "glossary_id": glossary.glossary_id},
                          files={"file": ("a.txt", b"A dog.")})
    assert "source_lang" in deepl_error(without_source, 400)
    client.delete_glossary(glossary)
    with pytest.raises(deepl.DeepLException, match="Glossary not found"):
        client.translate_document_upload(b"A dog.", source_lang="EN", target_lang="DE", filename="a.txt",
                                         glossary=glossary.glossary_id)


def test_the_python_clients_glossary_calls_from_csv_and_its_v3_updates(client: deepl.DeepLClient):
    csv = client.create_glossary_from_csv("csv", source_lang="DE", target_lang="EN", csv_data="Hund,hound\n")
    assert csv.entry_count == 1
    assert "hound" in client.translate_text_with_glossary("Der Hund schläft.", csv, target_lang="EN-GB").text
    client.delete_glossary(csv)
    multi = client.create_multilingual_glossary_from_csv("multi", "EN", "DE", "dog,Köter\n")
    assert client.update_multilingual_glossary_name(multi, "renamed").name == "renamed"
    client.update_multilingual_glossary_dictionary(multi, Entries("EN", "DE", {"park": "Stadtpark"}))
    client.update_multilingual_glossary_dictionary_from_csv(multi, "DE", "EN", "Hund,hound\n")
    entries = client.get_multilingual_glossary_entries(multi, "EN", "DE").dictionaries[0].entries
    assert deepl.util.convert_tsv_to_dict(entries) == {"dog": "Köter", "park": "Stadtpark"}
    replaced = client.replace_multilingual_glossary_dictionary_from_csv(multi, "EN", "DE", "cat,Mieze\n")
    assert replaced.entry_count == 1
    client.replace_multilingual_glossary_dictionary(multi, Entries("EN", "DE", {"cow": "Kuh"}))
    client.delete_multilingual_glossary_dictionary(multi, source_lang="DE", target_lang="EN")
    info = client.get_multilingual_glossary(multi.glossary_id)
    assert [(d.source_lang, d.target_lang, d.entry_count) for d in info.dictionaries] == [("EN", "DE", 1)]
    client.delete_multilingual_glossary(multi)
