"""What the store costs a request: the shipped model served with keys and limits off (the store is never asked),
and with every request checked against a key with all three limits and counted in its usage, on SQLite and on
PostgreSQL (each request: the key, three limits' counters and a usage row, in one transaction).

    python -m bench.serving.store_cost [--seconds 10] [--repeats 3]

At each layout, one client's latency (p50, p99) and 32 clients' throughput, one sentence a request (wrk,
bench.serving.loadgen), in interleaved rounds; the median round of each. Results: bench/results/store-cost.{json,md}.
"""

from __future__ import annotations

import argparse
import shutil
import time

from bench.common.cli import command_line
from bench.common.defaults import MODEL_DIR, REPEATS, RESULTS, THREADS
from bench.common.machine import environment, provenance
from bench.common.postgres import running_postgres
from bench.common.report import markdown_table, median, write_results
from bench.common.sentences import SENTENCES
from bench.common.timing import rotation
from bench.serving.loadgen import run_load
from service.launch import running_service
from service.store import Store
from service.store.keys import Limits, add_key

LAYOUTS = ("off", "SQLite", "PostgreSQL")
HIGH = 10**9  # limits that are checked and counted but never reached


def keyed_store(url: str) -> str:
    """A key with every limit, made in the store at `url`; the key."""
    store = Store(url)
    with store.transaction() as session:
        _, key = add_key(session, "bench", Limits(HIGH, HIGH, HIGH))
    store.close()
    return key


def measure(settings: dict, fields: dict, seconds: float, threads: int) -> dict:
    log = RESULTS / "tmp" / "store-cost" / "service.log"
    with running_service(MODEL_DIR, log, threads=threads, log_level="warning", **settings) as service:
        run_load(service.url, SENTENCES, 32, 2, fields=fields)  # warm-up
        alone = run_load(service.url, SENTENCES, 1, seconds, fields=fields)
        many = run_load(service.url, SENTENCES, 32, seconds, fields=fields)
    return {"p50_ms": alone["latency_ms"]["p50"], "p99_ms": alone["latency_ms"]["p99"],
            "throughput_32": many["sentences_per_s"], "errors": alone["errors"] + many["errors"]}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--repeats", type=int, default=REPEATS)
    p.add_argument("--threads", type=int, default=THREADS, help="the engine's ONNX Runtime threads")
    args = p.parse_args(argv)
    shutil.rmtree(RESULTS / "tmp" / "store-cost", ignore_errors=True)  # no store of an earlier run
    (RESULTS / "tmp" / "store-cost").mkdir(parents=True)
    runs: dict[str, list[dict]] = {name: [] for name in LAYOUTS}
    with running_postgres() as postgres:
        for round_ in range(args.repeats):
            for name in rotation(list(LAYOUTS), round_):
                data = RESULTS / "tmp" / "store-cost" / f"data-{name}-{round_}"
                url = {"off": "", "SQLite": f"sqlite:///{data / 'translator.db'}",
                       "PostgreSQL": postgres.database(f"cost_{round_}_{int(time.time())}")}[name]
                settings = {"data_dir": data, "store_url": url, "require_api_keys": name != "off"}
                fields = {"api_key": keyed_store(url)} if url else {}
                run = measure(settings, fields, args.seconds, args.threads)
                runs[name].append(run)
                print(f"round {round_ + 1}, {name}: p50 {run['p50_ms']} ms, 32 clients {run['throughput_32']:.1f} "
                      "sentences/s", flush=True)
    rows, off = [], {k: median([r[k] for r in runs["off"]]) for k in ("p50_ms", "throughput_32")}
    for name in LAYOUTS:
        p50, throughput = median([r["p50_ms"] for r in runs[name]]), median([r["throughput_32"] for r in runs[name]])
        rows.append({"layout": name, "p50_ms": p50, "p50_vs_off": p50 / off["p50_ms"], "throughput_32": throughput,
                     "throughput_vs_off": throughput / off["throughput_32"], "rounds": runs[name]})
    text = f"`{command_line('bench.serving.store_cost')}`\n\n" + markdown_table(
        ["store", "1 client p50 ms", "p50 vs off", "32 clients sentences/s", "throughput vs off", "errors"],
        [[r["layout"], r["p50_ms"], f"{r['p50_vs_off']:.3f}", r["throughput_32"], f"{r['throughput_vs_off']:.3f}",
          sum(x["errors"] for x in r["rounds"])] for r in rows])
    print(text)
    data = {**provenance("bench.serving.store_cost"),
            "environment": environment(["onnxruntime-gpu", "sqlalchemy", "psycopg", "fastapi"]), "layouts": rows}
    for path in write_results(RESULTS, "store-cost", data, text):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
