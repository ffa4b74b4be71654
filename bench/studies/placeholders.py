"""Which placeholder forms a model copies into its translation, and how protected spans come back through it.

    python -m bench.studies.placeholders [--models models/en-de models/de-en] [--sentences 80]

First, each candidate placeholder form (a four- or three-digit number, letters and digits, brackets, angle brackets,
underscores, #n) is put at a random word boundary of test_2016_flickr source sentences (beam 4): the share of
translations holding it exactly once is how often the model copies that form. Then real spans (URLs, emails,
mentions, hashtags, paths, inline code, emoji, codes) go through service.worker.spans as the service runs it:
the share the model copied and the share put back by place (every span comes back exactly as written either way).
Last, inline markup as service.worker.markup marks it: a <b> around one or two words of each sentence, and in half
of them a <br> at another word boundary; the share of the tags' placeholders the model copied.
Results: bench/results/placeholders.{json,md}.
"""

from __future__ import annotations

import argparse
import random
import re
from collections.abc import Callable
from pathlib import Path

from bench.common.cli import command_line
from bench.common.defaults import REPO, RESULTS
from bench.common.machine import environment
from bench.common.report import markdown_table, write_results
from core.corpus import TEST_SPLIT, load_test_set
from core.search import SearchOptions
from service.translator import Translator
from service.worker.markup import Atom, Close, Open, Unit, mark
from service.worker.spans import copied, protect

FORMS: dict[str, Callable[[int], str]] = {
    "four digits (7301)": lambda i: str(7301 + 17 * i),
    "three digits (501)": lambda i: str(501 + i),
    "letters and digits (X19)": lambda i: f"X{i + 1}9",
    "brackets ([1])": lambda i: f"[{i + 1}]",
    "angle brackets (<1>)": lambda i: f"<{i + 1}>",
    "underscores (__1__)": lambda i: f"__{i + 1}__",
    "hash (#1)": lambda i: f"#{i + 1}",
}
SPANS = ["https://example.com/docs/setup?lang=en&v=2", "anna.schmidt@example.org", "@maria_k", "#MachineLearning",
         "/etc/nginx/nginx.conf", "`pip install x`", "🎵", "👍🏽", "A-77321"]


def with_inserted(sentence: str, piece: str, rng: random.Random) -> str:
    words = sentence.split()
    words.insert(rng.randrange(1, len(words)), piece)
    return " ".join(words)


def copied_share(translator: Translator, sources: list[str], pieces: list[str]) -> float:
    outputs = [r[0].text for r in translator.translate(sources, SearchOptions(beam_size=4))]
    found = sum(len(re.findall(rf"(?<![\w]){re.escape(p)}(?![\w])", o)) == 1 for o, p in zip(outputs, pieces))
    return found / len(sources)


def with_markup(sentence: str, rng: random.Random) -> Unit:
    """The sentence as a unit with a <b> around one or two of its inner words, and one time in two a <br> inside
    the words after them."""
    words = sentence.split()
    start = rng.randrange(1, len(words) - 3)
    end = start + rng.randint(1, 2)
    after = words[end:]
    unit: Unit = [" ".join(words[:start]) + " ", Open("b"), " ".join(words[start:end]), Close("b")]
    if rng.random() < 0.5 and len(after) > 1:
        at = rng.randrange(1, len(after))
        return [*unit, " " + " ".join(after[:at]), Atom("br"), " ".join(after[at:])]
    return [*unit, " " + " ".join(after)]


def markup_copied_share(translator: Translator, sentences: list[str], rng: random.Random) -> float:
    marked = [mark(with_markup(s, rng)) for s in sentences]
    outputs = [r[0].text for r in translator.translate([m.text for m in marked], SearchOptions(beam_size=4))]
    groups = sum(len(m.groups) for m in marked)
    found = sum(len(copied(o) & m.groups.keys()) for m, o in zip(marked, outputs))
    return found / groups


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", type=Path, nargs="+", default=[REPO / "models" / "en-de", REPO / "models" / "de-en"])
    p.add_argument("--sentences", type=int, default=80)
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    results = {}
    for folder in args.models:
        translator = Translator(folder)
        source, target = translator.config.source_language, translator.config.target_language
        sentences = [s for s in load_test_set(TEST_SPLIT, source, target)[0] if len(s.split()) > 5][: args.sentences]
        rng, forms = random.Random(0), {}
        for name, form in FORMS.items():
            pieces = [form(i % 3) for i in range(len(sentences))]
            forms[name] = copied_share(translator, [with_inserted(s, p, rng) for s, p in zip(sentences, pieces)],
                                       pieces)
        protected = [protect(with_inserted(s, SPANS[i % len(SPANS)], rng)) for i, s in enumerate(sentences)]
        outputs = [r[0].text for r in translator.translate([x.text for x in protected], SearchOptions(beam_size=4))]
        restored = [x.restore(o) for x, o in zip(protected, outputs)]
        spans = sum(len(x.spans) for x in protected)
        put_back = sum(missing for _, missing in restored)
        exact = sum(all(span in text for span in x.spans.values()) for x, (text, _) in zip(protected, restored))
        results[folder.name] = {"forms": forms, "spans": spans, "copied": (spans - put_back) / spans,
                                "put_back": put_back / spans, "all_spans_exact": exact / len(protected),
                                "markup_copied": markup_copied_share(translator, sentences, rng)}
        print(folder.name, results[folder.name], flush=True)
    rows = [[name, *(f"{100 * results[m]['forms'][name]:.0f} %" for m in results)] for name in FORMS]
    spans = [[what, *(f"{100 * results[m][key]:.0f} %" for m in results)] for what, key in
             [("spans copied by the model", "copied"), ("spans put back by place", "put_back"),
              ("sentences with every span exact", "all_spans_exact"),
              ("inline tags' placeholders copied by the model", "markup_copied")]]
    markdown = (f"# Placeholders\n\n`{command_line('bench.studies.placeholders', argv)}`\n\n"
                f"Share of {args.sentences} test_2016_flickr sentences (beam 4) whose translation holds the "
                "placeholder exactly once:\n\n" + markdown_table(["placeholder", *results], rows) +
                "\nReal spans through service.worker.spans (four-digit placeholders), and inline markup through "
                "service.worker.markup:\n\n" +
                markdown_table(["", *results], spans))
    write_results(args.out_dir, "placeholders", {"environment": environment([]), "results": results}, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
