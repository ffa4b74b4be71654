"""Who a request is and whether it may go on: its key (when keys are on: 403 for an unknown or revoked one), its
limits (429 with Retry-After), and what it used. Everything is counted in the store, which every worker and
replica shares; with keys and limits off, the store is not asked at all.

The requests that a worker asks to admit while its last batch runs are admitted together (service.store.batches).
When the worker trusts each key they name and all of them fit, the batch is one transaction on the driver's own
connection (service.store.at_once: PostgreSQL's one statement, SQLite's two); else one transaction of SQLAlchemy's
says who is refused: one statement for each key's usage (which also finds a revoked key revoked at once) and one for
each subject's limits while its requests fit. A worker reads a key's id and limits once a KEY_TRUST_S; whether it is
revoked, with every batch. Every count is the store's and committed before the request is answered, so the limits
stay exact and the usage never lags.

A translation may start before its admission is settled (start(), early): when its subject's (its key's, or its
address's) last admission in this worker held, one of the last HELD subjects admitted here, and no other early
admission of the subject is under way here. Its answer still waits for the admission, and a refusal cancels its work
and is the answer. A lone client thus waits for the store beside its translation, not before it, and a refused
client's wasted work is at most one request a worker each time its admissions turn from held to refused.
"""

from __future__ import annotations

import asyncio
import functools
import math
import random
import time
from collections import OrderedDict
from dataclasses import dataclass

from fastapi import Request
from sqlalchemy import Connection

from service.metrics import Metrics
from service.settings import Settings
from service.store import Store
from service.store.at_once import take_all
from service.store.batches import Batches
from service.store.keys import KeyCheck, Limits, check_key, check_keys, record_use
from service.store.limits import DAY_S, SWEEP_CHANCE, Limit, fixed_window, month_window, sweep, take, take_each
from service.worker.errors import Forbidden, RequestError


class TooManyRequests(RequestError):
    """Over a limit: 429, with Retry-After the seconds until its window ends."""

    status = 429

    def __init__(self, limit: Limit, now: float):
        super().__init__(f"Too many requests: over the limit of {limit.most} {WORDS[limit.kind]}")
        self.deepl_status = 456 if limit.kind == "chars" else 429  # DeepL's "quota exceeded" for characters
        self.headers = {"Retry-After": str(max(1, math.ceil(limit.window.ends - now)))}


KEY_TRUST_S = 60  # how long a worker trusts what it read of a key (its id and limits; whether it is revoked is read
# with every request's usage)
HELD = 1024  # the subjects whose last admission held that a worker remembers, for early admissions
WORDS = {"minute": "requests per minute", "day": "requests per day", "chars": "characters per month"}


@dataclass(frozen=True)
class Client:
    """Whose request: `owner` names it for its limits and files ("key:ID", or "ip:ADDRESS" when keys are off)."""

    owner: str
    key_id: int | None = None
    limits: Limits = Limits()  # its key's, or those of clients without a key

    @classmethod
    def of_key(cls, key: KeyCheck) -> Client:
        return cls(f"key:{key.id}", key.id, key.limits)


def address(request: Request) -> str:
    """The client's address: the connection's, or what a trusted proxy named (TRANSLATOR_TRUSTED_PROXIES)."""
    return request.client.host if request.client else "unknown"


def characters(text: object) -> int:
    """The characters of a request's text (one string or a list)."""
    return sum(len(one) for one in (text if isinstance(text, list) else [text]) if isinstance(one, str))


@dataclass(frozen=True)
class Asked:
    """A request to admit: the key it names (None if none), its address, the characters of its text."""

    key: str | None
    where: str
    used: int


