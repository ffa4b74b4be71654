"""Plain-text serving throughput of this checkout against another one, side by side, rounds interleaved.

    python -m bench.serving.checkouts /tmp/base [--rounds 2] [--concurrency 32] [--seconds 20]
                                      [--setting NAME=VALUE ...] [--base-setting NAME=VALUE ...] [--name NAME]
                                      [--stand-in [batched]] [--paired]

Each round starts `python -m service` of each checkout in turn (service.launch.running_service, the same shipped
model and default settings) and loads it with single test_2016_flickr sentences from wrk (bench.serving.loadgen):
sentences per second and latency, the median over rounds, and this checkout's throughput over the other's.
--setting and --base-setting give this checkout's and the other's service settings that differ from the defaults;
with this checkout as the other (`.`), the two sides are two settings of the same code. --stand-in serves each
checkout with the stand-in models instead (`python -m bench.serving.frontend --serve-stand-in` of that checkout: the
engine process echoes every sentence at once, so a request's time is what surrounds the model: the HTTP worker, the
round trip to the engine process and its server, not its batcher); --stand-in batched serves stand-ins whose
sentences go through the engine's batcher, ended at its first step (bench.serving.instant_model): the request's
time is then everything but the model's work.
--paired runs both checkouts' services at once and one client alternates between them, a request at a time
(bench.serving.paired): every request of one meets the same moments of the machine as its neighbour of the other, so
that a small difference in a lone request's time shows through this machine's noise; --concurrency is then 1.
Results: bench/results/NAME.{json,md} (serving-checkouts).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from bench.common.cli import command_line, parse_settings
from bench.common.defaults import MODEL_DIR, REPO, RESULTS
from bench.common.machine import environment
from bench.common.report import markdown_table, write_results
from bench.common.sentences import multi30k_sentences
from bench.serving.frontend import STAND_IN, STAND_IN_BATCHED, stand_in_service
from bench.serving.loadgen import run_load
from bench.serving.paired import paired_latency
from service.launch import RunningService, running_service


@contextmanager
def serving(checkout: Path, log: Path, settings: dict[str, object], stand_in: str | None
            ) -> Iterator[RunningService]:
    """A checkout's service on the shipped model, or on the stand-in models (`stand_in`: "echo" or "batched"); its
    data folder beside its log, its own (--paired runs two services at once)."""
    settings = {"data_dir": log.parent / f"{log.stem}-data", **settings}
    if not stand_in:
        with running_service(MODEL_DIR, log, checkout=checkout, **settings) as service:
            yield service
        return
    module = STAND_IN_BATCHED if stand_in == "batched" else STAND_IN
    with stand_in_service(log, settings, checkout, module) as service:
        yield service


def in_turns(args: argparse.Namespace, checkouts: dict[str, Path], settings: dict[str, dict], sentences: list[str],
             logs: Path) -> dict[str, list[dict]]:
    """Each round, each checkout's service in turn under the clients' load (wrk): its report."""
    runs: dict[str, list[dict]] = {name: [] for name in checkouts}
    for round_ in range(args.rounds):
        for name, checkout in (checkouts.items() if round_ % 2 == 0 else reversed(checkouts.items())):
            with serving(checkout, logs / f"{name}-{round_}.log", settings[name], args.stand_in) as service:
                run_load(service.url, sentences, args.concurrency, 3)  # warm-up
                runs[name].append(run_load(service.url, sentences, args.concurrency, args.seconds))
            print(name, round_, runs[name][-1]["sentences_per_s"], flush=True)
    return runs


def paired(args: argparse.Namespace, checkouts: dict[str, Path], settings: dict[str, dict], sentences: list[str],
           logs: Path) -> dict[str, list[dict]]:
    """Each round, both checkouts' services at once, one client alternating between them: each one's latency."""
    runs: dict[str, list[dict]] = {name: [] for name in checkouts}
    for round_ in range(args.rounds):
        with ExitStack() as stack:
            urls = {name: stack.enter_context(serving(checkout, logs / f"{name}-{round_}.log", settings[name],
                                                      args.stand_in)).url for name, checkout in checkouts.items()}
            for name, latency in paired_latency(urls, sentences, args.seconds).items():
                runs[name].append(latency)
        print(round_, {name: (r[-1]["p50_ms"], r[-1]["mean_ms"]) for name, r in runs.items()}, flush=True)
    return runs


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base", type=Path, help="the other checkout (git worktree add /tmp/base COMMIT)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--setting", action="append", default=[], help="a setting of this checkout's service, name=value")
    p.add_argument("--base-setting", action="append", default=[], help="a setting of the other's, name=value")
    p.add_argument("--name", default="serving-checkouts", help="the results' file name")
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    p.add_argument("--stand-in", nargs="?", const="echo", choices=["echo", "batched"],
                   help="serve the stand-in models, which echo at once (batched: through the batcher)")
    p.add_argument("--paired", action="store_true", help="one client alternating between both services at once")
    args = p.parse_args(argv)
    sentences = multi30k_sentences()
    checkouts = {"this": REPO, "base": args.base.resolve()}
    settings = {"this": parse_settings(args.setting), "base": parse_settings(args.base_setting)}
    with tempfile.TemporaryDirectory() as logs:
        runs = (paired if args.paired else in_turns)(args, checkouts, settings, sentences, Path(logs))
    models = {None: "", "echo": "stand-in models (echoing), ",
              "batched": "stand-in models (through the batcher, ended at once), "}[args.stand_in]
    head = (f"# Serving, this checkout against {args.base}\n\n`{command_line('bench.serving.checkouts', argv)}`\n\n"
            f"{{clients}}, single sentences, {models}median of {args.rounds} rounds; settings other than the defaults: "
            f"this {settings['this'] or 'none'}, base {settings['base'] or 'none'}:\n\n")
    data = {"environment": environment([]), "settings": settings, "runs": runs, "stand_in": args.stand_in}
    if args.paired:
        median = {name: {key: statistics.median(r[key] for r in reports) for key in ("p50_ms", "p99_ms", "mean_ms")}
                  | {"requests": sum(r["requests"] for r in reports)} for name, reports in runs.items()}
        ratio = median["this"]["p50_ms"] / median["base"]["p50_ms"]
        rows = [[name, f"{m['p50_ms']:.3f}", f"{m['p99_ms']:.3f}", f"{m['mean_ms']:.3f}", m["requests"]]
                for name, m in median.items()]
        mean_ratio = median["this"]["mean_ms"] / median["base"]["mean_ms"]
        markdown = (head.format(clients="One client alternating between the two, a request at a time")
                    + markdown_table(["checkout", "p50 ms", "p99 ms", "mean ms", "requests"], rows)
                    + f"\nThis checkout's p50 latency: {ratio:.3f}x the base's; its mean: {mean_ratio:.3f}x.\n")
        data |= {"paired": True, "median": median, "ratio": ratio}
    else:
        median = {name: {"sentences_per_s": statistics.median(r["sentences_per_s"] for r in reports),
                         "p50_ms": statistics.median(r["latency_ms"]["p50"] for r in reports),
                         "p99_ms": statistics.median(r["latency_ms"]["p99"] for r in reports),
                         "errors": sum(r["errors"] for r in reports)}
                  for name, reports in runs.items()}
        ratio = median["this"]["sentences_per_s"] / median["base"]["sentences_per_s"]
        rows = [[name, f"{m['sentences_per_s']:.1f}", f"{m['p50_ms']:.1f}", f"{m['p99_ms']:.1f}", m["errors"]]
                for name, m in median.items()]
        markdown = (head.format(clients=f"{args.concurrency} clients")
                    + markdown_table(["checkout", "sentences/s", "p50 ms", "p99 ms", "errors"], rows)
                    + f"\nThis checkout's throughput: {ratio:.2f}x the base's.\n")
        data |= {"median": median, "ratio": ratio}
    write_results(args.out_dir, args.name, data, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
