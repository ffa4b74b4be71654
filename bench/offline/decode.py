"""Offline decoding speed and memory: PyTorch without and with a KV cache against ONNX Runtime with one.

    python -m bench.offline.decode [--model-dir models/en-de] [--data MULTI30K_DIR] [--sentences 200]
                                   [--batched-sentences 1000] [--batch-sizes 1 16 64] [--beams 1 4] [--repeats 3]
                                   [--threads N] [--engines ...] [--out bench/results/decode.json]

Engines, all on the CPU with the same number of threads (torch.set_num_threads / Translator(threads=...)):
    pytorch-nocache  model.decode.translate(cached=False): every step re-runs the decoder over the whole prefix
    pytorch-cache    model.decode.translate(cached=True): the KV-cached decoder the model is evaluated with
    ort-fp32         service.translator.Translator, fp32 graphs, KV cache; what the service runs
    ort-int8         the same with the dynamically quantized int8 graphs (an extra row)
Every engine translates through the same search (core.search) and the same batching (sentences sorted by
length, then cut into batches), so what differs is how the decoder steps run.

Rows (batch size, beam) are measured one after the other. For a row, every engine gets a process of its own
(bench.common.processes.EngineProcess: spawned, a fresh interpreter, and torch is imported only by the PyTorch
engines), which loads the engine, then translates the row's sentences once per repeat, each time after one untimed
batch of the row's shape; the repeats are interleaved, each going through every engine in an order rotating by one
from repeat to repeat.
Reported are medians over the repeats. Rows with batch size 1 translate the first --sentences sentences of
test_2016_flickr (PyTorch without a cache is slow there), the others the first --batched-sentences; within a row
every engine translates the same sentences. Target tokens are the SentencePiece tokens of the output, re-encoded
alike for every engine. Peak memory is the peak resident set size (VmHWM) of the engine's process for that row: the
libraries, the loaded model and the decoding of the row.
Results go to --out (JSON, and a .md beside it); `python -m bench.report` puts them in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from bench.common.cli import add_engine_arguments, add_grid_arguments, command_line, settings_of
from bench.common.defaults import REPEATS, REPO, RESULTS, RUN_SENTENCES, SHORT_RUN_SENTENCES
from bench.common.machine import environment
from bench.common.processes import EngineProcess
from bench.common.report import markdown_table, median, write_results
from bench.common.sentences import multi30k_sentences, run_sentences
from bench.common.timing import rotation, timed
from core.corpus import TEST_SPLIT, multi30k_dir
from core.search import SearchOptions

ENGINES = {
    "pytorch-nocache": "PyTorch, no cache",
    "pytorch-cache": "PyTorch, KV cache",
    "ort-fp32": "ONNX Runtime fp32, KV cache",
    "ort-int8": "ONNX Runtime int8, KV cache",
}
BASELINES = {"pytorch-nocache": "× PyTorch no cache", "pytorch-cache": "× PyTorch cache"}
REFERENCE = "pytorch-cache"  # whose outputs the others' are compared with
PACKAGES = ["torch", "onnxruntime", "onnxruntime-gpu", "numpy", "sentencepiece"]
SECTION = "Offline decoding (bench.offline.decode)"


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the table per engine: the first `sentences` test sentences, in batches, greedy or beam."""

    batch_size: int
    beam_size: int
    sentences: int


def rows(args: argparse.Namespace, available: int) -> list[Row]:
    def sentences(batch_size: int) -> int:
        return run_sentences(batch_size, args.sentences, args.batched_sentences, available)

    return [Row(b, k, sentences(b)) for k in args.beams for b in args.batch_sizes]


def row_of(run: dict) -> Row:
    return Row(run["batch_size"], run["beam_size"], run["sentences"])


