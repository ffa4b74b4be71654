"""Check that CTranslate2 runs our model as we do: greedy translations, id for id, on a Multi30k split.

    python -m bench.offline.ct2_check [--checkpoint models/en-de/model.pt --spm models/en-de/spm.model]
                                      [--ct2-dir DIR] [--split test_2016_flickr] [--min-agreement 0.99]

Converts the checkpoint (into a temporary directory unless --ct2-dir names an existing conversion),
translates the split with both engines and prints a JSON summary; exits 1 below --min-agreement.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from bench.common.ct2_convert import convert
from bench.common.ct2_engine import CT2Translator
from bench.common.defaults import MODEL_DIR, RESULTS
from bench.common.report import write_results
from bench.common.sentences import batches, multi30k_sentences
from core.corpus import TEST_SPLIT
from core.search import SearchOptions
from model.checkpoint import load_model
from model.decode import translate_ids
from model.transformer import Transformer

GREEDY = SearchOptions(beam_size=1)


def torch_greedy_ids(model: Transformer, sources: list[list[int]], batch_size: int = 64) -> list[list[int]]:
    """Our PyTorch model's greedy translations (model.decode.translate_ids) of sources without </s>."""
    eos = model.cfg.eos_id
    out: list[list[int]] = []
    for batch in batches(sources, batch_size):
        out.extend(hyps[0].tokens for hyps in translate_ids(model, [ids + [eos] for ids in batch], GREEDY))
    return out


def ct2_greedy_ids(translator: CT2Translator, sources: list[list[int]], batch_size: int = 64) -> list[list[int]]:
    return [ids for batch in batches(sources, batch_size) for ids in translator.translate_ids(batch, GREEDY)]


def compare(ours: list[list[int]], theirs: list[list[int]]) -> dict:
    """The share of identical translations, and where the first few differences start."""
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
    examples = []
    for i in differ[:5]:
        first = next((t for t, (a, b) in enumerate(zip(ours[i], theirs[i])) if a != b), None)
        examples.append({"sentence": i, "first_difference_at": first, "ours": ours[i], "ct2": theirs[i]})
    return {
        "sentences": len(ours),
        "identical": len(ours) - len(differ),
        "agreement": (len(ours) - len(differ)) / max(len(ours), 1),
        "differences": examples,
    }


def check(checkpoint: Path, spm_model: Path, ct2_dir: Path, texts: list[str], compute_type: str = "float32") -> dict:
    """Compare greedy translations of `texts` by our PyTorch model and by its CTranslate2 conversion."""
    model = load_model(checkpoint)
    translator = CT2Translator(ct2_dir, compute_type=compute_type)
    sources = [ids[: model.cfg.max_len - 1] for ids in translator.tokenizer.encode(texts)]
    result = compare(torch_greedy_ids(model, sources), ct2_greedy_ids(translator, sources))
    return {"checkpoint": str(checkpoint), "compute_type": compute_type, **result}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=MODEL_DIR / "model.pt")
    parser.add_argument("--spm", type=Path, default=MODEL_DIR / "spm.model")
    parser.add_argument("--ct2-dir", type=Path, help="an existing conversion (default: convert now)")
    parser.add_argument("--split", default=TEST_SPLIT)
    parser.add_argument("--compute-type", default="float32")
    parser.add_argument("--min-agreement", type=float, default=0.99)
    parser.add_argument("--out", type=Path, default=RESULTS / "ct2-check.json", help="the result file")
    args = parser.parse_args(argv)
    texts = multi30k_sentences(split=args.split)
    with tempfile.TemporaryDirectory() as tmp:
        ct2_dir = args.ct2_dir or convert(args.checkpoint, args.spm, Path(tmp) / "ct2")
        result = check(args.checkpoint, args.spm, ct2_dir, texts, args.compute_type)
    result = {"split": args.split, **result}
    write_results(args.out.parent, args.out.stem, result)
    print(json.dumps(result, indent=2))
    if result["agreement"] < args.min_agreement:
        sys.exit(f"agreement {result['agreement']:.4f} is below {args.min_agreement}")


if __name__ == "__main__":
    main()
