"""Score a model folder (ONNX Runtime) on corpus splits, greedy and beam 4, for the model card.

    python -m quality.scores models/en-de --set multi30k=DIR:val,test_2016_flickr --set tatoeba=DIR:val,test

Prints a markdown table and writes the figures as JSON (--out).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from core.corpus import read_pairs
from core.search import SearchOptions
from quality.bleu import score
from service.translator import Translator


def parse_set(text: str) -> tuple[str, Path, list[str]]:
    """'NAME=DIR:split,split'"""
    name, _, rest = text.partition("=")
    directory, _, splits = rest.rpartition(":")
    return name, Path(directory), splits.split(",")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir", type=Path)
    p.add_argument("--set", dest="sets", type=parse_set, action="append", required=True)
    p.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    p.add_argument("--precision", default="fp32")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    translator = Translator(args.model_dir, precision=args.precision, provider="cpu")
    cfg = translator.model_config
    rows = []
    for name, directory, splits in args.sets:
        for split in splits:
            pairs = read_pairs(directory, split, cfg.src_lang, cfg.tgt_lang)
            for beam in args.beams:
                started = time.perf_counter()
                out = translator.translate([s for s, _ in pairs], SearchOptions(beam_size=beam))
                hyps = [t[0].text for t in out]
                seconds = round(time.perf_counter() - started, 1)
                rows.append(
                    {
                        "set": name,
                        "split": split,
                        "beam": beam,
                        **score(hyps, [t for _, t in pairs]),
                        "sentences": len(pairs),
                        "seconds": seconds,
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    print("\n| set | split | search | BLEU | BLEU (lowercased) | chrF |\n|---|---|---|---|---|---|")
    for r in rows:
        search = "greedy" if r["beam"] == 1 else f"beam {r['beam']}"
        figures = " | ".join(f"{r[k]:.2f}" for k in ("bleu", "bleu_lowercase", "chrf"))
        print(f"| {r['set']} | {r['split']} | {search} | {figures} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
