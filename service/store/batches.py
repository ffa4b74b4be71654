"""What requests ask of the store on their path, run in batches by one thread of the process: whatever was asked
while the last batch ran goes into the next, in one transaction (one commit for all) on one connection that the
thread keeps open. A request then costs the store its own statements alone, and the event loop awaits its answer
without a thread of its own. What need not delay an answer (keys' usage: service.store.unrecorded) is written
after it, once no request has been asked for LATER_S (the event loop meanwhile takes its answers on without
waiting for the thread), or every LATER_EVERY batches, and at close.

    batches = Batches(store, run)       # run(connection, items) -> an answer or a RequestError for each item
    batches = Batches(store, run, at_once)  # at_once(connection, items) -> the answers, or None: run's turn
    batches = Batches(store, run, later=Unrecorded(usage_of))  # a committed batch's usage, recorded after
    answer = await batches.ask(item)    # StoreUnavailable for all of a batch the store fails
    batches.close()                     # answers what was asked, then records what is left
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from service.store.database import Store, StoreUnavailable, describe
from service.store.unrecorded import Unrecorded

log = logging.getLogger(__name__)
Item = TypeVar("Item")
Answer = TypeVar("Answer")
MOST = 64  # items in one batch: a batch holds its rows' locks until it commits
LATER_S = 0.001  # how long the thread waits for more requests before it writes what was left for later
LATER_EVERY = 16  # batches at most between two writes of what was left for later, however busy
RETRY_S = 1.0  # how long what was left for later waits to be tried again when the store failed it
CLOSE_TRIES = 3  # at close, tries of what was left for later, RETRY_S apart, before it is given up (logged)
Asked = tuple[Item, asyncio.Future]
Run = Callable[[Connection, list[Item]], list[Answer | Exception]]  # a batch's answers, in its items' order
Attempt = Callable[[Connection, list[Item]], list[Answer | Exception] | None]  # or None: not answered


class Batches(Generic[Item, Answer]):
    def __init__(self, store: Store, run: Run[Item, Answer], at_once: Attempt[Item, Answer] | None = None,
                 later: Unrecorded[Item, Answer] | None = None):
        """`run` answers a batch's items in its transaction, in their order: an answer, or the exception that item
        raises (its own: the others' stand); whatever it raises fails the whole batch, which is rolled back.
        `at_once`, if given, is asked first, on the connection in autocommit (each statement its own transaction):
        the answers, or None when the batch needs `run`'s transaction. `later` is told each committed batch, and
        records what it leaves after the answers."""
        self.store = store
        self.run = run
        self.at_once = at_once
        self.later = later
        self.behind = 0  # batches committed since `later` last recorded
        self.failing = False  # whether the store failed `later`'s last try
        self.asked: queue.SimpleQueue[Asked | None] = queue.SimpleQueue()
        self.connection: Connection | None = None
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    async def ask(self, item: Item) -> Answer:
        future = asyncio.get_running_loop().create_future()
        self.asked.put((item, future))
        self.started()
        return await future

    def started(self) -> None:
        if self.thread is None:
            with self.lock:
                if self.thread is None:
                    self.thread = threading.Thread(target=self.serve, name="store-batches", daemon=True)
                    self.thread.start()

    def serve(self) -> None:
        """Batch after batch until close(), what they leave for later recorded in between."""
        while (first := self.next_asked()) is not None:
            batch = [first]
            while len(batch) < MOST and (more := self.next_waiting()) is not None:
                batch.append(more)
            try:
                answers = self.transaction([item for item, _ in batch])
            except Exception as error:  # the batch's requests answer it
                answers = [error] * len(batch)
            for (_, future), answer in zip(batch, answers, strict=True):
                with contextlib.suppress(RuntimeError):  # its event loop closed: no one waits for it
                    future.get_loop().call_soon_threadsafe(settle, future, answer)
            if self.behind >= LATER_EVERY:
                self.catch_up()
        for _ in range(CLOSE_TRIES):
            if self.catch_up():
                break
            time.sleep(RETRY_S)
        else:
            log.error("Given up at close: usage the store failed to record, by key and day: %s",
                      self.later.used if self.later is not None else {})
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    def next_asked(self) -> Asked | None:
        """The next item asked (None: close()); meanwhile, what was left for later is recorded once none is asked
        for LATER_S (RETRY_S while the store fails it)."""
        while True:
            wait = None if self.later is None or not self.later.due() else RETRY_S if self.failing else LATER_S
            try:
                return self.asked.get(timeout=wait)
            except queue.Empty:
                self.catch_up()

    def next_waiting(self) -> Asked | None:
        """The next item already waiting, if any (close()'s None is left for serve())."""
        try:
            asked = self.asked.get_nowait()
        except queue.Empty:
            return None
        if asked is None:
            self.asked.put(None)
        return asked

    @contextlib.contextmanager
    def connected(self) -> Iterator[Connection]:
        """The thread's connection, connected anew after a failure (the server may have restarted);
        StoreUnavailable if the store fails what is done with it."""
        self.store.ready()
        try:
            if self.connection is None:
                self.connection = self.store.engine.connect()
            yield self.connection
        except (DBAPIError, self.store.engine.dialect.loaded_dbapi.Error) as error:  # SQLAlchemy's or the driver's
            if self.connection is not None:
                self.connection.invalidate()
                self.connection = None
            raise StoreUnavailable(describe(error)) from error

    def transaction(self, items: list[Item]) -> list[Answer | Exception]:
        with self.connected() as connection:
            answers = self.autocommitted(connection, items) if self.at_once is not None else None
            if answers is None:
                with connection.begin():
                    answers = self.run(connection, items)
        if self.later is not None:
            self.later.committed(items, answers)
            self.behind += 1
        return answers

    def catch_up(self) -> bool:
        """Record what committed batches left for later, if any: whether none is left (else it is kept for the
        next try)."""
        if self.later is None or not self.later.due():
            return True
        try:
            with self.connected() as connection:
                self.later.record(connection)
        except StoreUnavailable as error:
            log.warning("The store's usage waits to be recorded: %s", error)
            self.failing = True
            return False
        self.behind, self.failing = 0, False
        return True

    def autocommitted(self, connection: Connection, items: list[Item]) -> list[Answer | Exception] | None:
        """at_once's answers, the connection in autocommit meanwhile (one found lost is left to be replaced)."""
        connection.execution_options(isolation_level="AUTOCOMMIT")
        try:
            with connection.begin():  # SQLAlchemy's transaction alone: the server's are each statement's
                return self.at_once(connection, items)
        finally:
            if not connection.invalidated:
                connection.execution_options(isolation_level=connection.default_isolation_level)

    def close(self) -> None:
        """Answer what was asked, then stop the thread and close its connection."""
        if self.thread is not None:
            self.asked.put(None)
            self.thread.join()
            self.thread = None


def settle(future: asyncio.Future, answer: object) -> None:
    """`future`'s answer, unless its request was cancelled meanwhile."""
    if future.cancelled():
        return
    if isinstance(answer, BaseException):
        future.set_exception(answer)
    else:
        future.set_result(answer)
