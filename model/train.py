"""Train the Transformer: python -m model.train --data DIR[:WEIGHT] ... --out RUN_DIR

Label smoothing, Adam(0.9, 0.98, 1e-9) with the paper's warm-up and inverse-square-root schedule, batches
by token count, gradient clipping, bf16 autocast (mixed precision) on CUDA and on CPUs that support it.
Every --save-every steps and at each epoch's end a checkpoint is written; running the same command again
resumes from the newest one, exactly where it stopped.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from core.corpus import read_pairs
from core.folder import ModelConfig
from core.search import SearchOptions
from core.tokenizer import Tokenizer
from core.translate import source_ids
from model.augment import casing_variants, number_variants, number_word_variants, placeholder_variants
from model.checkpoint import average_weights, step_checkpoints
from model.config import PRESETS, preset
from model.data import Example, token_batches
from model.decode import translate
from model.tokenizer import train_sentencepiece
from model.transformer import Transformer


@dataclass
class Corpus:
    directory: Path
    weight: int = 1  # how many times its training pairs are repeated in an epoch
    name: str = field(init=False)

    def __post_init__(self):
        self.name = Path(self.directory).name

    @classmethod
    def parse(cls, text: str) -> Corpus:
        """'DIR' or 'DIR:WEIGHT'"""
        directory, _, weight = text.partition(":")
        return cls(Path(directory), int(weight or 1))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Corpus.parse, action="append", required=True, help="corpus folder[:weight]")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--out", type=Path, required=True, help="run folder: tokenizer, checkpoints, metrics")
    p.add_argument("--preset", choices=PRESETS, default="small")
    p.add_argument("--pre-norm", action="store_true", help="pre-LN instead of the paper's post-LN")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--case-tags", action="store_true",
                   help="read sources case-folded, each UPPER or Title Case word after a tag (core.tokenizer)")
    p.add_argument("--init", type=Path, help="start from the weights of another run's checkpoint, and its tokenizer "
                   "(a fine-tune); embedding rows the vocabulary gained (--case-tags) start at random")
    p.add_argument("--case-share", type=float, default=0.05, help="share of pairs added again in another casing")
    p.add_argument("--case-target", action=argparse.BooleanOptionalAction, default=False,
                   help="recase the target of those pairs too (default: the source alone)")
    p.add_argument("--number-copies", type=int, default=3, help="copies of each pair with digits, new numbers")
    p.add_argument(
        "--number-word-copies", type=int, default=1, help="copies of each pair spelling one small number, in digits"
    )
    p.add_argument("--placeholders", action="store_true",
                   help="add pairs again with the service's span placeholders in them (model.augment)")
    p.add_argument("--placeholder-share", type=float, default=0.1,
                   help="with --placeholders: share of the pairs without a shared name that get one at an edge")
    p.add_argument("--max-tokens", type=int, default=6000, help="padded source+target tokens per batch")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps in all (0: no limit)")
    p.add_argument("--warmup", type=int, default=4000)
    p.add_argument("--lr-scale", type=float, default=1.0)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clipping")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--save-every", type=int, default=500, help="steps between checkpoints")
    p.add_argument("--keep", type=int, default=5, help="step checkpoints kept (the newest)")
    p.add_argument("--average", type=int, default=5, help="average the last N checkpoints at the end")
    p.add_argument("--val-bleu", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True, help="bf16 autocast")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default)")
    return p.parse_args(argv)


def learning_rate(step: int, d_model: int, warmup: int, scale: float) -> float:
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)"""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def training_pairs(corpus: Corpus, args: argparse.Namespace) -> list[tuple[str, str]]:
    """A corpus's training pairs and their augmented variants (model.augment), before repetition by weight."""
    pairs = read_pairs(corpus.directory, "train", args.src, args.tgt)
    return (
        pairs
        + casing_variants(pairs, args.case_share, args.seed, args.case_target)
        + number_variants(pairs, args.src, args.tgt, args.number_copies, args.seed)
        + number_word_variants(pairs, args.src, args.tgt, args.number_word_copies, args.seed)
        + (placeholder_variants(pairs, args.placeholder_share, args.seed) if args.placeholders else [])
    )


def load_tokenizer(args: argparse.Namespace) -> Tokenizer:
    """The run's SentencePiece model: --init's run's, or else trained on the training text of every corpus on first
    use."""
    path = args.out / "spm.model"
    if not path.exists() and args.init:
        shutil.copy(args.init.parent.parent / "spm.model", path)  # RUN/checkpoints/step_*.pt -> RUN/spm.model
    if not path.exists():
        pairs = [p for c in args.data for p in training_pairs(c, args)]
        texts = [side for pair in pairs for side in pair]
        train_sentencepiece(texts, args.out / "spm", args.vocab_size)
    return Tokenizer(path, args.case_tags)


