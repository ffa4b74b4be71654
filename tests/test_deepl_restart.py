"""DeepL document jobs survive a restart and a worker's death: `python -m service` with the shipped models and two
HTTP workers translates a document through /v2/document; the service is stopped in the middle of it and started
again on the same data folder (the job resumes at start), or the worker translating it is killed (another takes it up
once its lease has run out). Either way the job ends done and its translation is whole: the same as /translate_file
gives for the same file."""

from __future__ import annotations

import itertools
import os
import signal
import sqlite3
import time
from pathlib import Path

import httpx
from client import TIMEOUT

from service.launch import REPO, RunningService, running_service

KEY = "restart-key"
AUTH = {"Authorization": f"DeepL-Auth-Key {KEY}"}
LEASE_S = 2
SUBJECTS = ["A man", "A young woman", "Two dogs", "An old man", "A little girl", "Three children", "A worker",
            "A group of people"]
ACTIONS = ["is walking", "is sitting", "is playing", "is running", "is standing"]
PLACES = ["in the park", "on the beach", "near a red car", "in front of a building", "on a busy street"]
TIMES = ["", " at night", " in the morning"]
# distinct captions, one paragraph each: as many as keep the job busy for some seconds
STORY = "\n\n".join(f"{s} {a} {p}{t}." for s, a, p, t in itertools.product(SUBJECTS, ACTIONS, PLACES, TIMES)) + "\n"


def start(folder: Path, name: str):
    return running_service(REPO / "models", folder / f"{name}.log", threads=1, http_workers=2, log_level="warning",
                           api_keys=KEY, data_dir=folder / "data", document_lease_s=LEASE_S)


def post(service: RunningService, path: str, **request: object) -> httpx.Response:
    response = httpx.post(service.url + path, headers=AUTH, timeout=TIMEOUT, **request)
    assert response.status_code == 200, response.text
    return response


def upload(service: RunningService) -> dict:
    return post(service, "/v2/document", data={"source_lang": "EN", "target_lang": "DE"},
                files={"file": ("story.txt", STORY.encode())}).json()


def status(service: RunningService, job: dict) -> dict:
    return post(service, f"/v2/document/{job['document_id']}", data={"document_key": job["document_key"]}).json()


def midway(service: RunningService, job: dict) -> None:
    """Wait until the job is partly translated: translating, with seconds_remaining reported."""
    deadline = time.monotonic() + 120
    while (now := status(service, job)).get("seconds_remaining") in (None, 0):
        assert now["status"] in ("queued", "translating") and time.monotonic() < deadline, now
        time.sleep(0.05)


def translated(service: RunningService, job: dict) -> str:
    """The job's result once done."""
    deadline = time.monotonic() + 300
    while (now := status(service, job))["status"] != "done":
        assert now["status"] in ("queued", "translating") and time.monotonic() < deadline, now
        time.sleep(0.2)
    assert now["billed_characters"] == sum(len(line) for line in STORY.splitlines())  # counted once
    return post(service, f"/v2/document/{job['document_id']}/result",
                data={"document_key": job["document_key"]}).text


def whole(service: RunningService, translation: str) -> None:
    """The translation is /translate_file's of the same file: every paragraph translated, none lost."""
    answer = httpx.post(service.url + "/translate_file", data={"source": "en", "target": "de", "api_key": KEY},
                        files={"file": ("story.txt", STORY.encode())}, timeout=TIMEOUT)
    assert answer.status_code == 200, answer.text
    expected = httpx.get(answer.json()["translatedFileUrl"], params={"api_key": KEY}, timeout=TIMEOUT).text
    assert len(translation.split("\n\n")) == len(STORY.split("\n\n"))
    assert translation == expected


def stored(folder: Path, job: dict) -> tuple[str, str | None]:
    """The job's status and holder (HTTP worker's pid:id) in the store (service.worker.deepl.documents)."""
    with sqlite3.connect(folder / "data" / "translator.db") as db:
        return db.execute("SELECT status, holder FROM document_jobs WHERE id = ?", (job["document_id"],)).fetchone()


def test_a_job_resumes_when_the_service_starts_again(tmp_path: Path):
    folder = tmp_path
    with start(folder, "before") as service:
        job = upload(service)
        midway(service, job)
        assert service.stop() == 0  # SIGTERM: the service drains and lets the job go
    assert stored(folder, job) == ("queued", None)
    with start(folder, "after") as service:
        whole(service, translated(service, job))


def test_a_job_whose_worker_dies_is_taken_up_by_another(tmp_path: Path):
    folder = tmp_path
    with start(folder, "killed") as service:
        job = upload(service)
        midway(service, job)
        status, holder = stored(folder, job)
        dead = int(holder.split(":")[0])
        assert status == "translating" and dead != service.process.pid
        os.kill(dead, signal.SIGKILL)  # an HTTP worker: the service replaces it
        text = translated(service, job)
        whole(service, text)
