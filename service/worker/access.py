"""Who a request is and whether it may go on: its key (when keys are on: 403 for an unknown or revoked one), its
limits (429 with Retry-After), and what it used. Everything is counted in the store, which every worker and
replica shares; with keys and limits off, the store is not asked at all.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

from fastapi import Request

from service.metrics import Metrics
from service.settings import Settings
from service.store import Store
from service.store.keys import KeyCheck, Limits, check_key, record_use
from service.store.limits import DAY_S, Limit, fixed_window, month_window, take
from service.worker.errors import Forbidden, RequestError


class TooManyRequests(RequestError):
    """Over a limit: 429, with Retry-After the seconds until its window ends."""

    status = 429

    def __init__(self, limit: Limit, now: float):
        super().__init__(f"Too many requests: over the limit of {limit.most} {WORDS[limit.kind]}")
        self.deepl_status = 456 if limit.kind == "chars" else 429  # DeepL's "quota exceeded" for characters
        self.headers = {"Retry-After": str(max(1, math.ceil(limit.window.ends - now)))}


WORDS = {"minute": "requests per minute", "day": "requests per day", "chars": "characters per month"}


@dataclass(frozen=True)
class Client:
    """Whose request: `owner` names it for its limits and files ("key:ID", or "ip:ADDRESS" when keys are off)."""

    owner: str
    key_id: int | None = None
    limits: Limits = Limits()  # the key's

    @classmethod
    def of_key(cls, key: KeyCheck) -> Client:
        return cls(f"key:{key.id}", key.id, key.limits)


def address(request: Request) -> str:
    """The client's address: the connection's, or what a trusted proxy named (TRANSLATOR_TRUSTED_PROXIES)."""
    return request.client.host if request.client else "unknown"


def characters(text: object) -> int:
    """The characters of a request's text (one string or a list)."""
    return sum(len(one) for one in (text if isinstance(text, list) else [text]) if isinstance(one, str))


class Access:
    def __init__(self, settings: Settings, store: Store, metrics: Metrics):
        self.settings = settings
        self.store = store
        self.metrics = metrics

    async def admit(self, request: Request, key: object, used: int) -> Client:
        """The request's client, once its key and limits allow it (Forbidden, TooManyRequests, StoreUnavailable):
        `key` as the request names it, `used` the characters of its text."""
        if not self.settings.limits_on:
            return Client(f"ip:{address(request)}")
        client = await asyncio.to_thread(self._admit, key if isinstance(key, str) else None, address(request), used)
        if client.key_id is not None:
            self.metrics.key_requests.inc()
            self.metrics.key_characters.inc(used)
        return client

    def _admit(self, key: str | None, where: str, used: int) -> Client:
        """In one transaction: the key, every limit's count, the key's usage."""
        now = time.time()
        with self.store.transaction() as session:
            if self.settings.keys_required:
                found = known(check_key(session, key) if key else None)
                client, limits = Client.of_key(found), self.limits(now, found.limits)
            else:
                client = Client(f"ip:{where}")
                limits = self.limits(now, Limits(self.settings.anonymous_req_limit or None,
                                                 self.settings.anonymous_daily_req_limit or None))
            if over := take(session, client.owner, [(limit, used if limit.kind == "chars" else 1) for limit in limits]):
                self.metrics.limited.labels(over.kind).inc()
                raise TooManyRequests(over, now)  # the transaction rolls back: nothing counted
            if client.key_id is not None:
                record_use(session, client.key_id, 1, used)
        return client

    def limits(self, now: float, limits: Limits) -> list[Limit]:
        """The limits that apply now."""
        windows = {"minute": fixed_window(now, self.settings.limit_window_s), "day": fixed_window(now, DAY_S),
                   "chars": month_window(now)}
        given = {"minute": limits.req_limit, "day": limits.daily_req_limit, "chars": limits.monthly_char_limit}
        return [Limit(kind, most, windows[kind]) for kind, most in given.items() if most is not None]

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
            with self.store.transaction() as session:
                record_use(session, client.key_id, 0, used)
                take(session, client.owner, [(limit, used) for limit in self.limits(time.time(), client.limits)
                                             if limit.kind == "chars"], within=False)

        await asyncio.to_thread(count)
        self.metrics.key_characters.inc(used)


def known(found: KeyCheck | None) -> KeyCheck:
    """The key, unless unknown or revoked (Forbidden)."""
    if found is None:
        raise Forbidden("Invalid API key")
    if found.revoked is not None:
        raise Forbidden("API key revoked")
    return found