def measure(args: argparse.Namespace, sources: list[str]) -> tuple[list[dict], dict[str, dict]]:
    """Every run of every row; and each engine's RSS before and after loading (in its first row's process)."""
    runs: list[dict] = []
    memory: dict[str, dict] = {}
    for row in rows(args, len(sources)):
        engines = {name: EngineProcess(name, args.model_dir, args.threads) for name in args.engines}
        try:
            runs += measure_row(row, engines, sources[: row.sentences], args.repeats)
        finally:
            for engine in engines.values():
                engine.close()
        for name, engine in engines.items():
            memory.setdefault(name, engine.memory)
    return runs, memory


def measure_row(row: Row, engines: dict[str, EngineProcess], texts: list[str], repeats: int) -> list[dict]:
    """The repeats of one row, interleaved: each repeat runs every engine once, in an order rotating by one."""
    opts, runs = SearchOptions(beam_size=row.beam_size), []
    for repeat in range(repeats):
        order = rotation(list(engines), repeat)
        outputs = {}
        for name in order:
            result = engines[name].run(texts, opts, row.batch_size)
            outputs[name] = result.pop("outputs")
            runs.append({"engine": name, "repeat": repeat, **dataclasses.asdict(row), **result})
            print(
                f"batch {row.batch_size:3d} beam {row.beam_size} repeat {repeat} {name:16s}"
                f" {row.sentences / result['seconds']:8.2f} sentences/s",
                file=sys.stderr,
            )
        for run in runs[-len(order) :]:
            run["same_as_reference"] = same_fraction(outputs, run["engine"])
    return runs


def same_fraction(outputs: dict[str, list[str]], name: str) -> float | None:
    """The fraction of sentences that an engine translates exactly as the reference engine does."""
    if REFERENCE not in outputs:
        return None
    return sum(a == b for a, b in zip(outputs[name], outputs[REFERENCE])) / len(outputs[name])


def summarize(runs: list[dict], engines: list[str]) -> list[dict]:
    """Medians over the repeats per (row, engine), with the speed-ups over the PyTorch engines."""
    summary = []
    for row in dict.fromkeys(row_of(r) for r in runs):
        speed = {}
        for name in engines:
            group = [r for r in runs if r["engine"] == name and row_of(r) == row]
            speed[name] = median([row.sentences / r["seconds"] for r in group])
            summary.append(
                {
                    **dataclasses.asdict(row),
                    "engine": name,
                    "repeats": len(group),
                    "sentences_per_s": speed[name],
                    "target_tokens_per_s": median([r["target_tokens"] / r["seconds"] for r in group]),
                    "peak_rss_mib": max(r["peak_rss_mib"] for r in group),
                    "same_as_reference": min((r["same_as_reference"] for r in group), default=None),
                }
            )
        for entry in summary[-len(engines) :]:
            for base in BASELINES:
                entry[f"speedup_vs_{base}"] = entry["sentences_per_s"] / speed[base] if base in speed else None
    return summary


def acceptance(summary: list[dict], engine: str = "ort-fp32") -> list[str]:
    """The issue's two claims, checked on the measured medians."""
    ours = [s for s in summary if s["engine"] == engine]
    lines = []
    greedy1 = [s for s in ours if s["batch_size"] == 1 and s["beam_size"] == 1]
    if greedy1 and greedy1[0]["speedup_vs_pytorch-nocache"] is not None:
        x = greedy1[0]["speedup_vs_pytorch-nocache"]
        lines.append(f"{engine} vs PyTorch without cache, batch 1 greedy: {x:.1f}× (wanted ≥ 5×): {verdict(x >= 5)}")
    against_cache = [s for s in ours if s["speedup_vs_pytorch-cache"] is not None]
    if against_cache:
        each = ", ".join(
            f"batch {s['batch_size']} beam {s['beam_size']}: {s['speedup_vs_pytorch-cache']:.2f}×"
            for s in against_cache
        )
        ok = all(s["speedup_vs_pytorch-cache"] > 1 for s in against_cache)
        lines.append(f"{engine} vs PyTorch with cache, every row (wanted > 1×): {each}: {verdict(ok)}")
    return lines


