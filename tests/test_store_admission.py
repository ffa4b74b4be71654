"""Admission in batches (service.worker.access over service.store.batches) on SQLite and on PostgreSQL: what a
batch answers each request, and exact limits when several workers admit many requests at once."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from types import SimpleNamespace

from service.metrics import Metrics
from service.settings import Settings
from service.store import Store, StoreUnavailable
from service.store.at_once import take_all
from service.store.keys import Limits, add_key, find_key, revoke, usage
from service.store.limits import Limit, count, fixed_window, month_window
from service.worker.access import HELD, Access, Asked, Client, TooManyRequests
from service.worker.dependencies import once_admitted
from service.worker.errors import Forbidden, InvalidRequest


def access(store_url: str, **settings: object) -> Access:
    """A worker's access to the store at `store_url`: its own connection and batches' thread; windows of an
    hour, so that none ends during a test."""
    values = {"require_api_keys": True, "limit_window_s": 3600, **settings}
    return Access(Settings(**values), Store(store_url), Metrics())


def new_key(store_url: str, limits: Limits) -> tuple[int, str]:
    store = Store(store_url)
    with store.transaction() as session:
        row, key = add_key(session, "test", limits)
    store.close()
    return row.id, key


def admit_all(worker: Access, asked: list[Asked]) -> list[Client | Exception]:
    """`asked` asked of `worker` at once, as a worker's concurrent requests: each one's answer or exception."""

    async def all_at_once() -> list[Client | Exception]:
        return await asyncio.gather(*(worker.batches.ask(one) for one in asked), return_exceptions=True)

    return asyncio.run(all_at_once())


def test_a_batch_answers_each_request_its_own(store_url: str):
    """One batch: a key within its limits, one over them, an unknown key and none; one refusal takes nothing."""
    key_id, key = new_key(store_url, Limits(req_limit=2, monthly_char_limit=10))
    worker = access(store_url)
    batch = [Asked(key, "a", 4), Asked("nope", "a", 1), Asked(key, "a", 7), Asked(None, "a", 1), Asked(key, "a", 6),
             Asked(key, "a", 1)]
    worker.store.ready()
    with worker.store.engine.connect() as connection, connection.begin():
        answers = worker._admit(connection, batch)
    assert [type(a) for a in answers] == [Client, Forbidden, TooManyRequests, Forbidden, Client, TooManyRequests]
    assert str(answers[2]).endswith("10 characters per month") and str(answers[5]).endswith("2 requests per minute")
    with worker.store.transaction() as session:
        assert [(u.requests, u.characters) for u in usage(session, key_id, datetime.now(UTC).date())] == [(2, 10)]
        now = time.time()
        assert count(session, f"key:{key_id}", Limit("chars", 10, month_window(now))) == 10
        assert count(session, f"key:{key_id}", Limit("minute", 2, fixed_window(now, 3600))) == 2
    worker.store.close()


def test_a_batch_at_once_is_taken_whole_or_changes_nothing(store_url: str):
    """service.store.at_once: a batch that fits is counted, in usage and counters; one over a limit (alone, in a
    window not yet counted, or over what was counted), or of a revoked key, changes nothing (the batch's full
    transaction then says who is refused)."""
    key_id, key = new_key(store_url, Limits(req_limit=3, monthly_char_limit=10))
    store = Store(store_url)
    now = time.time()
    minute, chars = Limit("minute", 3, fixed_window(now, 3600)), Limit("chars", 10, month_window(now))

    def attempt(requests: int, characters: int) -> bool:
        with store.engine.connect() as connection:
            wanted = [(minute, requests), (chars, characters)]
            return take_all(connection, {key_id: (requests, characters)}, [(f"key:{key_id}", key_id, wanted)])

    def counted() -> tuple[list[tuple[int, int]], int, int]:
        with store.transaction() as session:
            used = [(u.requests, u.characters) for u in usage(session, key_id, datetime.now(UTC).date())]
            return used, count(session, f"key:{key_id}", minute), count(session, f"key:{key_id}", chars)

    assert not attempt(1, 11) and counted() == ([], 0, 0)  # over the characters' limit alone, in a new month
    assert not attempt(4, 4) and counted() == ([], 0, 0)  # more requests than a new window's limit
    assert attempt(2, 8) and counted() == ([(2, 8)], 2, 8)
    assert not attempt(1, 5) and counted() == ([(2, 8)], 2, 8)  # over the characters' limit with what was counted
    with store.transaction() as session:
        revoke(session, find_key(session, key))
    assert not attempt(1, 1) and counted() == ([(2, 8)], 2, 8)
    store.close()


def test_a_request_over_a_limit_alone_is_refused_in_a_new_window(store_url: str):
    """A key's first request of the month with more characters than its monthly limit is refused, once the worker
    trusts the key (each batch then tries at once first), and takes nothing from its other limits."""
    key_id, key = new_key(store_url, Limits(req_limit=2, monthly_char_limit=10))
    worker = access(store_url)
    worker.store.ready()
    with worker.store.engine.connect() as connection, connection.begin():
        worker.known(connection, {key}, time.time())  # read and trusted, as after an earlier request
    assert isinstance(admit_all(worker, [Asked(key, "a", 11)])[0], TooManyRequests)
    assert [type(a) for a in admit_all(worker, [Asked(key, "a", 10)] * 2)] == [Client, TooManyRequests]
    with worker.store.transaction() as session:
        assert [(u.requests, u.characters) for u in usage(session, key_id, datetime.now(UTC).date())] == [(1, 10)]
        assert count(session, f"key:{key_id}", Limit("minute", 2, fixed_window(time.time(), 3600))) == 1
    worker.close()
    worker.store.close()


def test_workers_admitting_at_once_accept_exactly_the_limit_and_count_it_once(store_url: str):
    """4 workers, each with 60 requests at once of one key limited to 37 a window: 37 admitted in all, 37 counted
    in its usage; the rest refused."""
    key_id, key = new_key(store_url, Limits(req_limit=37, daily_req_limit=10**6, monthly_char_limit=10**6))
    workers = [access(store_url) for _ in range(4)]
    workers[0].store.ready()
    with ThreadPoolExecutor(4) as pool:
        answers = [a for some in pool.map(lambda w: admit_all(w, [Asked(key, "a", 3)] * 60), workers) for a in some]
    assert sum(isinstance(a, Client) for a in answers) == 37
    assert sum(isinstance(a, TooManyRequests) for a in answers) == 240 - 37
    with workers[0].store.transaction() as session:
        assert [(u.requests, u.characters) for u in usage(session, key_id, datetime.now(UTC).date())] == [(37, 111)]
    for worker in workers:
        worker.close()
        worker.store.close()


def test_a_key_revoked_elsewhere_is_refused_at_once_though_the_worker_knows_it(store_url: str):
    key_id, key = new_key(store_url, Limits())
    worker = access(store_url)
    assert isinstance(admit_all(worker, [Asked(key, "a", 1)])[0], Client)  # the worker now knows the key
    elsewhere = Store(store_url)
    with elsewhere.transaction() as session:
        revoke(session, find_key(session, key))
    refused = admit_all(worker, [Asked(key, "a", 1)])[0]
    assert isinstance(refused, Forbidden) and str(refused) == "API key revoked"
    with elsewhere.transaction() as session:
        assert [u.requests for u in usage(session, key_id, datetime.now(UTC).date())] == [1]
    worker.close()
    worker.store.close()
    elsewhere.close()


def test_anonymous_clients_are_limited_by_address(store_url: str):
    worker = access(store_url, require_api_keys=False, anonymous_req_limit=2)
    answers = admit_all(worker, [Asked(None, "10.0.0.1", 1)] * 3 + [Asked(None, "10.0.0.2", 1)])
    assert sorted(type(a).__name__ for a in answers[:3]) == ["Client", "Client", "TooManyRequests"]
    assert isinstance(answers[3], Client) and answers[3].owner == "ip:10.0.0.2"
    worker.close()
    worker.store.close()


def test_an_unreachable_store_fails_the_batch_at_once():
    worker = access("postgresql+psycopg://postgres@127.0.0.1:1/nothing")
    started = time.monotonic()
    answers = admit_all(worker, [Asked("k", "a", 1)] * 3)
    assert all(isinstance(a, StoreUnavailable) for a in answers)
    assert time.monotonic() - started < 5
    worker.close()




# --- early admissions: the work starts beside the admission, the answer waits for it ---------------------------


def request_from(where: str) -> SimpleNamespace:
    return SimpleNamespace(client=SimpleNamespace(host=where))


async def outcome(admission: asyncio.Future) -> object:
    """An admission's client, or its refusal."""
    return (await asyncio.gather(admission, return_exceptions=True))[0]


