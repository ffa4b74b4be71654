"""Sentence splitters on a labelled English and German test set: share of texts split exactly right, time per text.

    python -m bench.studies.splitters [--repeats 20] [--out-dir bench/results]

The test set is tests/data/sentences.en-de.json (tests/test_text.py reads it too): short texts with their correct
sentences, covering abbreviations, numbers, dates, quotes, ellipses, lists, URLs and plain text. As in the service,
every line of a text is split on its own, since a line break always ends a sentence there. A text is right when the
splitter's sentences, stripped of surrounding whitespace, are exactly the labelled ones; over all texts, cuts inside a
sentence (the worse error for translation) and missed sentence ends are counted too. The libraries run as they come;
the last row is service.worker.text, which adds one rule to sentencex. Time per text: the median over --repeats runs
of splitting the whole text, then the median over the texts of a language; making a splitter (once per language) is
not timed. Results go to --out-dir/splitters.json and .md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
from collections.abc import Callable
from pathlib import Path

from bench.common.cli import command_line
from bench.common.defaults import REPO, RESULTS
from bench.common.machine import environment
from bench.common.report import markdown_table, median, write_results
from bench.common.timing import timed

TESTSET = REPO / "tests" / "data" / "sentences.en-de.json"
LANGUAGES = ["en", "de"]

Split = Callable[[str], list[str]]  # one line of text -> its sentences


def regex_splitter(language: str) -> Split:
    """The splitter the service had before: at every . ! ? (and closing quote) followed by whitespace."""
    boundary = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+")
    return boundary.split


def pysbd_splitter(language: str) -> Split:
    import pysbd

    return pysbd.Segmenter(language=language, clean=False).segment


def sentencex_splitter(language: str) -> Split:
    import sentencex

    return lambda line: list(sentencex.segment(language, line))


def moses_splitter(language: str) -> Split:
    from sentence_splitter import SentenceSplitter

    return SentenceSplitter(language=language).split


def blingfire_splitter(language: str) -> Split:
    import blingfire

    return lambda line: blingfire.text_to_sentences(line).split("\n")


def syntok_splitter(language: str) -> Split:
    from syntok import segmenter

    def split(line: str) -> list[str]:
        starts = [s[0].offset - len(s[0].spacing) for paragraph in segmenter.process(line) for s in paragraph]
        return [line[a:b] for a, b in zip(starts, [*starts[1:], len(line)])]  # its tokens may rewrite "n't"

    return split


def service_splitter(language: str) -> Split:
    """What the service runs: sentencex, keeping a list item's number ("1.") that opens a line with its item."""
    from service.worker.text import sentences_of, split_sentences

    return lambda line: sentences_of(split_sentences(line, language))


# name -> (its PyPI distribution, the splitter for a language)
SPLITTERS: dict[str, tuple[str, Callable[[str], Split]]] = {
    "regex (before)": ("", regex_splitter),
    "pysbd": ("pysbd", pysbd_splitter),
    "sentencex": ("sentencex", sentencex_splitter),
    "sentence-splitter (Moses)": ("sentence-splitter", moses_splitter),
    "blingfire": ("blingfire", blingfire_splitter),
    "syntok": ("syntok", syntok_splitter),
    "service.worker.text (sentencex + list numbers)": ("sentencex", service_splitter),
}


def load_testset(path: Path = TESTSET) -> dict[str, list[dict]]:
    """Language -> cases, each {"covers", "text", "sentences"} and, for known misses of service.worker.text,
    "known_miss"."""
    return {lang: cases for lang, cases in json.loads(path.read_text()).items() if lang in LANGUAGES}


def sentences(split: Split, text: str) -> list[str]:
    """The splitter's sentences of a text, line by line, stripped, without empty ones."""
    return [s.strip() for line in text.split("\n") for s in split(line) if s.strip()]


def cuts(sentences: list[str]) -> set[int]:
    """Where the sentences of a text end (but the last), counted in characters other than whitespace."""
    return set(itertools.accumulate(len("".join(s.split())) for s in sentences[:-1]))


def seconds_per_text(split: Split, text: str, repeats: int) -> float:
    return median([timed(sentences, split, text)[1] for _ in range(repeats)])


def measure(name: str, language: str, cases: list[dict], repeats: int) -> dict:
    split = SPLITTERS[name][1](language)
    misses = [
        {"covers": c["covers"], "text": c["text"], "got": got}
        for c in cases
        if (got := sentences(split, c["text"])) != c["sentences"]
    ]
    right_cuts = {c["text"]: cuts(c["sentences"]) for c in cases}
    return {
        "splitter": name,
        "language": language,
        "texts": len(cases),
        "right": len(cases) - len(misses),
        "cuts_inside_a_sentence": sum(len(cuts(m["got"]) - right_cuts[m["text"]]) for m in misses),
        "missed_sentence_ends": sum(len(right_cuts[m["text"]] - cuts(m["got"])) for m in misses),
        "median_us_per_text": median([seconds_per_text(split, c["text"], repeats) for c in cases]) * 1e6,
        "misses": misses,
    }


def markdown(results: list[dict], env: dict, testset: dict[str, list[dict]], command: str) -> str:
    categories = sorted({c["covers"] for cases in testset.values() for c in cases})
    versions = ", ".join(f"{name} {version}" for name, version in env["versions"].items())
    sizes = ", ".join(f"{len(testset[lang])} {lang}" for lang in LANGUAGES)
    rows = [
        [
            r["splitter"],
            r["language"],
            f"{r['right']}/{r['texts']}",
            f"{100 * r['right'] / r['texts']:.0f}%",
            r["cuts_inside_a_sentence"],
            r["missed_sentence_ends"],
            r["median_us_per_text"],
            *(sum(m["covers"] == cat for m in r["misses"]) or "" for cat in categories),
        ]
        for r in results
    ]
    header = ["splitter", "lang", "right", "share right", "cuts inside a sentence", "missed sentence ends"]
    header += ["median µs/text", *(f"wrong: {c}" for c in categories)]
    return (
        f"## Sentence splitters (bench.studies.splitters)\n\n`{command}`\n\n"
        f"Machine: {env['cpu']}, {env['cores']} cores. Python {env['python']}; {versions}.\n"
        f"Test set: {TESTSET.relative_to(REPO)} ({sizes} texts); each line split on its own; a text counts as right "
        "when its sentences are exactly the labelled ones. Over all texts: cuts inside a sentence (the worse error for "
        "translation) and missed sentence ends. Time: median over texts of the median of repeated runs. Last columns: "
        "wrong texts by what they cover.\n\n" + markdown_table(header, rows)
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=20, help="runs per text for its time")
    p.add_argument("--splitters", nargs="+", default=list(SPLITTERS), choices=list(SPLITTERS))
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    testset = load_testset()
    results = [measure(name, lang, testset[lang], args.repeats) for name in args.splitters for lang in LANGUAGES]
    env = environment([SPLITTERS[name][0] for name in args.splitters if SPLITTERS[name][0]])
    command = command_line("bench.studies.splitters", argv)
    data = {"command": command, "environment": env, "results": results}
    for path in write_results(args.out_dir, "splitters", data, markdown(results, env, testset, command)):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
