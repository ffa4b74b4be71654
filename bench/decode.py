"""Offline decoding speed and memory: PyTorch without and with a KV cache against ONNX Runtime with one.

    python -m bench.decode [--model-dir models/en-de] [--data MULTI30K_DIR] [--sentences 200]
                           [--batched-sentences 1000] [--batch-sizes 1 16 64] [--beams 1 4] [--repeats 3]
                           [--threads N] [--engines ...] [--out bench/results/decode.json] [--markdown BENCHMARKS.md]

Engines, all on the CPU with the same number of threads (torch.set_num_threads / Translator(threads=...)):
    pytorch-nocache  model.decode.translate(cached=False): every step re-runs the decoder over the whole prefix
    pytorch-cache    model.decode.translate(cached=True): the KV-cached decoder the model is evaluated with
    ort-fp32         service.translator.Translator, fp32 graphs, KV cache; what the service runs
    ort-int8         the same with the dynamically quantized int8 graphs (an extra row)
Every engine translates through the same search (service.search) and the same batching (sentences sorted by
length, then cut into batches), so what differs is how the decoder steps run.

Rows (batch size, beam) are measured one after the other. For a row, every engine gets a process of its own (spawned:
a fresh interpreter, and torch is imported only by the PyTorch engines), which loads the engine, warms it up on one
batch, then translates the row's sentences once per repeat; the repeats are interleaved, each going through every
engine in an order rotating by one from repeat to repeat. Reported are medians over the repeats. Rows with batch
size 1 translate the first --sentences sentences of test_2016_flickr (PyTorch without a cache is slow there), the
others the first --batched-sentences; within a row every engine translates the same sentences. Target tokens are
the SentencePiece tokens of the output, re-encoded by the driver. Peak memory is the peak resident set size
(VmHWM) of the engine's process for that row: the libraries, the loaded model and the decoding of the row.
Results go to --out (JSON, and a .md beside it) and to the section "Offline decoding (bench.decode)" of --markdown.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import shlex
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

from bench.report import RESULTS, environment, markdown_table, median, peak_rss_mib, rss_mib, write_results
from bench.testset import DEFAULT_SPLIT, REPO, multi30k_dir
from model.data import data_file, read_lines
from service.search import SearchOptions
from service.tokenizer import Tokenizer

ENGINES = {
    "pytorch-nocache": "PyTorch, no cache",
    "pytorch-cache": "PyTorch, KV cache",
    "ort-fp32": "ONNX Runtime fp32, KV cache",
    "ort-int8": "ONNX Runtime int8, KV cache",
}
BASELINES = {"pytorch-nocache": "× PyTorch no cache", "pytorch-cache": "× PyTorch cache"}
REFERENCE = "pytorch-cache"  # whose outputs the others' are compared with
PACKAGES = ["torch", "onnxruntime", "onnxruntime-gpu", "numpy", "sentencepiece"]
SECTION = "Offline decoding (bench.decode)"

Translate = Callable[[list[str], SearchOptions, int], list[str]]


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the table per engine: the first `sentences` test sentences, in batches, greedy or beam."""

    batch_size: int
    beam_size: int
    sentences: int


# --- an engine's process (imports torch only for the PyTorch engines) ---------------------------------------


def load_engine(name: str, model_dir: Path, threads: int) -> Translate:
    """translate(texts, opts, batch_size) -> the best translation of each text, for one engine."""
    if name.startswith("ort-"):
        from service.translator import Translator

        translator = Translator(model_dir, precision=name.removeprefix("ort-"), provider="cpu", threads=threads)
        return lambda texts, opts, batch: [h[0].text for h in translator.translate(texts, opts, batch_size=batch)]
    import torch

    from model.checkpoint import load_model
    from model.decode import translate

    torch.set_num_threads(threads)
    model, tokenizer = load_model(model_dir / "model.pt"), Tokenizer(model_dir / "spm.model")
    cached = {"pytorch-cache": True, "pytorch-nocache": False}[name]
    return lambda texts, opts, batch: translate(model, tokenizer, texts, opts, batch_size=batch, cached=cached)


def serve(conn: Connection, name: str, model_dir: Path, threads: int, texts: list[str], row: Row) -> None:
    """Load the engine and warm it up on one batch; then translate the row's texts at each request, until None."""
    rss_start = rss_mib()
    translate = load_engine(name, model_dir, threads)
    rss_loaded = rss_mib()
    opts = SearchOptions(beam_size=row.beam_size)
    translate(texts[: row.batch_size], opts, row.batch_size)
    conn.send({"rss_start_mib": rss_start, "rss_loaded_mib": rss_loaded})
    while conn.recv() is not None:
        started = time.perf_counter()
        outputs = translate(texts, opts, row.batch_size)
        seconds = time.perf_counter() - started
        conn.send({"seconds": seconds, "outputs": outputs, "peak_rss_mib": peak_rss_mib()})