def encode_pairs(tokenizer: Tokenizer, pairs: list[tuple[str, str]], cfg: ModelConfig) -> list[Example]:
    """Sources as the encoder reads them (ModelConfig.source_ids); targets cut so that </s> still fits."""
    src = source_ids(tokenizer, cfg, [s for s, _ in pairs])
    tgt = tokenizer.encode_targets([t for _, t in pairs])
    return [Example(s, t[: cfg.max_len - 1]) for s, t in zip(src, tgt)]


def collate(examples: list[Example], cfg: ModelConfig, device: str) -> tuple[torch.Tensor, ...]:
    """Padded tensors: src, src_mask, tgt_in (<s> y), tgt_out (y </s>), tgt_mask."""
    n = len(examples)
    src = torch.full((n, max(len(e.src) for e in examples)), cfg.pad_id, dtype=torch.long)
    tgt_len = max(len(e.tgt) for e in examples) + 1
    tgt_in = torch.full((n, tgt_len), cfg.pad_id, dtype=torch.long)
    tgt_out = torch.full((n, tgt_len), cfg.pad_id, dtype=torch.long)
    for i, e in enumerate(examples):
        src[i, : len(e.src)] = torch.tensor(e.src)
        tgt_in[i, : len(e.tgt) + 1] = torch.tensor([cfg.bos_id] + e.tgt)
        tgt_out[i, : len(e.tgt) + 1] = torch.tensor(e.tgt + [cfg.eos_id])
    src, tgt_in, tgt_out = src.to(device), tgt_in.to(device), tgt_out.to(device)
    return src, src != cfg.pad_id, tgt_in, tgt_out, tgt_in != cfg.pad_id


def batch_loss(model, batch, cfg: ModelConfig, label_smoothing: float, amp: bool) -> tuple[torch.Tensor, int]:
    """Mean label-smoothed cross-entropy over the real target tokens, and their count."""
    src, src_mask, tgt_in, tgt_out, tgt_mask = batch
    with torch.autocast(src.device.type, dtype=torch.bfloat16, enabled=amp):
        logits = model(src, src_mask, tgt_in, tgt_mask)
    loss = F.cross_entropy(
        logits.float().flatten(0, 1), tgt_out.flatten(), ignore_index=cfg.pad_id, label_smoothing=label_smoothing
    )
    return loss, int(tgt_mask.sum())


