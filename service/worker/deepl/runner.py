"""The document jobs an HTTP worker translates in the background (service.worker.deepl.documents keeps them): the
ones uploaded to it, and those it claims when their worker stopped or died (keep()). A job is translated as
/translate_file translates a file (service.worker.documents.translate), as the engine's bulk work
(Pipeline.translate_document), from its upload, with the terms of its glossary if it names one; its status ends
done or error. A job interrupted by this worker's stop is let go, not failed: another worker, or this service once
restarted, translates it anew.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import PurePath

from service.protocol import EngineError, EngineGone, ShuttingDown
from service.store import StoreUnavailable
from service.worker.access import Access
from service.worker.deepl.documents import DocumentJobs, Job
from service.worker.deepl.glossaries import Glossaries, matcher
from service.worker.documents import Limits
from service.worker.documents.translate import translate_file
from service.worker.errors import ENGINE_ANSWERS, RequestError
from service.worker.pipeline import Options, Pipeline

log = logging.getLogger(__name__)
INTERRUPTED = (ShuttingDown, EngineGone)  # the engine stops: the job is let go, to be translated anew
RENEWALS_PER_LEASE = 6  # how often keep() renews the leases (and looks for jobs to claim) in one lease


class DocumentRunner:
    """This worker's running jobs (see the module's docstring)."""

    def __init__(self, jobs: DocumentJobs, glossaries: Glossaries, access: Access, lease_s: float):
        self.jobs = jobs
        self.glossaries = glossaries
        self.access = access
        self.every_s = lease_s / RENEWALS_PER_LEASE
        self.running: dict[str, asyncio.Task] = {}  # by document_id (a reference keeps each task alive)
        self.remaining: dict[str, int | None] = {}  # seconds_remaining of each running job, for renew()
        self.keeper: asyncio.Task | None = None
        self.stopping = asyncio.Event()
        self.billing: set[asyncio.Task] = set()  # bills under way, which a stop waits for (billed())

    def begin(self, p: Pipeline) -> None:
        """Keep the jobs from now on (keep()), once the worker serves."""
        self.keeper = asyncio.create_task(self.keep(p), name="document jobs")

    def start(self, p: Pipeline, job: Job) -> None:
        """Translate the job (held by this worker) in the background."""
        task = asyncio.create_task(self.translate(p, job), name=f"document {job.document_id}")
        self.running[job.document_id] = task
        task.add_done_callback(lambda _: self.forget(job.document_id))

    def forget(self, document_id: str) -> None:
        self.running.pop(document_id, None)
        self.remaining.pop(document_id, None)

    async def keep(self, p: Pipeline) -> None:
        """For as long as the worker serves: renew the leases of its jobs (a job whose lease another worker took
        meanwhile is dropped here), claim the jobs that no worker holds, first at once (those let go when the
        service stopped), and forget those past their retention; until the worker stops, each round whole (a
        cancelled round could leave a job claimed in the store that no task translates)."""
        store_down = False
        while not self.stopping.is_set():
            try:
                held = await asyncio.to_thread(self.jobs.renew, dict(self.remaining))
                for document_id in set(self.running) - held:
                    log.warning("document %s: its lease was taken by another worker", document_id)
                    self.running[document_id].cancel()
                for job in await asyncio.to_thread(self.jobs.claim):
                    log.info("document %s: taken up", job.document_id)
                    self.start(p, job)
                await asyncio.to_thread(self.jobs.sweep)
                store_down = False
            except StoreUnavailable as error:
                if not store_down:  # once an outage
                    log.error("document jobs: the store is unavailable (%s)", error)
                store_down = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.every_s)

    async def stop(self) -> None:
        """Stop keeping the jobs once the keeper's round ends; cancel the running ones and let them go (the worker
        stops)."""
        self.stopping.set()
        if self.keeper:
            await asyncio.gather(self.keeper, return_exceptions=True)
        document_ids, tasks = list(self.running), list(self.running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*self.billing, return_exceptions=True)
        await self.let_go(document_ids)

    async def let_go(self, document_ids: list[str]) -> None:
        try:
            await asyncio.to_thread(self.jobs.release, document_ids)
        except StoreUnavailable as error:  # their leases run out instead
            log.error("document jobs: the store is unavailable (%s)", error)

    async def billed(self, p: Pipeline, job: Job, characters: int) -> None:
        """The job's characters recorded once (DocumentJobs.bill), and then counted in its key's usage, even when the
        job is cancelled meanwhile: a stop waits for it, since characters recorded but not counted would never be."""
        billing = asyncio.create_task(self.bill(p, job, characters))
        self.billing.add(billing)
        billing.add_done_callback(self.billing.discard)
        await asyncio.shield(billing)

    async def bill(self, p: Pipeline, job: Job, characters: int) -> None:
        if await asyncio.to_thread(self.jobs.bill, job, characters):
            await self.access.count_characters(await asyncio.to_thread(self.jobs.client, job), characters)
            p.metrics.billed_characters.inc(characters)

    async def translate(self, p: Pipeline, job: Job) -> None:
        """Translate the job's upload, reporting its progress; its status ends done or error, or it is let go when
        the engine stops. Its characters count once in its key's usage and monthly limit
        (Access.count_characters)."""
        started = time.monotonic()
        if not await asyncio.to_thread(self.jobs.translating, job):
            return

        async def translate_texts(texts: list[str]) -> list[str]:
            billed, done = sum(map(len, texts)), 0

            def progress(translated: list[str]) -> None:
                """seconds_remaining: the time so far, for the share of characters left."""
                nonlocal done
                done += sum(map(len, translated))
                self.remaining[job.document_id] = round((time.monotonic() - started) * (billed - done) / max(done, 1))

            await self.billed(p, job, billed)
            return await p.translate_document(texts, job.source_lang, job.target_lang, progress, options)

        try:
            options = Options()
            if job.glossary_id:  # as it is now: it may have changed, or gone, since the upload
                options = Options(terms=await asyncio.to_thread(matcher, self.glossaries, job.owner, job.glossary_id,
                                                                job.source_lang, job.target_lang))
            suffix = PurePath(job.name).suffix.lower()
            limits = Limits.of(p.settings)
            source = await asyncio.to_thread(self.jobs.source, job)
            result = await translate_file(source, suffix, limits, translate_texts, job.target_lang, turn=p.documents)
            if not await asyncio.to_thread(self.jobs.finish, job, result):
                log.warning("document %s: translated, but another worker holds it now", job.document_id)
        except INTERRUPTED:
            await self.let_go([job.document_id])
        except (RequestError, EngineError) as error:
            message = error.message if isinstance(error, RequestError) else ENGINE_ANSWERS[type(error)][1]
            await asyncio.to_thread(self.jobs.fail, job, message)
        except StoreUnavailable as error:  # its lease runs out, and a worker takes it up again
            log.error("document %s: the store is unavailable (%s)", job.document_id, error)
        except Exception:
            log.exception("document %s failed", job.document_id)
            await asyncio.to_thread(self.jobs.fail, job, "internal error")
