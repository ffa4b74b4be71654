"""Corpus scores with sacreBLEU: the figures of the model cards and of training's validation."""

from __future__ import annotations

import sacrebleu


def score(hyps: list[str], refs: list[str]) -> dict:
    """Corpus-level cased BLEU, lowercased BLEU and chrF of hypotheses against one reference each."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    return {
        "bleu": sacrebleu.corpus_bleu(hyps, [refs]).score,
        "bleu_lowercase": sacrebleu.corpus_bleu(hyps, [refs], lowercase=True).score,
        "chrf": sacrebleu.corpus_chrf(hyps, [refs]).score,
    }
