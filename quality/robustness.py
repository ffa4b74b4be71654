"""Robustness of a model folder on everyday input: numbers, times, dates, greetings, casing, short sentences.

    python -m quality.robustness models/en-de --set tests/data/robustness/en-de.tsv [--beam 4] [--out results.json]

The set is a TSV file with a header, `category<TAB>source<TAB>reference` (tests/data/robustness/README.md).
For every category, and for every sentence of all categories together ("all"), it measures:

- BLEU and chrF against the references (sacreBLEU, 13a tokenization), and chrF compared case-insensitively.
- digits copied (digits, times, dates): the share of sentences whose every maximal digit run of the source
  appears as a digit run of the output, as often as in the source and in any order (German reorders dates).
  Two normalizations first: thousands separators between digit groups are dropped ("2,000", "2.000" and "2000"
  are one number), and so are zero minutes or cents ("20:00" and "20 Uhr" are one time); a decimal point or
  comma ("1.5", "1,5") splits its runs alike in both languages. A number spelled out ("3" -> "drei") counts as
  changed. Sentences whose correct translation changes the digits (12-hour to 24-hour times: "7 pm" is
  "19 Uhr") are those whose reference fails the same rule: they are kept out of this figure and listed in the
  JSON, with whether the output has the reference's digits instead.
- degenerate: the share of outputs that repeat themselves absurdly (`is_degenerate`), the "Erllollollo" failure.

Each `casing` sentence is also translated in UPPER case, lower case and Title Case (rows casing:upper,
casing:lower, casing:title); their translations are scored case-insensitively only, beside the normal
sentence's case-insensitive chrF. Prints a markdown table and writes the figures, the exempt sentences and
every translation as JSON (--out). Needs no torch: the translator is service.translator's, on the CPU.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF

from core.search import SearchOptions
from service.translator import Translator

CATEGORIES = ("digits", "times", "dates", "greetings", "casing", "everyday")
DIGIT_CATEGORIES = ("digits", "times", "dates")


def title_case(text: str) -> str:
    """Every space-separated word capitalized: 'a man is here.' -> 'A Man Is Here.'"""
    return " ".join(word.capitalize() for word in text.split(" "))


CASINGS: dict[str, Callable[[str], str]] = {"upper": str.upper, "lower": str.lower, "title": title_case}
# The rows of the table: the categories, the casing variants, and every sentence (no variants) together.
ROWS = (*(c for c in CATEGORIES if c != "casing"), "casing", *(f"casing:{name}" for name in CASINGS), "all")

# A "," or "." between a digit and exactly three more: "2,000" and "2.000" are 2000 in English and German.
THOUSANDS_SEPARATOR = re.compile(r"(?<=\d)[.,](?=\d{3}(?!\d))")
# Zero minutes or cents: "20:00" is "20 Uhr", "3.00 euros" is "3 Euro".
ZERO_FRACTION = re.compile(r"(?<=\d)[:.,]00(?!\d)")
DIGIT_RUN = re.compile(r"\d+")
# The same 1-4 characters (no digit: "10000" is a number) 4 or more times in a row: "llollollollo", "IIII".
REPEATED_CHUNK = re.compile(r"(\D{1,4}?)\1{3,}")
# The same word 4 or more times in a row, whatever stands between: "Fahrrad, Fahrrad Fahrrad Fahrrad".
REPEATED_WORD = re.compile(r"\b(\w+)(?:\W+\1\b){3,}")
LENGTH_RATIO = 3  # an output longer than this many times its source (counted as at least 10 characters)
SHORT_SOURCE = 10


@dataclass(frozen=True)
class Example:
    category: str
    source: str
    reference: str


@dataclass
class Row:
    """The figures of one category (or casing variant, or all sentences); None where they do not apply."""

    sentences: int
    bleu: float | None
    chrf: float | None
    chrf_lowercase: float
    digit_sentences: int  # sentences counted in digits_copied
    digits_copied: float | None  # percent
    degenerate: float | None  # percent


def read_set(path: str | Path) -> list[Example]:
    """The examples of a TSV file with the header category, source, reference."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    if lines[0].split("\t") != ["category", "source", "reference"]:
        raise ValueError(f"{path}: the header should be category<TAB>source<TAB>reference, not {lines[0]!r}")
    examples = []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) != 3 or not all(f.strip() for f in fields) or fields[0] not in CATEGORIES:
            raise ValueError(f"{path}:{number}: want a category of {CATEGORIES}, a source and a reference: {line!r}")
        examples.append(Example(*fields))
    return examples


def digit_runs(text: str) -> list[str]:
    """The maximal runs of digits, normalized: '2,000 Gäste um 10:30 und 11:00' -> ['2000', '10', '30', '11']."""
    return DIGIT_RUN.findall(ZERO_FRACTION.sub("", THOUSANDS_SEPARATOR.sub("", text)))


