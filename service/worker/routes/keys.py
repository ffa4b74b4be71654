"""GET /usage: what a key used, by day, and its limits; a key asks about itself alone."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from fastapi import APIRouter, Query, Request

from service.store.keys import last_uses, usage
from service.store.tables import ApiKey
from service.worker.dependencies import state
from service.worker.errors import InvalidRequest
from service.worker.schemas import ErrorBody, KeyUsage, UsageDay

router = APIRouter()
MAX_DAYS = 366


@router.get("/usage", response_model=KeyUsage,
            responses={400: {"model": ErrorBody}, 403: {"model": ErrorBody}, 503: {"model": ErrorBody}})
async def key_usage(request: Request, api_key: str | None = None, days: int = Query(31, ge=1, le=MAX_DAYS)) -> KeyUsage:
    """The key's requests and characters by day (UTC) over the last `days`, and its limits (null: none)."""
    s = state(request)
    if not s.settings.keys_required:
        raise InvalidRequest("API keys are off: no usage is kept")
    key_id = (await s.access.key(api_key)).id

    def report() -> KeyUsage:
        since = datetime.now(UTC).date() - timedelta(days=days - 1)
        with s.store.transaction() as session:
            row = session.get(ApiKey, key_id)
            used = [UsageDay(day=u.day, requests=u.requests, characters=u.characters)
                    for u in usage(session, key_id, since)]
            return KeyUsage(name=row.name, created=row.created, last_used=last_uses(session).get(key_id),
                            req_limit=row.req_limit, daily_req_limit=row.daily_req_limit,
                            monthly_char_limit=row.monthly_char_limit, days=used)

    return await asyncio.to_thread(report)