def verdict(ok: bool) -> str:
    return "yes" if ok else "NO"


# --- reporting ---------------------------------------------------------------------------------------------


def report(result: dict) -> str:
    """The markdown of the section: how it was measured, the table, the acceptance checks."""
    env, settings = result["environment"], result["settings"]
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v != "not installed")
    header = ["batch", "beam", "sentences", "engine", "sentences/s", "target tokens/s", "peak RSS (MiB)"]
    header += list(BASELINES.values()) + ["same output as PyTorch"]
    table = []
    for s in result["summary"]:
        ratios = [f"{s[f'speedup_vs_{b}']:.2f}" if s[f"speedup_vs_{b}"] is not None else "" for b in BASELINES]
        same = "" if s["same_as_reference"] is None else f"{100 * s['same_as_reference']:.1f}%"
        table.append(
            [s["batch_size"], s["beam_size"], s["sentences"], ENGINES[s["engine"]], s["sentences_per_s"]]
            + [s["target_tokens_per_s"], s["peak_rss_mib"], *ratios, same]
        )
    loaded = ", ".join(f"{ENGINES[n]} {m['rss_loaded_mib']:.0f} MiB" for n, m in result["memory"].items())
    lines = [
        f"`{result['command']}`",
        "",
        f"Machine: {env['cpu']}, {env['cores']} cores; {settings['threads']} threads for every engine. "
        f"Python {env['python']}; {versions}.",
        f"Model: {display_path(Path(settings['model_dir']))} ({settings['parameters']:,} parameters). "
        f"Test set: {settings['test_set']}; "
        f"batch size 1 on the first {settings['sentences']} sentences, larger batches on the first "
        f"{settings['batched_sentences']}; within a row every engine translates the same sentences. "
        f"Medians of {settings['repeats']} interleaved repeats. Peak RSS: of the engine's own process for the row, "
        f"libraries and model included (RSS once loaded: {loaded}).",
        "",
        markdown_table(header, table),
    ]
    return "\n".join(lines + [f"- {line}" for line in result["acceptance"]]) + "\n"


def display_path(path: Path) -> str:
    """A path relative to the repository when it lies inside it."""
    return str(path.resolve().relative_to(REPO)) if path.resolve().is_relative_to(REPO) else str(path)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_engine_arguments(p)
    p.add_argument("--data", type=Path, default=multi30k_dir(), help="Multi30k folder (default: MULTI30K_DIR)")
    p.add_argument("--sentences", type=int, default=SHORT_RUN_SENTENCES, help="sentences of the batch-size-1 rows")
    p.add_argument("--batched-sentences", type=int, default=RUN_SENTENCES, help="sentences of the other rows")
    add_grid_arguments(p)
    p.add_argument("--repeats", type=int, default=REPEATS)
    p.add_argument("--engines", nargs="+", choices=list(ENGINES), default=list(ENGINES))
    p.add_argument("--out", type=Path, default=RESULTS / "decode.json")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    sources = multi30k_sentences(args.data)
    config = json.loads((args.model_dir / "config.json").read_text())
    (runs, memory), seconds = timed(measure, args, sources)
    summary = summarize(runs, args.engines)
    result = {
        "command": command_line("bench.offline.decode", argv),
        "environment": environment(PACKAGES),
        "settings": {
            **settings_of(args),
            "test_set": f"{TEST_SPLIT}.en ({len(sources)} sentences)",
            "parameters": config.get("parameters", 0),
        },
        "seconds": round(seconds, 1),
        "memory": memory,
        "summary": summary,
        "acceptance": acceptance(summary),
        "runs": runs,
    }
    markdown = report(result)
    write_results(args.out.parent, args.out.stem, result, f"## {SECTION}\n\n{markdown}")
    print(markdown)
    return result


if __name__ == "__main__":
    main()