# --- the driver --------------------------------------------------------------------------------------------


class Worker:
    """One engine's process for one row; spawned (a fresh interpreter), so that its memory is its own."""

    def __init__(self, name: str, model_dir: Path, threads: int, texts: list[str], row: Row):
        self.name = name
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=serve, args=(child, name, model_dir, threads, texts, row), name=name)
        self.process.start()
        child.close()
        self.memory = self._receive()

    def _receive(self) -> dict:
        try:
            return self.conn.recv()
        except EOFError:
            self.process.join()
            raise RuntimeError(f"engine {self.name} ended (exit code {self.process.exitcode})") from None

    def run(self) -> dict:
        self.conn.send(True)
        return self._receive()

    def close(self) -> None:
        self.conn.send(None)
        self.process.join(timeout=60)


def rows(args: argparse.Namespace, available: int) -> list[Row]:
    def sentences(batch_size: int) -> int:
        return min(available, args.sentences if batch_size == 1 else args.batched_sentences)

    return [Row(b, k, sentences(b)) for k in args.beams for b in args.batch_sizes]


def row_of(run: dict) -> Row:
    return Row(run["batch_size"], run["beam_size"], run["sentences"])


def measure(args: argparse.Namespace, sources: list[str]) -> tuple[list[dict], dict[str, dict]]:
    """Every run of every row; and each engine's RSS before and after loading (in its first row's process)."""
    counter = Tokenizer(args.model_dir / "spm.model")
    runs: list[dict] = []
    memory: dict[str, dict] = {}
    for row in rows(args, len(sources)):
        workers = {
            name: Worker(name, args.model_dir, args.threads, sources[: row.sentences], row) for name in args.engines
        }
        try:
            runs += measure_row(row, workers, args.repeats, counter)
        finally:
            for worker in workers.values():
                worker.close()
        for name, worker in workers.items():
            memory.setdefault(name, worker.memory)
    return runs, memory


def measure_row(row: Row, workers: dict[str, Worker], repeats: int, counter: Tokenizer) -> list[dict]:
    """The repeats of one row, interleaved: each repeat runs every engine once, in an order rotating by one."""
    names, runs = list(workers), []
    for repeat in range(repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        outputs = {}
        for name in order:
            result = workers[name].run()
            outputs[name] = result.pop("outputs")
            tokens = sum(len(ids) for ids in counter.encode(outputs[name]))
            runs.append(
                {"engine": name, "repeat": repeat, **dataclasses.asdict(row), "target_tokens": tokens, **result}
            )
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


def write_section(path: Path, title: str, body: str) -> None:
    """Replace (or append) the section `## title` of a markdown file, leaving the other sections alone."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    heading = f"## {title}\n"
    if heading in text:
        before, rest = text.split(heading, 1)
        after = rest[rest.index("\n## ") + 1 :] if "\n## " in rest else ""
    else:
        before, after = text.rstrip("\n") + "\n\n", ""
    path.write_text(before + heading + "\n" + body.rstrip("\n") + "\n" + ("\n" + after if after else ""))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=REPO / "models" / "en-de")
    p.add_argument("--data", type=Path, default=multi30k_dir(), help="Multi30k folder (default: MULTI30K_DIR)")
    p.add_argument("--sentences", type=int, default=200, help="sentences of the batch-size-1 rows")
    p.add_argument("--batched-sentences", type=int, default=1000, help="sentences of the other rows")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=multiprocessing.cpu_count(), help="threads of every engine")
    p.add_argument("--engines", nargs="+", choices=list(ENGINES), default=list(ENGINES))
    p.add_argument("--out", type=Path, default=RESULTS / "decode.json")
    p.add_argument("--markdown", type=Path, default=REPO / "BENCHMARKS.md", help="the file to write the section into")
    p.add_argument("--no-markdown", action="store_true", help="write only --out")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    sources = read_lines(data_file(args.data, DEFAULT_SPLIT, "en"))
    config = json.loads((args.model_dir / "config.json").read_text())
    started = time.perf_counter()
    runs, memory = measure(args, sources)
    summary = summarize(runs, args.engines)
    result = {
        "command": "python -m bench.decode " + shlex.join(sys.argv[1:] if argv is None else argv),
        "environment": environment(PACKAGES),
        "settings": {
            **{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "test_set": f"{DEFAULT_SPLIT}.en ({len(sources)} sentences)",
            "parameters": config.get("parameters", 0),
        },
        "seconds": round(time.perf_counter() - started, 1),
        "memory": memory,
        "summary": summary,
        "acceptance": acceptance(summary),
        "runs": runs,
    }
    markdown = report(result)
    write_results(args.out.parent, args.out.stem, result, f"## {SECTION}\n\n{markdown}")
    if not args.no_markdown:
        write_section(args.markdown, SECTION, markdown)
    print(markdown)
    return result


if __name__ == "__main__":
    main()