def test_only_a_subject_whose_last_admission_held_starts_early(store_url: str):
    """A key's first request waits for its admission; once one held, the next starts early, but not two at once;
    after a refusal (over its limit, or revoked) it waits again."""
    key_id, key = new_key(store_url, Limits(req_limit=3))
    worker = access(store_url)

    async def run() -> list[tuple[bool, type]]:
        seen = []
        for _ in range(2):
            admission, early = worker.start(request_from("a"), key, 1)
            seen.append((early, type(await admission)))
        first, early_one = worker.start(request_from("a"), key, 1)
        second, early_two = worker.start(request_from("a"), key, 1)  # the first still under way
        seen += [(early_one, type(await first)), (early_two, type(await outcome(second)))]
        admission, early = worker.start(request_from("a"), key, 1)  # after the refusal
        seen.append((early, type(await outcome(admission))))
        return seen

    seen = asyncio.run(run())
    assert seen[:3] == [(False, Client), (True, Client), (True, Client)]
    assert seen[3] == (False, TooManyRequests)  # the fourth request of the minute: refused
    assert seen[4] == (False, TooManyRequests)
    worker.close()


def test_keys_off_a_request_starts_early_without_the_store():
    worker = Access(Settings(), store=None, metrics=Metrics())  # keys and limits off: the store is never asked

    async def run() -> tuple[Client, bool]:
        admission, early = worker.start(request_from("10.0.0.1"), None, 5)
        return await admission, early

    assert asyncio.run(run()) == (Client("ip:10.0.0.1"), True)


