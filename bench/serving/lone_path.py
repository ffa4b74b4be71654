"""What a lone client's request costs beyond its translation, ours against LibreTranslate's.

    python -m bench.serving.lone_path [--seconds 10] [--rounds 3] [--threads N] [--precision fp32|int8] [--beam 1]
                                      [--stand-ins]

A round: each server in turn (started as bench.serving.servers starts it, warmed up) serves one client for
--seconds (bench.serving.loadgen: the test sentences in turn, one a request); then each server's engine alone in a
process of its own (bench.common.processes.EngineProcess, the same threads) translates the sentences that client
sent, one at a time, texts in and out (their tokenizers' work included, which ours does in the HTTP worker when
served): ours the offline Translator with the service's spinning (`step`) and repetition guards (its settings'
defaults), LibreTranslate's CTranslate2 on the same model at the same precision.
A request's path is the server's time a request less its engine's time a sentence alone: for ours the HTTP worker,
the round trip to the engine process and the batcher; for LibreTranslate its Flask app and Argos Translate around
CTranslate2. Ours is split further by the service's metrics (/metrics): the time from the engine's queue to the
answer (translator_queue_wait_seconds and translator_inference_seconds) less the engine alone is the batcher's,
the worker's whole request (translator_request_latency_seconds, as its app sees it) less that is the HTTP worker's
and the round trip's, and the rest of the client's time a request is the client's, the connection's and the HTTP
server's around the app.
With --stand-ins each server runs a stand-in for its model: ours bench.serving.instant_model (each sentence through
the batcher, ended at its first step), LibreTranslate's bench/serving/ct2_stand_in (CTranslate2's Translator gives
the source tokens back at once: Argos Translate's sentence splitting and its tokenizer's work are in its path).
Neither engine's speed on this CPU then weighs in. What an engine alone would do of a stand-in's work is taken from
its request's time as above: for ours the search of that one step (instant_model.search_alone: core.search.search
over the stand-in's decoder, one sentence at a time, the ids made beforehand), whose bookkeeping an engine alone
does too; for LibreTranslate's nothing, its stand-in searching nothing. The tokenizers' work stays in both paths.
Reported: medians over rounds, written to bench/results/lone-path.{json,md} (with --stand-ins,
lone-path-stand-ins.{json,md}).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.common.cli import command_line, settings_of
from bench.common.defaults import LOAD_SECONDS, RESULTS
from bench.common.engines import COMPUTE_TYPES, ensure_ct2_model
from bench.common.machine import environment
from bench.common.processes import EngineProcess
from bench.common.report import markdown_table, median, write_results
from bench.common.sentences import multi30k_sentences
from bench.common.timing import rotation
from bench.serving import argos
from bench.serving.frontend import STAND_IN_BATCHED, stand_in_service
from bench.serving.instant_model import search_alone
from bench.serving.loadgen import run_load
from bench.serving.servers import add_server_arguments, running, running_libretranslate
from core.search import SearchOptions
from service.launch import RunningService
from service.settings import Settings

SERVERS = {"ours": "ort-{precision}-step", "libretranslate": "ct2-{compute_type}"}  # each server's engine alone
PACKAGES = ["onnxruntime", "onnxruntime-gpu", "ctranslate2", "fastapi", "uvicorn", "uvloop", "numpy"]
# the service's own time of what it measures, summed over the requests so far: /metrics' *_sum lines
ENGINE_SUMS = ("translator_queue_wait_seconds_sum", "translator_inference_seconds_sum")
REQUEST_SUM = "translator_request_latency_seconds_sum"


def metric_sums(url: str) -> dict[str, float]:
    """Each *_sum of the service's metrics, over every label and process."""
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=30).text):
        for sample in family.samples:
            if sample.name.endswith("_sum"):
                sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    return sums


