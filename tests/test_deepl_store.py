"""DeepL's glossaries and document jobs in the store (service.worker.deepl.glossaries and .documents), on SQLite and
on PostgreSQL: what one worker keeps another sees, per owner; a job is held by one worker at a time, claimed by
exactly one when its lease has run out or it was let go, and its result is given once."""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from service.store import Store
from service.worker.deepl.documents import DocumentError, DocumentJobs
from service.worker.deepl.glossaries import Glossaries, GlossaryNotFound
from service.worker.deepl.glossary import Dictionary, GlossaryError

EN_DE = Dictionary("en", "de", {"dog": "Köter", "the park": "der Stadtpark"})
DE_EN = Dictionary("de", "en", {"Hund": "hound"})


@pytest.fixture
def stores(store_url: str):
    """Two stores on one database: two workers, or two replicas."""
    made = [Store(store_url), Store(store_url)]
    yield made
    for store in made:
        store.close()


def test_a_glossary_made_through_one_store_is_seen_through_another_by_its_owner_alone(stores: list[Store]):
    one, other = Glossaries(stores[0]), Glossaries(stores[1])
    made = one.create("key:1", "pets", [EN_DE, DE_EN], ignore_case=True)
    seen = other.get("key:1", made.glossary_id)
    assert seen == made and seen.dictionaries == [EN_DE, DE_EN] and seen.ignore_case
    assert seen.creation_time.endswith("Z")
    assert [g.glossary_id for g in other.list("key:1")] == [made.glossary_id]
    assert other.list("key:2") == []
    with pytest.raises(GlossaryNotFound):
        other.get("key:2", made.glossary_id)
    with pytest.raises(GlossaryNotFound):
        other.delete("key:2", made.glossary_id)
    other.delete("key:1", made.glossary_id)
    with pytest.raises(GlossaryNotFound):
        one.get("key:1", made.glossary_id)


def test_a_change_is_whole_or_nothing(stores: list[Store]):
    glossaries = Glossaries(stores[0])
    made = glossaries.create("", "g", [EN_DE], ignore_case=False)

    def renamed(glossary):
        return glossary.__class__(glossary.glossary_id, "renamed", [DE_EN], glossary.creation_time, False)

    assert glossaries.change("", made.glossary_id, renamed).name == "renamed"
    assert Glossaries(stores[1]).get("", made.glossary_id).dictionaries == [DE_EN]

    def refused(glossary):
        raise GlossaryError("no")

    with pytest.raises(GlossaryError):
        glossaries.change("", made.glossary_id, refused)
    assert glossaries.get("", made.glossary_id).name == "renamed"
    with pytest.raises(GlossaryNotFound):
        glossaries.change("", "no-such-id", renamed)


def test_changes_at_once_lose_none(stores: list[Store]):
    """Eight workers each add a term to one glossary at once: every term is kept."""
    made = Glossaries(stores[0]).create("", "g", [Dictionary("en", "de", {"a": "A"})], ignore_case=False)

    def add(i: int) -> None:
        def with_term(glossary):
            entries = {**glossary.dictionaries[0].entries, f"term{i}": f"Term{i}"}
            return glossary.__class__(glossary.glossary_id, glossary.name, [Dictionary("en", "de", entries)],
                                      glossary.creation_time, False)

        Glossaries(stores[i % 2]).change("", made.glossary_id, with_term)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(add, range(8)))
    assert len(Glossaries(stores[0]).get("", made.glossary_id).dictionaries[0].entries) == 9


RETENTION_S = 3600


def jobs_of(stores: list[Store], folder: Path, lease_s: float = 60) -> list[DocumentJobs]:
    """One worker's DocumentJobs per store, sharing the data folder."""
    return [DocumentJobs(folder, store, lease_s, RETENTION_S) for store in stores]


def test_a_job_is_seen_by_every_worker_and_its_result_given_once(stores: list[Store], tmp_path: Path):
    mine, other = jobs_of(stores, tmp_path)
    job, key = mine.create("key:1", 1, "a.txt", "en", "de", b"A dog.")
    assert other.get("key:1", job.document_id, key).status == "queued"
    for owner, document_id, document_key in (("key:2", job.document_id, key), ("key:1", job.document_id, "0" * 64),
                                             ("key:1", "nothing", key)):
        with pytest.raises(DocumentError, match="not found"):
            other.get(owner, document_id, document_key)
    assert key not in str(other.get("key:1", job.document_id, key))  # kept as its hash alone
    with pytest.raises(DocumentError, match="its status is queued"):
        other.take_result("key:1", job.document_id, key)
    assert not other.finish(job, b"Ein Hund.")  # another worker holds it
    assert sorted(p.name for p in (tmp_path / job.document_id).iterdir()) == ["source"]
    assert mine.translating(job) and mine.finish(job, b"Ein Hund.")
    assert not (tmp_path / job.document_id / "source").exists()
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda jobs: try_take(jobs, job.document_id, key), [mine, other] * 2))
    assert Counter(answers) == {b"Ein Hund.": 1, "already downloaded": 3}
    assert not (tmp_path / job.document_id).exists()


