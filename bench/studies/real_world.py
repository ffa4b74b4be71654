"""Real-world text through the service: numbers, placeholders, long sentences, capitals, unserved languages, markup.

    python -m bench.studies.real_world [--baseline DIR] [--out-dir bench/results]

Serves the shipped models (models/) with the default settings, from this checkout (`python -m service`, over
HTTP), and measures on the probe sets of tests/data/real_world (written for it) and the test sets:
- numbers: en.txt (en->de) and de.txt (de->en); a sentence keeps its numbers when the runs of digits of its
  translation are those of the source (the localization rule changes separators only), none lost, none made up;
- BLEU and chrF of Multi30k test_2016_flickr and Tatoeba test, both directions, greedy (with --baseline DIR, also
  of the service of another checkout, e.g. `git archive` of the commit before);
- collisions: 1,000 generated texts mixing four-digit numbers (placeholder numbers among them, some with a
  thousands separator) with inline markup, sent 4 at a time as HTML and as plain text, and 40 of them as .docx
  files; a collision is a text whose translation does not hold each number of the source exactly as often;
- long sentences: 300-word sentences made of the probe sentences; each must be translated (200), and no word 4-gram
  may occur more than twice beyond its count in the source;
- capitals: the probe and test sentences in capitals come back in capitals; chrF against the references in capitals
  next to the same sentences in ordinary case against theirs;
- unserved: unserved.tsv (200 sentences, 10 languages) with source auto gets 400 naming its language; the en and de
  sentences of the test sets with auto are refused at most this often;
- markup: the probe sentences with <b>, <i> or a link around one or two inner words; the translation with its tags
  removed equals the translation of the sentence without markup.
Results: bench/results/real-world.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import random
import re
import subprocess
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import docx
import httpx
from bs4 import BeautifulSoup

from bench.common.cli import command_line
from bench.common.defaults import REPO, RESULTS
from bench.common.machine import environment
from bench.common.report import markdown_table, write_results
from core.corpus import multi30k_dir, read_aligned
from quality.bleu import score
from service.launch import running_service

PROBES = REPO / "tests" / "data" / "real_world"
TATOEBA = multi30k_dir().parent / "tatoeba-en-de"
OTHER = {"en": "de", "de": "en"}
BATCH, AT_ONCE, RETRIES = 32, 4, 60
DIGITS = re.compile(r"\d+")


def lines(name: str) -> list[str]:
    return [line for line in (PROBES / name).read_text(encoding="utf-8").splitlines() if line.strip()]


class Client:
    """Requests to one running service, AT_ONCE at a time."""

    def __init__(self, url: str):
        self.url = url
        self.running = asyncio.Semaphore(AT_ONCE)  # made again by each asyncio.run (fresh())

    def fresh(self) -> httpx.AsyncClient:
        """A client for one asyncio.run, and AT_ONCE places in it."""
        self.running = asyncio.Semaphore(AT_ONCE)
        return httpx.AsyncClient(timeout=600)

    async def post(self, client: httpx.AsyncClient, q: str | list[str], source: str, target: str,
                   **fields: str) -> httpx.Response:
        async with self.running:
            for _ in range(RETRIES):  # an engine busy past TRANSLATOR_ENGINE_TIMEOUT_S answers 503: asked again
                answer = await client.post(self.url + "/translate",
                                           json={"q": q, "source": source, "target": target, **fields})
                if answer.status_code != 503:
                    break
                await asyncio.sleep(2)
            return answer

    async def translate(self, texts: list[str], source: str, target: str, **fields: str) -> list[str]:
        """Each text's translation, BATCH texts a request."""
        async with self.fresh() as client:
            answers = await asyncio.gather(*(self.post(client, texts[i : i + BATCH], source, target, **fields)
                                             for i in range(0, len(texts), BATCH)))
        out = []
        for answer in answers:
            answer.raise_for_status()
            out += answer.json()["translatedText"]
        return out

    async def each(self, texts: list[str], source: str, target: str, **fields: str) -> list[httpx.Response]:
        """One request a text."""
        async with self.fresh() as client:
            return await asyncio.gather(*(self.post(client, text, source, target, **fields) for text in texts))

    async def document(self, client: httpx.AsyncClient, data: bytes, target: str) -> bytes:
        async with self.running:
            answer = await client.post(self.url + "/translate_file", data={"source": "en", "target": target},
                                       files={"file": ("probe.docx", data)})
            answer.raise_for_status()
            return (await client.get(answer.json()["translatedFileUrl"])).content


def runs(text: str) -> Counter:
    return Counter(DIGITS.findall(text))


