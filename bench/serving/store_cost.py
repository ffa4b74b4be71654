"""What the store costs a request: the shipped model served with keys and limits off (the store is never asked),
and with every request checked against a key with all three limits and counted in its usage, on SQLite and on
PostgreSQL (service.worker.access: a worker's requests admitted in batches, one transaction each).

    python -m bench.serving.store_cost [--seconds 10] [--lone-seconds 30] [--repeats 3] [--base /tmp/base]

Each round starts a service for every layout (and with --base, for another checkout's too: `git worktree add
/tmp/base main`), all at once. One client then sends one sentence a request to each in turn (bench.serving.paired):
a lone client's latency, p50 and p99, every layout meeting the same moments of the machine, so that a difference of
a few percent shows. Then 32 clients (wrk, bench.serving.loadgen) load each service in turn, the others idle:
throughput. Reported: the median round of each layout, over its checkout's with the store off (the p50's ratio is
taken within each round, then the median). The machine's load average (1 minute) is kept with every throughput run:
other work on its cores moves the figures, less so the CPU time that the service's processes and PostgreSQL's spend
a request under 32 clients, which is kept too. Results: bench/results/store-cost.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

from bench.common.cli import command_line
from bench.common.defaults import MODEL_DIR, REPEATS, REPO, RESULTS, THREADS
from bench.common.machine import environment, provenance, tree_cpu_seconds
from bench.common.postgres import Postgres, running_postgres
from bench.common.report import markdown_table, median, write_results
from bench.common.sentences import SENTENCES
from bench.common.timing import rotation
from bench.serving.loadgen import run_load
from bench.serving.paired import paired_latency
from service.launch import RunningService, running_service
from service.store import Store
from service.store.keys import Limits, add_key

STORES = ("off", "SQLite", "PostgreSQL")
HIGH = 10**9  # limits that are checked and counted but never reached
MEDIANS = ("p50_ms", "throughput_32", "service_cpu_ms", "postgres_cpu_ms", "load_1min")  # of a layout's rounds


def keyed_store(url: str) -> str:
    """A key with every limit, made in the store at `url`; the key."""
    store = Store(url)
    with store.transaction() as session:
        _, key = add_key(session, "bench", Limits(HIGH, HIGH, HIGH))
    store.close()
    return key


def cpu_now(service_pid: int, postgres: Postgres | None) -> tuple[float, float]:
    """The CPU seconds so far of the service's processes, and of PostgreSQL's (none without it)."""
    return tree_cpu_seconds(service_pid), tree_cpu_seconds(postgres.pid) if postgres else 0.0


def loaded(service: RunningService, fields: dict, seconds: float, postgres: Postgres | None) -> dict:
    """32 clients' throughput, and the CPU time spent a request, of one service."""
    before = cpu_now(service.process.pid, postgres)
    many = run_load(service.url, SENTENCES, 32, seconds, fields=fields)
    service_s, postgres_s = (end - start for start, end in zip(before, cpu_now(service.process.pid, postgres)))
    return {"throughput_32": many["sentences_per_s"], "errors": many["errors"],
            "service_cpu_ms": round(1000 * service_s / many["requests"], 2),
            "postgres_cpu_ms": round(1000 * postgres_s / many["requests"], 3),
            "load_1min": round(os.getloadavg()[0], 2)}


