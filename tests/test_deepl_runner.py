"""The document runner lets go of every job it holds when its worker stops, even one claimed as the stop began, and
the characters of a job billed as it stopped are counted."""

import asyncio
import threading
from types import SimpleNamespace

from service.worker.deepl.runner import DocumentRunner


class SlowClaims:
    """Document jobs whose claim() waits for `claiming` to be set: it takes one job that no task translates yet."""

    def __init__(self):
        self.claiming, self.claim_began = threading.Event(), threading.Event()
        self.released: list[str] = []

    def renew(self, remaining: dict) -> set[str]:
        return set()

    def claim(self) -> list:
        self.claim_began.set()
        assert self.claiming.wait(10)
        return [SimpleNamespace(document_id="taken-up")]

    def sweep(self) -> None:
        pass

    def release(self, document_ids: list[str]) -> None:
        self.released.extend(document_ids)


def test_a_job_claimed_as_the_worker_stops_is_let_go():
    jobs = SlowClaims()

    async def scenario() -> None:
        runner = DocumentRunner(jobs, glossaries=None, access=None, lease_s=60)
        runner.translate = lambda p, job: asyncio.sleep(3600)  # a job translating until cancelled
        runner.begin(p=None)
        await asyncio.to_thread(jobs.claim_began.wait, 10)
        stopped = asyncio.create_task(runner.stop())
        await asyncio.sleep(0.1)  # the stop began while the claim is under way
        jobs.claiming.set()
        await asyncio.wait_for(stopped, 10)

    asyncio.run(scenario())
    assert jobs.released == ["taken-up"]


class SlowBills:
    """Document jobs whose bill() waits for `billing` to be set, and records the characters."""

    def __init__(self):
        self.billing, self.bill_began = threading.Event(), threading.Event()
        self.released: list[str] = []

    def bill(self, job, characters: int) -> bool:
        self.bill_began.set()
        assert self.billing.wait(10)
        return True

    def client(self, job) -> str:
        return "its key"

    def release(self, document_ids: list[str]) -> None:
        self.released.extend(document_ids)


class Usage:
    """Access's counting of a document's characters, recorded."""

    def __init__(self):
        self.counted: list[tuple[str, int]] = []

    async def count_characters(self, client: str, used: int) -> None:
        self.counted.append((client, used))


def test_characters_billed_as_the_worker_stops_are_counted():
    """A job cancelled by the stop while its bill is recorded: the stop waits, and the characters count."""
    jobs, usage = SlowBills(), Usage()
    metrics = SimpleNamespace(billed_characters=SimpleNamespace(inc=lambda n: None))

    async def scenario() -> None:
        runner = DocumentRunner(jobs, glossaries=None, access=usage, lease_s=60)
        job = SimpleNamespace(document_id="billed")
        translating = asyncio.create_task(runner.billed(SimpleNamespace(metrics=metrics), job, 1234))
        runner.running[job.document_id] = translating
        await asyncio.to_thread(jobs.bill_began.wait, 10)
        stopped = asyncio.create_task(runner.stop())
        await asyncio.sleep(0.1)  # the job is cancelled while its bill is being recorded
        assert translating.cancelled() and not stopped.done()
        jobs.billing.set()
        await asyncio.wait_for(stopped, 10)

    asyncio.run(scenario())
    assert usage.counted == [("its key", 1234)]
    assert jobs.released == ["billed"]
