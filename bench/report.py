"""BENCHMARKS.md, generated from the result files under bench/results: one section per question; and README.md's
table of headline figures.

    python -m bench.report           write BENCHMARKS.md and README.md's table
    python -m bench.report --check   exit 1 when either differs from what the results give

Each question names its result files; each file's provenance (commit, date, machine, command) is the one
bench.common.report.write_results recorded in it. A file under bench/results that no question names is an error:
a superseded result leaves the folder (git's history keeps it), a new one gets a question here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.common.defaults import REPO, RESULTS

OUTPUT = REPO / "BENCHMARKS.md"
README = REPO / "README.md"
README_BEGIN, README_END = "<!-- benchmarks-table:begin -->", "<!-- benchmarks-table:end -->"
# the questions whose headline figures README.md shows
README_QUESTIONS = [
    "Our service against LibreTranslate", "Ours against CTranslate2, the full grid, one thread",
    "Dynamic batching under load",
    "A lone sentence behind heavy requests", "The GPU: one H200", "The CPU image beside LibreTranslate's",
]  # fmt: skip
IGNORED = {"tmp"}  # bench/results/tmp: scratch of the benchmarks (git-ignored)


@dataclass(frozen=True)
class Figure:
    """One measured figure and its ratio against the question's anchor."""

    what: str
    value: str
    ratio: str
    source: int = 0  # the index of the question's result file it comes from


@dataclass(frozen=True)
class Question:
    title: str
    measures: str
    anchor: str  # what the ratio is against: CTranslate2, LibreTranslate, a goal, a setting's other value
    files: tuple[str, ...]  # under bench/results; the first one's provenance heads the section
    figures: Callable[[list[dict]], list[Figure]]
    note: str = ""  # what the figures do not cover (e.g. changes since a GPU run)
    headline: tuple[int, ...] = (0,)  # the figures the summary shows

    @property
    def anchor_id(self) -> str:
        """The id GitHub gives the section's heading: lower case, punctuation but hyphens dropped, spaces hyphens."""
        return "".join(c for c in self.title.lower() if c.isalnum() or c in " -").replace(" ", "-")


# --- the figures of each question ---------------------------------------------------------------------------------


def per_s(value: float, unit: str = "sentences/s") -> str:
    return f"{value:,.1f} {unit}" if value < 100 else f"{value:,.0f} {unit}"


def times(ratio: float) -> str:
    return f"{ratio:.2f}×"


def mib(value: float) -> str:
    return f"{value:,.0f} MiB"


def clients_text(clients: int) -> str:
    return f"{clients} client" + ("s" if clients != 1 else "")


def goal(ratio: float, wanted: str, met: bool) -> str:
    """A ratio against a goal: "R× the goal (≥ G): not met"."""
    return f"{times(ratio)} the goal ({wanted}): {'met' if met else 'not met'}"


def verdict(wanted: str, met: bool) -> str:
    """Where the figure is itself the ratio the goal is about: "goal ≤ 0.3×: met"."""
    return f"goal {wanted}: {'met' if met else 'not met'}"


def decode(results: list[dict]) -> list[Figure]:
    rows = {(r["engine"], r["batch_size"], r["beam_size"]): r for r in results[0]["summary"]}
    nocache = rows["ort-fp32", 1, 1]["speedup_vs_pytorch-nocache"]
    figures = [Figure("ONNX Runtime fp32 over PyTorch without a cache, greedy, batch 1", times(nocache),
                      verdict("≥ 5×", nocache >= 5))]
    for (engine, batch, beam), r in sorted(rows.items(), key=lambda kv: (kv[0][2], kv[0][1])):
        if engine == "ort-fp32":
            search = "greedy" if beam == 1 else f"beam {beam}"
            ratio = r["speedup_vs_pytorch-cache"]
            figures.append(Figure(f"ONNX Runtime fp32 over PyTorch with a cache, {search}, batch {batch}",
                                  times(ratio), verdict("> 1×", ratio > 1)))
    return figures


def load(results: list[dict]) -> list[Figure]:
    runs, ratio = results[0]["runs"], results[0]["throughput_ratio"]
    return [
        Figure("dynamic batching over batch size 1, 32 clients", times(ratio), verdict("≥ 3×", ratio >= 3)),
        Figure("dynamic batching, 32 clients", per_s(runs["batching"]["sentences_per_s"]), ""),
    ]


ENGINE_NAMES = {"ort-fp32": "ours fp32", "ort-int8": "ours int8"}


def engines(results: list[dict]) -> list[Figure]:
    """Our engines' rows, each against CTranslate2 at the same precision, batch and beam; of each run where a
    question has several."""
    figures = []
    for source, data in enumerate(results):
        run = f"run {source + 1}, " if len(results) > 1 else ""
        for r in sorted(data["summary"], key=lambda r: (r["engine"], r["beam_size"], r["batch_size"])):
            if r["engine"] in ENGINE_NAMES and r["ratio_to_ct2"] is not None:
                search = "greedy" if r["beam_size"] == 1 else f"beam {r['beam_size']}"
                figures.append(Figure(f"{run}{ENGINE_NAMES[r['engine']]}, {search}, batch {r['batch_size']}",
                                      per_s(r["sentences_per_s"]), f"{times(r['ratio_to_ct2'])} CTranslate2", source))
    return figures


def converted(results: list[dict]) -> list[Figure]:
    """A converted model: conversion and export time and peak memory, the service's memory serving it."""
    data, figures = results[0], []
    for step, s in data["steps"].items():
        figures += [Figure(f"{step}: time", f"{s['seconds']:.0f} s", ""),
                    Figure(f"{step}: peak RSS", mib(s["peak_rss_mib"]), "")]  # fmt: skip
    serve = data["serve"]
    figures += [
        Figure(f"the service serving it ({serve['precision']}): RSS of its process tree, ready",
               mib(serve["rss_ready_mib"]), ""),
        Figure("requests answered", f"{serve['answered']} of {serve['requests']}", ""),
    ]
    return figures


def servers(results: list[dict]) -> list[Figure]:
    """Our throughput over LibreTranslate's (against #46's goals where it has one), ours alone, and the process
    trees' memory, by clients."""
    by = {(r["server"], r["concurrency"]): r for r in results[0]["summary"]}
    goals = {1: 1.2, 8: 2.5, 32: 2.5}  # #46's
    clients_run = sorted({c for _, c in by})
    figures = []
    for clients in clients_run:
        ratio = by["ours", clients]["sentences_per_s"] / by["libretranslate", clients]["sentences_per_s"]
        wanted = goals.get(clients)
        figures.append(Figure(f"throughput over LibreTranslate's, {clients_text(clients)}", times(ratio),
                              verdict(f"≥ {wanted}×", ratio >= wanted) if wanted else ""))
    for clients in clients_run:
        figures.append(Figure(f"our throughput, {clients_text(clients)}", per_s(by["ours", clients]["sentences_per_s"]),
                              ""))
    for clients in clients_run:
        ours, peer = by["ours", clients], by["libretranslate", clients]
        figures.append(Figure(f"RSS of the whole process tree after {clients_text(clients)}", mib(ours["rss_mib"]),
                              f"{times(ours['rss_mib'] / peer['rss_mib'])} LibreTranslate"))
    return figures


def lone_path(results: list[dict]) -> list[Figure]:
    """A lone request's path (its time less its engine's alone, both models stood in or not), ours over
    LibreTranslate's against #46's goal (no more), and where ours goes."""
    summary = results[0]["summary"]
    ours, theirs, ratio = summary["ours"], summary["libretranslate"], summary["path_ratio"]
    stand_ins = results[0]["settings"].get("stand_ins", False)
    path = "a request's time less its engine's alone" + (", both models stood in" if stand_ins else "")
    return [
        Figure(f"our path ({path}) over LibreTranslate's", times(ratio), verdict("≤ 1×", ratio <= 1)),
        Figure("our path", f"{ours['path_ms']:.2f} ms", f"{times(ratio)} LibreTranslate's"),
        Figure("LibreTranslate's path", f"{theirs['path_ms']:.2f} ms", ""),
        Figure("our request at one client", f"{ours['request_ms']:.2f} ms",
               f"{times(ours['request_ms'] / theirs['request_ms'])} LibreTranslate's"),
        Figure("of it, the engine process beyond the engine alone (queue, batcher, metrics)",
               f"{ours['batcher_ms']:.2f} ms", ""),
        Figure("of it, the HTTP worker's app beyond its engine's answer, and the round trip to the engine",
               f"{ours['worker_and_round_trip_ms']:.2f} ms", ""),
        Figure("of it, the client, the connection and the HTTP server around the app",
               f"{ours['client_and_http_ms']:.2f} ms", ""),
    ]


def frontend(results: list[dict]) -> list[Figure]:
    rate = next(r for r in results[0]["by_workers"] if r["workers"] == 1)["sentences_per_s"]
    figures = [Figure("HTTP front end alone (a stand-in engine), one worker", per_s(rate, "requests/s"),
                      goal(rate / 1000, "≥ 1,000 requests/s", rate >= 1000))]
    by = {(r["layout"], r["concurrency"]): r for r in results[0]["by_clients"]}
    for clients in sorted({c for _, c in by}):
        workers, alone = by["HTTP workers", clients], by["one process", clients]
        ratio = workers["sentences_per_s"] / alone["sentences_per_s"]
        figures.append(Figure(f"HTTP workers, shipped model, {clients_text(clients)}",
                              per_s(workers["sentences_per_s"]), f"{times(ratio)} one process"))
    return figures


