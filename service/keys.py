"""python -m service.keys: the API keys of the store (TRANSLATOR_STORE_URL, else SQLite in TRANSLATOR_DATA_DIR),
as LibreTranslate's `ltmanage keys`.

    python -m service.keys add NAME [--req-limit N] [--daily-req-limit N] [--char-limit N]   prints the new key
    python -m service.keys list
    python -m service.keys usage [KEY_ID_OR_NAME] [--days N]
    python -m service.keys remove KEY_ID_OR_NAME                                           revokes it: 403

A key is shown once, when made: the store keeps its SHA-256 alone. Keys are required once TRANSLATOR_API_KEYS
names any or TRANSLATOR_REQUIRE_API_KEYS is set. The command tries to reach the store for --wait seconds before it
gives up: a store starting beside it, or a name its network does not resolve yet, is waited for.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from datetime import UTC, datetime, timedelta

from service.settings import Settings
from service.store import Store, StoreUnavailable
from service.store.keys import Limits, add_key, all_keys, last_uses, named_keys, revoke, totals, usage
from service.store.tables import ApiKey


class OneLineParser(argparse.ArgumentParser):
    """What is wrong with the command line, in one line (argparse adds its usage)."""

    def error(self, message: str) -> None:
        self.exit(2, f"{self.prog}: {message}\n")


def limit(value: str) -> int:
    """A limit: a whole number of at least 1."""
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"a limit is a whole number of at least 1, not {value!r}")
    return int(value)


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m service.keys", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wait", type=float, default=15, metavar="SECONDS",
                   help="how long to try to reach the store before giving up (default: %(default)g)")
    commands = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    add = commands.add_parser("add", help="make a key and print it")
    add.add_argument("name", help="who or what the key is for")
    add.add_argument("--req-limit", type=limit, help="requests a minute (default: no limit)")
    add.add_argument("--daily-req-limit", type=limit, help="requests a day, UTC (default: no limit)")
    add.add_argument("--char-limit", type=limit, help="characters a month, UTC (default: no limit)")
    commands.add_parser("list", help="every key: id, name, limits, created, last used, revoked")
    show = commands.add_parser("usage", help="requests and characters: of one key by day, else of every key")
    show.add_argument("key", nargs="?", help="a key's id or name")
    show.add_argument("--days", type=limit, default=31, help="how many days back, today included (default: 31)")
    remove = commands.add_parser("remove", help="revoke a key: it gets 403 from now on, its usage stays")
    remove.add_argument("key", help="a key's id or name (every key of that name)")
    return p


def when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment else "-"


def shown(value: int | None) -> str:
    return "-" if value is None else str(value)


def describe(row: ApiKey, last_used: datetime | None) -> str:
    limits = f"{shown(row.req_limit)}/min {shown(row.daily_req_limit)}/day {shown(row.monthly_char_limit)} chars/month"
    state = f"revoked {when(row.revoked)}" if row.revoked else "active"
    return f"{row.id}\t{row.name}\t{limits}\tcreated {when(row.created)}\tlast used {when(last_used)}\t{state}"


def run(args: argparse.Namespace, store: Store) -> int:
    with store.transaction() as session:
        if args.command == "add":
            row, key = add_key(session, args.name, Limits(args.req_limit, args.daily_req_limit, args.char_limit))
            print(key)
            print(f"made key {row.id} ({row.name}): it is shown this once", file=sys.stderr)
            return 0
        if args.command == "list":
            used = last_uses(session)
            for row in all_keys(session):
                print(describe(row, used.get(row.id)))
            return 0
        rows = named_keys(session, args.key) if args.key else []
        if args.key and not rows:
            print(f"no key {args.key!r}", file=sys.stderr)
            return 1
        if args.command == "remove":
            for row in rows:
                revoke(session, row)
                print(f"revoked {describe(row, last_uses(session).get(row.id))}")
            return 0
        since = datetime.now(UTC).date() - timedelta(days=args.days - 1)
        if rows:
            for row in rows:
                for day in usage(session, row.id, since):
                    print(f"{row.id}\t{row.name}\t{day.day}\t{day.requests} requests\t{day.characters} characters")
            return 0
        used = totals(session, since)
        for row in all_keys(session):
            requests, characters = used.get(row.id, (0, 0))
            print(f"{row.id}\t{row.name}\tsince {since}\t{requests} requests\t{characters} characters")
        return 0


def reach(store: Store, seconds: float) -> None:
    """Connect and migrate, trying again every half second for `seconds`; StoreUnavailable after that."""
    deadline = time.monotonic() + seconds
    for attempt in itertools.count():
        try:
            return store.ready()
        except StoreUnavailable as error:
            if time.monotonic() >= deadline:
                raise
            if attempt == 0:
                print(f"waiting for the store ({error})", file=sys.stderr)
            time.sleep(0.5)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    settings = Settings()
    store = Store.of(settings)
    try:
        reach(store, args.wait)
        status = run(args, store)
    except StoreUnavailable as error:
        raise SystemExit(f"the store is unavailable: {error}") from None
    finally:
        store.close()
    raise SystemExit(status)


if __name__ == "__main__":
    main()
