"""Exact limits: one key's requests a minute accepted across 2 instances of 2 HTTP workers each, which share one
PostgreSQL store, over 3 whole windows.

    python -m bench.serving.exact_limits [--limit 100] [--window-s 60] [--windows 3] [--clients 16]

Stand-in models (service.testing.ECHO_MODELS): what is measured is the limit alone. The clients, half on each
instance, send in the first half of each window alone and each answer comes within it (checked), so that every
answer belongs to the window it was sent in; each window must accept exactly the limit, and refuse the rest (429).
Results: bench/results/exact-limits.{json,md}.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

from bench.common.cli import command_line
from bench.common.defaults import RESULTS
from bench.common.machine import environment, provenance
from bench.common.postgres import running_postgres
from bench.common.report import markdown_table, write_results
from bench.serving.frontend import stand_in_service
from service.launch import RunningService
from service.store import Store
from service.store.keys import Limits, add_key


@contextmanager
def running_stand_in(folder: Path, name: str, **settings: object) -> Iterator[RunningService]:
    """`python -m service` with stand-in models (service.testing) and 2 HTTP workers, its data folder folder/data
    unless a setting names one; its log folder/NAME.log."""
    values = {"http_workers": 2, "log_level": "warning", **settings}
    with stand_in_service(folder / f"{name}.log", values) as server:
        yield server


def windowed_answers(urls: list[str], key: str, window_s: float, windows: int, clients: int) -> list[tuple]:
    """`clients` threads (spread over `urls`) translating with `key` from the next window's start for `windows`
    windows, in the first half of each alone: (sent, answered, status) of every request."""
    first = (int(time.time()) // window_s + 1) * window_s
    answers: list[tuple[float, float, int]] = []

    def client(url: str) -> None:
        with httpx.Client(timeout=window_s / 2) as http:
            while (now := time.time()) < first + windows * window_s:
                if now < first or not 0.1 < now % window_s < window_s / 2:
                    time.sleep(0.01)
                    continue
                fields = {"q": "Hi", "source": "en", "target": "de", "api_key": key}
                status = http.post(url + "/translate", json=fields).status_code
                answers.append((now, time.time(), status))

    threads = [threading.Thread(target=client, args=(urls[i % len(urls)],)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def by_window(answers: list[tuple], window_s: float) -> dict[int, Counter]:
    """The statuses of each window's answers, by window number; AssertionError if an answer came in a later
    window than its request was sent in."""
    late = [(sent, answered) for sent, answered, _ in answers if sent // window_s != answered // window_s]
    assert not late, f"answers in a later window than their request: {late[:3]}"
    windows: dict[int, Counter] = {}
    for sent, _, status in answers:
        windows.setdefault(int(sent // window_s), Counter())[status] += 1
    return dict(sorted(windows.items()))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--limit", type=int, default=100, help="the key's requests a minute (a window)")
    p.add_argument("--window-s", type=int, default=60, help="TRANSLATOR_LIMIT_WINDOW_S")
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--clients", type=int, default=16)
    args = p.parse_args(argv)
    folder = RESULTS / "tmp" / "exact-limits"
    folder.mkdir(parents=True, exist_ok=True)
    with running_postgres() as postgres, ExitStack() as stack:
        url = postgres.database(f"limits_{int(time.time())}")
        store = Store(url)
        with store.transaction() as session:
            _, key = add_key(session, "bench", Limits(req_limit=args.limit))
        store.close()
        settings = {"store_url": url, "require_api_keys": "true", "limit_window_s": args.window_s}
        servers = [stack.enter_context(running_stand_in(folder, f"instance-{i}", **settings)) for i in range(2)]
        answers = windowed_answers([s.url for s in servers], key, args.window_s, args.windows, args.clients)
    windows = by_window(answers, args.window_s)
    rows = [[time.strftime("%H:%M:%S", time.gmtime(w * args.window_s)), c[200], c[429],
             sum(n for s, n in c.items() if s not in (200, 429))] for w, c in windows.items()]
    exact = all(c[200] == args.limit for c in windows.values()) and len(windows) == args.windows
    text = (f"`{command_line('bench.serving.exact_limits')}`\n\n{args.clients} clients with one key limited to "
            f"{args.limit} requests a window of {args.window_s} s, on 2 instances of 2 HTTP workers sharing one "
            f"PostgreSQL:\n\n" + markdown_table(["window (UTC)", "accepted (200)", "refused (429)", "other"], rows)
            + f"\nExactly the limit in every window: {'yes' if exact else 'NO'}.\n")
    data = {**provenance("bench.serving.exact_limits"), "environment": environment(["sqlalchemy", "psycopg"]),
            "limit": args.limit, "window_s": args.window_s, "clients": args.clients, "exact": exact,
            "windows": [{"start": w * args.window_s, **{str(s): n for s, n in c.items()}} for w, c in windows.items()]}
    print(text)
    for path in write_results(RESULTS, "exact-limits", data, text):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