def lone(results: list[dict]) -> list[Figure]:
    ratios = [run["ratio"] for run in results[0]["lone"]["this"]["runs"]]
    median = statistics.median(ratios)
    return [Figure(f"a lone greedy sentence's time over four heavy requests' (median of {len(ratios)})",
                   f"{median:.3f}×", verdict("≤ 0.3×", median <= 0.3))]


MICRO_GOALS = {"beam 1, batch 1": 0.5, "beam 4, batch 1": 0.5, "beam 4, batch 16": 0.7}


def micro(results: list[dict]) -> list[Figure]:
    """Time ratios (the inverse of the speed ratios) of this checkout's micro model against the other's."""
    figures = []
    for shape, speed in results[0]["ratio"].items():
        wanted = MICRO_GOALS.get(shape)
        figures.append(Figure(f"{shape.replace('beam 1', 'greedy')}: time over 36dfb15's", f"{1 / speed:.3f}×",
                              verdict(f"≤ {wanted}×", 1 / speed <= wanted) if wanted else ""))
    return figures


def checkouts(results: list[dict]) -> list[Figure]:
    """Speed ratios of this checkout against the other: offline (bench.offline.checkouts), one figure a shape of
    each result (a precision); served (bench.serving.checkouts), its throughput at its clients."""
    figures = []
    for source, data in enumerate(results):
        if data.get("paired"):  # served, one client alternating between the two
            models = {"echo": "stand-in models", "batched": "stand-in models through the batcher"}
            served = ", ".join(["served", *([models[data["stand_in"]]] if data["stand_in"] else []),
                                "one client alternating between the two"])
            this, base = data["median"]["this"], data["median"]["base"]
            ratio = f"{times(data['ratio'])} the base's"
            figures += [Figure(f"{served}: p50 latency", f"{this['p50_ms']:.2f} ms", ratio, source),
                        Figure(f"{served}: the base's p50 latency", f"{base['p50_ms']:.2f} ms", "", source)]
            if "mean_ms" in this:  # what a lone client's rate reads
                figures.append(Figure(f"{served}: mean latency", f"{this['mean_ms']:.2f} ms",
                                      f"{times(this['mean_ms'] / base['mean_ms'])} the base's", source))
            continue
        if "precision" not in data:  # served
            clients = data["runs"]["this"][0]["concurrency"]
            served = f"served, {clients_text(clients)}"
            if data.get("stand_in"):  # with this checkout's settings: two results of one question differ in them
                served = ", ".join(["served, stand-in models", clients_text(clients),
                                    *(f"{name}={value}" for name, value in data["settings"]["this"].items())])
            this, base = data["median"]["this"], data["median"]["base"]
            figures.append(Figure(f"{served}: throughput", per_s(this["sentences_per_s"]),
                                  f"{times(data['ratio'])} the base", source))
            if data.get("stand_in"):  # a request's time is its path's
                figures.append(Figure(f"{served}: p50 latency", f"{this['p50_ms']:.1f} ms",
                                      f"{times(this['p50_ms'] / base['p50_ms'])} the base's", source))
            continue
        threads = data.get("threads", 1)
        engine = data["precision"] if threads == 1 else f"{data['precision']} on {threads} threads"
        figures += [Figure(f"{engine}, {shape.replace('beam 1', 'greedy')}: speed over "
                           f"{data['checkouts']['other']}'s", f"{speed:.2f}×", "", source)
                    for shape, speed in data["ratio"].items()]
    return figures


def profile(results: list[dict]) -> list[Figure]:
    figures = []
    for data in results:
        for run in data["runs"]:
            what = f"{data['settings']['precision']}, beam {run['beam_size']}, batch {run['batch_size']}"
            runtime = run["share"]["encoder"] + run["share"]["decoder"]
            figures += [
                Figure(f"{what}: our time", f"{run['seconds']:.2f} s",
                       f"{times(run['seconds'] / run['ct2_seconds'])} CTranslate2's"),
                Figure(f"{what}: ONNX Runtime's share of it", f"{100 * runtime:.0f} %", ""),
            ]
    return figures


def projection_bound(results: list[dict]) -> list[Figure]:
    figures = []
    for run in results[0]["runs"]:
        search = "greedy" if run["beam"] == 1 else f"beam {run['beam']}"
        what = f"{search}, batch {run['batch_size']}"
        ours, theirs = run["engine_s"]["ours"], run["engine_s"]["ctranslate2"]
        figures += [
            Figure(f"{what}: our time", f"{ours:.2f} s", f"{times(ours / theirs)} CTranslate2's"),
            Figure(f"{what}: the projection alone ({run['bound_s']:.2f} s), a share of our time",
                   f"{100 * run['bound_share']['ours']:.0f} %", ""),
            Figure(f"{what}: the same, a share of CTranslate2's", f"{100 * run['bound_share']['ctranslate2']:.0f} %",
                   ""),
        ]
    return figures


def spin(results: list[dict]) -> list[Figure]:
    engines_result, *served = results
    rows = {(r["engine"], r["beam_size"], r["batch_size"]): r for r in engines_result["summary"]}
    figures = []
    for (engine, beam, batch), r in sorted(rows.items()):
        if not engine.endswith("-nospin"):
            off = rows[f"{engine}-nospin", beam, batch]
            search = "greedy" if beam == 1 else f"beam {beam}"
            ratio = r["sentences_per_s"] / off["sentences_per_s"]
            figures.append(Figure(f"offline, {engine.removeprefix('ort-')}, {search}, batch {batch}",
                                  per_s(r["sentences_per_s"]), f"{times(ratio)} not spinning"))
    modes = {"true": "always", "false": "never"}  # the setting was a boolean
    for source, data in enumerate(served, start=1):
        clients = data["runs"]["this"][0]["concurrency"]
        this, base = (modes.get(s["spin_threads"], s["spin_threads"]) for s in data["settings"].values())
        figures.append(Figure(f"served, {this}, {clients_text(clients)}",
                              per_s(data["median"]["this"]["sentences_per_s"]), f"{times(data['ratio'])} {base}",
                              source))
    return figures


def gpu_check(results: list[dict]) -> list[Figure]:
    figures = []
    for source, data in enumerate(results):
        run = ("first run", "second run", "third run")[source]
        for g in data["goals"]:
            value = g["measured"]
            shown = f"{100 * value:.1f} %" if value <= 1 else per_s(value)
            wanted = f"≥ {100 * g['want']:.0f} %" if g["want"] <= 1 else f"≥ {g['want']:,}"
            figures.append(Figure(f"{run}, {g['engine']}: {g['goal']}", shown,
                                  goal(value / g["want"], wanted, g["met"]), source))
    return figures


def gpu_kernels(results: list[dict]) -> list[Figure]:
    runs = results[0]["runs"]
    eager = {(r["beam"], r["batch_size"]): r["ms_per_step"] for r in runs if r["decoder"] == "eager"}
    figures = []
    for r in runs:
        search = "greedy" if r["beam"] == 1 else f"beam {r['beam']}"
        name = f"{r['decoder']}, {search}, batch {r['batch_size']}"
        step = eager[r["beam"], r["batch_size"]]
        figures += [Figure(f"{name}: the GPU busy", f"{100 * r['busy_share']:.0f} % of a step", ""),
                    Figure(f"{name}: a step, wall time", f"{r['ms_per_step']:.2f} ms",
                           "" if r["decoder"] == "eager" else f"{times(r['ms_per_step'] / step)} eager's")]
    return figures


def max_rows(results: list[dict]) -> list[Figure]:
    scores = results[0]["best"]["scores"]
    return [Figure("fp32 with CUDA graphs, bound 256 rows, the probe's score", per_s(scores["fp32-graphs-256"]),
                   f"{times(scores['fp32-graphs-256'] / scores['fp32-graphs-64'])} bound 64")]


def detect(results: list[dict]) -> list[Figure]:
    figures = []
    for row in results[0]["rows"]:
        short = row["accuracy"]["tatoeba_1to4"]
        right, total = sum(v["right"] for v in short.values()), sum(v["total"] for v in short.values())
        name = f"{row['detector']} ({len(row['languages'])} languages loaded)"
        figures += [Figure(f"{name}: right on Tatoeba sentences of 1 to 4 words", f"{100 * right / total:.1f} %", ""),
                    Figure(f"{name}: load time", f"{row['load_s']:.2f} s", ""),
                    Figure(f"{name}: memory added", mib(row["rss_added_mib"]), "")]  # fmt: skip
    return figures


def splitters(results: list[dict]) -> list[Figure]:
    figures = []
    for r in results[0]["results"]:
        name = f"{r['splitter']}, {r['language']}"
        figures += [Figure(f"{name}: texts split right", f"{r['right']} of {r['texts']}", ""),
                    Figure(f"{name}: time a text", f"{r['median_us_per_text']:.1f} µs", "")]  # fmt: skip
    return figures


def placeholders(results: list[dict]) -> list[Figure]:
    figures = []
    for model, r in results[0]["results"].items():
        if not model.endswith("-before"):
            figures += [Figure(f"{model}: protected spans copied by the model", f"{100 * r['copied']:.0f} %", ""),
                        Figure(f"{model}: spans back exact", f"{100 * r['all_spans_exact']:.0f} %", "")]  # fmt: skip
    return figures