class Trainer:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        args.out.mkdir(parents=True, exist_ok=True)
        if args.threads:
            torch.set_num_threads(args.threads)
        self.tokenizer = load_tokenizer(args)
        tok = self.tokenizer
        self.cfg = preset(
            args.preset, vocab_size=tok.vocab_size, pre_norm=args.pre_norm, src_lang=args.src, tgt_lang=args.tgt,
            pad_id=tok.pad_id, unk_id=tok.unk_id, bos_id=tok.bos_id, eos_id=tok.eos_id, case_tags=args.case_tags,
        )
        seed_everything(args.seed)
        self.model = Transformer(self.cfg).to(args.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
        self.train_set = [
            example
            for c in args.data
            for example in encode_pairs(tok, training_pairs(c, args), self.cfg)
            * c.weight
        ]
        self.val_sets = {c.name: read_pairs(c.directory, "val", args.src, args.tgt) for c in args.data}
        self.step, self.epoch, self.batch_index, self.best_bleu = 0, 0, 0, -1.0
        self.checkpoints = args.out / "checkpoints"
        self.checkpoints.mkdir(exist_ok=True)
        if existing := step_checkpoints(self.checkpoints):
            self.resume(existing[-1])
        elif args.init:
            self.initialize(args.init)

    # --- checkpoints ---------------------------------------------------------------------------------
    def save(self) -> Path:
        path = self.checkpoints / f"step_{self.step:07d}.pt"
        state = {
            "config": self.cfg.to_dict(),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "epoch": self.epoch,
            "batch_index": self.batch_index,
            "best_bleu": self.best_bleu,
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()},
        }
        torch.save(state, path.with_suffix(".tmp"))
        path.with_suffix(".tmp").rename(path)  # a checkpoint is whole or absent, whenever the run is stopped
        for old in step_checkpoints(self.checkpoints)[: -self.args.keep]:
            old.unlink()
        return path

    def resume(self, path: Path) -> None:
        state = torch.load(path, map_location=self.args.device, weights_only=False)
        self.cfg = ModelConfig.from_dict(state["config"])
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.epoch, self.batch_index = state["step"], state["epoch"], state["batch_index"]
        self.best_bleu = state["best_bleu"]
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        np.random.set_state(state["rng"]["numpy"])
        print(f"resumed from {path}: step {self.step}, epoch {self.epoch}, batch {self.batch_index}")

    def initialize(self, path: Path) -> None:
        """Start from the weights of another run's checkpoint (same dimensions); the embedding rows this run's
        vocabulary has beyond that run's keep their random start. Optimizer, step and schedule start afresh."""
        weights = torch.load(path, map_location=self.args.device, weights_only=False)["model"]
        embedding = self.model.embed.weight.detach().clone()
        embedding[: len(weights["embed.weight"])] = weights["embed.weight"]
        self.model.load_state_dict(weights | {"embed.weight": embedding})
        print(f"initialized from {path}: {len(embedding) - len(weights['embed.weight'])} new embedding rows")

    # --- training ------------------------------------------------------------------------------------
    def log(self, record: dict) -> None:
        with open(self.args.out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    def finished(self) -> bool:
        return self.epoch >= self.args.epochs or (self.args.max_steps and self.step >= self.args.max_steps)

    def train_step(self, batch) -> tuple[float, int]:
        self.model.train()
        lr = learning_rate(self.step + 1, self.cfg.d_model, self.args.warmup, self.args.lr_scale)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss, n_tokens = batch_loss(self.model, batch, self.cfg, self.args.label_smoothing, self.args.amp)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.clip)
        self.optimizer.step()
        self.step += 1
        return loss.item(), n_tokens

    def run_epoch(self) -> None:
        batches = token_batches(self.train_set, self.args.max_tokens, seed=self.args.seed + self.epoch)
        bar = tqdm(total=len(batches), initial=self.batch_index, desc=f"epoch {self.epoch}", mininterval=5)
        started, tokens = time.time(), 0
        while self.batch_index < len(batches) and not self.finished():
            batch = collate([self.train_set[i] for i in batches[self.batch_index]], self.cfg, self.args.device)
            loss, n = self.train_step(batch)
            self.batch_index += 1
            tokens += n
            bar.update()
            bar.set_postfix(loss=f"{loss:.3f}", step=self.step)
            if self.step % 50 == 0:
                lr = self.optimizer.param_groups[0]["lr"]
                rate = tokens / (time.time() - started)
                self.log({"step": self.step, "epoch": self.epoch, "train_loss": loss, "lr": lr, "tokens_per_s": rate})
            if self.step % self.args.save_every == 0:
                self.save()
        bar.close()
        if self.batch_index >= len(batches):
            self.epoch, self.batch_index = self.epoch + 1, 0
            self.validate()
            self.save()

    @torch.no_grad()
    def validate(self) -> None:
        import sacrebleu

        self.model.eval()
        record: dict = {"step": self.step, "epoch": self.epoch}
        for name, pairs in self.val_sets.items():
            examples = encode_pairs(self.tokenizer, pairs, self.cfg)
            total, count = 0.0, 0
            for batch in token_batches(examples, self.args.max_tokens, seed=0):
                tensors = collate([examples[i] for i in batch], self.cfg, self.args.device)
                loss, n = batch_loss(self.model, tensors, self.cfg, 0.0, self.args.amp)
                total, count = total + loss.item() * n, count + n
            record[f"val_loss/{name}"] = total / count
            if self.args.val_bleu:
                hyps = translate(self.model, self.tokenizer, [s for s, _ in pairs], SearchOptions(), batch_size=128)
                record[f"val_bleu/{name}"] = sacrebleu.corpus_bleu(hyps, [[t for _, t in pairs]]).score
        bleus = [v for k, v in record.items() if k.startswith("val_bleu/")]
        if bleus and (mean := sum(bleus) / len(bleus)) > self.best_bleu:
            self.best_bleu = mean
            torch.save({"config": self.cfg.to_dict(), "model": self.model.state_dict()}, self.args.out / "best.pt")
        self.log(record)
        print(json.dumps(record))

    def train(self) -> None:
        while not self.finished():
            self.run_epoch()
        if self.step % self.args.save_every:
            self.save()
        last = step_checkpoints(self.checkpoints)[-self.args.average :]
        torch.save(average_weights(last), self.args.out / "averaged.pt")
        print(f"done at step {self.step}; averaged {len(last)} checkpoints into {self.args.out / 'averaged.pt'}")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def main(argv: list[str] | None = None) -> None:
    Trainer(parse_args(argv)).train()


if __name__ == "__main__":
    main()
