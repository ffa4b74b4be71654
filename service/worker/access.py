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
from service.store.keys import add_characters, find_key, record_use
from service.store.limits import DAY_S, Limit, fixed_window, month_window, take
from service.store.tables import ApiKey
from service.worker.errors import Forbidden, RequestError


class TooManyRequests(RequestError):
    """Over a limit: 429, with Retry-After the seconds until its window ends."""

    status = 429

    def __init__(self, limit: Limit, now: float):
        super().__init__(f"Too many requests: over the limit of {limit.most} {WORDS[limit.kind]}")
        self.headers = {"Retry-After": str(max(1, math.ceil(limit.window.ends - now)))}


WORDS = {"minute": "requests per minute", "day": "requests per day", "chars": "characters per month"}


@dataclass(frozen=True)
class Client:
    """Whose request: `owner` names it for its limits and files ("key:ID", or "ip:ADDRESS" when keys are off)."""

    owner: str
    key_id: int | None = None

    @classmethod
    def of_key(cls, row: ApiKey) -> Client:
        return cls(f"key:{row.id}", row.id)


def address(request: Request) -> str:
    """The client's address: the connection's, or what a trusted proxy named (TRANSLATOR_TRUSTED_PROXIES)."""
    return request.client.host if request.client else "unknown"


def characters(values: dict) -> int:
    """The characters of a request's text (q: one string or a list)."""
    q = values.get("q")
    return sum(len(text) for text in (q if isinstance(q, list) else [q]) if isinstance(text, str))


class Access:
    def __init__(self, settings: Settings, store: Store, metrics: Metrics):
        self.settings = settings
        self.store = store
        self.metrics = metrics

    async def admit(self, request: Request, values: dict) -> Client:
        """The request's client, once its key and limits allow it (Forbidden, TooManyRequests, StoreUnavailable)."""
        if not self.settings.limits_on:
            return Client(f"ip:{address(request)}")
        key, used = values.get("api_key"), characters(values)
        client = await asyncio.to_thread(self._admit, key if isinstance(key, str) else None, address(request), used)
        if client.key_id is not None:
            self.metrics.key_requests.inc()
            self.metrics.key_characters.inc(used)
        return client

    def _admit(self, key: str | None, where: str, used: int) -> Client:
        now = time.time()
        with self.store.transaction() as session:
            if self.settings.keys_required:
                row = self._known(session, key)
                client = Client.of_key(row)
                limits = self.limits(now, row.req_limit, row.daily_req_limit, row.monthly_char_limit)
            else:
                client, limits = Client(f"ip:{where}"), self.limits(
                    now, self.settings.anonymous_req_limit, self.settings.anonymous_daily_req_limit)
            for limit in limits:
                if not take(session, client.owner, limit, used if limit.kind == "chars" else 1):
                    self.metrics.limited.labels(limit.kind).inc()
                    raise TooManyRequests(limit, now)  # the transaction rolls back: nothing else taken
            if self.settings.keys_required:
                record_use(session, row, used)
        return client

    def limits(self, now: float, minute: int | None, day: int | None, chars: int | None = None) -> list[Limit]:
        """The limits that apply now (None or 0: none of that kind)."""
        windows = {"minute": fixed_window(now, self.settings.limit_window_s), "day": fixed_window(now, DAY_S),
                   "chars": month_window(now)}
        given = {"minute": minute, "day": day, "chars": chars}
        return [Limit(kind, most, windows[kind]) for kind, most in given.items() if most]

    @staticmethod
    def _known(session, key: str | None) -> ApiKey:
        row = find_key(session, key) if key else None
        if row is None:
            raise Forbidden("Invalid API key")
        if row.revoked is not None:
            raise Forbidden("API key revoked")
        return row

    async def key(self, key: str | None) -> ApiKey:
        """The key a request names, known and not revoked (Forbidden), without counting the request."""

        def known() -> ApiKey:
            with self.store.transaction() as session:
                return self._known(session, key)

        return await asyncio.to_thread(known)

    async def count_characters(self, client: Client, used: int) -> None:
        """Characters known once the request is under way (a document's text): counted in the key's usage and
        against its monthly limit, which refuses the next request once passed."""
        if client.key_id is None:
            return

        def count() -> None:
            now = time.time()
            with self.store.transaction() as session:
                add_characters(session, client.key_id, used)
                for limit in self.limits(now, None, None, session.get(ApiKey, client.key_id).monthly_char_limit):
                    take(session, client.owner, limit, used, within=False)

        await asyncio.to_thread(count)
        self.metrics.key_characters.inc(used)