def document(results: list[dict]) -> list[Figure]:
    f = results[0]["figures"]
    what = f"a {f['bytes'] / 1e6:.1f} MB .docx ({f['sentences']:,} sentences) in one request"
    return [Figure(what, f"{f['seconds']:.0f} s", ""),
            Figure("its paragraphs back", f"{f['paragraphs_back']:,} of {f['paragraphs']:,}", "")]  # fmt: skip


def soak(results: list[dict]) -> list[Figure]:
    data = results[0]
    rss, statuses = data["rss"], data["served_statuses"]
    growth = rss["growth_percent"]
    return [
        Figure("RSS growth of the whole process tree, first minute to last", f"{growth:+.1f} %",
               verdict("< +10 %", data["goal"]["rss_growth_under_10_percent"])),
        Figure("RSS in the last minute", mib(rss["last_window_median_mib"]), ""),
        Figure("responses 500", str(statuses.get("500", 0)), verdict("none", data["goal"]["no_500"])),
    ]


def hostile(results: list[dict]) -> list[Figure]:
    load_result, protocol = results[0], results[1]
    load_ = load_result["load"]
    bounded = protocol["protocol"]["bounded"]["median_requests_per_s"]
    plain = protocol["protocol"]["httptools"]["median_requests_per_s"]
    return [
        Figure(f"{load_['clients']} clients, {load_['sentences']} sentences each at beam {load_['beam_size']}: 503s "
               "with Retry-After", f"{load_['503_with_retry_after']} of {sum(load_['statuses'].values())}", ""),
        Figure("other responses 5xx", str(load_["other_5xx"]), verdict("none", load_["other_5xx"] == 0)),
        Figure("a stopped engine: /ready answers 503 after", f"{load_result['stall']['ready_503_after_s']:.1f} s", ""),
        Figure("the bounded HTTP protocol", per_s(bounded, "requests/s"), f"{times(bounded / plain)} httptools alone"),
    ]


def cached_start(results: list[dict]) -> list[Figure]:
    data = results[0]
    plain, cached = data["medians"]["plain folder"], data["medians"]["cache (TRANSLATOR_MODELS)"]
    return [
        Figure("a second start from the model cache over the plain folder's, to /ready", times(cached / plain),
               verdict("≤ 1.1×", cached <= 1.1 * plain)),
        Figure("a second start from the model cache, to /ready", f"{cached:.1f} s", ""),
        Figure("the same model from a plain folder, to /ready", f"{plain:.1f} s", ""),
    ]


def image_start(results: list[dict]) -> list[Figure]:
    data = results[0]
    quiet = [r["seconds"] for r in data["rounds"] if r["load_1min"] < data["cores"]]
    return [
        Figure("the CPU image, `podman run` to /ready (median)", f"{data['median_s']:.1f} s",
               verdict("≤ 10 s", data["median_s"] <= data["goal_s"])),
        Figure("starts within 10 s", f"{data['within_goal']} of {len(data['rounds'])}", ""),
        Figure(f"starts at a load below the cores ({data['cores']}): longest",
               f"{max(quiet):.1f} s" if quiet else "none", ""),
    ]


def exact_limits(results: list[dict]) -> list[Figure]:
    data = results[0]
    exact = sum(window["200"] == data["limit"] for window in data["windows"])
    return [Figure(f"windows of {data['window_s']} s in which exactly the limit ({data['limit']}) was accepted",
                   f"{exact} of {len(data['windows'])}", verdict("N ± 0", data["exact"]))]


def store_cost(results: list[dict]) -> list[Figure]:
    """This checkout's layouts against the goal; the base checkout's, when measured side by side, after them."""
    figures = []
    for layout in results[0]["layouts"]:
        if layout["layout"] == "off":
            continue
        where = layout["layout"] if layout["checkout"] == "this" else \
            f"{layout['layout']} at {results[0]['base']['commit']} (the base)"
        load = f" (load {layout['load_1min']:.1f})"
        p50, throughput = layout["p50_vs_off"], layout["throughput_vs_off"]
        figures.append(Figure(f"{where}: a lone client's p50 over the store off{load}", times(p50),
                              verdict("≤ 1.05×", p50 <= 1.05)))
        figures.append(Figure(f"{where}: 32 clients' throughput over the store off{load}", times(throughput),
                              verdict("≥ 0.95×", throughput >= 0.95)))
    return figures


def real_world(results: list[dict]) -> list[Figure]:
    r = results[0]["results"]
    figures = [Figure(f"numbers kept or localized, {pair}", f"{n['kept_percent']:.1f} %",
                      verdict("100 %", n["kept_percent"] == 100)) for pair, n in r["numbers"].items()]
    collisions = r["collisions"]
    figures.append(Figure(f"placeholder collisions in {collisions['texts']} texts",
                          str(collisions["collisions"]), verdict("0", collisions["collisions"] == 0)))
    worst = min(r["bleu"][name]["bleu"] - r["bleu_baseline"][name]["bleu"] for name in r["bleu"])
    figures.append(Figure("BLEU on the test sets, the largest change", f"{worst:+.2f}",
                          verdict("≥ -0.5", worst >= -0.5)))
    for pair, long in r["long"].items():
        done = long["translated_percent"]
        figures.append(Figure(f"{long['words']}-word sentences translated, {pair}", f"{done:.0f} %",
                              verdict("100 %", done == 100)))
    for name, caps in r["capitals"].items():
        gap = caps["chrf_capitals"] - caps["chrf_ordinary"]
        figures.append(Figure(f"capitals' chrF minus ordinary case's, {name}", f"{gap:+.1f}",
                              verdict("≥ -5", gap >= -5)))
    unserved = r["unserved"]
    figures.append(Figure(f"unserved languages refused with auto ({unserved['sentences']} sentences)",
                          f"{unserved['refused_percent']:.1f} %", verdict("≥ 95 %", unserved["refused_percent"] >= 95)))
    figures.append(Figure("en and de test sentences refused with auto", f"{unserved['en_de_refused_percent']:.2f} %",
                          verdict("≤ 0.5 %", unserved["en_de_refused_percent"] <= 0.5)))
    same = [m["same_words_percent"] for m in r["markup"].values()]
    sentences = [m["sentences"] for m in r["markup"].values()]
    overall = sum(p * n for p, n in zip(same, sentences)) / sum(sentences)
    figures.append(Figure("inline markup: the same words as without it, both directions", f"{overall:.1f} %",
                          verdict("≥ 95 %", overall >= 95)))
    return figures


def engines_memory(results: list[dict]) -> list[Figure]:
    memory = results[0]["memory"]
    figures = []
    for ours, theirs in (("ort-fp32", "ct2-float32"), ("ort-int8", "ct2-int8")):
        ratio = memory[ours]["peak_rss_mib"] / memory[theirs]["peak_rss_mib"]
        figures.append(Figure(f"{ours}'s worker, peak RSS over {theirs}'s", times(ratio),
                              verdict("≤ 1.2×", ratio <= 1.2)))
        figures.append(Figure(f"{ours}'s worker, peak RSS", mib(memory[ours]["peak_rss_mib"]), ""))
    return figures


def document_bombs(results: list[dict], key: str = "bombs") -> list[Figure]:
    figures = []
    for name, bomb in results[0][key].items():
        if name == "load_average_after":
            continue
        growth, after = bomb["worker_rss_growth_mib"], bomb["worker_rss_10s_after_over_idle_mib"]
        figures.append(Figure(f"{name} (answered {bomb['got']}): a worker's RSS growth", mib(growth),
                              verdict("≤ 100 MiB", growth <= 100)))
        figures.append(Figure(f"{name}: its RSS 10 s after, over idle", mib(after), verdict("≤ 50 MiB", after <= 50)))
    return figures


def answered_bombs(results: list[dict]) -> list[Figure]:
    return document_bombs(results, "bombs_answered")


def hostile_documents(results: list[dict]) -> list[Figure]:
    data = results[0]
    figures = document_bombs(results)
    uploads = data["uploads"]
    figures.append(probe_p99(f"while {uploads['clients']} clients upload 1 MB documents", uploads))
    if "worker_rss_10s_after_over_idle_mib" in uploads:
        after = uploads["worker_rss_10s_after_over_idle_mib"]
        figures.append(Figure("the workers' RSS 10 s after those uploads, over idle", mib(after),
                              verdict("≤ 50 MiB", after <= 50)))
    for label, case in data.get("paragraph", {}).items():
        figures.append(probe_p99(f"while {case['clients']} clients upload a 1 MB paragraph ({label})", case))
    for key, what in (("refused", "whose clients hang up"), ("refused_503", "refused 503")):
        if key in data:
            idle = data[key]["engine_idle_after_last_answer_or_hang_up_s"]
            figures.append(Figure(f"the engine idle after {data[key]['documents']} documents {what}",
                                  f"{idle:.2f} s", goal(idle / 2, "≤ 2 s", idle <= 2)))
    return figures


