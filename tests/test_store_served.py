"""Keys, limits, usage and files as clients meet them, on the service's processes with stand-in models
(service.testing), their store SQLite or the tests' PostgreSQL (bench/common/postgres.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from client import assert_error, metrics

from bench.common.defaults import REPO
from bench.common.postgres import Postgres
from bench.serving.exact_limits import by_window, running_stand_in, windowed_answers
from service.launch import RunningService

STORE_DOWN = "The store of keys, limits and files is unavailable"


def keys_env(**settings: object) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("TRANSLATOR_")},
            **{f"TRANSLATOR_{k.upper()}": str(v) for k, v in settings.items()}}


def keys_command(*args: str, **settings: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "service.keys", *args], capture_output=True, text=True,
                          env=keys_env(**settings), cwd=REPO, timeout=60)


def new_key(name: str, *limits: str, **settings: object) -> str:
    made = keys_command("add", name, *limits, **settings)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def post(url: str, key: str | None = None, q: str = "Hello world", **headers: str) -> httpx.Response:
    fields = {"q": q, "source": "en", "target": "de", **({"api_key": key} if key else {})}
    return httpx.post(url + "/translate", json=fields, headers=headers, timeout=30)


# --- one instance, SQLite, keys on --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningService, Path]]:
    folder = tmp_path_factory.mktemp("keyed")
    with running_stand_in(folder, "keyed", api_keys="k1") as server:
        yield server, folder / "data"


def test_keys_of_the_setting_work_and_others_get_403(keyed):
    server, _ = keyed
    assert post(server.url, "k1").status_code == 200
    assert assert_error(post(server.url, "k2"), 403) == "Invalid API key"
    assert assert_error(post(server.url), 403) == "Invalid API key"


def test_a_key_made_by_the_command_works_at_once_up_to_its_limit(keyed):
    server, data = keyed
    key = new_key("limited", "--req-limit", "3", data_dir=data)
    answers = [post(server.url, key, q="abc") for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert "3 requests per minute" in assert_error(answers[3], 429)
    assert 1 <= int(answers[3].headers["Retry-After"]) <= 60
    used = httpx.get(server.url + "/usage", params={"api_key": key}).json()
    assert (used["name"], used["req_limit"], [(d["requests"], d["characters"]) for d in used["days"]]) == (
        "limited", 3, [(3, 9)])
    listed = keys_command("usage", "limited", data_dir=data).stdout
    assert "3 requests\t9 characters" in listed
    assert keys_command("remove", "limited", data_dir=data).returncode == 0
    assert assert_error(post(server.url, key), 403) == "API key revoked"
    assert assert_error(httpx.get(server.url + "/usage", params={"api_key": key}), 403) == "API key revoked"


def test_metrics_count_keyed_usage_without_a_label_per_key(keyed):
    server, _ = keyed
    before = metrics(server.url)
    assert post(server.url, "k1", q="12345").status_code == 200
    after = metrics(server.url)
    assert after[("translator_key_requests_total", frozenset())] == before[
        ("translator_key_requests_total", frozenset())] + 1
    assert after[("translator_key_characters_total", frozenset())] >= before[
        ("translator_key_characters_total", frozenset())] + 5
    labels = {label for name, labels in after for label, _ in labels if name.startswith("translator_key")}
    assert labels == set()


def test_a_translated_file_is_served_to_its_key_alone(keyed):
    server, data = keyed
    other = new_key("other", data_dir=data)
    url = translate_file(server.url, "k1")
    assert assert_error(httpx.get(url), 403) == "Invalid API key"
    assert httpx.get(url, params={"api_key": other}).status_code == 404
    assert httpx.get(url, params={"api_key": "k1"}).text == "a story"


def deepl(url: str, key: str, text: str = "Hello", path: str = "/v2/translate") -> httpx.Response:
    return httpx.post(url + path, json={"text": [text], "target_lang": "DE"},
                      headers={"Authorization": f"DeepL-Auth-Key {key}"}, timeout=30)


def test_deepl_keys_and_limits_are_the_store_s_in_deepl_s_answers(keyed):
    """DeepL's API admits a request as LibreTranslate's does (the same keys, limits and usage); a request limit is
    DeepL's 429, the monthly characters its 456 ("quota exceeded"), each in DeepL's {"message"}."""
    server, data = keyed
    assert deepl(server.url, "k1").status_code == 200
    for refused in (deepl(server.url, "nope"), httpx.post(server.url + "/v2/translate", json={"text": ["Hello"],
                                                                                               "target_lang": "DE"})):
        assert (refused.status_code, refused.json()) == (403, {"message": "Invalid API key"})
    quick = new_key("deepl-quick", "--req-limit", "2", data_dir=data)
    answers = [deepl(server.url, quick) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert list(answers[2].json()) == ["message"] and 1 <= int(answers[2].headers["Retry-After"]) <= 60
    wordy = new_key("deepl-wordy", "--char-limit", "10", data_dir=data)
    assert deepl(server.url, wordy, "Hello").status_code == 200
    assert httpx.get(server.url + "/v2/usage", headers={"Authorization": f"DeepL-Auth-Key {wordy}"}).json() == {
        "character_count": 5, "character_limit": 10}
    over = deepl(server.url, wordy, "Hello world!")
    assert over.status_code == 456 and "characters per month" in over.json()["message"]
    assert post(server.url, wordy, q="Hello world!").status_code == 429  # LibreTranslate's answer to the same


def translate_file(url: str, key: str | None = None) -> str:
    fields = {"source": "en", "target": "de", **({"api_key": key} if key else {})}
    answer = httpx.post(url + "/translate_file", data=fields, files={"file": ("story.txt", b"A story")}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()["translatedFileUrl"]


def test_a_malformed_limit_gets_one_clear_line(tmp_path: Path):
    done = keys_command("add", "x", "--daily-req-limit", "ten", data_dir=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "python -m service.keys add: argument --daily-req-limit: a limit is a whole number of at least 1, not 'ten'"]


# --- anonymous clients by address, behind a trusted proxy ---------------------------------------------------


def test_anonymous_limits_count_the_client_a_trusted_proxy_names(tmp_path: Path):
    with running_stand_in(tmp_path, "anonymous", anonymous_req_limit=2, trusted_proxies="127.0.0.1") as server:
        def status(forwarded: str, local: str = "127.0.0.1") -> int:
            with httpx.Client(transport=httpx.HTTPTransport(local_address=local)) as client:
                fields = {"q": "Hi", "source": "en", "target": "de"}
                return client.post(server.url + "/translate", json=fields,
                                   headers={"X-Forwarded-For": forwarded}).status_code

        assert [status("203.0.113.1") for _ in range(3)] == [200, 200, 429]
        assert status("203.0.113.2") == 200
        # what the client wrote before the proxy's own entry names nobody: the proxy's entry counts
        assert [status("198.51.100.9, 203.0.113.2") for _ in range(2)] == [200, 429]
        # from an address that is no trusted proxy, X-Forwarded-For is ignored: the connection's address counts
        assert [status(f"192.0.2.{i}", local="127.0.0.2") for i in range(3)] == [200, 200, 429]


# --- the store unreachable ----------------------------------------------------------------------------------


def test_an_unreachable_store_leaves_what_needs_none_served(tmp_path: Path):
    down = "postgresql+psycopg://postgres@127.0.0.1:1/nothing"
    with ExitStack() as stack:
        plain = stack.enter_context(running_stand_in(tmp_path, "plain", store_url=down))
        keyed = stack.enter_context(running_stand_in(tmp_path, "keyed", store_url=down, api_keys="k1"))
        assert post(plain.url).json() == {"translatedText": "hello world"}
        files = {"file": ("story.txt", b"A story")}
        answer = httpx.post(plain.url + "/translate_file", data={"source": "en", "target": "de"}, files=files)
        assert assert_error(answer, 503) == STORE_DOWN and answer.headers["Retry-After"]
        assert assert_error(post(keyed.url, "k1"), 503) == STORE_DOWN
        assert httpx.get(keyed.url + "/ready").status_code == 200


def test_the_keys_command_says_at_once_that_the_store_is_unreachable_when_told_not_to_wait():
    done = keys_command("--wait", "0", "list", store_url="postgresql+psycopg://postgres@127.0.0.1:1/nothing")
    assert done.returncode == 1
    assert done.stderr.startswith("the store is unavailable: ") and "waiting" not in done.stderr, done.stderr


def test_translated_files_survive_a_restart(tmp_path: Path):
    with running_stand_in(tmp_path, "before") as server:
        url = translate_file(server.url)
        path = url.split("/download_file/", 1)[1]
    with running_stand_in(tmp_path, "after") as server:
        assert httpx.get(f"{server.url}/download_file/{path}").text == "a story"


# --- two instances sharing PostgreSQL and the data folder ---------------------------------------------------

WINDOW_S = 4
LIMIT = 25


@pytest.fixture(scope="module")
def replicas(postgres: Postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], dict]]:
    """Two instances of 2 HTTP workers each, keys on, one PostgreSQL database and one data folder."""
    folder = tmp_path_factory.mktemp("replicas")
    settings = {"store_url": postgres.database("replicas"), "data_dir": folder / "data", "require_api_keys": "true",
                "limit_window_s": WINDOW_S}
    with ExitStack() as stack:
        servers = [stack.enter_context(running_stand_in(folder, f"replica-{i}", **settings)) for i in range(2)]
        yield [s.url for s in servers], settings


def test_a_key_made_on_one_instance_works_on_the_other_and_is_counted_once(replicas):
    (a, b), settings = replicas
    key = new_key("both", **settings)
    answers = [post(url, key, q="abcd") for url in [a] * 6 + [b] * 5]
    assert [r.status_code for r in answers] == [200] * 11
    assert len({r.headers["X-Translator-Instance"] for r in answers}) == 2
    assert [(d["requests"], d["characters"]) for d in httpx.get(b + "/usage", params={"api_key": key}).json()[
        "days"]] == [(11, 44)]
    url = translate_file(a, key)  # and a file translated on one is served by the other
    assert httpx.get(url.replace(a, b), params={"api_key": key}).text == "a story"


def test_exactly_the_limit_is_accepted_in_each_window_across_instances_and_workers(replicas):
    """16 clients with one key, half on each instance, for 3 windows (bench.serving.exact_limits measures it over
    3 minutes): each window accepts exactly the limit and refuses the rest."""
    (a, b), settings = replicas
    key = new_key("exact", "--req-limit", str(LIMIT), **settings)
    windows = by_window(windowed_answers([a, b], key, WINDOW_S, 3, 16), WINDOW_S)
    assert [(c[200], c[429] > 0, len(c)) for c in windows.values()] == [(LIMIT, True, 2)] * 3, windows


def test_a_postgresql_restart_under_load_fails_cleanly_and_recovers(replicas, postgres: Postgres):
    """Clients keep asking while PostgreSQL stops for 2 s and starts again: every answer is 200 or the store's 503,
    answers are 200 again within 10 s of its start, and the key's usage and limits' counters count every 200
    exactly once."""
    (a, b), settings = replicas
    key = new_key("restart", "--daily-req-limit", "1000000", "--char-limit", "1000000", **settings)
    answers: list[tuple[float, int, str]] = []
    stop = threading.Event()

    def client(url: str) -> None:
        with httpx.Client(timeout=15) as http:
            while not stop.is_set():
                r = http.post(url + "/translate", json={"q": "Hi", "source": "en", "target": "de", "api_key": key})
                answers.append((time.time(), r.status_code, r.json().get("error", "")))

    threads = [threading.Thread(target=client, args=(url,)) for url in [a, b] * 4]
    for thread in threads:
        thread.start()
    time.sleep(2)
    postgres.stop()
    time.sleep(2)
    postgres.start()
    started = time.time()
    time.sleep(10)
    stop.set()
    for thread in threads:
        thread.join()
    assert {(status, error) for _, status, error in answers} <= {(200, ""), (503, STORE_DOWN)}
    assert any(status == 503 for _, status, _ in answers)
    recovered = min(t for t, status, _ in answers if status == 200 and t > started)
    assert recovered - started < 10
    assert all(status == 200 for t, status, _ in answers if t > recovered + 1)
    served = sum(status == 200 for _, status, _ in answers)
    used = httpx.get(a + "/usage", params={"api_key": key}).json()["days"]
    assert sum(d["requests"] for d in used) == served
    day, chars = postgres.psql("SELECT c.count FROM counters c JOIN api_keys k ON c.subject = 'key:' || k.id "
                               "WHERE k.name = 'restart' AND c.kind IN ('day', 'chars') ORDER BY c.kind DESC",
                               database="replicas").split()
    assert (int(day), int(chars)) == (served, 2 * served)


def test_the_keys_command_waits_for_a_store_that_starts_after_it(postgres: Postgres):
    """As `docker compose exec translator python -m service.keys add` may run while PostgreSQL is starting."""
    url = postgres.database("late")
    postgres.stop()
    try:
        command = subprocess.Popen([sys.executable, "-m", "service.keys", "--wait", "60", "add", "late"], cwd=REPO,
                                   env=keys_env(store_url=url), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        time.sleep(3)
        assert command.poll() is None
    finally:
        postgres.start()
    out, err = command.communicate(timeout=60)
    assert command.returncode == 0, err
    assert err.startswith("waiting for the store (") and err.count("waiting") == 1, err
    assert postgres.psql("SELECT name FROM api_keys", database="late").split() == ["late"] and out.strip()