def copies_digits(source: str, output: str) -> bool:
    """Whether every digit run of the source is a digit run of the output (as often, in any order)."""
    return not Counter(digit_runs(source)) - Counter(digit_runs(output))


def counts_for_digits(example: Example) -> bool:
    """Whether the example counts in the digit-copy figure: a digit category whose reference copies the digits."""
    return example.category in DIGIT_CATEGORIES and copies_digits(example.source, example.reference)


def is_degenerate(text: str, source: str) -> bool:
    """A chunk of 1-4 characters or a word repeated 4+ times in a row, or an output over 3x the source's length."""
    too_long = len(text) > LENGTH_RATIO * max(len(source), SHORT_SOURCE)
    return too_long or bool(REPEATED_CHUNK.search(text) or REPEATED_WORD.search(text))


def percent(flags: list[bool]) -> float | None:
    return 100.0 * sum(flags) / len(flags) if flags else None


@dataclass(frozen=True)
class Run:
    """One sentence to translate: the row it counts in, its example, and the source as the model gets it."""

    row: str
    example: Example
    source: str


def runs_of(examples: list[Example]) -> list[Run]:
    """Every example as written, then every casing example in each casing variant."""
    runs = [Run(e.category, e, e.source) for e in examples]
    variants = [
        Run(f"casing:{name}", e, change(e.source))
        for name, change in CASINGS.items()
        for e in examples
        if e.category == "casing"
    ]
    return runs + variants


def in_row(run: Run, row: str) -> bool:
    """Whether a run counts in a row; "all" is every sentence as written, without the casing variants."""
    return run.row == row or (row == "all" and ":" not in run.row)


def score_row(runs: list[Run], outputs: list[str], cased: bool = True) -> Row:
    """The figures of one row's translations; cased=False leaves out the figures that compare case."""
    refs = [[run.example.reference for run in runs]]
    counted = [(run.source, out) for run, out in zip(runs, outputs) if counts_for_digits(run.example)]
    return Row(
        sentences=len(runs),
        bleu=BLEU().corpus_score(outputs, refs).score if cased else None,
        chrf=CHRF().corpus_score(outputs, refs).score if cased else None,
        chrf_lowercase=CHRF(lowercase=True).corpus_score(outputs, refs).score,
        digit_sentences=len(counted),
        digits_copied=percent([copies_digits(source, out) for source, out in counted]),
        degenerate=percent([is_degenerate(out, run.source) for run, out in zip(runs, outputs)]),
    )


def measure(translator: Translator, examples: list[Example], beam: int = 4) -> dict:
    """Translate the set and the casing variants in one call: the figures per row, exemptions, translations."""
    runs = runs_of(examples)
    results = translator.translate([run.source for run in runs], SearchOptions(beam_size=beam))
    outputs = [r[0].text for r in results]
    rows = {}
    for row in ROWS:
        picked = [i for i, run in enumerate(runs) if in_row(run, row)]
        if not picked:  # a set without this category
            continue
        rows[row] = asdict(score_row([runs[i] for i in picked], [outputs[i] for i in picked], cased=":" not in row))
    translations = [
        {"row": run.row, "source": run.source, "reference": run.example.reference, "output": out}
        for run, out in zip(runs, outputs)
    ]
    exempt = [
        {**t, "has_reference_digits": copies_digits(run.example.reference, t["output"])}
        for run, t in zip(runs, translations)
        if run.example.category in DIGIT_CATEGORIES and not counts_for_digits(run.example)
    ]
    return {
        "model": translator.name,
        "beam": beam,
        "rows": rows,
        "exempt_from_digits_copied": exempt,
        "translations": translations,
    }


def markdown_table(rows: dict[str, dict]) -> str:
    def show(value: float | None) -> str:
        return "–" if value is None else f"{value:.1f}"

    lines = [
        "| row | sentences | BLEU | chrF | chrF (case-insensitive) | digits copied % | degenerate % |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        digits = "–" if r["digits_copied"] is None else f"{r['digits_copied']:.1f} (n={r['digit_sentences']})"
        lines.append(
            f"| {name} | {r['sentences']} | {show(r['bleu'])} | {show(r['chrf'])} | "
            f"{show(r['chrf_lowercase'])} | {digits} | {show(r['degenerate'])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir", type=Path)
    p.add_argument("--set", dest="set_file", type=Path, required=True, help="TSV: category, source, reference")
    p.add_argument("--beam", type=int, default=4, help="beam size (1: greedy)")
    p.add_argument("--threads", type=int, default=0, help="ONNX Runtime threads (0: one per core)")
    p.add_argument("--out", type=Path, help="write the figures and every translation here as JSON")
    args = p.parse_args(argv)
    translator = Translator(args.model_dir, provider="cpu", threads=args.threads)
    result = {"set": str(args.set_file), **measure(translator, read_set(args.set_file), args.beam)}
    print(f"{result['model']} on {args.set_file}, beam {args.beam}\n")
    print(markdown_table(result["rows"]))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    return result


if __name__ == "__main__":
    main()