def images(results: list[dict]) -> list[Figure]:
    ours, theirs = results[0]["images"]["ours"], results[0]["images"]["libretranslate"]

    def mb(size: int) -> str:
        return f"{size / 1e6:,.0f} MB" if size else "none"

    lt = f"LibreTranslate {theirs['version']}"
    return [
        Figure(f"our CPU image (podman's .Size), which carries {ours['carries']}", mb(ours["bytes"]),
               f"{times(ours['bytes'] / theirs['bytes'])} {lt}'s; goal ≤ 450 MB: "
               f"{'met' if ours['bytes'] <= 450e6 else 'not met'}"),
        Figure(f"{lt}'s image, from its Dockerfile, which carries {theirs['carries']}", mb(theirs["bytes"]), ""),
        Figure("ours above its Debian base", mb(ours["above_base_bytes"]),
               f"{times(ours['above_base_bytes'] / theirs['above_base_bytes'])} {lt}'s"),
        Figure(f"{lt}'s above its base", mb(theirs["above_base_bytes"]), ""),
        Figure("the models in ours (/app/models)", mb(ours["folders"]["/app/models"]), ""),
        Figure(f"the models in {lt}'s (/home/libretranslate/.local)",
               mb(theirs["folders"]["/home/libretranslate/.local"]), "downloaded at its first start"),
    ]


def paragraph_runs(results: list[dict]) -> list[Figure]:
    case = results[0]["paragraph_runs"]
    ours, before = case["this checkout"], case["baseline"]
    cpu = statistics.median(r["service_cpu_s"] for r in ours)
    cpu_before = statistics.median(r["service_cpu_s"] for r in before)
    seconds = statistics.median(r["seconds"] for r in ours)
    load = max(r["load_average_after"][0] for r in ours + before)
    return [
        Figure(f"a .docx paragraph of {case['runs']:,} runs: the service's CPU, median of {len(ours)} "
               f"(load up to {load:g})", f"{cpu:.1f} s", f"{times(cpu / cpu_before)} the code before"),
        Figure("the same with the code before", f"{cpu_before:.1f} s", ""),
        Figure("its answer's time, median", f"{seconds:.1f} s",
               f"{times(seconds / statistics.median(r['seconds'] for r in before))} the code before"),
    ]


def threads_or_process(results: list[dict]) -> list[Figure]:
    runs = results[0]["threads_or_process"]
    figures = []
    for case, what, unit in (("1 MB for 30 s", "a probe's p99 while 50 clients upload 1 MB", "p99_s"),
                             ("50 kB answered", "a probe's p99 while 50 clients upload 50 kB", "p99_s")):
        thread = statistics.median(r[case]["probe"][unit] for r in runs["thread"])
        process = statistics.median(r[case]["probe"][unit] for r in runs["process"])
        figures += [Figure(f"{what}, documents in a thread (median of {len(runs['thread'])})", f"{thread:.2f} s",
                           f"{times(thread / process)} in a process"),
                    Figure(f"{what}, documents in a process", f"{process:.2f} s", "")]
    peak = {label: statistics.median(max(r["1 MB for 30 s"]["worker_peak_rss_over_idle_mib"]) for r in rows)
            for label, rows in runs.items()}
    what = "the larger HTTP worker's peak RSS over idle with the processes it started, 1 MB uploads"
    figures += [Figure(f"{what}, documents in a thread", mib(peak["thread"]),
                       f"{times(peak['thread'] / peak['process'])} in a process"),
                Figure(f"{what}, documents in a process", mib(peak["process"]), "")]
    last = {label: statistics.median(r["50 kB answered"]["last_answer_s"] for r in rows)
            for label, rows in runs.items()}
    figures += [Figure("50 uploads of 50 kB: the last answer, documents in a thread", f"{last['thread']:.1f} s",
                       f"{times(last['thread'] / last['process'])} in a process"),
                Figure("50 uploads of 50 kB: the last answer, documents in a process", f"{last['process']:.1f} s", "")]
    return figures


def probe_p99(during: str, case: dict) -> Figure:
    """The figure of a probe's p99 latency against the goal of 1 s."""
    p99 = case["probe"]["p99_s"]
    load = f" (load {case['load_average_after'][0]:g})" if "load_average_after" in case else ""
    return Figure(f"a probe's p99 {during}{load}", f"{p99:.2f} s", goal(p99, "≤ 1 s", p99 <= 1))


def glossary(results: list[dict]) -> list[Figure]:
    r = results[0]["results"]
    used, without = r["with glossary"], r["without glossary"]
    return [
        Figure("target term in the translation, with the glossary", f"{100 * used['term_share']:.1f} %",
               f"{times(used['term_share'] / without['term_share'])} without it"),
        Figure("chrF against references with the terms, with the glossary", f"{used['chrf']:.1f}",
               f"{times(used['chrf'] / without['chrf'])} without it"),
    ]


def deepl_document(results: list[dict]) -> list[Figure]:
    f = results[0]["figures"]
    ratio, longest = float(f["ratio"]), float(f["longest_request_wait_s"])
    return [
        Figure(f"a .docx of {f['bytes']:,} bytes: /v2/document's time, upload to result, over /translate_file's",
               times(ratio), verdict("≤ 1.1×", ratio <= 1.1)),
        Figure("the longest any request waited meanwhile (a probe's /translate, the job's status and result)",
               f"{longest:.2f} s", verdict("≤ 1 s", longest <= 1)),
        Figure("the same translated text as /translate_file's", "yes" if f["same_text"] else "no",
               verdict("the same", f["same_text"])),
    ]


# --- the questions ------------------------------------------------------------------------------------------------

CPU_SINCE = "The service's CPU code has changed since this commit; the figures are not remeasured."

