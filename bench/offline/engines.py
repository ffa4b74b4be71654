"""Our ONNX Runtime translator against CTranslate2 on the same model: speed, peak memory and BLEU.

    python -m bench.offline.engines [--model-dir models/en-de] [--threads N] [--rounds 3] [--batch-sizes 1 16 64]
                                    [--beams 1 4] [--engines ort-fp32 ort-int8 ct2-float32 ct2-int8]

Every engine lives in a process of its own (bench.common.processes.EngineProcess), so that its peak memory (VmHWM:
peak RSS) is its own and no engine's idle thread pool sits in another's process. The driver sends all engines the same
runs, interleaved: each round goes through every (batch size, beam) configuration, and within it through every engine,
the engine order rotating from round to round. A run translates the first N test sentences in corpus order, in
batches of the batch size, after one untimed batch of that shape; target tokens are counted by re-encoding each
engine's output text with the model's SentencePiece model, so that all engines are counted alike. Reported: medians
over rounds, BLEU (sacrebleu) of the first round, ours/CTranslate2 ratios at equal precision. The CTranslate2 model
is converted from MODEL_DIR/model.pt by bench.common.ct2_convert when missing or older than it. The engine
"pytorch-cache" (our PyTorch model, model.decode) can be added as a reference.

A model of several pairs converted from a Hugging Face folder (NLLB-200, M2M100: model.convert) runs one pair, with
CTranslate2 on its own conversion of that folder (ctranslate2.converters.TransformersConverter):

    python -m bench.offline.engines --model-dir WORK/model --hf-dir WORK/hf --pair en de --max-length 24 \
        --sentences 32 --batch1-sentences 8 --batch-sizes 1 16 --random-weights --name engines-nllb-600m

Every engine gets the same source ids and the target language's token as its first; --max-length bounds every
translation (</s> and the forced token counted, CTranslate2's bound set alike): a model of random weights never ends
a sentence, so every sentence is decoded to that bound by every engine.

A model folder converted from an Argos Translate package (model.argos) runs against CTranslate2 on the package's own
model/ folder, as LibreTranslate runs it (its int8 weights; ct2-float32 multiplies them back), both given the same
source ids, the package's SentencePiece pieces:

    python -m bench.offline.engines --model-dir WORK/model --package WORK/translate-en_de-1_0 --random-weights \
        --max-length 24 --name engines-argos-base

--random-weights: the outputs of a model of random weights are not text, so neither BLEU nor target tokens (which
re-encode the output text) mean anything; the tables leave them out.
"""

from __future__ import annotations

import argparse
import sys
import time
from itertools import groupby
from pathlib import Path

from bench.common.cli import add_engine_arguments, add_grid_arguments, command_line, settings_of
from bench.common.defaults import REPEATS, RESULTS, RUN_SENTENCES, SHORT_RUN_SENTENCES
from bench.common.engines import ensure_ct2_model
from bench.common.machine import environment
from bench.common.processes import EngineProcess
from bench.common.report import figure, log_x_panel, markdown_table, median, write_results
from bench.common.sentences import run_sentences
from bench.common.timing import rotation
from core.corpus import TEST_SPLIT, load_test_set
from core.search import SearchOptions

ENGINES = ["ort-fp32", "ort-int8", "ct2-float32", "ct2-int8"]
PAIRS = {  # ours -> CTranslate2 at the same precision
    "ort-fp32": "ct2-float32",
    "ort-int8": "ct2-int8",
    "ort-fp32-nospin": "ct2-float32",
    "ort-int8-nospin": "ct2-int8",
}
PACKAGES = ["onnxruntime", "onnxruntime-gpu", "ctranslate2", "sentencepiece", "numpy", "torch", "sacrebleu"]


def measure(args: argparse.Namespace, sources: list[str], references: list[str]) -> tuple[list[dict], dict]:
    """All runs, interleaved; and each engine's memory: RSS before and after loading, peak."""
    import sacrebleu

    pair = tuple(args.pair) if args.pair else None
    engines = {name: EngineProcess(name, args.model_dir, args.threads, args.ct2_dir, pair) for name in args.engines}
    runs, peak = [], {}
    try:
        for round_ in range(args.rounds):
            order = rotation(args.engines, round_)
            for beam in args.beams:
                opts = SearchOptions(beam_size=beam, max_length=args.max_length)
                for batch_size in args.batch_sizes:
                    n = run_sentences(batch_size, args.batch1_sentences, args.sentences, len(sources))
                    for name in order:
                        result = engines[name].run(sources[:n], opts, batch_size, in_order=True)
                        bleu = sacrebleu.corpus_bleu(result.pop("outputs"), [references[:n]]).score
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
        for engine in engines.values():
            engine.close()
    memory = {name: {**e.memory, "peak_rss_mib": peak.get(name)} for name, e in engines.items()}
    return runs, memory