@contextmanager
def running_stand_in(name: str, args: argparse.Namespace, log: Path) -> Iterator[RunningService]:
    """A server as bench.serving.servers.running() starts it, with a stand-in for its model (--stand-ins)."""
    if name == "ours":
        settings = {"threads": args.threads, "precision": args.precision, "beam_size": args.beam}
        with stand_in_service(log, settings, module=STAND_IN_BATCHED, model_dir=args.model_dir) as service:
            yield service
    else:
        languages = f"{args.source},{args.target}"
        with running_libretranslate(log, args.threads, COMPUTE_TYPES[args.precision], args.beam, languages,
                                    stand_in=True) as service:
            yield service


def served(name: str, args: argparse.Namespace, sentences: list[str], round_: int) -> dict:
    """One client's run against one server: ms a request, and (ours) the service's own sums over it."""
    start = running_stand_in if args.stand_ins else running
    with start(name, args, args.out / "tmp" / f"lone-path-{name}-{round_}.log") as service:
        run_load(service.url, sentences, 4, args.warmup, source=args.source, target=args.target)
        before = metric_sums(service.url) if name == "ours" else {}
        load = run_load(service.url, sentences, 1, args.seconds, source=args.source, target=args.target)
        after = metric_sums(service.url) if name == "ours" else {}
    record = {"server": name, "round": round_, "requests": load["ok"], "errors": load["errors"],
              "request_ms": 1000 * load["seconds"] / load["ok"]}  # fmt: skip
    if name == "ours":
        per_request = lambda key: 1000 * (after[key] - before.get(key, 0.0)) / load["ok"]  # noqa: E731
        record["worker_ms"] = per_request(REQUEST_SUM)
        record["engine_ms"] = sum(per_request(key) for key in ENGINE_SUMS)
    return record


def alone(engine: EngineProcess, sentences: list[str], opts: SearchOptions) -> float:
    """ms a sentence of the engine alone, one sentence at a time."""
    return 1000 * engine.run(sentences, opts, 1, in_order=True)["seconds"] / len(sentences)


def alone_ms(name: str, args: argparse.Namespace, engines: dict[str, EngineProcess], sentences: list[str],
             opts: SearchOptions) -> float:
    """ms a sentence of a server's engine alone, on the sentences its client sent; with --stand-ins, what an engine
    alone does of its stand-in's work (see the module's docstring)."""
    if not args.stand_ins:
        return alone(engines[name], sentences, opts)
    return 1000 * search_alone(args.model_dir, sentences, opts) if name == "ours" else 0.0


def measure(args: argparse.Namespace, sentences: list[str]) -> list[dict]:
    guards = Settings()  # the service's repetition guards, as its settings' defaults have them
    options = {
        "ours": SearchOptions(beam_size=args.beam, repetition_penalty=guards.repetition_penalty,
                              no_repeat_ngram_size=guards.no_repeat_ngram_size, ngram_repeats=guards.ngram_repeats),
        "libretranslate": SearchOptions(beam_size=args.beam),
    }  # fmt: skip
    names = {name: engine.format(precision=args.precision, compute_type=COMPUTE_TYPES[args.precision])
             for name, engine in SERVERS.items()}  # fmt: skip
    engines = {} if args.stand_ins else {
        name: EngineProcess(names[name], args.model_dir, args.threads, args.ct2_dir) for name in SERVERS}
    records = []
    try:
        for round_ in range(args.rounds):
            for name in rotation(list(SERVERS), round_):
                record = served(name, args, sentences, round_)
                record["engine_alone_ms"] = alone_ms(name, args, engines, sentences[: record["requests"]],
                                                     options[name])
                record["path_ms"] = record["request_ms"] - record["engine_alone_ms"]
                records.append(record)
                print(f"round {round_} {name:14s}: {record['request_ms']:.2f} ms a request, its engine alone "
                      f"{record['engine_alone_ms']:.2f} ms", file=sys.stderr)
    finally:
        for engine in engines.values():
            engine.close()
    return records