def numbers(client: Client) -> dict:
    """Sentences whose translation holds exactly the source's runs of digits."""
    result = {}
    for name, source in (("en.txt", "en"), ("de.txt", "de")):
        sources = lines(name)
        outputs = asyncio.run(client.translate(sources, source, OTHER[source]))
        kept = [runs(s) == runs(o) for s, o in zip(sources, outputs)]
        lost = sum(sum((runs(s) - runs(o)).values()) for s, o in zip(sources, outputs))
        made_up = sum(sum((runs(o) - runs(s)).values()) for s, o in zip(sources, outputs))
        result[f"{source}->{OTHER[source]}"] = {
            "sentences": len(sources), "kept_percent": 100 * sum(kept) / len(kept), "runs_lost": lost,
            "runs_made_up": made_up, "numbers": sum(sum(runs(s).values()) for s in sources),
            "examples": [[s, o] for s, o, k in zip(sources, outputs, kept) if not k][:5],
        }
    return result


def test_sets() -> dict[str, tuple[list[str], list[str]]]:
    """(sources, references) of each test set and direction."""
    sets = {}
    for source in ("en", "de"):
        target = OTHER[source]
        sets[f"multi30k {source}->{target}"] = read_aligned(multi30k_dir(), "test_2016_flickr", source, target)
        sets[f"tatoeba {source}->{target}"] = read_aligned(TATOEBA, "test", source, target)
    return sets


def bleu(client: Client) -> dict:
    out = {}
    for name, (sources, refs) in test_sets().items():
        source = name.split()[1][:2]
        started = time.perf_counter()
        hyps = asyncio.run(client.translate(sources, source, OTHER[source]))
        out[name] = {**score(hyps, refs), "sentences": len(sources), "seconds": time.perf_counter() - started}
    return out


def generated_texts(count: int, seed: int = 0) -> list[tuple[str, str]]:
    """(format, text) mixing four-digit numbers, placeholder numbers among them, with inline markup."""
    rng = random.Random(seed)
    placeholders = [7301 + 17 * i for i in range(12)]

    def number() -> str:
        n = rng.choice(placeholders) if rng.random() < 0.5 else rng.randint(1000, 9999)
        return f"{n // 1000},{n % 1000:03d}" if rng.random() < 0.2 else str(n)

    texts = []
    for i in range(count):
        a, b, c = number(), number(), number()
        if i % 2:
            texts.append(("html", rng.choice([
                f'<p>Call {a} or <a href="tel:{b}">{b}</a>.</p>',
                f"<p>Room {a} is <b>open</b> until {b}, see https://example.com/{c}.</p>",
                f"<p>The code is <b>{a}</b> and the order <i>{b}</i> ships with {c} items.</p>",
                f"<p>Order {a}: <a href=\"/o/{b}\">details</a> for {c} people.</p>",
            ])))
        else:
            texts.append(("text", rng.choice([
                f"Call {a} or {b} for help.",
                f"The price is {a} dollars and the site is https://example.com/{b}.",
                f"Tickets {a} and {b} are valid, {c} are not.",
                f"We sold {a} cars and {b} bikes in {c} days.",
            ])))
    return texts


def visible(html: str) -> str:
    return BeautifulSoup(html, "html.parser").get_text()


def collisions(client: Client) -> dict:
    """Texts whose translation does not hold each number of the source as often (with a thousands separator
    localized: 7,301 -> 7.301, the same runs of digits)."""
    texts = generated_texts(1000)
    responses = []
    for kind in ("html", "text"):
        chosen = [text for fmt, text in texts if fmt == kind]
        responses += zip(chosen, asyncio.run(client.each(chosen, "en", "de", format=kind)), [kind] * len(chosen))
    bad = [(t, r.json()) for t, r, kind in responses
           if r.status_code != 200 or runs(visible(t) if kind == "html" else t)
           != runs(visible(r.json()["translatedText"]) if kind == "html" else r.json()["translatedText"])]
    tags = sum(t.count("<") != r.json()["translatedText"].count("<") for t, r, kind in responses if kind == "html")
    documents = [text for fmt, text in texts if fmt == "text"][:40]

    async def translate_documents() -> list[bytes]:
        async with client.fresh() as http:
            return await asyncio.gather(*(client.document(http, as_docx(text), "de") for text in documents))

    translated = asyncio.run(translate_documents())
    bad_documents = [(t, d) for t, d in zip(documents, map(docx_text, translated)) if runs(t) != runs(d)]
    return {"texts": len(texts), "collisions": len(bad), "tags_lost": tags, "documents": len(documents),
            "document_collisions": len(bad_documents), "examples": [list(map(str, b)) for b in bad[:5]]
            + [list(b) for b in bad_documents[:3]]}