QUESTIONS = [
    Question(
        "Offline decoding against PyTorch",
        "Sentences per second of our ONNX Runtime translator (KV cache) against PyTorch without and with a cache, "
        "same search, same threads, the shipped en-de model, Multi30k test sentences.",
        "PyTorch (without a cache: the goal ≥ 5× at batch 1 greedy; with one: > 1× in every row)",
        ("decode.json",), decode, CPU_SINCE,
    ),
    Question(
        "Dynamic batching under load",
        "The service's throughput with dynamic batching against the same service at batch size 1, 32 closed-loop "
        "clients each sending one sentence per request.",
        "the goal: ≥ 3× batch size 1", ("load.json",), load, CPU_SINCE,
    ),
    Question(
        "Ours against CTranslate2, beam 4, one thread",
        "Sentences per second of beam 4 at batch 16 and 64 on the same weights, our engine against CTranslate2 at the "
        "same precision, one inference thread each, 3 interleaved rounds (medians).",
        "CTranslate2 (the goal: ≥ 1.0×)", ("engines-cross-from-run2.json",), engines,
    ),
    Question(
        "Ours against CTranslate2, the full grid, one thread",
        "Batch sizes 1, 16 and 64, greedy and beam 4, fp32 and int8, one thread each (CTranslate2 with two threads ran "
        "several times slower than with one on these virtual machines, so the comparison is at one thread), after "
        "the decoder step's projections came to read the weights in fp16 (a3b13de).",
        "CTranslate2 (the goals: ≥ 1.3× at batch 1 and 16, ≥ 1.05× at batch 64)", ("engines-1thread/engines.json",),
        engines, "Measured with nothing else running, three rounds. Every cell meets its goal: the lowest ratios are "
        "fp32's at batch 64, 1.22× greedy and 1.24× beam 4. Peak RSS of the engines' worker processes: fp32 186.0 "
        "against 198.1 MiB (0.94× CTranslate2's), int8 158.3 against 177.1 MiB (0.89×). Before the change (the "
        "runs at 6d42b04 and d1acfe8) fp32 at batch 16 read 1.25× to 1.34× CTranslate2's, and the grid at 474a06a "
        "1.13× and 1.23× at batch 64.",
        headline=(1, 4, 7, 10),
    ),
    Question(
        "Beams begun with one row",
        "A beam sentence holds one decoder row until its first step (its beams would all be that row before), and a "
        "batch's first caches hold FEW_ROWS rows at least. Against the code before (289b05d, which also lacks "
        "fcfd581's greedy change): offline greedy and beam 4 at batch 1, 16 and 64, CPU time, one thread.",
        "the code before", ("checkouts-first-row-int8.json", "checkouts-first-row-fp32.json"), checkouts,
        "Ten rounds over 512 test sentences. fp32 beam 4 was above 1 in every round at batch 16 and 64; int8 beam 4 "
        "at batch 16 moved between 0.97× and 1.08×. Timed in one process at batch 1 (int8, beam 4, 64 sentences): "
        "the growth's apply 105 µs, and the step after it 47 µs slower than the others (its host arrays bound "
        "again); the first step computes one row where it computed four. Over the test set at beam 4, 3,000 of "
        "63,164 row-steps were such rows. 400 test sentences came out token for token as at 289b05d in 36 "
        "settings (fp32 and int8, our kernels and the exported step, beam 1, 4 and 5 at batch 1, 16 and 64, and "
        "mixed beam sizes joining a running batch).",
        headline=(4, 10, 11),
    ),
    Question(
        "A 600M-parameter model against CTranslate2",
        "NLLB-200-distilled-600M's shape with random weights: our conversion and export against CTranslate2's own "
        "conversion of the same model, batch 1 and 16, greedy and beam 4, two threads.",
        "CTranslate2 (the goal: ≥ 1.0× at batch 16, beam 4, int8)", ("engines-nllb-600m.json",), engines,
    ),
    Question(
        "Converting and serving a 600M-parameter model",
        "Conversion and export (fp32, int8, fp16) of the NLLB-shaped model: time and peak memory; the service's "
        "memory serving it.",
        "none (absolute figures)", ("large-model.json",), converted, headline=(4,),
    ),
    Question(
        "An Argos Translate package against CTranslate2",
        "A package of LibreTranslate's size (Locomotive's defaults, random weights): our conversion of it against "
        "CTranslate2 on the package's own model folder, the one LibreTranslate runs.",
        "CTranslate2", ("engines-argos-base.json",), engines,
    ),
    Question(
        "Converting and serving an Argos Translate package",
        "Conversion and export (fp32, int8) of that package: time and peak memory; the service's memory serving it.",
        "none (absolute figures)", ("argos-model.json",), converted, headline=(4,),
    ),
    Question(
        "Our service against LibreTranslate",
        "Both servers on the same model (ours through ONNX Runtime, LibreTranslate 1.9.6 through CTranslate2 at the "
        "same precision and threads), 1, 8 and 32 closed-loop clients, one test sentence per request; memory is the "
        "resident set of each server's whole process tree.",
        "LibreTranslate (#46's goals: ≥ 1.2× a lone client's rate, ≥ 2.5× at 8 and 32 clients)", ("servers.json",),
        servers,
        "Measured with nothing else running, four rounds, after a lone request's path was shortened (4c7ea1a: the "
        "worker's /translate, the engine's metrics after its answers). The ratio of each round ran from 1.68 to 1.98 "
        "at one client, 3.16 to 4.34 at 8 and 3.39 to 4.41 at 32: every round meets the goals. Six rounds at e3ef9b9, "
        "after the decoder step came to read its weights in fp16, gave 1.49×, 3.07× and 3.51× (rounds 1.41 to 1.79 "
        "at one client); at ce8f398, before that, 1.21×, 2.48× and 3.44×; ten at b3ec9c6 1.14×, 2.58× and 3.38×. "
        "Each process's RSS counts the pages it shares with others.",
        headline=(0, 1, 2),
    ),
    Question(
        "The CPU image beside LibreTranslate's",
        "Both images built here by podman (no registry is reachable to pull either): ours from our Dockerfile "
        "(`--target cpu`) on tests/deploy's Debian 12 base, as `make test-deploy` builds it; LibreTranslate's from its "
        "own docker/Dockerfile with its defaults (with_models=false, as its published image is built), its "
        "python:3.11.14-slim-bookworm stages on the same Debian bases (the runtime one plus adduser, which the stage "
        "runs), `python3` for `python` and pip trusting the machine's certificates in the builder stage "
        "(the result file lists each substitution and the Dockerfile's diff). Size is podman's .Size, decimal MB.",
        "LibreTranslate's image (the goal for ours: ≤ 450 MB)", ("images.json",), images,
        "Its published image (libretranslate/libretranslate) is built from the same Dockerfile on "
        "python:3.11.14-slim-bookworm, which cannot be had here, and resolved its unpinned dependencies (onnxruntime, "
        "PyMuPDF, ...) on the day it was published: its base and those versions differ from what is measured here. "
        "It carries no language model either: they are downloaded at its first start (a volume on "
        "/home/libretranslate/.local keeps them). Ours ships the en-de and de-en models in /app/models.",
        headline=(0, 1),
    ),
    Question(
        "The HTTP front end",
        "Requests per second the HTTP workers sustain with a stand-in engine, and the shipped model served by HTTP "
        "workers in front of one engine process against one process doing both.",
        "the goal (≥ 1,000 requests/s with one worker); one process", ("frontend.json",), frontend, CPU_SINCE,
    ),
    Question(
        "A lone sentence behind heavy requests",
        "Iteration-level batching: the time of a lone greedy sentence sent while four requests of 64 sentences at "
        "beam 4 run, over their time.",
        "the goal: ≤ 0.3×", ("lone-encoder.json",), lone,
    ),
    Question(
        "The host's work per decoder step",
        "The micro model (two layers) translated by this checkout against the code of 36dfb15, CPU time, one thread: "
        "the share of the step's time the work around ONNX Runtime takes.",
        "the goals: ≤ 0.5× the time greedy and beam 4 at batch 1, ≤ 0.7× beam 4 at batch 16",
        ("checkouts-fused-projections-micro-vs-issue.json",), micro,
    ),
    Question(
        "The engine's memory work at the speed it had",
        "The caches off the arena, a row of encoder keys/values a sentence and the encoder in parts, against the "
        "code before them (5a19181), greedy and beam 4 at batch 1, 16 and 64, CPU time, one thread.",
        "the code before", ("checkouts-engine-memory-fp32.json", "checkouts-engine-memory-int8.json",
                               "checkouts-engine-memory-fp32-batch1.json"), checkouts,
        headline=(5,),
    ),
    Question(
        "The encoder's runs, the cross-attention's reach and the fused LayerNorm against the code before",
        "The CPU encoder in runs of similar length, the cross-attention kernel stopping at each row's last source "
        "position and AddLayerNorm, against the code before them (05874a1), greedy and beam 4 at batch 1, 16 and 64, "
        "CPU time, one thread.",
        "the code before", ("checkouts-encoder-fp32.json", "checkouts-encoder-int8.json"), checkouts,
    ),
    Question(
        "The engine's arena and graphs at the speed it had",
        "The CPU arena's regions doubling, no memory patterns on the CPU and the graphs made in a process of their "
        "own, against the code before them (56e601a), greedy and beam 4 at batch 1 and 64, CPU time, one thread.",
        "the code before", ("checkouts-arena-fp32.json", "checkouts-arena-int8.json"), checkouts,
    ),
    Question(
        "Encoder keys/values left in place when a sentence ends",
        "The slot table's encoder keys/values moved only once the rows read half of them or sentences join, against "
        "the code before (f84176d): offline greedy and beam 4 at batch 16 and 64, CPU time, one thread.",
        "the code before", ("checkouts-lazy-cross-int8.json", "checkouts-lazy-cross-fp32.json"), checkouts,
        "Four rounds over 512 test sentences; on this shared machine a figure within about 5 % of 1 is noise. "
        "Timed around the slot table's apply in one process, 400 sentences at batch 16, int8 greedy: 480 to 496 µs a "
        "leave against 593 to 612 before.",
    ),
    Question(
        "Caches with room after the batch's rows",
        "Our kernels read caches of more rows than the step's, so the slot table's caches stay the same tensors, "
        "bound once, when sentences leave; and a leave's bookkeeping in fewer calls. Against the code before "
        "(7b00e2b): offline greedy and beam 4 at batch 16 and 64, CPU time, one thread.",
        "the code before", ("checkouts-room-int8.json", "checkouts-room-fp32.json"), checkouts,
        "Eight rounds over 512 test sentences; on this shared machine a figure within about 5 % of 1 is noise. "
        "Served, three rounds of 10 s: 1.02× at 32 clients; at 8 clients 0.94× and 1.08× in two runs. Timed around "
        "the slot table's apply and the next step's binding in one process each, 400 sentences at batch 16, int8 "
        "greedy, the steps at the same speed: 359 µs a leave against 664 before.",
    ),
    Question(
        "Repetition guards that watch only the steps they may change",
        "With the n-gram guard on (the service's default: 4-grams at most twice), a step asks the decoder for more "
        "candidates, and a greedy one for log-probabilities, only where some row's last token already stands twice "
        "before (guards.watching). Against the code before (390fad8), both with the service's guards: offline greedy "
        "and beam 4 at batch 1, 16 and 64, CPU time, one thread; served, one client alternating between the two.",
        "the code before",
        ("checkouts-guards-fp32.json", "checkouts-guards-int8.json", "serving-guards-paired.json"), checkouts,
        "Eight rounds (fp32) and six (int8) over 512 test sentences (64 at batch 1). Over 200 test sentences at "
        "batch 1, 8 of 3,172 steps were watched; inside the search loop the test costs 7 µs a step (median). Served "
        "on two threads, the two services side by side, the lone request's time did not move. Translations "
        "and scores were the same as at 390fad8 in 60 settings (fp32 and int8, our kernels and the exported step, "
        "three guard settings, greedy and beam 4 at batch 1 and 16, mixed beam sizes joining a running batch).",
        headline=(0, 1, 12),
    ),
    Question(
        "The decoder step's weights read in fp16",
        "On CPUs with AVX-512, each projection of the decoder step whose weight is exported in fp16 (every one of "
        "the shipped models') reads it in fp16 (ours.HalfGemm), summed in ONNX Runtime's order, so the same "
        "translations and scores. Against the code before (13e8234): offline greedy and beam 4 at batch 1, 16 and "
        "64, CPU time on one thread and the wall clock on two; int8, whose graphs keep ONNX Runtime's projections, "
        "as a control; served, one client alternating between the two.",
        "the code before",
        ("checkouts-half-weights-fp32.json", "checkouts-half-weights-fp32-2threads.json",
         "checkouts-half-weights-int8.json", "serving-half-weights-paired.json"), checkouts,
        "Four rounds (three for int8) over 512 test sentences (64 at batch 1). On one thread an earlier run of the "
        "same command on the uncommitted tree read 1.79×, 1.20× and 1.03× greedy and 1.55×, 1.05× and 1.00× beam 4. "
        "The int8 rows (0.95× to 1.02×) run the same graph on both sides: noise. Served on two threads, the lone "
        "request's median fell from 9.57 to 7.62 ms. Translations and scores were the same as at 13e8234 in 60 "
        "settings (fp32 and int8, our kernels and the exported step, three guard settings, greedy and beam 4 at "
        "batch 1 and 16, mixed beam sizes joining a running batch).",
        headline=(0, 1, 3, 18),
    ),
    Question(
        "The encoder's weights read in fp16 too",
        "The encoder's projections (a MatMul, then the Add of its bias, and the FFN's Relu) as ours.HalfGemm, the bias "
        "added after the sums as ONNX Runtime adds it. Against the step's change alone (a3b13de): offline greedy and "
        "beam 4 at batch 1, 16 and 64, CPU time, one thread; served, one client alternating between the two.",
        "the code before", ("checkouts-half-encoder-fp32.json", "serving-half-encoder-paired.json"), checkouts,
        "Four rounds over 512 test sentences (64 at batch 1). Translations and scores were the same as at 13e8234 "
        "in the 60 settings of the step's change.",
        headline=(0,),
    ),
    Question(
        "Greedy steps without log-probabilities",
        "A greedy step asks for its best tokens alone, and our top-k kernel leaves out the log-sum-exp over the "
        "vocabulary that their log-probabilities need. Against the code before (289b05d): offline greedy and beam 4 "
        "(which still asks, a control) at batch 1, 16 and 64, CPU time, one thread; fp32 twice.",
        "the code before",
        ("checkouts-greedy-logits-int8.json", "checkouts-greedy-logits-fp32.json",
         "checkouts-greedy-logits-fp32-2.json"), checkouts,
        "Ten rounds over 512 test sentences; the beam-4 rows, which the change does not touch, moved from 0.95× to "
        "1.07×, so only a greedy figure beyond that reads as a change. Per round, int8 greedy at batch 16 was above "
        "1 in 8 of 10 rounds. ORT's profiler gave the kernel 38.8 µs a step at 16 rows, int8, before.",
        headline=(1, 7, 13),
    ),
    Question(
        "The decoder's kernels in vectors and joins into the rows that left",
        "The attention at the usual head sizes and the top-k's block maxima in eight-lane vectors, and a sentence that "
        "joins a running batch written into the rows that left it (the caches cut only once half of them is "
        "needed), against the code before them (2ea72be): offline greedy and beam 4 at batch 1, 16 and 64, CPU time, "
        "one thread; served (the shipped model, default settings) at 8 and 32 clients.",
        "the code before", ("checkouts-kernels-int8.json", "checkouts-kernels-fp32.json",
                               "serving-kernels-joins-c8.json", "serving-kernels-joins-c32.json"), checkouts,
        "The offline runs went through the same test sentences in two processes a round, the checkouts alternating; "
        "on this shared machine a figure within about 5 % of 1 is noise (a first fp32 run of 4 rounds over 64 "
        "sentences at batch 1 had greedy 0.95× and beam 4 1.15×, a run of 6 rounds over 128 greedy 1.10× and beam 4 "
        "1.03×). In one process, with only the kernels' library swapped, 512 sentences at batch 16: int8 greedy "
        "1.065×, beam 4 1.084×, fp32 1.039× and 1.038×.",
        headline=(1, 4),
    ),
    Question(
        "A lone request's path against LibreTranslate's",
        "One client, one test sentence a request, each server in turn (2 threads, fp32, greedy); then each server's "
        "engine alone in a process of its own translating the same sentences one at a time (ours: the offline "
        "Translator with the service's spinning and repetition guards; LibreTranslate's: CTranslate2 on the same "
        "model). A request's path is its time less its engine's alone; ours is split by the service's own metrics.",
        "LibreTranslate's path", ("lone-path.json",), lone_path,
        "The engines alone translate texts, so their tokenizers' time is in the engine here (ours tokenizes in the "
        "HTTP worker when served). The engines alone run one sentence after another, the served ones after a pause "
        "(the request's time outside the engine), in which the cores' caches and idle threads cool: part of every "
        "path is that. A path is the difference of two noisy times: by round ours ran from 0.82 to 2.07 ms and "
        "LibreTranslate's from 0.23 to 2.92, ours the shorter in five rounds of six. Earlier: at bc58e81 2.83 "
        "against 1.48 ms (1.91×); at 460404a (before the link's changes) 4.03 against 2.31 (1.74×).",
        headline=(0,),
    ),
    Question(
        "A lone request's path against LibreTranslate's, both models stood in",
        "One client, one test sentence a request, each server in turn (2 threads, fp32, greedy), each with a "
        "stand-in for its model: ours sends each sentence through the engine's batcher, whose decoder ends it at its "
        "first step; LibreTranslate's CTranslate2 Translator gives the source tokens back at once. Neither engine's "
        "speed on this CPU weighs in. As in the question above, what an engine alone does of that work is taken from "
        "a request's time: for ours the search of the stand-in's one step (timed offline, one sentence at a time), "
        "for LibreTranslate's nothing, its stand-in searching nothing.",
        "LibreTranslate's path", ("lone-path-stand-ins.json",), lone_path,
        "Both paths keep their tokenizers' work (the engines alone of the question above count it), LibreTranslate's "
        "Argos Translate's sentence splitting too. Our answer is empty, theirs the source again. The search of our "
        "stand-in's step costs more served than alone (its code cold between requests), and that excess stays in our "
        "path. By round ours ran from 0.69 to 0.76 ms and LibreTranslate's from 0.64 to 0.75; level in one round of "
        "six. With nothing taken from the requests' times, as the earlier runs had it (our request at one client "
        "above): 1.14×. "
        "Earlier runs, so taken: at 26cefe2 1.04 against 0.71 ms (1.46×); at 80335f3, on the Xeon machine, 2.19 "
        "against 1.37 ms (1.60×); before the engine's link changed (859daf4) 2.78 against 1.31 ms (2.12×), and at "
        "30cc8b2 3.34 against 1.28 (2.60×).",
        headline=(0,),
    ),
    Question(
        "A lone request's path: the worker's busiest route, the engine's metrics after its answers",
        "Against the code before (aee3f57): /translate awaiting its dependencies and writing its JSON itself, "
        "FastAPI's OpenTelemetry off, a text's derived lists worked out once, the tokenizer's case tags without a "
        "pass over a lowercase word's letters, the engine answering before it writes a step's metrics and writing "
        "the decoder steps' measures once the batch empties (or once a second). Both checkouts served at once, one "
        "client alternating between them a request at a time (bench.serving.checkouts --paired): the shipped model, "
        "then the stand-in models whose sentences go through the batcher.",
        "the code before", ("lone-paired-path.json", "lone-paired-path-stand-ins.json"), checkouts,
        "Three rounds each, every round's p50 lower on this checkout: by 0.23 to 0.32 ms with the shipped model, by "
        "0.09 to 0.10 ms with the stand-ins. Measured change by change in the same way (each against the one before, "
        "3 rounds): the batcher's measures written once the batch empties 0.988× with the shipped model; writing the "
        "head and body of an answer in one send (tried, not kept) 1.005×, and in one send at the end of the event "
        "loop's turn 1.036×; the client's hang-up told by the HTTP server rather than watched by a task (tried, not "
        "kept) 0.999×, with the stand-ins. In one process, the worker's app alone (the echo model, direct ASGI calls, "
        "instructions a request counted by callgrind, which vary by about 2 % from run to run): 1.91 million at "
        "aee3f57, about 1.5 million after; FastAPI's dependency solving had been about 8 % of them, its second "
        "validation of the answer about 1 %, the text's lists worked out again about 6 %.",
    ),
    Question(
        "A lone request's path: a Unix socket to the engine, answered from the batcher's thread",
        "The HTTP workers and the engine process linked by a Unix stream socket (service.channel) in place of "
        "ZeroMQ, the engine process on uvloop's event loop, and the engine's answer written from the batcher's "
        "thread as a request's last sentence ends, against the code before them (6f94dfc): both checkouts served at "
        "once with the stand-in models whose sentences go through the batcher, one client alternating between them "
        "a request at a time (bench.serving.checkouts --paired); then the same with the shipped model.",
        "the code before", ("lone-paired-link.json", "lone-paired-link-shipped.json", "link-c8.json"), checkouts,
        "Three rounds of 30 s each; every round's p50 was lower on this checkout, by 0.40 to 0.68 ms. With the "
        "shipped model (three rounds of 20 s, at c9eeadb, written to a scratch folder and copied in), every round's "
        "p50 was lower by 0.26 to 0.47 ms. Measured "
        "step by step the same way (3 rounds of 20 s, each against the step before): the Unix socket 0.956×, "
        "uvloop 0.975×, the answer from the batcher's thread 0.953×. The two services share the machine's two cores "
        "with the client. Under 8 clients on the AMD EPYC machine (the shipped model, 4 interleaved rounds of 20 s, "
        "at d1acfe8, whose uncommitted changes were to bench/report.py and result files; written to a scratch folder "
        "and copied in), this checkout's rounds over the base's beside them: 0.97×, 1.02×, 1.02×, 1.03×.",
    ),
    Question(
        "A lone request's path: each event loop reads its socket, the work in the request's own task",
        "The engine's and the HTTP workers' event loops read their ZeroMQ sockets themselves rather than through "
        "zmq.asyncio, and a request's work runs in its own task while its client is watched, against the code "
        "before (0679353); then a request of one pair submitting its sentences in its own task, against the code "
        "before it (8da1ff7): both checkouts served at once with the stand-in models whose sentences go through the "
        "batcher, one client alternating between them a request at a time (bench.serving.checkouts --paired).",
        "the code before", ("lone-paired-event-loops.json", "lone-paired-one-pair.json"), checkouts,
        "Three rounds of 30 s each. Every round's p50 was lower on this checkout: by 0.22 to 0.36 ms in the first "
        "comparison, by 0.01 to 0.05 ms in the second. The two services share the machine's two cores with the "
        "client, so each request's time here is longer than with one service and wrk's client.",
    ),
    Question(
        "A lone request's engine work: guards once, the encoder's threads spinning",
        "The repetition guards' per-row options worked out once per batch rather than at every step, the batcher's "
        "queue bookkeeping skipped while nobody waits, and the encoder's and cache graphs' threads spinning within "
        "their runs (as the decoder's do within a step), against the code before them (85916d1): served, the shipped "
        "model, default settings, at 1, 8 and 32 clients.",
        "the code before", ("serving-guards-spin-c1.json", "serving-guards-spin-c8.json",
                               "serving-guards-spin-c32.json"), checkouts,
        "Four rounds of 10 s a level, the checkouts alternating; on this shared machine a figure within about 5 % of "
        "1 is noise (at 8 clients the rounds' ratios ran from 0.91 to 1.02).",
    ),
    Question(
        "A lone request's path: no access log, spans looked for only where they may be",
        "A lone client's requests served with the stand-in models (the engine process echoes at once, so a request's "
        "time is its path: the HTTP worker, the round trip to the engine process and its server), against the code "
        "before (4a9f195): with uvicorn's access log off (TRANSLATOR_ACCESS_LOG's default), the search for "
        "protected spans skipped in a text without a sign of one, and one task fewer on each side of the round trip; "
        "then the same with the access log on, which leaves the rest.",
        "the code before", ("lone-stand-in.json", "lone-stand-in-logged.json"), checkouts,
        "Six rounds of 8 s, the checkouts alternating. The machine's speed moved within the run (a checkout's rounds "
        "spread over 2×); each round's rate is in the result files.",
    ),
    Question(
        "The output projection's bound at batch 64",
        "The output projection alone (ONNX Runtime's MatMul or PyTorch's, the faster at each row count), for every "
        "decoder step our translator takes over the test sentences at batch 64 in corpus order, against each "
        "engine's time on the same batches, fp32, one thread.",
        "the bound: the engine's time if the rest of the work were free", ("projection-bound.json",),
        projection_bound,
    ),
    Question(
        "Where a beam-4 step's time goes",
        "Our translator at batch 64, beam 4, one thread: the share of the time ONNX Runtime's sessions take, and the "
        "whole against CTranslate2's on the same sentences.",
        "CTranslate2", ("profile-slot-table-b64-fp32.json", "profile-slot-table-b64-int8.json"), profile, CPU_SINCE,
    ),
    Question(
        "The decoder's threads spinning",
        "TRANSLATOR_SPIN_THREADS: the decoder's intra-op threads spinning between its operators, offline (two "
        "threads, `always` against `never`) and served (the shipped model; `step`, the service's default, against "
        "`never` at 1, 8 and 32 clients, and `always` against `never` in an earlier run).",
        "the same code not spinning",
        ("engines-spin-decoder.json", "serving-spin-step-c1.json", "serving-spin-step-c8.json",
         "serving-spin-step-c32.json", "serving-spin-c1.json", "serving-spin-c32.json"),
        spin, "The offline figures and the served `always` ones were measured at df8f11b; the service's CPU code has "
        "changed since.", headline=(12,),
    ),
    Question(
        "The GPU: one H200",
        "python -m bench.offline.gpu --check on one NVIDIA H200: greedy at batch 1 and at the best batch, beam 4 at "
        "batch 64, and the share of outputs identical to the CPU's; eager and with CUDA graphs, fp32 and fp16, in two "
        "runs one after the other on one machine, and a third on another H200 after 6d42b04 (beams begun with one "
        "row), which changed how the buckets take a plan.",
        "the goals: ≥ 250 sentences/s greedy at batch 1, ≥ 20,000 at the best batch, ≥ 2,200 beam 4 at batch 64, "
        "≥ 99 % identical to the CPU",
        ("gpu-check-1.json", "gpu-check-2.json", "gpu-check-3.json"), gpu_check,
        "The two runs differ by up to 1.6× on the same machine (the step is bound by the host: see the next "
        "section), so a goal met in one run only is not counted as met; the third ran on another machine, whose "
        "host differs, so it compares with neither. The last GPU runs before, at 5e54187 "
        "(2026-11-30, two runs on an H200), measured ort-cuda-fp32-graphs at 188 and 165 sentences/s greedy at "
        "batch 1, 21,966 and 18,002 at the best batch (4,000), and 2,322 and 1,628 beam 4 at batch 64.",
        headline=(8, 9, 10, 24, 25, 26, 40, 41, 42),
    ),
    Question(
        "Where a step's time goes on the GPU",
        "python -m bench.offline.gpu_kernels on one NVIDIA H200, fp32: every kernel and copy of a translation read "
        "through CUPTI, against the wall time per decoder step; eager and with CUDA graphs.",
        "none: a busy share well under 100 % means the host, not the GPU, bounds the step",
        ("gpu-kernels.json",), gpu_kernels, headline=(6, 10),
    ),
    Question(
        "CUDA graphs: how many rows a bucket holds",
        "TRANSLATOR_CUDA_GRAPHS_MAX_ROWS: five translators in one process on one H200, three rounds; the probe's score "
        "sums greedy at batch 256 and beam 4 at batch 64.",
        "the bound of 64 rows", ("gpu-probe-max-rows-2.json",), max_rows,
        "Measured at ae755be by a session script, not rerun since; the buckets as they are now passed the GPU check "
        "at b3fd4c5 (The GPU: one H200).",
    ),
    Question(
        "Language detection",
        "Offline language identifiers on short and longer Tatoeba sentences (English and German): accuracy, load "
        "time and memory.",
        "none (a study)", ("detect.json",), detect, headline=(6,),
    ),
    Question(
        "Sentence splitting",
        "Sentence splitters on our labelled texts: the texts split exactly right, and the time a text.",
        "none (a study)", ("splitters.json",), splitters, headline=(24,),
    ),
    Question(
        "Placeholders",
        "How protected spans (URLs, e-mail addresses, emoji, markup) come back through the shipped models.",
        "none (a study)", ("placeholders.json",), placeholders,
    ),
    Question(
        "A document in one request",
        "A 1 MB .docx translated through /translate_file in one request: its time, and its structure after.",
        "none (absolute figures)", ("document.json",), document, CPU_SINCE,
    ),
    Question(
        "Hostile clients and a stopped engine",
        "64 clients each sending 64 sentences at beam 8 against the admission limits; an engine stopped with "
        "SIGSTOP; the cost of the bounded HTTP protocol against httptools.",
        "the goals: every refusal a 503 with Retry-After, no other 5xx", ("hostile_load.json", "hostile.json"),
        hostile, CPU_SINCE,
    ),
    Question(
        "A second start from the model cache",
        "An Argos Translate package named in TRANSLATOR_MODELS, pulled once; then the time from start to /ready, "
        "served from the cache, against the same model served from a plain folder (medians of the rounds).",
        "the goal: within 1.1× the plain folder's time", ("cached-start.json",), cached_start,
    ),
    Question(
        "The CPU image's start",
        "Seconds from `podman run` to /ready 200 for the CPU image with the shipped models, read-only root and /tmp "
        "on tmpfs as compose runs it, fresh containers one after another, the load average before each recorded.",
        "the goal: ready within 10 s", ("image-start.json",), image_start,
    ),
    Question(
        "The engine's memory against CTranslate2",
        "Peak RSS of each engine's own worker process (VmHWM) over greedy and beam 4 at batch 1, 16 and 64, one "
        "thread, the shipped model, 256 test sentences (64 at batch 1), CTranslate2 4.8 on the same weights.",
        "the goal: at most 1.2× CTranslate2's peak in each precision", ("engines-memory.json",), engines_memory,
    ),
    Question(
        "Exact limits across workers and instances",
        "One key limited to N requests a minute, 16 clients against 2 instances of 2 HTTP workers sharing PostgreSQL, "
        "for 3 minutes: the requests accepted in each minute.",
        "the goal: exactly N in every window", ("exact-limits.json",), exact_limits,
    ),
    Question(
        "The store's cost",
        "A lone client's p50 and 32 clients' throughput with keys and limits on (SQLite, PostgreSQL), each over the "
        "same checkout with the store off (shipped en-de, 2 HTTP workers): the lone client paired, its requests to "
        "every service in turn, the 32 clients in interleaved rounds; the base checkout (the code before the change "
        "measured, its commit named) in the same rounds.",
        "the goal: within 5 % of the store off", ("store-cost.json",), store_cost,
        "Measured on a 2-core machine that other work loaded (each figure's load average is the median of its "
        "rounds'), PostgreSQL on the same cores.",
    ),
    Question(
        "Real-world text",
        "Numbers, placeholder collisions, 300-word sentences, capitals, unserved languages with auto and inline "
        "markup over the shipped models as served (default settings, greedy), against probe sets written for it "
        "(tests/data/real_world) and the test sets, with the service before these features as the BLEU baseline.",
        "the goals", ("real-world.json",), real_world,
    ),
    Question(
        "Hostile documents",
        "Document bombs uploaded alone (their answer and an HTTP worker's memory), a probe sentence every 0.5 s while "
        "50 clients upload 1 MB documents (and while 4 upload a paragraph of 1 MB), and how soon the engine is idle "
        "after 8 documents whose clients hang up, and after 8 refused.",
        "the goals", ("hostile-documents.json",), hostile_documents,
    ),
    Question(
        "Document bombs at the HTML node limit",
        "The document bombs of hostile documents uploaded alone, with an .html of as many paragraphs as the old "
        "shared node limit let through and one as TRANSLATOR_MAX_HTML_NODES does: each answer and an HTTP worker's "
        "memory.",
        "the goals", ("hostile-bombs.json",), document_bombs,
    ),
    Question(
        "Document bombs near the node limits",
        "The document bombs of hostile documents uploaded alone, with .epubs, .odts and .odps of one-letter "
        "paragraphs a thousand nodes within and past their limits: an .epub's XHTML documents together against "
        "TRANSLATOR_MAX_HTML_NODES (one .epub within TRANSLATOR_MAX_FILE_NODES but past it), an OpenDocument's "
        "elements against TRANSLATOR_MAX_FILE_NODES and its old default. Each answer and an HTTP worker's memory; "
        "a file within its limit is translated until its client hangs up after 20 s.",
        "the goals", ("hostile-epub.json",), document_bombs,
        "Each growth is over the worker's RSS once it held still before that case, after the cases before it: memory "
        "a worker kept from them and used again shows as less growth. A file within its limit is measured to its "
        "answer in the next question.", headline=(10, 16, 22),
    ),
    Question(
        "Document bombs within their node limits, answered",
        "The files of the document bombs near the node limits that are within them (.html and .epub within "
        "TRANSLATOR_MAX_HTML_NODES, .odt and .odp within TRANSLATOR_MAX_FILE_NODES), uploaded alone to the service "
        "with stand-in models (the engine echoes), each waited for to its answer: read, translated and written.",
        "the goals", ("hostile-epub.json",), answered_bombs,
        "Each growth is over the worker's RSS once it held still before that case, after the cases before it (on "
        "the two HTTP workers): a worker that has read documents before grows less; the first case (the .html) "
        "meets workers that have read none.",
        headline=(0, 2, 4, 6),
    ),
    Question(
        "A paragraph of many runs",
        "A .docx of one paragraph of 20,000 runs, every other one in italics, through the service with stand-in "
        "models (the engine echoes: what costs is the worker's), against the code before placeholders were found "
        "in one pass, the two in turn.",
        "the code before", ("hostile-runs.json",), paragraph_runs,
    ),
    Question(
        "Documents in a thread or in a process",
        "The service with stand-in models reading and writing documents in its thread, against the same in a "
        "process of its own per HTTP worker (bench.serving.document_process: the document parsed twice, only bytes "
        "and texts crossing), in turn: a probe sentence every 0.5 s while 50 clients upload a 1 MB .txt for 30 s, "
        "and while 50 upload 50 kB and wait for their answers.",
        "documents in a process", ("hostile-pool.json",), threads_or_process,
    ),
    Question(
        "A soak under mixed load",
        "Mixed load (plain, HTML, alternatives, abandoned requests) against the service: its memory from the first "
        "minute to the last, and its responses 500.",
        "the goals: RSS growth < 10 %, no response 500", ("soak.json",), soak,
        "At this commit the service was one process, so its RSS is the whole tree. The service's code has changed "
        "since; the figures are not remeasured.",
    ),
    Question(
        "Glossary terms through the DeepL API",
        "200 sentences written around 40 glossary terms (tests/data/glossary), en-de, the shipped model through "
        "DeepL's Python client: the target term in the translation, and chrF against references with the terms.",
        "the same sentences without the glossary", ("glossary.json",), glossary,
    ),
    Question(
        "A document through DeepL's API",
        "A .docx through /v2/document (upload, status polls, result) against the same through /translate_file, one "
        "after the other on one service (shipped en-de, default settings), while a probe client sends a one-sentence "
        "/translate every 0.25 s.",
        "the goals: within 1.1× of /translate_file's time, no request waiting over 1 s", ("deepl-document.json",),
        deepl_document, "Two runs of each on one service, taking turns to go first (`--rounds 2`: A B B A), on a "
        "2-core machine whose other work had ended (load average 1.2 to 2.2, in the result file): no decoder step "
        "stalled past 0.25 s, and the probe's longest wait was 0.17 s in either path. Earlier runs of this code "
        "on the loaded machine (commit 56f0b2d, load 8 to 15, one round) had /v2/document at 1.11× and the "
        "longest waits at 2.4 s (the probe) and 1.8 s (a status request), with 17 decoder steps stalled past "
        "0.25 s.",
        (0, 1),
    ),
]  # fmt: skip


