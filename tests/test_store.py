"""The store (service.store) on SQLite and on PostgreSQL: migrations, keys, limits' counters, usage, files."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import inspect, select, text

from service.store import Store, StoreUnavailable
from service.store.keys import (
    IMPORTED,
    Limits,
    add_key,
    all_keys,
    find_key,
    last_uses,
    record_use,
    revoke,
    totals,
    usage,
)
from service.store.limits import Limit, Window, count, fixed_window, month_window, sweep, take, take_each
from service.store.tables import Counter, KeptFile
from service.worker.files import TranslatedFiles


@pytest.fixture
def store(store_url: str):
    store = Store(store_url)
    yield store
    store.close()


def test_instances_starting_at_once_migrate_once(store_url: str):
    """Four processes migrate one empty store at once: each waits for the one migrating, none fails."""
    code = f"from service.store import Store; s = Store({store_url!r}); s.ready(); s.close()"
    runs = [subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True) for _ in range(4)]
    errors = [run.communicate(timeout=120)[1] for run in runs]
    assert [run.returncode for run in runs] == [0] * 4, errors
    store = Store(store_url)
    with store.transaction() as session:
        assert session.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == ["0002"]
        assert {"api_keys", "usage", "counters", "files"} <= set(inspect(session.connection()).get_table_names())
    store.close()


def test_a_key_is_kept_as_its_hash_alone(store: Store):
    with store.transaction() as session:
        row, key = add_key(session, "alice", Limits(req_limit=5))
    with store.transaction() as session:
        stored = [tuple(map(str, r)) for r in session.execute(text("SELECT * FROM api_keys"))]
        assert not any(key in value for r in stored for value in r)
        found = find_key(session, key)
        assert (found.id, found.name, found.req_limit, found.daily_req_limit) == (row.id, "alice", 5, None)
        assert find_key(session, key + "x") is None
        revoke(session, found)
    with store.transaction() as session:
        assert find_key(session, key).revoked is not None


def test_configured_keys_are_imported_once_without_limits_and_a_revoked_one_stays_revoked(store_url: str):
    first = Store(store_url, ["k1", "k2"])
    with first.transaction() as session:
        assert [(r.name, r.req_limit, r.daily_req_limit, r.monthly_char_limit) for r in all_keys(session)] == [
            (IMPORTED, None, None, None)] * 2
        revoke(session, find_key(session, "k1"))
    first.close()
    again = Store(store_url, ["k1", "k2", "k3"])  # a restart with one more key
    with again.transaction() as session:
        assert len(all_keys(session)) == 3
        assert find_key(session, "k1").revoked is not None and find_key(session, "k3").revoked is None
    again.close()


def test_exactly_the_limit_is_taken_by_many_connections_at_once(store_url: str):
    """8 threads, each with its own connection pool, take 400 times from a limit of 37: exactly 37 are taken."""
    stores = [Store(store_url) for _ in range(8)]
    stores[0].ready()
    limit = Limit("minute", 37, fixed_window(time.time(), 3600))

    def attempts(store: Store) -> int:
        taken = 0
        for _ in range(50):
            with store.transaction() as session:
                taken += take(session, "ip:10.0.0.1", [(limit, 1)]) is None
        return taken

    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(attempts, stores)) == 37
    with stores[0].transaction() as session:
        assert count(session, "ip:10.0.0.1", limit) == 37
    for store in stores:
        store.close()


def test_a_request_over_one_limit_takes_nothing_from_the_others(store: Store):
    now = time.time()
    minute, chars = Limit("minute", 10, fixed_window(now, 60)), Limit("chars", 100, month_window(now))

    def request(characters: int) -> bool:
        try:
            with store.transaction() as session:
                if take(session, "key:1", [(minute, 1), (chars, characters)]):
                    raise LookupError  # refused: the transaction rolls back
            return True
        except LookupError:
            return False

    assert [request(60), request(60), request(40), request(1)] == [True, False, True, False]
    with store.transaction() as session:
        assert (count(session, "key:1", minute), count(session, "key:1", chars)) == (2, 100)
        assert take(session, "key:1", [(chars, 5)], within=False) is None  # a document's, once known
        assert count(session, "key:1", chars) == 105


def test_requests_taken_together_are_taken_whole_and_in_order(store: Store):
    """A batch's requests of one subject: their sums at once while they fit; else each in order while it fits,
    all of a request's or none (what the sums took of a limit that fit is given back)."""
    now = time.time()
    minute, chars = Limit("minute", 10, fixed_window(now, 60)), Limit("chars", 100, month_window(now))

    def counts(session) -> tuple[int, int]:
        return count(session, "key:1", minute), count(session, "key:1", chars)

    with store.transaction() as session:
        assert take_each(session, "key:1", [[(minute, 1), (chars, 30)], [(minute, 1), (chars, 60)]]) == [None, None]
        assert counts(session) == (2, 90)
        # the sums fit the minute's limit but not the characters': the minute's count is taken, then given back
        assert take_each(session, "key:1", [[(minute, 1), (chars, 5)], [(minute, 1), (chars, 20)],
                                            [(minute, 1), (chars, 5)]]) == [None, chars, None]
        assert counts(session) == (4, 100)
        assert take_each(session, "key:1", [[(minute, 1), (chars, 0)]] * 7) == [None] * 6 + [minute]
        assert counts(session) == (10, 100)