def summarize(records: list[dict]) -> dict:
    """Medians over rounds per server; ours split; the ratio of the paths."""
    summary = {}
    for name in SERVERS:
        rows = [r for r in records if r["server"] == name]
        keys = [k for k in rows[0] if k.endswith("_ms")]
        summary[name] = {key: median([r[key] for r in rows]) for key in keys} | {"rounds": len(rows)}
    ours = summary["ours"]
    ours["batcher_ms"] = ours["engine_ms"] - ours["engine_alone_ms"]
    ours["worker_and_round_trip_ms"] = ours["worker_ms"] - ours["engine_ms"]
    ours["client_and_http_ms"] = ours["request_ms"] - ours["worker_ms"]
    summary["path_ratio"] = ours["path_ms"] / summary["libretranslate"]["path_ms"]
    return summary


def markdown(result: dict) -> str:
    env, settings, s = result["environment"], result["settings"], result["summary"]
    ours, theirs = s["ours"], s["libretranslate"]
    search = "greedy" if settings["beam"] == 1 else f"beam {settings['beam']}"
    stand_ins = settings.get("stand_ins", False)
    alone = lambda r: f"{r['engine_alone_ms']:.2f}"  # noqa: E731
    rows = [[name, f"{r['request_ms']:.2f}", alone(r), f"{r['path_ms']:.2f}"]
            for name, r in (("ours", ours), ("libretranslate", theirs))]  # fmt: skip
    models = ("Each server with a stand-in for its model (bench.serving.lone_path --stand-ins): its engine alone is "
              "what an engine alone does of the stand-in's work, ours the search of its one step, LibreTranslate's "
              "none. " if stand_ins else "")
    raw = (f"\nWith nothing taken from the requests' times (the stand-ins' whole time as the path): "
           f"{ours['request_ms'] / theirs['request_ms']:.2f}×." if stand_ins else "")
    split = [
        ["the engine alone (offline, one sentence at a time" + (": the stand-in's search" if stand_ins else "") + ")",
         alone(ours)],
        ["the engine process beyond it: queue, batcher, metrics", f"{ours['batcher_ms']:.2f}"],
        ["the HTTP worker's app beyond its engine's answer, the round trip to the engine",
         f"{ours['worker_and_round_trip_ms']:.2f}"],
        ["the client, the connection and the HTTP server around the app", f"{ours['client_and_http_ms']:.2f}"],
    ]
    return (
        f"Machine: {env['cpu']}, {env['cores']} cores. {models}{settings['threads']} inference threads, "
        f"{settings['precision']}, {search}; one client, {settings['seconds']:g} s a round, {settings['rounds']} "
        "rounds (medians); one test sentence a request.\n\n"
        + markdown_table(["server", "ms a request", "its engine alone, ms a sentence", "the path, ms"], rows)
        + f"\nOur path over LibreTranslate's: {s['path_ratio']:.2f}×.{raw}\n\nOur request, ms:\n\n"
        + markdown_table(["where", "ms"], split)
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_arguments(p)  # its --beam the engines' alone too
    p.add_argument("--seconds", type=float, default=LOAD_SECONDS / 2, help="one client's time a server a round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--stand-ins", action="store_true", help="stand-ins for both servers' models")
    p.add_argument("--out", type=Path, default=RESULTS, help="where lone-path.json and lone-path.md go")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    sentences = multi30k_sentences(lang=args.source)
    argos.ensure_venv()
    args.ct2_dir = ensure_ct2_model(args.model_dir, args.ct2_dir)
    argos.install_packages(args.ct2_dir, args.source, args.target, args.out / "tmp" / "argos")
    records = measure(args, sentences)
    env = environment(PACKAGES)
    env["libretranslate_venv"] = argos.versions()
    result = {"environment": env, "settings": settings_of(args, "out"),
              "command": command_line("bench.serving.lone_path", argv), "summary": summarize(records),
              "runs": records}  # fmt: skip
    name = "lone-path-stand-ins" if args.stand_ins else "lone-path"
    print("\n".join(str(p) for p in write_results(args.out, name, result, markdown(result))))


if __name__ == "__main__":
    main()