# --- the document -------------------------------------------------------------------------------------------------


def result_files(results: Path) -> set[str]:
    """Every file under results (relative paths), but scratch."""
    return {str(p.relative_to(results)) for p in results.rglob("*") if p.is_file() and p.relative_to(results).parts[0]
            not in IGNORED}  # fmt: skip


def cited(question: Question, results: Path) -> set[str]:
    """The files a question names, with their .md and .png beside them."""
    names = set()
    for name in question.files:
        stem = name.removesuffix(".json")
        names |= {name} | {f"{stem}{ext}" for ext in (".md", ".png") if (results / f"{stem}{ext}").exists()}
    return names


def section(question: Question, results: Path) -> tuple[str, list[tuple[Question, Figure, dict]]]:
    data = [json.loads((results / name).read_text()) for name in question.files]
    figures = question.figures(data)
    lines = [f"## {question.title}", "", question.measures, ""]
    for name, d in zip(question.files, data, strict=True):
        p = d["provenance"]
        lines.append(f"- [{name}](bench/results/{name}): `{p['command']}`; {p['machine']}; {p['date'][:10]}; "
                     f"commit {p['commit']}")  # fmt: skip
    lines += ["", f"Anchor: {question.anchor}.", "", "| figure | today | ratio |", "|---|---|---|"]
    lines += [f"| {f.what} | {f.value} | {f.ratio} |" for f in figures]
    if question.note:
        lines += ["", question.note]
    return "\n".join(lines) + "\n", [(question, figures[i], data[figures[i].source]["provenance"])
                                     for i in question.headline]  # fmt: skip