def try_take(jobs: DocumentJobs, document_id: str, key: str) -> bytes | str:
    try:
        return jobs.take_result("key:1", document_id, key)[1]
    except DocumentError as error:
        return "already downloaded" if "already downloaded" in error.message else error.message


def test_characters_are_billed_once(stores: list[Store], tmp_path: Path):
    mine, _ = jobs_of(stores, tmp_path)
    job, _ = mine.create("", None, "a.txt", "en", "de", b"A dog.")
    assert mine.bill(job, 6) and not mine.bill(job, 6)


def test_a_job_whose_lease_ran_out_is_claimed_by_exactly_one_worker(stores: list[Store], tmp_path: Path):
    workers = [DocumentJobs(tmp_path, stores[i % 2], 60, RETENTION_S) for i in range(6)]
    for store in stores:
        store.ready()
    dead = DocumentJobs(tmp_path, stores[0], 2, RETENTION_S)
    job, _ = dead.create("", None, "a.txt", "en", "de", b"A dog.")
    assert all(worker.claim() == [] for worker in workers)  # the lease holds
    time.sleep(2.1)
    with ThreadPoolExecutor(6) as pool:
        claimed = list(pool.map(DocumentJobs.claim, workers))
    winners = [worker for worker, jobs in zip(workers, claimed) if jobs]
    assert len(winners) == 1 and [j.document_id for j in claimed[workers.index(winners[0])]] == [job.document_id]
    assert not dead.translating(job) and not dead.finish(job, b"late")  # the dead worker's lease is gone
    assert winners[0].renew({job.document_id: 3}) == {job.document_id}
    assert dead.renew({}) == set()


def test_a_job_let_go_is_claimed_at_once_and_a_finished_one_never(stores: list[Store], tmp_path: Path):
    stopping, starting = jobs_of(stores, tmp_path)
    job, key = stopping.create("", None, "a.txt", "en", "de", b"A dog.")
    done, _ = stopping.create("", None, "b.txt", "en", "de", b"A cat.")
    failed, _ = stopping.create("", None, "c.txt", "en", "de", b"A cow.")
    assert stopping.translating(job) and stopping.finish(done, b"Eine Katze.")
    stopping.fail(failed, "broken")
    stopping.release([job.document_id, done.document_id, failed.document_id])
    assert starting.get("", job.document_id, key).status == "queued"
    assert [j.document_id for j in starting.claim()] == [job.document_id]
    assert starting.source(job) == b"A dog."
    assert starting.claim() == []


def test_nothing_is_left_of_a_job_the_store_refuses(tmp_path: Path):
    jobs = DocumentJobs(tmp_path / "documents", Store("postgresql://nobody@127.0.0.1:1/none"), 60, RETENTION_S)
    with pytest.raises(Exception, match="unavailable|refused|connect"):
        jobs.create("", None, "a.txt", "en", "de", b"A dog.")
    assert list((tmp_path / "documents").iterdir()) == []


def test_ended_jobs_are_forgotten_after_the_retention_and_unfinished_ones_never(stores: list[Store], tmp_path: Path):
    worker = DocumentJobs(tmp_path, stores[0], 60, retention_s=1)
    done, key = worker.create("", None, "a.txt", "en", "de", b"A dog.")
    running, running_key = worker.create("", None, "b.txt", "en", "de", b"A cat.")
    assert worker.finish(done, b"Ein Hund.")
    worker.sweep()
    assert worker.get("", done.document_id, key).status == "done"  # within its retention
    time.sleep(1.1)
    worker.sweep()
    with pytest.raises(DocumentError, match="not found"):
        worker.get("", done.document_id, key)
    assert not (tmp_path / done.document_id).exists()
    assert worker.get("", running.document_id, running_key).status == "queued"
    assert worker.source(running) == b"A cat."
