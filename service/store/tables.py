"""The store's tables (SQLAlchemy's declarative models). A new table is a class on Base (here, or in a module of its
own imported here) and a migration in migrations/versions/ (service.store.database.alembic_config says how to make
one)."""

from __future__ import annotations

from datetime import UTC, date, datetime

from sqlalchemy import BigInteger, Boolean, Date, DateTime, ForeignKey, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator


class UtcDateTime(TypeDecorator):
    """A moment, in UTC; read back with its time zone (SQLite keeps none)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        return value if value is None or value.tzinfo else value.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UtcDateTime}


class ApiKey(Base):
    """A key: its SHA-256 (never the key itself), its name and its limits (None: none)."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    created: Mapped[datetime] = mapped_column()
    revoked: Mapped[datetime | None] = mapped_column()
    req_limit: Mapped[int | None] = mapped_column(Integer)  # requests a minute
    daily_req_limit: Mapped[int | None] = mapped_column(Integer)
    monthly_char_limit: Mapped[int | None] = mapped_column(BigInteger)


class Usage(Base):
    """What a key used on one day (UTC): requests and characters, and when it was last used that day."""

    __tablename__ = "usage"

    key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    requests: Mapped[int] = mapped_column(BigInteger, default=0)
    characters: Mapped[int] = mapped_column(BigInteger, default=0)
    last_used: Mapped[datetime] = mapped_column()


class Counter(Base):
    """A limit's count in one window: `subject` (a key or an address) and `kind` ("minute", "day", "chars")
    name the limit, `start` (seconds since the epoch) the window, which ends at `ends`; `most` is the limit."""

    __tablename__ = "counters"

    subject: Mapped[str] = mapped_column(String(80), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    start: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    ends: Mapped[int] = mapped_column(BigInteger, index=True)
    count: Mapped[int] = mapped_column(BigInteger)
    most: Mapped[int] = mapped_column(BigInteger)


class KeptFile(Base):
    """A translated file in the data folder (files/TOKEN/NAME) and its owner, until `expires`."""

    __tablename__ = "files"

    token: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(1024))
    owner: Mapped[str] = mapped_column(String(80), index=True)
    size: Mapped[int] = mapped_column(BigInteger)
    created: Mapped[datetime] = mapped_column()
    expires: Mapped[datetime] = mapped_column(index=True)


class GlossaryRow(Base):
    """A DeepL glossary of `owner` (service.worker.deepl.glossaries): its name; its dictionaries are GlossaryEntries."""

    __tablename__ = "glossaries"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)  # a UUID, as DeepL's glossary_id
    owner: Mapped[str] = mapped_column(String(80), index=True)
    name: Mapped[str] = mapped_column(Text)
    ignore_case: Mapped[bool] = mapped_column(Boolean)
    created: Mapped[datetime] = mapped_column()


class GlossaryEntries(Base):
    """One language pair of a glossary (DeepL's base codes in lower case) and its entries as TSV, in their order."""

    __tablename__ = "glossary_dictionaries"

    glossary_id: Mapped[str] = mapped_column(ForeignKey("glossaries.id", ondelete="CASCADE"), primary_key=True)
    source_lang: Mapped[str] = mapped_column(String(16), primary_key=True)
    target_lang: Mapped[str] = mapped_column(String(16), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)  # the dictionaries' order in the glossary
    entries: Mapped[str] = mapped_column(Text)


class DocumentJob(Base):
    """A document of DeepL's /v2/document (service.worker.deepl.documents): whose it is, its status, and which worker
    translates it while `lease_expires` is ahead (`holder`); its upload and its result are files in the data
    folder."""

    __tablename__ = "document_jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # DeepL's document_id
    key_digest: Mapped[str] = mapped_column(String(64))  # the SHA-256 of its document_key
    owner: Mapped[str] = mapped_column(String(80), index=True)
    key_id: Mapped[int | None] = mapped_column(Integer)  # the API key it was uploaded with, whose usage it counts in
    name: Mapped[str] = mapped_column(String(1024))
    source_lang: Mapped[str] = mapped_column(String(16))  # served codes ("auto": detected)
    target_lang: Mapped[str] = mapped_column(String(16))
    glossary_id: Mapped[str | None] = mapped_column(String(36))  # read when the job is translated
    status: Mapped[str] = mapped_column(String(16), index=True)  # queued, translating, done, error
    seconds_remaining: Mapped[int | None] = mapped_column(Integer)
    billed_characters: Mapped[int | None] = mapped_column(BigInteger)  # set once counted in the key's usage
    error_message: Mapped[str | None] = mapped_column(Text)
    created: Mapped[datetime] = mapped_column()
    holder: Mapped[str | None] = mapped_column(String(64))
    lease_expires: Mapped[datetime | None] = mapped_column()
    downloaded: Mapped[datetime | None] = mapped_column()