def headlines(results: Path) -> tuple[list[str], list[tuple[Question, Figure, dict]]]:
    """Every question's section and its headline figures; raises when a file under results is named by none."""
    unnamed = result_files(results) - set().union(*(cited(q, results) for q in QUESTIONS))
    if unnamed:
        raise SystemExit(f"no question of bench/report.py names {', '.join(sorted(unnamed))}: add one, or remove "
                         "the file (git's history keeps it)")  # fmt: skip
    sections, summary = [], []
    for question in QUESTIONS:
        text, rows = section(question, results)
        sections.append(text)
        summary += rows
    return sections, summary


def with_readme_table(readme: str, results: Path = RESULTS) -> str:
    """README.md with the headline figures of README_QUESTIONS between its markers."""
    _, summary = headlines(results)
    rows = ["| question | figure | today | ratio | measured |", "|---|---|---|---|---|"]
    rows += [f"| [{q.title}](BENCHMARKS.md#{q.anchor_id}) | {f.what} | {f.value} | {f.ratio} | {p['date'][:10]}, "
             f"{p['commit']} |" for q, f, p in summary if q.title in README_QUESTIONS]  # fmt: skip
    before, rest = readme.split(README_BEGIN, 1)
    _, after = rest.split(README_END, 1)
    return before + README_BEGIN + "\n" + "\n".join(rows) + "\n" + README_END + after