class Access:
    def __init__(self, settings: Settings, store: Store, metrics: Metrics):
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.batches: Batches[Asked, Client] = Batches(store, self._admit, self._admit_at_once)
        self.keys: dict[str, tuple[KeyCheck, float]] = {}  # a known key, and until when its id and limits are trusted
        self.held: OrderedDict[str, None] = OrderedDict()  # the last HELD subjects (asking()) admitted here
        self.early: set[str] = set()  # the subjects with an early admission under way here

    def start(self, request: Request, key: object, used: int) -> tuple[asyncio.Future[Client], bool]:
        """The request's admission under way: its client once its key and limits allow it (Forbidden,
        TooManyRequests, StoreUnavailable), `key` as the request names it, `used` the characters of its text; and
        whether the request's work may start before it is settled (early: see the module's docstring)."""
        if not self.settings.limits_on:
            done = asyncio.get_running_loop().create_future()
            done.set_result(Client(f"ip:{address(request)}"))
            return done, True
        asked = Asked(key if isinstance(key, str) and key else None, address(request), used)
        subject = self.asking(asked)
        early = subject in self.held and subject not in self.early
        if early:
            self.early.add(subject)
        admission = self.batches.submit(asked)
        admission.add_done_callback(functools.partial(self._settled, asked, subject, early))
        return admission, early

    def _settled(self, asked: Asked, subject: str, early: bool, admission: asyncio.Future[Client]) -> None:
        """What an admission's answer tells: whether its subject's last admission held, and its key's usage."""
        if early:
            self.early.discard(subject)
        if admission.cancelled() or admission.exception() is not None:
            self.held.pop(subject, None)
            return
        self.held[subject] = None
        self.held.move_to_end(subject)
        if len(self.held) > HELD:
            self.held.popitem(last=False)
        if admission.result().key_id is not None:
            self.metrics.key_requests.inc()
            self.metrics.key_characters.inc(asked.used)

    def asking(self, asked: Asked) -> str:
        """Who asks, as far as this worker can tell before the store answers: the key the request names (when keys
        are on), else its address."""
        return f"key {asked.key}" if self.settings.keys_required else f"ip:{asked.where}"

    def _admit(self, connection: Connection, batch: list[Asked]) -> list[Client | RequestError]:
        """In the batch's transaction (the batches' thread alone runs it): the clients, their keys' usage, which
        also says whether each key is still unrevoked (one statement a key), then the limits' counts of each subject
        (a key or an address: one statement while its requests fit). Rows are locked in one order, usage by key id
        then counters by subject, so that two workers' batches never wait for each other in a cycle."""
        now = time.time()
        if random.random() < SWEEP_CHANCE:
            sweep(connection, now - self.settings.limit_window_s)  # windows a while over: none is taken from again
        answers = self.clients(batch, self.known(connection, self.named(batch), now))
        admitted = [(answer, asked.used) for answer, asked in zip(answers, batch) if isinstance(answer, Client)]
        revoked = {key_id for key_id, (requests, used) in usage(tally(admitted)).items()
                   if not record_use(connection, key_id, requests, used, unless_revoked=True)}
        for i, answer in enumerate(answers):
            if isinstance(answer, Client) and answer.key_id in revoked:
                answers[i] = Forbidden("API key revoked")
        self.keys = {key: known for key, known in self.keys.items() if known[0].id not in revoked}
        refused = self.take_limits(connection, batch, answers, now)
        for key_id, (requests, used) in usage(tally(refused)).items():  # their usage given back
            record_use(connection, key_id, -requests, -used)
        return answers

    def _admit_at_once(self, connection: Connection, batch: list[Asked]) -> list[Client | RequestError] | None:
        """The batch in a transaction of its own on the driver's connection (service.store.at_once), when this
        worker trusts what it read of each key it names, each key is unrevoked and each request fits its limits;
        else None, and _admit's transaction admits it (and sweeps, when its turn comes)."""
        now = time.time()
        named = self.named(batch)
        if random.random() < SWEEP_CHANCE or len(found := self.trusted(named, now)) < len(named):
            return None
        answers = self.clients(batch, found)
        tallies = tally([(answer, asked.used) for answer, asked in zip(answers, batch) if isinstance(answer, Client)])
        subjects = [(owner, client.key_id, wanted(self.limits(now, client.limits), requests, characters))
                    for owner, (client, requests, characters) in sorted(tallies.items())]
        return answers if take_all(connection, usage(tallies), subjects) else None

    def named(self, batch: list[Asked]) -> set[str]:
        """The keys the batch names, when keys are on."""
        return {asked.key for asked in batch if asked.key} if self.settings.keys_required else set()

    def trusted(self, keys: set[str], now: float) -> dict[str, KeyCheck]:
        """The keys of `keys` that this worker read in the last KEY_TRUST_S seconds."""
        return {key: known[0] for key in keys if (known := self.keys.get(key)) and known[1] >= now}

    def known(self, connection: Connection, keys: set[str], now: float) -> dict[str, KeyCheck]:
        """The keys of `keys` that the store knows: those trusted(), the others read in one statement (a revoked
        key is found revoked by record_use)."""
        found = self.trusted(keys, now)
        if missing := keys - set(found):
            found |= check_keys(connection, missing)
            self.keys |= {key: (found[key], now + KEY_TRUST_S) for key in missing
                          if key in found and found[key].revoked is None}
        return found

    def clients(self, batch: list[Asked], found: dict[str, KeyCheck]) -> list[Client | RequestError]:
        """Whose each request is, with its limits: its key's (when keys are on: Forbidden if unknown or revoked),
        else its address's."""
        if not self.settings.keys_required:
            anonymous = Limits(self.settings.anonymous_req_limit or None,
                               self.settings.anonymous_daily_req_limit or None)
            return [Client(f"ip:{asked.where}", limits=anonymous) for asked in batch]
        answers: list[Client | RequestError] = []
        for asked in batch:
            try:
                answers.append(Client.of_key(known(found.get(asked.key) if asked.key else None)))
            except Forbidden as refused:
                answers.append(refused)
        return answers

    def take_limits(self, connection: Connection, batch: list[Asked], answers: list[Client | RequestError],
                    now: float) -> list[tuple[Client, int]]:
        """Each client's limits taken, subject by subject; the answers of those refused become TooManyRequests:
        their clients and characters."""
        refused: list[tuple[Client, int]] = []
        for client, indexes, wanted in self.subjects(batch, answers, now):
            for i, over in zip(indexes, take_each(connection, client.owner, wanted)):
                if over:
                    self.metrics.limited.labels(over.kind).inc()
                    refused.append((client, batch[i].used))
                    answers[i] = TooManyRequests(over, now)
        return refused

    def subjects(self, batch: list[Asked], answers: list[Client | RequestError],
                 now: float) -> list[tuple[Client, list[int], list[list[tuple[Limit, int]]]]]:
        """The admitted requests of each subject, subjects in order: its client, their indexes in the batch, and
        what each wants of each limit."""
        by_subject: dict[str, list[int]] = {}
        for i, answer in enumerate(answers):
            if isinstance(answer, Client):
                by_subject.setdefault(answer.owner, []).append(i)
        found: list[tuple[Client, list[int], list[list[tuple[Limit, int]]]]] = []
        for subject in sorted(by_subject):
            client, indexes = answers[by_subject[subject][0]], by_subject[subject]
            limits = self.limits(now, client.limits)
            found.append((client, indexes, [wanted(limits, 1, batch[i].used) for i in indexes]))
        return found

    def limits(self, now: float, limits: Limits) -> tuple[Limit, ...]:
        """The limits that apply now."""
        length = self.settings.limit_window_s
        return applying(limits, length, int(now // length), int(now // DAY_S))

    async def key(self, key: str | None) -> KeyCheck:
        """The key a request names, known and not revoked (Forbidden), without counting the request."""

        def check() -> KeyCheck:
            with self.store.transaction() as session:
                return known(check_key(session, key) if key else None)

        return await asyncio.to_thread(check)

    async def count_characters(self, client: Client, used: int) -> None:
        """Characters known once the request is under way (a document's text): counted in the key's usage and
        against its monthly limit, which refuses the next request once passed."""
        if client.key_id is None:
            return

        def count() -> None:
            with self.store.transaction() as session:  # usage, then counters: the order of _admit's locks
                record_use(session, client.key_id, 0, used)
                take(session, client.owner, [(limit, used) for limit in self.limits(time.time(), client.limits)
                                             if limit.kind == "chars"], within=False)

        await asyncio.to_thread(count)
        self.metrics.key_characters.inc(used)

    def close(self) -> None:
        self.batches.close()


@functools.lru_cache(maxsize=1024)
def applying(limits: Limits, length: int, minute: int, day: int) -> tuple[Limit, ...]:
    """`limits` in the `minute`th window of `length` seconds since the epoch, the `day`th day and that day's month
    (kept for each key's limits while their windows hold)."""
    windows = {"minute": fixed_window(minute * length, length), "day": fixed_window(day * DAY_S, DAY_S),
               "chars": month_window(day * DAY_S)}
    given = {"minute": limits.req_limit, "day": limits.daily_req_limit, "chars": limits.monthly_char_limit}
    return tuple(Limit(kind, most, windows[kind]) for kind, most in given.items() if most is not None)


def wanted(limits: tuple[Limit, ...], requests: int, characters: int) -> list[tuple[Limit, int]]:
    """What `requests` requests of `characters` characters in all want of each limit."""
    return [(limit, characters if limit.kind == "chars" else requests) for limit in limits]


def tally(admitted: list[tuple[Client, int]]) -> dict[str, tuple[Client, int, int]]:
    """The requests and characters of each subject among `admitted` (clients and their characters): its client,
    its requests and its characters, by subject."""
    counts: dict[str, tuple[Client, int, int]] = {}
    for client, used in admitted:
        _, requests, characters = counts.get(client.owner, (client, 0, 0))
        counts[client.owner] = (client, requests + 1, characters + used)
    return counts


def usage(tallies: dict[str, tuple[Client, int, int]]) -> dict[int, tuple[int, int]]:
    """The requests and characters of each key among `tallies` (tally()'s), by key id in order."""
    return dict(sorted((client.key_id, (requests, characters)) for client, requests, characters in tallies.values()
                       if client.key_id is not None))


def known(found: KeyCheck | None) -> KeyCheck:
    """The key, unless unknown or revoked (Forbidden)."""
    if found is None:
        raise Forbidden("Invalid API key")
    if found.revoked is not None:
        raise Forbidden("API key revoked")
    return found
