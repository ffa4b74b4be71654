"""An HTTP worker's pairs: a request tokenizes each of its sentences once."""

import asyncio
from collections import Counter
from pathlib import Path

from core.search import Hypothesis
from service.metrics import Metrics
from service.protocol import Phase, PairInfo
from service.settings import Settings
from service.worker.app import pipeline_for
from service.worker.schemas import TranslateRequest


class Echo:
    """An engine that echoes each sentence's ids."""

    def __init__(self, folder: Path):
        self.pairs, self.phase = [PairInfo("en", "de", str(folder), "stand-in", "fp32")], Phase.READY

    async def translate(self, pair, sentences, opts, bulk=False):
        return [[Hypothesis(ids[:-1], 0.0)] * opts.n_best for ids in sentences]


def test_a_requests_sentences_are_tokenized_once(tiny_model_dir: Path):
    """Its length check (split_long) and its model input read the same ids."""
    pipeline = pipeline_for(Echo(tiny_model_dir), Settings(), Metrics())
    tokenizer = pipeline.pairs.pair("en", "de").tokenizer
    read, encode = Counter(), tokenizer.encode

    def counted(texts: list[str]) -> list[list[int]]:
        read.update(texts)
        return encode(texts)

    tokenizer.encode = counted
    q = "A dog runs in the park. Two women walk along the beach."
    answer = asyncio.run(pipeline.translate(TranslateRequest(q=q, source="en", target="de")))
    assert answer.translatedText
    assert read == Counter({"A dog runs in the park.": 1, "Two women walk along the beach.": 1})