def summarize(runs: list[dict], text: bool = True) -> list[dict]:
    """Medians over rounds per (engine, batch size, beam); BLEU of the first round and target tokens/s where the
    outputs are text (`text`: not a model of random weights); ratio to CTranslate2."""
    key = lambda r: (r["engine"], r["beam_size"], r["batch_size"])  # noqa: E731
    rows = []
    for (engine, beam, batch_size), group in groupby(sorted(runs, key=key), key=key):
        group = list(group)
        row = {
            "engine": engine,
            "beam_size": beam,
            "batch_size": batch_size,
            "sentences": group[0]["sentences"],
            "rounds": len(group),
            "sentences_per_s": median([r["sentences"] / r["seconds"] for r in group]),
        }
        if text:
            row["target_tokens_per_s"] = median([r["target_tokens"] / r["seconds"] for r in group])
            row["bleu"] = min(group, key=lambda r: r["round"])["bleu"]
        rows.append(row)
    speed = {(r["engine"], r["beam_size"], r["batch_size"]): r["sentences_per_s"] for r in rows}
    for row in rows:
        other = (PAIRS.get(row["engine"]), row["beam_size"], row["batch_size"])
        row["ratio_to_ct2"] = row["sentences_per_s"] / speed[other] if other in speed else None
    return rows


def markdown(result: dict) -> str:
    text = not result["settings"].get("random_weights")
    rows = [
        [
            r["engine"],
            r["batch_size"],
            r["beam_size"],
            r["sentences"],
            r["sentences_per_s"],
            *([r["target_tokens_per_s"], f"{r['bleu']:.2f}"] if text else []),
            "" if r["ratio_to_ct2"] is None else f"{r['ratio_to_ct2']:.2f}",
        ]
        for r in result["summary"]
    ]
    header = ["engine", "batch", "beam", "sentences", "sentences/s",
              *(["target tokens/s", "BLEU"] if text else []), "ours / CT2"]
    memory = [
        [name, m["rss_start_mib"], m["rss_loaded_mib"], m["peak_rss_mib"]] for name, m in result["memory"].items()
    ]
    env, settings = result["environment"], result["settings"]
    return (
        f"Machine: {env['cpu']}, {env['cores']} cores; {settings['threads']} threads per engine; "
        f"{settings['rounds']} rounds (medians); split {settings['split']}"
        + (f", pair {' → '.join(settings['pair'])}" if settings.get("pair") else "")
        + f"; at most {settings.get('max_length', SearchOptions.max_length)} tokens a translation"
        + ("" if text else "; random weights: the outputs are not text, so neither BLEU nor target tokens are given")
        + ".\n\n"
        + markdown_table(header, rows)
        + "\nPeak memory: RSS of each engine's own worker process, MiB (before loading the model, after, and "
        "the peak over all runs: VmHWM from /proc).\n\n"
        + markdown_table(["engine", "RSS before load", "RSS loaded", "peak RSS"], memory)
    )


def plot(summary: list[dict], path: Path) -> None:
    """Sentences/s by batch size, one line per engine, one panel per beam size."""
    beams = sorted({r["beam_size"] for r in summary})
    with figure(path, len(beams)) as axes:
        for ax, beam in zip(axes, beams):
            for engine in dict.fromkeys(r["engine"] for r in summary):
                points = sorted(
                    (r["batch_size"], r["sentences_per_s"])
                    for r in summary
                    if r["engine"] == engine and r["beam_size"] == beam
                )
                ax.plot(*zip(*points), marker="o", label=engine)
            title = "greedy" if beam == 1 else f"beam {beam}"
            ax.set(xlabel="batch size (sentences)", ylabel="sentences/s", title=title)
            log_x_panel(ax, sorted({r["batch_size"] for r in summary}))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_engine_arguments(p, ct2=True)
    p.add_argument("--engines", nargs="+", default=ENGINES)
    add_grid_arguments(p)
    p.add_argument("--rounds", type=int, default=REPEATS)
    p.add_argument("--sentences", type=int, default=RUN_SENTENCES, help="test sentences per run")
    p.add_argument(
        "--batch1-sentences", type=int, default=SHORT_RUN_SENTENCES, help="test sentences per run at batch size 1"
    )
    p.add_argument("--split", default=TEST_SPLIT)
    p.add_argument("--pair", nargs=2, metavar=("SOURCE", "TARGET"), help="the pair of a model folder of several")
    p.add_argument("--hf-dir", type=Path, help="the Hugging Face folder MODEL_DIR was converted from: CTranslate2 "
                   "runs its own conversion of it")
    p.add_argument("--package", type=Path, help="the installed Argos Translate package MODEL_DIR was converted "
                   "from: CTranslate2 runs its model/ folder as it is")
    p.add_argument("--random-weights", action="store_true", help="the model's weights are random: leave out BLEU "
                   "and target tokens")
    p.add_argument("--max-length", type=int, default=SearchOptions.max_length, help="tokens per translation at most")
    p.add_argument("--name", default="engines", help="the results' name: NAME.json, NAME.md, NAME.png")
    p.add_argument("--pause", type=float, default=0.5, help="seconds between runs, for idle threads to settle")
    p.add_argument("--out", type=Path, default=RESULTS, help="where NAME.json, NAME.md, NAME.png go")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if any(name.startswith("ct2") for name in args.engines):
        args.ct2_dir = args.package / "model" if args.package else ensure_ct2_model(
            args.model_dir, args.ct2_dir, args.hf_dir
        )
    sources, references = load_test_set(args.split)
    runs, memory = measure(args, sources, references)
    result = {
        "environment": environment(PACKAGES),
        "settings": settings_of(args, "out"),
        "command": command_line("bench.offline.engines", argv),
        "summary": summarize(runs, text=not args.random_weights),
        "memory": memory,
        "runs": runs,
    }
    paths = write_results(args.out, args.name, result, markdown(result))
    plot(result["summary"], args.out / f"{args.name}.png")
    print("\n".join(str(p) for p in (*paths, args.out / f"{args.name}.png")))


if __name__ == "__main__":
    main()