def test_windows(store: Store):
    assert fixed_window(125.5, 60) == Window(120, 180)
    february = datetime(2028, 2, 29, 23, 59, tzinfo=UTC).timestamp()
    assert month_window(february) == Window(int(datetime(2028, 2, 1, tzinfo=UTC).timestamp()),
                                            int(datetime(2028, 3, 1, tzinfo=UTC).timestamp()))
    december = datetime(2027, 12, 31, tzinfo=UTC).timestamp()
    assert month_window(december).ends == int(datetime(2028, 1, 1, tzinfo=UTC).timestamp())
    with store.transaction() as session:  # a new window starts from nothing
        first, then = Limit("minute", 1, Window(0, 60)), Limit("minute", 1, Window(60, 120))
        assert take(session, "ip:a", [(first, 1)]) is None
        assert take(session, "ip:a", [(first, 1)]) == first
        assert take(session, "ip:a", [(then, 1)]) is None


def test_usage_is_counted_by_key_and_day(store: Store):
    with store.transaction() as session:
        a, _ = add_key(session, "a", Limits())
        b, _ = add_key(session, "b", Limits())
        for characters in (10, 20, 30):
            record_use(session, a.id, 1, characters)
        record_use(session, b.id, 1, 7)
        record_use(session, b.id, 0, 3)  # a document's characters, once known
    today = datetime.now(UTC).date()
    with store.transaction() as session:
        assert [(u.day, u.requests, u.characters) for u in usage(session, a.id, today)] == [(today, 3, 60)]
        assert totals(session, today - timedelta(days=30)) == {a.id: (3, 60), b.id: (1, 10)}
        assert set(last_uses(session)) == {a.id, b.id}
        assert datetime.now(UTC) - last_uses(session)[a.id] < timedelta(minutes=1)


def test_an_unreachable_store_says_so_at_once():
    store = Store("postgresql+psycopg://postgres@127.0.0.1:1/nothing")
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        with store.transaction():
            pass
    assert time.monotonic() - started < 5


# --- translated files (service.worker.files) on the store -----------------------------------------------------


def files(store: Store, folder: Path, retention_s: float = 3600, budget: int = 1000) -> TranslatedFiles:
    return TranslatedFiles(folder, store, retention_s, budget)


def test_a_file_is_served_to_its_owner_until_it_expires(store: Store, tmp_path: Path):
    kept = files(store, tmp_path / "files", retention_s=1.5)
    token = kept.put("key:1", "story.txt", b"Geschichte")
    assert kept.get(token, "story.txt", "key:1") == kept.get(token, "story.txt") == b"Geschichte"
    assert kept.get(token, "story.txt", "key:2") is None
    assert kept.get(token, "other.txt", "key:1") is None
    time.sleep(1.6)
    assert kept.get(token, "story.txt", "key:1") is None
    kept.put("key:2", "next.txt", b"x")  # forgets what expired, whoever owned it
    assert not (tmp_path / "files" / token).exists()
    with store.transaction() as session:
        assert session.get(KeptFile, token) is None


def test_an_owner_over_the_budget_loses_its_own_oldest_files(store: Store, tmp_path: Path):
    kept = files(store, tmp_path / "files", budget=250)
    theirs = kept.put("ip:10.0.0.2", "theirs.txt", b"t" * 200)
    mine = [kept.put("ip:10.0.0.1", f"{i}.txt", b"m" * 100) for i in range(4)]
    assert [kept.get(token, f"{i}.txt") for i, token in enumerate(mine)] == [None, None, b"m" * 100, b"m" * 100]
    assert kept.get(theirs, "theirs.txt") == b"t" * 200
    big = kept.put("ip:10.0.0.1", "big.txt", b"b" * 400)  # over the budget alone: the newest stays
    assert kept.get(big, "big.txt") == b"b" * 400 and kept.get(mine[3], "3.txt") is None
    with store.transaction() as session:
        assert session.scalars(select(KeptFile.owner).order_by(KeptFile.owner)).all() == ["ip:10.0.0.1",
                                                                                           "ip:10.0.0.2"]


def test_a_file_survives_ten_thousand_uploads_of_another_client_and_a_restart(store_url: str, tmp_path: Path):
    store = Store(store_url)
    kept = files(store, tmp_path / "files", budget=1000)
    token = kept.put("key:1", "mine.txt", b"mine")
    for i in range(10_000):
        kept.put("key:2", "theirs.txt", b"%05d" % i)
    assert kept.get(token, "mine.txt", "key:1") == b"mine"
    store.close()
    restarted = files(Store(store_url), tmp_path / "files")
    assert restarted.get(token, "mine.txt", "key:1") == b"mine"
    assert len(list((tmp_path / "files").iterdir())) == 1 + 1000 // 5  # the other's within its own budget
    restarted.store.close()


def test_a_file_is_not_kept_when_the_store_is_unavailable(tmp_path: Path):
    kept = files(Store("postgresql+psycopg://postgres@127.0.0.1:1/nothing"), tmp_path / "files")
    with pytest.raises(StoreUnavailable):
        kept.put("ip:10.0.0.1", "story.txt", b"x")
    assert list((tmp_path / "files").iterdir()) == []


def test_counters_of_ended_windows_are_swept(store: Store):
    with store.transaction() as session:
        take(session, "ip:a", [(Limit("minute", 5, Window(0, 60)), 1)])
        take(session, "ip:a", [(Limit("minute", 5, Window(60, 120)), 1)])
        sweep(session, 100)
        assert session.scalars(select(Counter.start)).all() == [60]
