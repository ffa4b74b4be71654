"""The page at / and the API docs at /docs: every asset is served by us, and both work in a real browser.

The first tests ask an app holding only service.worker.routes.pages' router. The browser tests drive headless Chromium
(Debian's `chromium` package) with Playwright against the real service, `python -m service` serving the tiny
random model (conftest.tiny_model_dir), and check that no request the browser makes leaves the service.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from playwright.sync_api import Browser, Locator, Page, Route, expect, sync_playwright

from service.launch import RunningService, running_service
from service.worker.routes import pages

CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags Chromium's own connections (updates, sync) would be tried, and refused.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]

# --- every asset served by us ----------------------------------------------------------------------------------


@dataclass
class Reference:
    tag: str
    attrs: dict[str, str]
    url: str


class References(HTMLParser):
    """Every src and href of an HTML document, with the element that holds it."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.found: list[Reference] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        self.found += [Reference(tag, values, values[name]) for name in ("src", "href") if values.get(name)]


def is_local(url: str) -> bool:
    """A path on this server (absolute or relative) or inline data: nothing that names another host."""
    parts = urlsplit(url)
    return parts.scheme == "data" or (not parts.scheme and not parts.netloc)


@pytest.fixture
def client() -> TestClient:
    app = FastAPI(title="Translator", docs_url=None, redoc_url=None)
    app.include_router(pages.router)
    return TestClient(app)


def fetch_references(client: TestClient, path: str) -> list[tuple[Reference, httpx.Response]]:
    """Each src and href of the HTML at path (all local), fetched; data: URLs are left out."""
    response = client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    references = References(response.text).found
    assert [r.url for r in references if not is_local(r.url)] == []
    base = urljoin("http://testserver", path)
    return [(r, client.get(urljoin(base, r.url))) for r in references if not r.url.startswith("data:")]


def test_the_page_and_everything_it_references_are_served_by_us(client: TestClient) -> None:
    fetched = {r.url: response for r, response in fetch_references(client, "/")}
    assert {url: response.status_code for url, response in fetched.items()} == {
        "static/page.css": 200, "static/page.js": 200, "docs": 200
    }
    assert fetched["static/page.css"].headers["content-type"].startswith("text/css")
    assert "javascript" in fetched["static/page.js"].headers["content-type"]
    assert fetched["docs"].headers["content-type"].startswith("text/html")


def test_docs_load_swagger_ui_from_us(client: TestClient) -> None:
    html = client.get("/docs").text
    assert "cdn" not in html.lower()
    assert "url: '/openapi.json'" in html
    assert client.get("/openapi.json").status_code == 200
    fetched = fetch_references(client, "/docs")
    assert sorted(r.tag for r, _ in fetched) == ["link", "link", "script"]  # style sheet, icon, Swagger UI
    assert all(response.status_code == 200 for _, response in fetched)
    for r, response in fetched:
        kind = "javascript" if r.tag == "script" else "css" if r.attrs.get("rel") == "stylesheet" else "image/"
        assert kind in response.headers["content-type"], r.url
    script = next(response for r, response in fetched if r.tag == "script")
    assert b"SwaggerUIBundle" in script.content


