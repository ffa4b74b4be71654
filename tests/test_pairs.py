"""An HTTP worker's pairs: a request tokenizes each of its sentences once, and no long text is kept."""

import asyncio
from collections import Counter
from pathlib import Path

from core.search import Hypothesis
from service.metrics import Metrics
from service.protocol import PairInfo, Phase
from service.settings import Settings
from service.worker.app import pipeline_for
from service.worker.pairs import REMEMBERED_CHARS, Pairs
from service.worker.schemas import TranslateRequest


class Echo:
    """An engine that echoes each sentence's ids."""

    def __init__(self, folder: Path):
        self.pairs, self.phase = [PairInfo("en", "de", str(folder), "stand-in", "fp32")], Phase.READY

    async def translate(self, pair, sentences, opts, bulk=False):
        return [[Hypothesis(ids[:-1], 0.0)] * opts.n_best for ids in sentences]


def counting(tokenizer) -> Counter:
    """The texts the tokenizer encodes from now on, counted."""
    read, encode = Counter(), tokenizer.encode

    def counted(texts: list[str]) -> list[list[int]]:
        read.update(texts)
        return encode(texts)

    tokenizer.encode = counted
    return read


def test_a_requests_sentences_are_tokenized_once(tiny_model_dir: Path):
    """Its length check (split_long) and its model input read the same ids."""
    pipeline = pipeline_for(Echo(tiny_model_dir), Settings(), Metrics())
    read = counting(pipeline.pairs.pair("en", "de").tokenizer)
    q = "A dog runs in the park. Two women walk along the beach."
    answer = asyncio.run(pipeline.translate(TranslateRequest(q=q, source="en", target="de")))
    assert answer.translatedText
    assert read == Counter({"A dog runs in the park.": 1, "Two women walk along the beach.": 1})


def test_a_long_text_is_tokenized_each_time_and_never_kept(tiny_model_dir: Path):
    """A worker keeps no megabyte text's ids (split_long tokenizes a long text, then its halves, and so on)."""
    pair = Pairs.load(Echo(tiny_model_dir).pairs).pair("en", "de")
    read = counting(pair.tokenizer)
    short, long = "A dog runs.", "A dog runs. " * (REMEMBERED_CHARS // 10)
    for _ in range(2):
        assert pair.source_ids([short, long]) == pair.source_ids([short, long])
    assert read == Counter({short: 1, long: 4})
