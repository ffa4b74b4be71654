"""Translate a file with a checkpoint and score it: python -m model.evaluate CHECKPOINT --src-file F [--ref-file R]

Prints one JSON line: with references, cased sacreBLEU (13a tokenization), lowercased sacreBLEU and chrF; always
the number of sentences, the search settings and the time taken. Files may be gzipped.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from core.corpus import read_lines
from core.search import SearchOptions
from core.tokenizer import Tokenizer
from model.checkpoint import load_model
from model.decode import translate
from quality.bleu import score


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", type=Path, help="training checkpoint or shipped model.pt")
    p.add_argument("--src-file", type=Path, required=True)
    p.add_argument("--ref-file", type=Path, help="references, line-aligned with --src-file")
    p.add_argument("--spm", type=Path, help="SentencePiece model (default: spm.model beside the checkpoint)")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--length-penalty", type=float, default=0.6)
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    p.add_argument("--out", type=Path, help="write the translations here, one per line")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default)")
    return p.parse_args(argv)


def find_spm(checkpoint: Path) -> Path:
    """spm.model beside the checkpoint, or beside the folder holding it (a run's checkpoints/ folder)."""
    for folder in (checkpoint.parent, checkpoint.parent.parent):
        if (path := folder / "spm.model").exists():
            return path
    raise FileNotFoundError(f"no spm.model in {checkpoint.parent} or {checkpoint.parent.parent}: give --spm")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    sources = read_lines(args.src_file)
    refs = read_lines(args.ref_file) if args.ref_file else None
    if refs is not None and len(refs) != len(sources):
        raise SystemExit(f"{args.src_file} has {len(sources)} lines but {args.ref_file} has {len(refs)}")
    model = load_model(args.checkpoint, args.device)
    tokenizer = Tokenizer(args.spm or find_spm(args.checkpoint), model.cfg.case_tags)
    opts = SearchOptions(beam_size=args.beam_size, length_penalty=args.length_penalty)
    started = time.perf_counter()
    hyps = translate(model, tokenizer, sources, opts, batch_size=args.batch_size)
    seconds = time.perf_counter() - started
    if args.out:
        args.out.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    result = {
        **(score(hyps, refs) if refs is not None else {}),
        "sentences": len(hyps),
        "beam_size": args.beam_size,
        "length_penalty": args.length_penalty,
        "seconds": round(seconds, 3),
        "checkpoint": str(args.checkpoint),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