def as_docx(text: str) -> bytes:
    """The text as a .docx paragraph, its second word bold."""
    document, out = docx.Document(), io.BytesIO()
    words = text.split(" ")
    paragraph = document.add_paragraph(" ".join(words[:1]) + " ")
    paragraph.add_run(words[1]).bold = True
    paragraph.add_run(" " + " ".join(words[2:]))
    document.save(out)
    return out.getvalue()


def docx_text(data: bytes) -> str:
    return "\n".join(p.text for p in docx.Document(io.BytesIO(data)).paragraphs)


def long_sentences(count: int = 10) -> dict[str, list[str]]:
    """Per source language, sentences of 300 words: probe sentences joined by commas and "and"."""
    out = {}
    for name, source in (("en.txt", "en"), ("de.txt", "de")):
        rng, words = random.Random(1), {"en": "and", "de": "und"}[source]
        pool, made = lines(name), []
        for _ in range(count):
            parts: list[str] = []
            while sum(len(p.split()) for p in parts) < 300:
                parts.append(rng.choice(pool).rstrip(".!?"))
            sentence = f", {words} ".join(parts)
            made.append(" ".join(sentence.split()[:300]) + ".")
        out[source] = made
    return out


def word_ngrams(text: str, n: int = 4) -> Counter:
    words = re.findall(r"\w+", text.lower())
    return Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def long(client: Client) -> dict:
    result = {}
    for source, sentences in long_sentences().items():
        responses = asyncio.run(client.each(sentences, source, OTHER[source]))
        ok = [r.status_code == 200 for r in responses]
        loops = [max((word_ngrams(r.json()["translatedText"]) - word_ngrams(s)).values(), default=0) > 2
                 for s, r in zip(sentences, responses) if r.status_code == 200]
        result[f"{source}->{OTHER[source]}"] = {
            "sentences": len(sentences), "words": 300, "translated_percent": 100 * sum(ok) / len(ok),
            "with_a_4gram_over_twice_beyond_the_source": sum(loops)}
    return result


def capitals(client: Client) -> dict:
    result = {}
    for name, (sources, refs) in test_sets().items():
        if not name.startswith("multi30k"):
            continue
        source = name.split()[1][:2]
        sources, refs = sources[:300], refs[:300]
        ordinary = asyncio.run(client.translate(sources, source, OTHER[source]))
        upper = asyncio.run(client.translate([s.upper() for s in sources], source, OTHER[source]))
        result[name] = {
            "sentences": len(sources),
            "chrf_ordinary": score(ordinary, refs)["chrf"],
            "chrf_capitals": score(upper, [r.upper() for r in refs])["chrf"],
            "in_capitals_percent": 100 * sum(u == u.upper() for u in upper) / len(upper),
        }
    return result


def unserved(client: Client) -> dict:
    rows = [line.split("\t") for line in lines("unserved.tsv")]
    responses = asyncio.run(client.each([text for _, text in rows], "auto", "de"))
    refused = [r.status_code == 400 for r in responses]
    named = [r.status_code == 400 and f"({language})" in r.json()["error"] for (language, _), r in zip(rows, responses)]
    per_language = Counter(language for (language, _), r in zip(rows, refused) if r)
    served_refused, served = 0, 0
    for name, (sources, _) in test_sets().items():
        source = name.split()[1][:2]
        answers = asyncio.run(client.each(sources, "auto", source))  # detected as the target: given back as it is
        served += len(sources)
        served_refused += sum(a.status_code == 400 for a in answers)
    return {"sentences": len(rows), "languages": len(per_language | Counter(language for language, _ in rows)),
            "refused_percent": 100 * sum(refused) / len(rows), "named_percent": 100 * sum(named) / len(rows),
            "refused_per_language": dict(per_language), "en_de_sentences": served,
            "en_de_refused_percent": 100 * served_refused / served}


def with_markup(sentence: str, rng: random.Random) -> str:
    """The sentence as HTML with one or two inner words wrapped in <b>, <i> or a link."""
    words = sentence.split(" ")
    start = rng.randrange(1, max(len(words) - 2, 2))
    end = min(start + rng.choice((1, 1, 2)), len(words) - 1)
    open_tag, close = rng.choice([("<b>", "</b>"), ("<i>", "</i>"), ('<a href="https://example.com/x">', "</a>")])
    inner = " ".join(words[start:end])
    return f"<p>{' '.join(words[:start])} {open_tag}{inner}{close} {' '.join(words[end:])}</p>"


