"""Glossaries through the DeepL API: how often the glossary's target term appears, and whether the sentence around it
stays as good.

    python -m bench.studies.glossary [--model-dir models] [--threads 1]

`python -m service` serves the shipped models; DeepL's Python client makes a glossary of tests/data/glossary/
glossary.tsv (40 English terms with the German term wanted, some of them not the model's own choice: bicycle ->
Velo, phone -> Handy) and translates the 200 sentences of tests/data/glossary/sentences.tsv (written for this test:
five sentences around each term) with and without it. Reported: the share of translations that hold the glossary's
target term (as a word), and chrF against the references, which use the glossary's terms.
Results: bench/results/glossary.{json,md}.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import deepl
import sacrebleu

from bench.common.cli import command_line
from bench.common.defaults import REPO, RESULTS
from bench.common.machine import environment
from bench.common.report import markdown_table, write_results
from service.launch import running_service

DATA = REPO / "tests" / "data" / "glossary"
BATCH = 50  # texts a request


def read_tsv(path: Path) -> list[tuple[str, str]]:
    return [tuple(line.split("\t")) for line in path.read_text().splitlines() if line.strip()]


def term_of(source: str, glossary: dict[str, str]) -> str:
    """The glossary's target term for the (one) source term of a sentence."""
    found = [target for term, target in glossary.items() if re.search(rf"(?<!\w){re.escape(term)}(?!\w)", source)]
    assert len(found) == 1, (source, found)
    return found[0]


def translated(client: deepl.DeepLClient, sources: list[str], glossary: deepl.GlossaryInfo | None) -> list[str]:
    out: list[str] = []
    for begin in range(0, len(sources), BATCH):
        results = client.translate_text(sources[begin : begin + BATCH], source_lang="EN", target_lang="DE",
                                        glossary=glossary)
        out += [r.text for r in results]
    return out


def measure(url: str) -> dict:
    """Term share and chrF with and without the glossary, through the service at `url`."""
    client = deepl.DeepLClient("bench", server_url=url, send_platform_info=False)
    entries = dict(read_tsv(DATA / "glossary.tsv"))
    pairs = read_tsv(DATA / "sentences.tsv")
    sources, references = [s for s, _ in pairs], [r for _, r in pairs]
    terms = [term_of(s, entries) for s in sources]
    glossary = client.create_glossary("bench", source_lang="EN", target_lang="DE", entries=entries)
    results = {}
    for name, used in (("without glossary", None), ("with glossary", glossary)):
        outputs = translated(client, sources, used)
        held = sum(bool(re.search(rf"(?<!\w){re.escape(t)}(?!\w)", o)) for t, o in zip(terms, outputs))
        results[name] = {"term_share": held / len(outputs),
                         "chrf": sacrebleu.corpus_chrf(outputs, [references]).score,
                         "outputs": outputs}
    results["sentences"], results["terms"] = len(sources), len(entries)
    return results


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=REPO / "models")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, running_service(
        args.model_dir, Path(tmp) / "service.log", threads=args.threads, log_level="warning"
    ) as service:
        results = measure(service.url)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    command = command_line("bench.studies.glossary", argv)
    rows = [[name, f"{100 * results[name]['term_share']:.1f} %", f"{results[name]['chrf']:.1f}"]
            for name in ("without glossary", "with glossary")]
    markdown = (f"# Glossary terms through the DeepL API\n\n`{command}` (commit {commit}, "
                f"{datetime.now(UTC):%Y-%m-%d})\n\n{results['sentences']} sentences of tests/data/glossary, "
                f"{results['terms']} terms, en-de, the shipped model, default settings:\n\n"
                + markdown_table(["", "target term in the translation", "chrF vs references with the terms"], rows))
    write_results(args.out_dir, "glossary", {"environment": environment(["deepl", "sacrebleu"]), "commit": commit,
                                             "date": datetime.now(UTC).isoformat(), "command": command,
                                             "results": results}, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