def test_pages_stay_out_of_the_api_schema(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert "/" not in paths and "/docs" not in paths


# --- in a browser, against the real service --------------------------------------------------------------------


@pytest.fixture(scope="module")
def service(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    log = tmp_path_factory.mktemp("page") / "service.log"
    with running_service(tiny_model_dir, log, threads=1, log_level="warning") as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM.exists(), "the browser tests need Debian's chromium package (apt-get install chromium)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@dataclass
class Visit:
    """A fresh browser page, with every URL it requests and every uncaught script error."""

    page: Page
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def assert_stayed_on(self, origin: str) -> None:
        assert self.errors == []
        assert self.requests, "no request recorded"
        assert [url for url in self.requests if not url.startswith(origin + "/")] == []


@pytest.fixture
def visit(browser: Browser) -> Iterator[Visit]:
    context = browser.new_context(viewport={"width": 1100, "height": 700})
    visit = Visit(context.new_page())
    visit.page.on("request", lambda request: visit.requests.append(request.url))
    visit.page.on("pageerror", lambda error: visit.errors.append(str(error)))
    yield visit
    context.close()


def options_of(select: Locator) -> list[tuple[str, str]]:
    pairs = select.locator("option").evaluate_all("options => options.map(o => [o.value, o.textContent])")
    return [(value, label) for value, label in pairs]


def api_translate(service: RunningService, **request: object) -> dict:
    return httpx.post(service.url + "/translate", json={"format": "text", **request}, timeout=60).json()


def test_page_translates_with_the_languages_the_service_serves(
    service: RunningService, visit: Visit, tmp_path: Path
) -> None:
    page = visit.page
    page.goto(service.url + "/")
    translate = page.get_by_role("button", name="Translate", exact=True)
    expect(translate).to_be_enabled()  # the languages are loaded

    languages = httpx.get(service.url + "/languages").json()
    names = {language["code"]: language["name"] for language in languages}
    sources = [language for language in languages if language["targets"]]
    source, target = page.get_by_label("From"), page.get_by_label("To")
    # it starts where /frontend/settings says, as LibreTranslate's page does: from auto into a language English is
    # translated into, so that English typed in is translated, not given back
    start = httpx.get(service.url + "/frontend/settings").json()["language"]
    assert (source.input_value(), target.input_value()) == (start["source"]["code"], start["target"]["code"])
    assert source.input_value() == "auto" and target.input_value() != "en"
    assert options_of(source) == [("auto", "Detect language")] + [(s["code"], s["name"]) for s in sources]
    every_target = list(dict.fromkeys(code for language in languages for code in language["targets"]))
    assert options_of(target) == [(code, names[code]) for code in every_target]
    for language in sources:
        source.select_option(language["code"])
        assert options_of(target) == [(code, names[code]) for code in language["targets"]]
    source.select_option("auto")

    sentence, output = "A man is riding a bicycle.", page.get_by_label("Translation", exact=True)
    page.get_by_label("Text").fill(sentence)
    translate.click()
    expect(output).not_to_be_empty()
    expected = api_translate(service, q=sentence, source="auto", target=target.input_value(), alternatives=0)
    assert output.text_content() == expected["translatedText"] != sentence
    detected, shown = expected["detectedLanguage"], page.get_by_text("Detected:")
    expect(shown).to_have_text(re.compile(rf"^Detected: {names[detected['language']]} \(([\d.]+)% confidence\)$"))
    confidence = re.search(r"([\d.]+)%", shown.text_content()).group(1)
    assert float(confidence) == pytest.approx(detected["confidence"], abs=0.05)  # shown to one decimal

    page.get_by_label("Alternatives", exact=True).fill("2")
    page.get_by_label("Text").press("Control+Enter")
    listed = page.get_by_role("region", name="Alternative translations").get_by_role("listitem")
    expect(listed).to_have_count(2)
    expected = api_translate(service, q=sentence, source="auto", target=target.input_value(), alternatives=2)
    expect(listed).to_have_text(expected["alternatives"])
    assert output.text_content() == expected["translatedText"]
    page.screenshot(path=tmp_path / "page.png", full_page=True)

    page.get_by_label("Text").fill("")
    translate.click()
    expected = api_translate(service, q="", source="auto", target=target.input_value(), alternatives=2)
    expect(page.get_by_role("alert")).to_have_text(expected["error"])
    expect(output).to_be_empty()
    expect(listed).to_have_count(0)
    visit.assert_stayed_on(service.url)


def test_page_translates_a_file_with_progress_and_offers_its_download(
    service: RunningService, visit: Visit, tmp_path: Path
) -> None:
    """The Files tab: upload, progress, download, named as the CLI names it; the same file as /translate_file gives."""
    page = visit.page
    page.goto(service.url + "/")
    expect(page.get_by_role("button", name="Translate", exact=True)).to_be_enabled()
    page.get_by_role("tab", name="Files").click()
    expect(page.get_by_label("Text")).to_be_hidden()
    page.get_by_role("button", name="Translate the file").click()
    expect(page.get_by_role("alert")).to_have_text("Choose a file first.")

    story = tmp_path / "story.txt"
    story.write_text("A man is riding a bicycle.\nTwo dogs run through the park.\n")
    page.get_by_label("From").select_option("en")
    page.get_by_label("To").select_option("de")
    page.get_by_label("File").set_input_files(story)
    page.get_by_role("button", name="Translate the file").click()
    link = page.get_by_role("link", name="Download story.de.txt")
    expect(link).to_be_visible()
    expect(page.get_by_role("status")).to_have_text("Translated.")
    expect(page.get_by_label("Progress")).to_be_hidden()
    with page.expect_download() as started:
        link.click()
    downloaded = started.value
    assert downloaded.suggested_filename == "story.de.txt"
    answer = httpx.post(service.url + "/translate_file", data={"source": "en", "target": "de"},
                        files={"file": ("story.txt", story.read_bytes())}, timeout=60).json()
    expected = httpx.get(answer["translatedFileUrl"], timeout=60).content
    assert Path(downloaded.path()).read_bytes() == expected != story.read_bytes()
    visit.assert_stayed_on(service.url)


def test_page_offers_several_pairs_and_swaps_them(service: RunningService, visit: Visit) -> None:
    """Served languages and translations stand in for a server of several pairs (this one has one)."""
    page, posted = visit.page, []
    languages = [
        {"code": "en", "name": "English", "targets": ["de", "fr"]},
        {"code": "de", "name": "German", "targets": ["en"]},
        {"code": "fr", "name": "French", "targets": []},
    ]

    def translate(route: Route) -> None:
        posted.append(route.request.post_data_json)
        route.fulfill(json={"translatedText": "Hallo Welt."})

    page.route("**/languages", lambda route: route.fulfill(json=languages))
    page.route("**/translate", translate)
    page.goto(service.url + "/")
    source, target, swap = page.get_by_label("From"), page.get_by_label("To"), page.get_by_label("Swap languages")
    expect(page.get_by_role("button", name="Translate", exact=True)).to_be_enabled()
    assert options_of(source) == [("auto", "Detect language"), ("en", "English"), ("de", "German")]
    assert options_of(target) == [("de", "German"), ("fr", "French"), ("en", "English")]
    expect(swap).to_be_disabled()  # auto: no language to swap

    source.select_option("en")
    assert options_of(target) == [("de", "German"), ("fr", "French")] and target.input_value() == "de"
    expect(swap).to_be_enabled()
    target.select_option("fr")
    expect(swap).to_be_disabled()  # French is not a source
    target.select_option("de")

    page.get_by_label("Text").fill("Hello world.")
    page.get_by_role("button", name="Translate", exact=True).click()
    expect(page.get_by_label("Translation", exact=True)).to_have_text("Hallo Welt.")
    assert posted == [{"q": "Hello world.", "source": "en", "target": "de", "alternatives": 0, "format": "text"}]
    swap.click()
    assert (source.input_value(), target.input_value()) == ("de", "en")
    assert options_of(target) == [("en", "English")]
    expect(page.get_by_label("Text")).to_have_value("Hallo Welt.")
    expect(page.get_by_label("Translation", exact=True)).to_be_empty()
    visit.assert_stayed_on(service.url)


def test_page_says_the_model_is_loading_and_asks_again(service: RunningService, visit: Visit) -> None:
    """The first GET /languages answers as the service does while it loads its model; the next reaches it."""
    page, answered = visit.page, []

    def loading_once(route: Route) -> None:
        if answered:
            route.continue_()
        else:
            answered.append(503)
            route.fulfill(status=503, json={"error": "Model is loading"}, headers={"Retry-After": "1"})

    page.route("**/languages", loading_once)
    page.goto(service.url + "/")
    expect(page.get_by_role("alert")).to_have_text("Cannot load the languages: Model is loading")
    expect(page.get_by_role("button", name="Translate", exact=True)).to_be_enabled()
    expect(page.get_by_role("alert")).to_be_hidden()
    expect(page.get_by_label("To").locator("option")).not_to_have_count(0)
    visit.assert_stayed_on(service.url)


def test_page_asks_for_an_api_key_when_the_server_needs_one_and_sends_it(service: RunningService, visit: Visit) -> None:
    """/frontend/settings answers keyRequired as a server with keys does: the page shows a key field, and sends what
    is typed in it as api_key, LibreTranslate's parameter."""
    page, sent = visit.page, []

    def with_keys(route: Route) -> None:
        settings = route.fetch().json()
        route.fulfill(json={**settings, "apiKeys": True, "keyRequired": True})

    def recorded(route: Route) -> None:
        sent.append(route.request.post_data_json)
        route.continue_()

    page.goto(service.url + "/")
    expect(page.get_by_role("button", name="Translate")).to_be_enabled()
    expect(page.get_by_label("API key")).to_be_hidden()  # this server needs no key
    page.route("**/frontend/settings", with_keys)
    page.route("**/translate", recorded)
    page.reload()
    expect(page.get_by_role("button", name="Translate")).to_be_enabled()
    page.get_by_label("API key").fill("the-key")
    page.get_by_label("Text").fill("A man is riding a bicycle.")
    page.get_by_role("button", name="Translate").click()
    expect(page.get_by_label("Translation", exact=True)).not_to_be_empty()
    assert sent[-1]["api_key"] == "the-key"
    visit.assert_stayed_on(service.url)


def test_docs_render_swagger_ui_without_leaving_the_service(service: RunningService, visit: Visit) -> None:
    page = visit.page
    page.goto(service.url + "/docs")
    expect(page.locator(".opblock-post").get_by_text("/translate", exact=True)).to_be_visible()
    expect(page.locator(".opblock-get").get_by_text("/languages", exact=True)).to_be_visible()
    assert service.url + "/openapi.json" in visit.requests
    visit.assert_stayed_on(service.url)