def render(results: Path = RESULTS) -> str:
    """BENCHMARKS.md from the result files; raises when a file under results is named by no question."""
    sections, summary = headlines(results)
    head = [
        "# Benchmarks",
        "",
        "Generated by `python -m bench.report` from the result files under bench/results; do not edit by hand. Each "
        "section answers one question: what is measured, the command, the machine, the date and commit of the "
        "measurement, today's figures and their ratio against the anchor. `python -m bench --list` names every "
        "benchmark; `python -m bench NAME` runs one. Why the designs measured here were chosen, and what was tried "
        "and lost, is in [docs/decisions.md](docs/decisions.md).",
        "",
        "The CPU figures come from shared 2-core virtual machines whose runs move by about ±10 %: compare the "
        "figures of one section, which were measured side by side in one run.",
        "",
        "## Summary",
        "",
        "| question | figure | today | ratio | date | commit |",
        "|---|---|---|---|---|---|",
    ]
    head += [f"| [{q.title}](#{q.anchor_id}) | {f.what} | {f.value} | {f.ratio} | {p['date'][:10]} | {p['commit']} |"
             for q, f, p in summary]  # fmt: skip
    return "\n".join(head) + "\n\n" + "\n".join(sections)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser("python -m bench.report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--check", action="store_true", help="exit 1 when BENCHMARKS.md is not what the results give")
    args = p.parse_args(argv)
    text, readme = render(), README.read_text()
    if args.check:
        if OUTPUT.read_text() != text or readme != with_readme_table(readme):
            sys.exit("BENCHMARKS.md or README.md's table differs from bench/results: run python -m bench.report")
        return
    OUTPUT.write_text(text)
    README.write_text(with_readme_table(readme))
    print(OUTPUT, README)


if __name__ == "__main__":
    main()