def markup(client: Client) -> dict:
    result = {}
    for name, source in (("en.txt", "en"), ("de.txt", "de")):
        rng = random.Random(2)
        sentences = [s for s in lines(name) if len(s.split()) >= 4]
        marked = [with_markup(s, rng) for s in sentences]
        plain = asyncio.run(client.translate(sentences, source, OTHER[source]))
        html = asyncio.run(client.translate(marked, source, OTHER[source], format="html"))
        same = [" ".join(visible(h).split()) == " ".join(p.split()) for h, p in zip(html, plain)]
        result[f"{source}->{OTHER[source]}"] = {
            "sentences": len(sentences), "same_words_percent": 100 * sum(same) / len(same),
            "examples": [[m, h, p] for m, h, p, s in zip(marked, html, plain, same) if not s][:5]}
    return result


def measured(scratch: Path, baseline: Path | None) -> dict:
    """Every measure over this checkout's service, and BLEU over the baseline's (each with its log and data folder
    in `scratch`)."""
    results: dict = {}
    with running_service(REPO / "models", scratch / "service.log") as service:
        client = Client(service.url)
        for name, measure in (("numbers", numbers), ("collisions", collisions), ("long", long),
                              ("capitals", capitals), ("unserved", unserved), ("markup", markup), ("bleu", bleu)):
            started = time.perf_counter()
            results[name] = measure(client)
            print(name, round(time.perf_counter() - started, 1), "s", results[name], flush=True)
    if baseline:
        (scratch / "baseline").mkdir()  # a data folder of its own
        with running_service(REPO / "models", scratch / "baseline" / "service.log", checkout=baseline) as service:
            results["bleu_baseline"] = bleu(Client(service.url))
    return results


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", type=Path, help="a checkout whose service's BLEU is measured too")
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="real-world-") as scratch:  # the services' logs and data folders
        results = measured(Path(scratch), args.baseline)
    command = command_line("bench.studies.real_world", argv)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    when = datetime.now(UTC).isoformat(timespec="seconds")
    markdown = report(results, command).replace("\n\nShipped", f"\n\nCommit {commit}, {when}.\n\nShipped", 1)
    write_results(args.out_dir, "real-world", {"command": command, "commit": commit, "date": when,
                                               "environment": environment([]), "results": results}, markdown)
    print(markdown)
    return results


def report(results: dict, command: str) -> str:
    n, c, u = results["numbers"], results["collisions"], results["unserved"]
    rows = [
        *[[f"numbers kept or localized, {k}", f"{v['kept_percent']:.1f} % of {v['sentences']} sentences "
           f"({v['numbers']} runs of digits; {v['runs_lost']} lost, {v['runs_made_up']} made up)"]
          for k, v in n.items()],
        ["placeholder collisions", f"{c['collisions']} of {c['texts']} texts (HTML and plain, {AT_ONCE} at a time), "
         f"{c['document_collisions']} of {c['documents']} .docx; tags lost: {c['tags_lost']}"],
        *[[f"300-word sentences, {k}", f"{v['translated_percent']:.0f} % of {v['sentences']} translated, "
           f"{v['with_a_4gram_over_twice_beyond_the_source']} with a 4-gram over twice beyond the source"]
          for k, v in results["long"].items()],
        *[[f"capitals, {k}", f"chrF {v['chrf_capitals']:.1f} in capitals vs {v['chrf_ordinary']:.1f} ordinary, "
           f"{v['in_capitals_percent']:.0f} % back in capitals"] for k, v in results["capitals"].items()],
        ["unserved languages with auto", f"{u['refused_percent']:.1f} % of {u['sentences']} refused (400), "
         f"{u['named_percent']:.1f} % naming their language, {u['languages']} languages"],
        ["en/de test sentences refused with auto", f"{u['en_de_refused_percent']:.2f} % of {u['en_de_sentences']}"],
        *[[f"markup stripped = no markup, {k}", f"{v['same_words_percent']:.1f} % of {v['sentences']}"]
          for k, v in results["markup"].items()],
    ]
    bleu_rows = [[name, f"{v['bleu']:.2f}", f"{v['chrf']:.2f}",
                  f"{results['bleu_baseline'][name]['bleu']:.2f}" if "bleu_baseline" in results else "",
                  f"{v['bleu'] - results['bleu_baseline'][name]['bleu']:+.2f}" if "bleu_baseline" in results else ""]
                 for name, v in results["bleu"].items()]
    return (f"# Real-world text\n\n`{command}`\n\nShipped models, default settings, greedy, over HTTP.\n\n"
            + markdown_table(["goal", "measured"], rows) + "\n\n"
            + markdown_table(["test set", "BLEU", "chrF", "BLEU baseline", "difference"], bleu_rows) + "\n")


if __name__ == "__main__":
    main()
