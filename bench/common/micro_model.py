"""A micro model folder whose compute is next to nothing, to time the host's own cost per decoder step.

    python -m bench.common.micro_model --out /tmp/micro [--precision fp32 ...]

A random MarianMTModel (d_model 64, 2 + 2 layers, 4 heads, some 400 tokens of two SentencePiece models trained on
Multi30k), converted (model.convert) and exported (python -m export) as a user makes a folder. Its weights are
random at std 0.3, so its outputs depend on the source; most translations run to their length limit.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import sentencepiece as spm
import torch
import transformers
from transformers import MarianConfig, MarianMTModel

from core.corpus import data_file, multi30k_dir, read_lines
from core.tokenizer import MARIAN_FILES
from export.__main__ import main as export_main
from model.convert import main as convert_main
from model.tokenizer import train_sentencepiece

PIECES = 256  # of each language's SentencePiece model
DIMENSIONS = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, max_position_embeddings=256,
                  activation_function="swish", scale_embedding=True, share_encoder_decoder_embeddings=True,
                  dropout=0.0)


def write_marian(folder: Path, sentences: int = 5000) -> None:
    """A MarianMTModel folder with random weights and OPUS-MT's tokenizer layout (</s> 0, <unk> 1, <pad> last)."""
    pieces: dict[str, list[str]] = {}
    for name, lang in (("source", "en"), ("target", "de")):
        texts = read_lines(data_file(multi30k_dir(), "train", lang))[:sentences]
        path = train_sentencepiece(texts, folder / name, vocab_size=PIECES).rename(folder / MARIAN_FILES[name])
        sp = spm.SentencePieceProcessor(model_file=str(path))
        pieces[name] = [sp.id_to_piece(i) for i in range(sp.get_piece_size())
                        if not (sp.is_control(i) or sp.is_unknown(i))]
    shared = dict.fromkeys(pieces["source"] + pieces["target"])
    vocab = {piece: i for i, piece in enumerate(["</s>", "<unk>", *shared, "<pad>"])}
    (folder / MARIAN_FILES["vocab"]).write_text(json.dumps(vocab, ensure_ascii=False))
    transformers.MarianTokenizer(*(str(folder / f) for f in MARIAN_FILES.values()), source_lang="en",
                                 target_lang="de").save_pretrained(folder)
    pad = vocab["<pad>"]
    torch.manual_seed(0)
    model = MarianMTModel(MarianConfig(vocab_size=len(vocab), pad_token_id=pad, decoder_start_token_id=pad,
                                       eos_token_id=0, forced_eos_token_id=0, **DIMENSIONS))
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:  # not the sinusoids
                p.normal_(0.0, 0.3)
        model.get_input_embeddings().weight[pad] = 0.0
    model.save_pretrained(folder)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--precision", nargs="+", default=["fp32"], help="the variants to export")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        marian = Path(tmp) / "opus-mt-en-de"
        marian.mkdir()
        write_marian(marian)
        convert_main([str(marian), "--out", str(args.out)])
    export_main([str(args.out / "model.pt"), "--out", str(args.out), "--variants", *args.precision])
    print(args.out)


if __name__ == "__main__":
    main()
