"""Our ONNX Runtime translator against CTranslate2 on the same model: speed, peak memory and BLEU.

    python -m bench.engines [--model-dir models/en-de] [--threads 2] [--rounds 3]
                            [--batch-sizes 1 16 64] [--beams 1 4] [--engines ort-fp32 ort-int8 ct2-float32 ct2-int8]

Every engine lives in a worker process of its own (`python -m bench.engines --worker ENGINE`), so that
its peak memory (VmHWM: peak RSS) is its own and no engine's idle thread pool sits in another's
process. The driver sends all workers the same runs, interleaved: each round goes through every
(batch size, beam) configuration, and within it through every engine, the engine order rotating from
round to round. A run translates the first N test sentences in corpus order, in batches of the batch
size; target tokens are counted by re-encoding each engine's output text with the model's SentencePiece
model, so that all engines are counted alike. Reported: medians over rounds, BLEU (sacrebleu) of the
first round, ours/CTranslate2 ratios at equal precision. The CTranslate2 model is converted from
MODEL_DIR/model.pt by bench.ct2_convert when missing or older than it. The engine "torch-fp32" (our
PyTorch model, model.decode) can be added as a reference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from itertools import groupby
from pathlib import Path

from bench.report import (
    RESULTS,
    environment,
    log_x_ticks,
    markdown_table,
    median,
    peak_rss_mib,
    rss_mib,
    write_results,
)
from bench.testset import DEFAULT_SPLIT, REPO, load_test_set
from service.search import SearchOptions
from service.tokenizer import Tokenizer

Translate = Callable[[list[str], SearchOptions], list[str]]
ENGINES = ["ort-fp32", "ort-int8", "ct2-float32", "ct2-int8"]
PAIRS = {"ort-fp32": "ct2-float32", "ort-int8": "ct2-int8"}  # ours -> CTranslate2 at the same precision
PACKAGES = ["onnxruntime", "onnxruntime-gpu", "ctranslate2", "sentencepiece", "numpy", "torch", "sacrebleu"]


# --- engines (imported only in their own worker) ---


def load_engine(name: str, model_dir: Path, ct2_dir: Path, threads: int) -> Translate:
    """A function translating a list of texts as one batch: 'ort-PRECISION', 'ct2-COMPUTE_TYPE' or 'torch-fp32'."""
    kind, precision = name.split("-", 1)
    if kind == "ort":
        from service.translator import Translator

        ort = Translator(model_dir, precision=precision, provider="cpu", threads=threads)
        return lambda texts, opts: [t[0].text for t in ort.translate(texts, opts, batch_size=len(texts))]
    if kind == "ct2":
        from bench.ct2_engine import CT2Translator

        return CT2Translator(ct2_dir, compute_type=precision, threads=threads).translate
    if kind == "torch":
        import torch

        from model.checkpoint import load_model
        from model.decode import translate

        torch.set_num_threads(threads)
        model, tokenizer = load_model(model_dir / "model.pt"), Tokenizer(model_dir / "spm.model")
        return lambda texts, opts: translate(model, tokenizer, texts, opts, batch_size=len(texts))
    raise ValueError(f"unknown engine {name}")


def translate_in_batches(translate: Translate, texts: list[str], batch_size: int, opts: SearchOptions) -> list[str]:
    out: list[str] = []
    for start in range(0, len(texts), batch_size):
        out.extend(translate(texts[start : start + batch_size], opts))
    return out


def worker(args: argparse.Namespace) -> None:
    """Serve runs on stdin, one JSON request a line; answer on stdout (whatever libraries print goes to stderr)."""
    channel = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    def send(message: dict) -> None:
        channel.write(json.dumps(message) + "\n")
        channel.flush()

    rss_start = rss_mib()
    translate = load_engine(args.worker, args.model_dir, args.ct2_dir, args.threads)
    rss_loaded = rss_mib()
    counter = Tokenizer(args.model_dir / "spm.model")
    sources, _ = load_test_set(args.split)
    translate(sources[:8], SearchOptions())  # warm-up
    send({"rss_start_mib": rss_start, "rss_loaded_mib": rss_loaded})
    for line in sys.stdin:
        request = json.loads(line)
        texts, opts = sources[: request["sentences"]], SearchOptions(beam_size=request["beam_size"])
        started = time.perf_counter()
        outputs = translate_in_batches(translate, texts, request["batch_size"], opts)
        seconds = time.perf_counter() - started
        tokens = sum(len(ids) for ids in counter.encode(outputs))
        send({"seconds": seconds, "target_tokens": tokens, "hypotheses": outputs, "peak_rss_mib": peak_rss_mib()})


# --- the driver ---


class Worker:
    """One engine's worker process."""

    def __init__(self, name: str, args: argparse.Namespace):
        self.name = name
        command = [sys.executable, "-m", "bench.engines", "--worker", name, "--model-dir", str(args.model_dir)]
        command += ["--ct2-dir", str(args.ct2_dir), "--threads", str(args.threads), "--split", args.split]
        self.process = subprocess.Popen(command, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ready = self._receive()

    def _receive(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} ended (exit code {self.process.wait()})")
        return json.loads(line)

    def run(self, batch_size: int, beam_size: int, sentences: int) -> dict:
        request = {"batch_size": batch_size, "beam_size": beam_size, "sentences": sentences}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._receive()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def ensure_ct2_model(model_dir: Path, ct2_dir: Path) -> None:
    """Convert MODEL_DIR/model.pt for CTranslate2 unless ct2_dir holds a conversion newer than it."""
    checkpoint = model_dir / "model.pt"
    converted = ct2_dir / "model.bin"
    if converted.exists() and converted.stat().st_mtime >= checkpoint.stat().st_mtime:
        return
    from bench.ct2_convert import convert  # imports torch: only here, in the driver

    convert(checkpoint, model_dir / "spm.model", ct2_dir)


def measure(args: argparse.Namespace, sources: list[str], references: list[str]) -> tuple[list[dict], dict]:
    """All runs, interleaved; and each engine's memory: RSS before and after loading, peak."""
    import sacrebleu

    workers = {name: Worker(name, args) for name in args.engines}
    runs, peak = [], {}
    try:
        for round_ in range(args.rounds):
            shift = round_ % len(args.engines)
            order = args.engines[shift:] + args.engines[:shift]
            for beam in args.beams:
                for batch_size in args.batch_sizes:
                    n = min(len(sources), args.batch1_sentences if batch_size == 1 else args.sentences)
                    for name in order:
                        result = workers[name].run(batch_size, beam, n)
                        bleu = sacrebleu.corpus_bleu(result.pop("hypotheses"), [references[:n]]).score
                        peak[name] = result.pop("peak_rss_mib")
                        runs.append(
                            {
                                "engine": name,
                                "round": round_,
                                "batch_size": batch_size,
                                "beam_size": beam,
                                "sentences": n,
                                "bleu": bleu,
                                **result,
                            }
                        )
                        print(
                            f"round {round_} {name:12s} batch {batch_size:3d} beam {beam}: "
                            f"{n / result['seconds']:8.1f} sentences/s  BLEU {bleu:5.2f}",
                            file=sys.stderr,
                        )
                        time.sleep(args.pause)
    finally:
        for w in workers.values():
            w.close()
    memory = {name: {**w.ready, "peak_rss_mib": peak.get(name)} for name, w in workers.items()}
    return runs, memory


def summarize(runs: list[dict]) -> list[dict]:
    """Medians over rounds per (engine, batch size, beam); BLEU of the first round; ratio to CTranslate2."""
    key = lambda r: (r["engine"], r["beam_size"], r["batch_size"])  # noqa: E731
    rows = []
    for (engine, beam, batch_size), group in groupby(sorted(runs, key=key), key=key):
        group = list(group)
        rows.append(
            {
                "engine": engine,
                "beam_size": beam,
                "batch_size": batch_size,
                "sentences": group[0]["sentences"],
                "rounds": len(group),
                "sentences_per_s": median([r["sentences"] / r["seconds"] for r in group]),
                "target_tokens_per_s": median([r["target_tokens"] / r["seconds"] for r in group]),
                "bleu": min(group, key=lambda r: r["round"])["bleu"],
            }
        )
    speed = {(r["engine"], r["beam_size"], r["batch_size"]): r["sentences_per_s"] for r in rows}
    for row in rows:
        other = (PAIRS.get(row["engine"]), row["beam_size"], row["batch_size"])
        row["ratio_to_ct2"] = row["sentences_per_s"] / speed[other] if other in speed else None
    return rows


def markdown(result: dict) -> str:
    rows = [
        [
            r["engine"],
            r["batch_size"],
            r["beam_size"],
            r["sentences"],
            r["sentences_per_s"],
            r["target_tokens_per_s"],
            f"{r['bleu']:.2f}",
            "" if r["ratio_to_ct2"] is None else f"{r['ratio_to_ct2']:.2f}",
        ]
        for r in result["summary"]
    ]
    header = ["engine", "batch", "beam", "sentences", "sentences/s", "target tokens/s", "BLEU", "ours / CT2"]
    memory = [
        [name, m["rss_start_mib"], m["rss_loaded_mib"], m["peak_rss_mib"]] for name, m in result["memory"].items()
    ]
    env, settings = result["environment"], result["settings"]
    return (
        f"Machine: {env['cpu']}, {env['cores']} cores; {settings['threads']} threads per engine; "
        f"{settings['rounds']} rounds (medians); split {settings['split']}.\n\n"
        + markdown_table(header, rows)
        + "\nPeak memory: RSS of each engine's own worker process, MiB (before loading the model, after, and "
        "the peak over all runs: VmHWM from /proc).\n\n"
        + markdown_table(["engine", "RSS before load", "RSS loaded", "peak RSS"], memory)
    )


def plot(summary: list[dict], path: Path) -> None:
    """Sentences/s by batch size, one line per engine, one panel per beam size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    beams = sorted({r["beam_size"] for r in summary})
    fig, axes = plt.subplots(1, len(beams), figsize=(5 * len(beams), 4), squeeze=False)
    for ax, beam in zip(axes[0], beams):
        for engine in dict.fromkeys(r["engine"] for r in summary):
            points = sorted(
                (r["batch_size"], r["sentences_per_s"])
                for r in summary
                if r["engine"] == engine and r["beam_size"] == beam
            )
            ax.plot(*zip(*points), marker="o", label=engine)
        ax.set(xlabel="batch size (sentences)", ylabel="sentences/s", title="greedy" if beam == 1 else f"beam {beam}")
        log_x_ticks(ax, sorted({r["batch_size"] for r in summary}))
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=REPO / "models/en-de", help="exported model folder + model.pt")
    p.add_argument("--ct2-dir", type=Path, help="CTranslate2 conversion (default: bench/results/tmp/ct2-NAME)")
    p.add_argument("--engines", nargs="+", default=ENGINES)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sentences", type=int, default=1000, help="test sentences per run")
    p.add_argument("--batch1-sentences", type=int, default=200, help="test sentences per run at batch size 1")
    p.add_argument("--split", default=DEFAULT_SPLIT)
    p.add_argument("--pause", type=float, default=0.5, help="seconds between runs, for idle threads to settle")
    p.add_argument("--out", type=Path, default=RESULTS, help="where engines.json, engines.md, engines.png go")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.ct2_dir = args.ct2_dir or RESULTS / "tmp" / f"ct2-{args.model_dir.resolve().name}"
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    if any(name.startswith("ct2") for name in args.engines):
        ensure_ct2_model(args.model_dir, args.ct2_dir)
    sources, references = load_test_set(args.split)
    runs, memory = measure(args, sources, references)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k not in ("worker", "out")}
    result = {
        "environment": environment(PACKAGES),
        "settings": settings,
        "command": " ".join(sys.argv),
        "summary": summarize(runs),
        "memory": memory,
        "runs": runs,
    }
    paths = write_results(args.out, "engines", result, markdown(result))
    plot(result["summary"], args.out / "engines.png")
    print("\n".join(str(p) for p in (*paths, args.out / "engines.png")))


if __name__ == "__main__":
    main()