def summary(runs: dict[tuple[str, str], list[dict]]) -> list[dict]:
    """Each layout's median round, and its ratios over its checkout's with the store off: the p50's within each
    round (paired), the throughput's of the medians."""
    medians = {layout: {k: median([r[k] for r in rounds]) for k in MEDIANS} for layout, rounds in runs.items()}
    return [{"checkout": checkout, "layout": store, **medians[checkout, store],
             "p50_vs_off": median([r["p50_ms"] / off["p50_ms"]
                                   for r, off in zip(runs[checkout, store], runs[checkout, "off"])]),
             "throughput_vs_off": medians[checkout, store]["throughput_32"] / medians[checkout, "off"]["throughput_32"],
             "rounds": runs[checkout, store]} for checkout, store in runs]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=10, help="32 clients' load of each service a round")
    p.add_argument("--lone-seconds", type=float, default=30, help="the lone client's rounds across the services")
    p.add_argument("--repeats", type=int, default=REPEATS)
    p.add_argument("--threads", type=int, default=THREADS, help="the engine's ONNX Runtime threads")
    p.add_argument("--base", type=Path, help="another checkout measured side by side (git worktree add /tmp/base main)")
    args = p.parse_args(argv)
    shutil.rmtree(RESULTS / "tmp" / "store-cost", ignore_errors=True)  # no store of an earlier run
    (RESULTS / "tmp" / "store-cost").mkdir(parents=True)
    checkouts = {"this": REPO, **({"base": args.base.resolve()} if args.base else {})}
    runs: dict[tuple[str, str], list[dict]] = {(checkout, store): [] for checkout in checkouts for store in STORES}
    with running_postgres() as postgres:
        for round_ in range(args.repeats):
            with ExitStack() as stack:
                services, fields = {}, {}
                for checkout, store in runs:
                    data = RESULTS / "tmp" / "store-cost" / f"data-{checkout}-{store}-{round_}"
                    url = {"off": "", "SQLite": f"sqlite:///{data / 'translator.db'}",
                           "PostgreSQL": postgres.database(f"cost_{checkout}_{round_}_{int(time.time())}")}[store]
                    settings = {"data_dir": data, "store_url": url, "require_api_keys": store != "off"}
                    fields[checkout, store] = {"api_key": keyed_store(url)} if url else {}
                    log = RESULTS / "tmp" / "store-cost" / f"service-{checkout}-{store}.log"
                    services[checkout, store] = stack.enter_context(running_service(
                        MODEL_DIR, log, checkout=checkouts[checkout], threads=args.threads, log_level="warning",
                        **settings))
                for layout, service in services.items():  # warm-up
                    run_load(service.url, SENTENCES, 32, 2, fields=fields[layout])
                names = {f"{checkout} {store}": (checkout, store) for checkout, store in runs}
                alone = paired_latency({name: services[names[name]].url for name in names}, SENTENCES,
                                       args.lone_seconds, {name: fields[names[name]] for name in names})
                for layout in rotation(list(runs), round_):
                    run = {**alone[" ".join(layout)],
                           **loaded(services[layout], fields[layout], args.seconds,
                                    postgres if layout[1] == "PostgreSQL" else None)}
                    runs[layout].append(run)
                    print(f"round {round_ + 1}, {' '.join(layout)}: p50 {run['p50_ms']} ms, 32 clients "
                          f"{run['throughput_32']:.1f} sentences/s, load {run['load_1min']}", flush=True)
    rows = summary(runs)
    base = f" (--base {args.base}: {git_commit(args.base)})" if args.base else ""
    text = f"`{command_line('bench.serving.store_cost')}`{base}\n\n" + markdown_table(
        ["checkout", "store", "1 client p50 ms", "p50 vs off", "32 clients sentences/s", "rounds' range",
         "throughput vs off", "service CPU ms a request", "PostgreSQL CPU ms a request", "load (1 min)", "errors"],
        [[r["checkout"], r["layout"], r["p50_ms"], f"{r['p50_vs_off']:.3f}", f"{r['throughput_32']:.1f}",
          spread([x["throughput_32"] for x in r["rounds"]]), f"{r['throughput_vs_off']:.3f}", r["service_cpu_ms"],
          r["postgres_cpu_ms"], r["load_1min"], sum(x["errors"] for x in r["rounds"])] for r in rows])
    print(text)
    data = {**provenance("bench.serving.store_cost"),
            "environment": environment(["onnxruntime-gpu", "sqlalchemy", "psycopg", "fastapi"]),
            "base": {"checkout": str(args.base), "commit": git_commit(args.base)} if args.base else None,
            "layouts": rows}
    for path in write_results(RESULTS, "store-cost", data, text):
        print(f"wrote {path}")


def spread(values: list[float]) -> str:
    return f"{min(values):.0f}–{max(values):.0f}"


def git_commit(checkout: Path) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=checkout).stdout.strip() or "unknown"


if __name__ == "__main__":
    main()
