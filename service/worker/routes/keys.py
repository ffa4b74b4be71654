"""GET /usage: what a key used, by day, and its limits; a key asks about itself alone."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from fastapi import APIRouter, Query, Request

from service.store.keys import usage
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
    row = await s.access.key(api_key)

    def days_used() -> list[UsageDay]:
        since = datetime.now(UTC).date() - timedelta(days=days - 1)
        with s.store.transaction() as session:
            return [UsageDay(day=u.day, requests=u.requests, characters=u.characters)
                    for u in usage(session, row.id, since)]

    return KeyUsage(name=row.name, created=row.created, last_used=row.last_used, req_limit=row.req_limit,
                    daily_req_limit=row.daily_req_limit, monthly_char_limit=row.monthly_char_limit,
                    days=await asyncio.to_thread(days_used))
