"""What requests ask of the store on their path, run in batches by one thread of the process: whatever was asked
while the last batch ran goes into the next, in one transaction (one commit for all) on one connection that the
thread keeps open. A request then costs the store its own statements alone, and the event loop awaits its answer
without a thread of its own.

    batches = Batches(store, run)       # run(connection, items) -> an answer or a RequestError for each item
    batches = Batches(store, run, at_once)  # at_once(connection, items) -> the answers, or None: run's turn
    answer = await batches.ask(item)    # StoreUnavailable for all of a batch the store fails
    future = batches.submit(item)       # the same, as a future of the running event loop
    batches.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from service.store.database import Store, StoreUnavailable, describe

Item = TypeVar("Item")
Answer = TypeVar("Answer")
MOST = 64  # items in one batch: a batch holds its rows' locks until it commits
Asked = tuple[Item, asyncio.Future]
Run = Callable[[Connection, list[Item]], list[Answer | Exception]]  # a batch's answers, in its items' order
Attempt = Callable[[Connection, list[Item]], list[Answer | Exception] | None]  # or None: not answered


class Batches(Generic[Item, Answer]):
    def __init__(self, store: Store, run: Run[Item, Answer], at_once: Attempt[Item, Answer] | None = None):
        """`run` answers a batch's items in its transaction, in their order: an answer, or the exception that item
        raises (its own: the others' stand); whatever it raises fails the whole batch, which is rolled back.
        `at_once`, if given, is asked first, on the connection outside any transaction of SQLAlchemy's (it runs its
        own, on the driver's connection: service.store.driver): the answers, or None when the batch needs `run`'s
        transaction."""
        self.store = store
        self.run = run
        self.at_once = at_once
        self.asked: queue.SimpleQueue[Asked | None] = queue.SimpleQueue()
        self.connection: Connection | None = None
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    async def ask(self, item: Item) -> Answer:
        return await self.submit(item)

    def submit(self, item: Item) -> asyncio.Future[Answer]:
        future = asyncio.get_running_loop().create_future()
        self.asked.put((item, future))
        self.started()
        return future

    def started(self) -> None:
        if self.thread is None:
            with self.lock:
                if self.thread is None:
                    self.thread = threading.Thread(target=self.serve, name="store-batches", daemon=True)
                    self.thread.start()

    def serve(self) -> None:
        """Batch after batch until close()."""
        while (first := self.asked.get()) is not None:
            batch = [first]
            while len(batch) < MOST and (more := self.next_waiting()) is not None:
                batch.append(more)
            try:
                answers = self.transaction([item for item, _ in batch])
            except Exception as error:  # the batch's requests answer it
                answers = [error] * len(batch)
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future, object]]] = {}
            for (_, future), answer in zip(batch, answers, strict=True):
                by_loop.setdefault(future.get_loop(), []).append((future, answer))
            for loop, settled in by_loop.items():  # one wake-up of each loop
                with contextlib.suppress(RuntimeError):  # the loop closed: no one waits for them
                    loop.call_soon_threadsafe(settle, settled)
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    def next_waiting(self) -> Asked | None:
        """The next item already waiting, if any (close()'s None is left for serve())."""
        try:
            asked = self.asked.get_nowait()
        except queue.Empty:
            return None
        if asked is None:
            self.asked.put(None)
        return asked

    def transaction(self, items: list[Item]) -> list[Answer | Exception]:
        self.store.ready()
        try:
            if self.connection is None:
                self.connection = self.store.engine.connect()
            if self.at_once is not None and (answers := self.at_once(self.connection, items)) is not None:
                return answers
            with self.connection.begin():
                return self.run(self.connection, items)
        except (DBAPIError, self.store.engine.dialect.loaded_dbapi.Error) as error:  # SQLAlchemy's, the driver's
            if self.connection is not None:  # the next batch connects anew: the server may have restarted
                self.connection.invalidate()
                self.connection = None
            raise StoreUnavailable(describe(error)) from error

    def close(self) -> None:
        """Answer what was asked, then stop the thread and close its connection."""
        if self.thread is not None:
            self.asked.put(None)
            self.thread.join()
            self.thread = None


def settle(settled: list[tuple[asyncio.Future, object]]) -> None:
    """Each future's answer, unless its request was cancelled meanwhile."""
    for future, answer in settled:
        if future.cancelled():
            continue
        if isinstance(answer, BaseException):
            future.set_exception(answer)
        else:
            future.set_result(answer)