def test_the_subjects_remembered_are_bounded(store_url: str):
    worker = access(store_url, require_api_keys=False, anonymous_req_limit=10**6)

    async def run() -> None:
        for i in range(HELD + 10):
            admission, _ = worker.start(request_from(f"10.0.{i // 250}.{i % 250}"), None, 1)
            await admission

    asyncio.run(run())
    assert len(worker.held) == HELD and "ip:10.0.0.0" not in worker.held
    worker.close()


async def refused_after(seconds: float) -> Client:
    await asyncio.sleep(seconds)
    raise TooManyRequests(Limit("minute", 1, fixed_window(time.time(), 60)), time.time())


async def held_after(seconds: float) -> Client:
    await asyncio.sleep(seconds)
    return Client("ip:a")


def answered(admission, work, linger: float = 0.0) -> object:
    """once_admitted's answer (or exception) for an admission and a work, as coroutines; the loop runs on for
    `linger` seconds after it."""

    async def run() -> object:
        request = SimpleNamespace(state=SimpleNamespace(admission=asyncio.ensure_future(admission)))
        try:
            return await once_admitted(request, lambda: work)
        except Exception as error:
            return error
        finally:
            await asyncio.sleep(linger)

    return asyncio.run(run())


def test_a_refusal_cancels_the_work_and_is_the_answer():
    finished = []

    async def work() -> str:
        await asyncio.sleep(0.5)
        finished.append(True)
        return "translated"

    assert isinstance(answered(refused_after(0.01), work(), linger=0.7), TooManyRequests) and not finished


def test_a_refusal_is_the_answer_in_place_of_the_works_error():
    async def invalid() -> str:
        raise InvalidRequest("no such language")

    assert isinstance(answered(refused_after(0.05), invalid()), TooManyRequests)
    assert isinstance(answered(held_after(0.05), invalid()), InvalidRequest)


def test_the_answer_waits_for_an_admission_under_way():
    async def quick() -> str:
        return "translated"

    started = time.perf_counter()
    assert answered(held_after(0.2), quick()) == "translated" and time.perf_counter() - started >= 0.2


def test_a_refusal_settled_before_the_work_starts_is_the_answer():
    ran = []

    async def work() -> str:
        ran.append(True)
        return "translated"

    async def run() -> object:
        admission = asyncio.ensure_future(refused_after(0))
        await asyncio.sleep(0.01)  # settled before once_admitted is asked
        request = SimpleNamespace(state=SimpleNamespace(admission=admission))
        try:
            return await once_admitted(request, work)
        except TooManyRequests as refused:
            return refused

    assert isinstance(asyncio.run(run()), TooManyRequests) and not ran
