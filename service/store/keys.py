"""API keys in the store: made, found, revoked and listed, with their usage by day. A key is kept as its SHA-256
alone (a key is 32 random bytes, which no one finds from their hash); the key itself is shown once, when made."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime

from sqlalchemy import Connection, Date, TextClause, bindparam, func, select, text
from sqlalchemy.orm import Session

from service.store.tables import ApiKey, Usage, UtcDateTime
from service.store.upsert import insert

KEY_BYTES = 32
IMPORTED = "TRANSLATOR_API_KEYS"  # the name of the keys imported from the setting


@dataclass(frozen=True)
class Limits:
    """A key's limits; None: no limit."""

    req_limit: int | None = None  # requests a minute
    daily_req_limit: int | None = None
    monthly_char_limit: int | None = None


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def now() -> datetime:
    return datetime.now(UTC)


def add_key(session: Session, name: str, limits: Limits) -> tuple[ApiKey, str]:
    """A new key named `name` with `limits`: its row, and the key (never stored)."""
    key = secrets.token_urlsafe(KEY_BYTES)
    row = ApiKey(digest=digest(key), name=name, created=now(), req_limit=limits.req_limit,
                 daily_req_limit=limits.daily_req_limit, monthly_char_limit=limits.monthly_char_limit)
    session.add(row)
    session.flush()
    return row, key


def import_keys(session: Session, keys: tuple[str, ...]) -> None:
    """Keys of TRANSLATOR_API_KEYS that the store lacks, as keys without limits (one revoked stays revoked)."""
    for key in keys:
        values = {"digest": digest(key), "name": IMPORTED, "created": now()}
        session.execute(insert(session, ApiKey).values(values).on_conflict_do_nothing(index_elements=["digest"]))


def find_key(session: Session, key: str) -> ApiKey | None:
    return session.scalars(select(ApiKey).where(ApiKey.digest == digest(key))).one_or_none()


@dataclass(frozen=True)
class KeyCheck:
    """What a request needs of its key (read without the ORM: this is every request's path)."""

    id: int
    revoked: datetime | None
    limits: Limits


CHECK_KEYS = select(ApiKey.digest, ApiKey.id, ApiKey.revoked, ApiKey.req_limit, ApiKey.daily_req_limit,
                    ApiKey.monthly_char_limit).where(ApiKey.digest.in_(bindparam("digests", expanding=True)))


def check_keys(session: Session | Connection, keys: Iterable[str]) -> dict[str, KeyCheck]:
    """The keys of `keys` that the store knows, in one statement."""
    named = {digest(key): key for key in keys}
    return {named[row[0]]: KeyCheck(row[1], row[2], Limits(*row[3:]))
            for row in session.execute(CHECK_KEYS, {"digests": list(named)})}


def check_key(session: Session | Connection, key: str) -> KeyCheck | None:
    return check_keys(session, [key]).get(key)


def named_keys(session: Session, ref: str) -> list[ApiKey]:
    """The keys `ref` names: its id (a number), else every key of that name."""
    if ref.isdigit():
        return [row] if (row := session.get(ApiKey, int(ref))) else []
    return list(session.scalars(select(ApiKey).where(ApiKey.name == ref).order_by(ApiKey.id)))


def all_keys(session: Session) -> list[ApiKey]:
    return list(session.scalars(select(ApiKey).order_by(ApiKey.id)))


def revoke(session: Session, row: ApiKey) -> None:
    """From now on the key gets 403; its usage stays."""
    row.revoked = row.revoked or now()


def record_statement(unless_revoked: bool) -> TextClause:
    """record_use()'s statement: SQL that SQLite and PostgreSQL read alike, compiled once (it is on every keyed
    request's path)."""
    where = "id = :key_id AND revoked IS NULL" if unless_revoked else "id = :key_id"
    return text(
        "INSERT INTO usage (key_id, day, requests, characters, last_used) SELECT id, :day, :requests, :characters, "
        f":last_used FROM api_keys WHERE {where} ON CONFLICT (key_id, day) DO UPDATE SET requests = usage.requests "
        "+ excluded.requests, characters = usage.characters + excluded.characters, last_used = excluded.last_used "
        "RETURNING key_id"
    ).bindparams(bindparam("day", type_=Date), bindparam("last_used", type_=UtcDateTime))


RECORD_USE = {unless_revoked: record_statement(unless_revoked) for unless_revoked in (False, True)}


def record_use(session: Session | Connection, key_id: int, requests: int, characters: int,
               unless_revoked: bool = False) -> bool:
    """`requests` requests (or none: characters known later, as a document's) of `characters` characters, today
    (UTC), and the key's last use; whether they were counted (not if `unless_revoked` and the key is revoked)."""
    when = now()
    values = {"key_id": key_id, "day": when.date(), "requests": requests, "characters": characters,
              "last_used": when}
    return session.execute(RECORD_USE[unless_revoked], values).first() is not None


def last_uses(session: Session) -> dict[int, datetime]:
    """When each key that was ever used was last used, by key id."""
    query = select(Usage.key_id, func.max(Usage.last_used)).group_by(Usage.key_id)
    return {key_id: when for key_id, when in session.execute(query)}


def usage(session: Session, key_id: int, since: date) -> list[Usage]:
    """The key's usage by day from `since`, oldest first."""
    query = select(Usage).where(Usage.key_id == key_id, Usage.day >= since).order_by(Usage.day)
    return list(session.scalars(query))


def totals(session: Session, since: date) -> dict[int, tuple[int, int]]:
    """Every key's requests and characters from `since`, by key id."""
    query = (select(Usage.key_id, func.sum(Usage.requests), func.sum(Usage.characters))
             .where(Usage.day >= since).group_by(Usage.key_id))
    return {key_id: (int(requests), int(characters)) for key_id, requests, characters in session.execute(query)}
