"""The path of one translate request once its parameters are read: check, route, split, tokenize, submit, join.

A request's texts (q) are cleaned (service.worker.params.clean_text), routed to a language pair (detected when
source is "auto"), cut into segments (the text itself, or each text node of HTML), the segments into sentences;
the sentences of every pair are submitted to the engine at once (an EngineClient: service.protocol), and the
translations are put back in the same layout and markup. No HTTP here: a request that cannot be served raises a
domain error (service.worker.errors), the engine's refusals come as they are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any, Literal, TypeVar

from core.search import Hypothesis, SearchOptions
from service.metrics import Metrics
from service.protocol import EngineClient
from service.settings import Settings
from service.worker.deepl.glossary import placed, written
from service.worker.detect import LanguageDetector, unserved_language
from service.worker.errors import InvalidRequest, Unsupported
from service.worker.html import HtmlText
from service.worker.html_units import DEFAULT_TAGS, Tags
from service.worker.numbers import localize
from service.worker.pairs import Pair, Pairs, language_name
from service.worker.params import clean_text
from service.worker.projection import Wrapped, bare, markup_placeholders, plain_numbering, project, wrapped
from service.worker.schemas import DetectedLanguage, TranslateRequest, TranslateResponse
from service.worker.spans import Protected, Terms, held_in, protect, put_back
from service.worker.text import (
    in_capitals,
    join_translations,
    ordinary_case,
    sentences_of,
    split_long,
    split_sentences,
)

NOTHING_DETECTED = ("en", 0.0)  # LibreTranslate's detection of text with nothing to detect
DOCUMENT_BATCH = 64  # texts (paragraphs, cells, cues) of a document in one internal request
DOCUMENT_REQUESTS = 3  # a document's internal requests at a time: enough to keep the running batch full
DOCUMENT_SAMPLE = 5000  # characters of a document its language is detected on
DOCUMENT_TEXTS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="document-texts")  # Pipeline.run's, for bulk
T = TypeVar("T")


@dataclass(frozen=True)
class Options:
    """How a request's texts are cut and what is held through translation, beyond LibreTranslate's fields (the DeepL
    API's: service.worker.deepl)."""

    # "1": at sentence ends and line breaks; "nonewlines": at sentence ends only; "0": not at all, unless a text is
    # longer than the model's sentence bound (TRANSLATOR_MAX_SENTENCE_TOKENS), which is cut at clause boundaries
    split: Literal["1", "0", "nonewlines"] = "1"
    terms: Terms | None = None  # a glossary's terms, held as protected spans
    tags: Tags = DEFAULT_TAGS  # which elements are inline and which untranslated, with markup


@dataclass(frozen=True)
class Held:
    """A sentence's placeholders: its spans' (glossary terms aside), those of them that stand for inline markup, and
    how the others are numbered in the sentence without markup (service.worker.projection)."""

    spans: set[str]
    tags: set[str]
    numbering: dict[str, str]

    @property
    def bare_spans(self) -> set[str]:
        """The placeholders of the sentence without its markup (projection.bare)."""
        return {self.numbering.get(p, p) for p in self.spans - self.tags}


@dataclass
class Text:
    """One text of q on its way: where it goes, its segments split into sentences, and their translations. What
    is derived from its sentences is worked out once (cached_property): they never change once it is made."""

    original: str
    pair: Pair | None  # None: already in the target language, given back as it is
    detected: tuple[str, float] | None  # (language, confidence) when source was "auto"
    html: HtmlText | None
    segments: list[Protected]  # the text, or each text node of HTML, with its protected spans taken out
    layouts: list[list[str]]  # one split_sentences() layout per segment, long sentences split (split_long)
    localize: Callable[[str], str] | None  # how a number is written in the target language (numbers.localize)
    held: list[Held]  # per sentence
    translations: list[list[str]] | None = None  # per alternative, one translation per sentence
    put_back: list[int] = field(default_factory=list)  # per alternative, spans put back into their sentences

    @cached_property
    def sentences(self) -> list[str]:
        return [sentence for layout in self.layouts for sentence in sentences_of(layout)]

    @cached_property
    def with_terms(self) -> list[tuple[int, Protected]]:
        """(index, its segment) of each sentence that holds glossary terms: each is translated a second time with
        its terms as written (glossary.placed)."""
        found, i = [], 0
        for protected, layout in zip(self.segments, self.layouts):
            for sentence in sentences_of(layout):
                if any(placeholder in sentence for placeholder in protected.terms):
                    found.append((i, protected))
                i += 1
        return found

    @cached_property
    def ordinary(self) -> list[str]:
        """The sentences, one in capitals in ordinary case (it comes back in capitals)."""
        return [ordinary_case(s) if in_capitals(s) else s for s in self.sentences]

    @cached_property
    def wrapped(self) -> list[list[Wrapped]]:
        """Per sentence, the pairs of its markup's placeholders and the words each wraps (projection.wrapped)."""
        return [wrapped(s, held.tags) for s, held in zip(self.ordinary, self.held)]

    @cached_property
    def model_input(self) -> list[str]:
        """The sentences as the model reads them (ordinary); after them, each sentence with inline markup again
        without it, then the words each pair of its markup wraps alone, then each sentence with glossary terms
        again with its terms as written (set_translations)."""
        ordinary = self.ordinary
        return (ordinary + [bare(s, h.tags, h.numbering) for s, h in zip(ordinary, self.held) if h.tags]
                + [pair.words for pairs in self.wrapped for pair in pairs]
                + [written(ordinary[i], protected.terms) for i, protected in self.with_terms])

    def set_translations(self, nbest: list[list[str]]) -> None:
        """Per alternative, the model's translation of each of model_input: a sentence's in capitals where it was in
        capitals, the spans it lost put back (spans.put_back), with its markup projected onto its translation without
        markup, its glossary terms placed."""
        ordinary, capitals, pairs = self.ordinary, [in_capitals(s) for s in self.sentences], self.wrapped
        tagged = len(capitals) + sum(1 for held in self.held if held.tags)
        alone = tagged + sum(map(len, pairs))
        self.translations, self.put_back = [], []
        for alternative in nbest:
            bare_translations, words = iter(alternative[len(capitals) : tagged]), iter(alternative[tagged:alone])
            own = iter(alternative[alone:])
            translations, lost = [], 0
            for t, sentence, held, wraps in zip(alternative, ordinary, self.held, pairs):
                if held.tags:
                    plain, missing = put_back(bare(sentence, held.tags, held.numbering), next(bare_translations),
                                              held.bare_spans)
                    t = project(t, plain, held.tags, held.numbering, [(pair, next(words)) for pair in wraps])
                else:
                    t, missing = put_back(sentence, t, held.spans)
                translations.append(t)
                lost += missing
            for i, protected in self.with_terms:
                terms = {p: protected.spans[p] for p in protected.terms if p in self.sentences[i]}
                translations[i] = placed(translations[i], next(own), terms)
            self.translations.append([t.upper() if c else t for t, c in zip(translations, capitals)])
            self.put_back.append(lost)

    def render(self, k: int) -> tuple[str, int]:
        """The k-th alternative of this text, in its layout and markup, its protected spans back; the text itself when
        nothing was translated. And how many spans had to be put back by place (the model dropped their
        placeholder)."""
        if self.translations is None:
            return self.original, 0
        segments, put_back, it = [], self.put_back[k], iter(self.translations[k])
        for protected, layout in zip(self.segments, self.layouts):
            translation = join_translations(layout, [next(it) for _ in sentences_of(layout)])
            segment, missing = protected.restore(translation, self.localize)
            segments.append(segment)
            put_back += missing
        return (self.html.render(segments) if self.html else segments[0]), put_back


class Pipeline:
    def __init__(
        self, engine: EngineClient, pairs: Pairs, detector: LanguageDetector, settings: Settings, metrics: Metrics
    ):
        self.engine = engine
        self.pairs = pairs
        self.detector = detector
        self.settings = settings
        self.metrics = metrics
        # no translation is longer than the positions of its model: a larger max_length is capped, never an error
        self.longest_output = max(pair.config.model.max_len for pair in pairs.pairs.values())
        # documents read, translated and written at once (service.worker.documents.translate.translate_file's turn)
        self.documents = asyncio.Semaphore(settings.documents_at_once)

    def beam_size(self, req: TranslateRequest) -> int:
        """The beam a request decodes with: its own or the default, and wide enough for its alternatives."""
        return max(req.beam_size or self.settings.beam_size, req.alternatives + 1)

    def search_options(self, req: TranslateRequest) -> SearchOptions:
        s = self.settings
        return SearchOptions(
            beam_size=self.beam_size(req),
            length_penalty=s.length_penalty,
            n_best=req.alternatives + 1,
            max_length_ratio=s.max_length_ratio,
            max_length=min(req.max_length or SearchOptions.max_length, self.longest_output),
            repetition_penalty=s.repetition_penalty,
            no_repeat_ngram_size=s.no_repeat_ngram_size,
            ngram_repeats=s.ngram_repeats,
        )

    def check_texts(self, texts: list[str]) -> None:
        """At most max_chars characters in all."""
        if (chars := sum(len(text) for text in texts)) > (limit := self.settings.max_chars):
            raise InvalidRequest(f"{chars} characters, the limit is {limit}")

    def check(self, req: TranslateRequest) -> None:
        """Every rule about the options and languages of a request, before any text is looked at closely."""
        s = self.settings
        if req.alternatives > s.max_alternatives:
            raise InvalidRequest(f"alternatives parameter must be <= {s.max_alternatives}")
        if self.beam_size(req) > s.max_beam_size:
            raise InvalidRequest(f"beam_size is at most {s.max_beam_size}")
        languages = self.pairs.languages  # each also translates into itself, as in LibreTranslate
        if req.source != "auto" and req.source not in languages:
            raise Unsupported(f"{req.source} is not supported")
        if req.target not in languages:
            raise Unsupported(f"{req.target} is not supported")
        if req.source not in ("auto", req.target) and not self.pairs.pair(req.source, req.target):
            raise Unsupported(self.not_available(req.source, req.target))

    def pair_label(self, req: TranslateRequest) -> str:
        """The served pair that a request names, as its metrics label it (service.metrics): its name, or "" for a pair
        not served and for source "auto" (its texts may go to several)."""
        pair = self.pairs.pair(req.source, req.target)
        return pair.name if pair else ""

    def not_available(self, source: str, target: str) -> str:
        """LibreTranslate's words for two languages served, but not as a pair."""
        return (f"{language_name(target)} ({target}) is not available as a target language from "
                f"{language_name(source)} ({source})")

    def detect(self, q: str | list[str]) -> list[tuple[str, float]]:
        """/detect: the served languages, most likely first, with confidences in percent. For a list, each text's
        confidences weighed by its length, as LibreTranslate does; text with nothing to detect (blank, emoji,
        digits) counts for nothing, and with nothing at all LibreTranslate's answer: English, confidence 0."""
        texts = [clean_text(text) for text in ([q] if isinstance(q, str) else q)]
        self.check_texts(texts)
        weighed: dict[str, float] = {}
        total = 0
        for text in filter(translatable, texts):
            total += len(text)
            for language, confidence in self.detector.detect(text):
                weighed[language] = weighed.get(language, 0.0) + confidence * len(text)
        if not total:
            return [NOTHING_DETECTED]
        return sorted(((language, w / total) for language, w in weighed.items()), key=lambda lc: -lc[1])

    def route(self, text: str, req: TranslateRequest) -> tuple[Pair | None, tuple[str, float] | None]:
        """The pair that translates `text`, and what was detected. Text in the target language is given back as it
        is (pair None), as LibreTranslate does: with "auto", when it is detected so, or when source is the target.
        Otherwise with "auto", the likeliest language that has a pair into the target is taken."""
        if req.source != "auto":
            return self.pairs.pair(req.source, req.target), None
        self.check_served(text)
        ranked = self.detector.detect(text)
        if ranked[0][0] == req.target:
            return None, ranked[0]
        sources = self.pairs.sources_into(req.target)
        found = next(((language, c) for language, c in ranked if language in sources), None)
        if found is None:
            raise Unsupported(self.not_available(ranked[0][0], req.target))
        return self.pairs.pair(found[0], req.target), found

    def check_served(self, text: str) -> None:
        """A text of unserved_min_chars or more that the detector, over every language it knows, confidently gives
        to languages no model serves (unserved_confidence) is refused (400), naming the likeliest."""
        s = self.settings
        if sum(char.isalpha() or char.isspace() for char in text) < s.unserved_min_chars:
            return
        language, confidence = unserved_language(text, self.pairs.languages)
        if confidence >= s.unserved_confidence:
            raise Unsupported(f"the text is in {language_name(language)} ({language}), which is not served; "
                              f"served: {', '.join(self.pairs.languages)}")

    def too_long(self, pair: Pair) -> Callable[[str], bool]:
        """Whether a sentence has more source tokens than split_tokens (and max_sentence_tokens) allow."""
        bound = min(self.settings.split_tokens, self.settings.max_sentence_tokens)
        return lambda sentence: len(pair.source_ids([sentence])[0]) > bound

    def prepare(self, original: str, text: str, req: TranslateRequest, options: Options) -> Text:
        """A text of q, cleaned (`text`: clean_text's), its markup, protected spans and glossary terms taken out,
        routed and split; a text with nothing to translate is given back as it came (`original`). Inline markup's
        placeholders (of HTML, of a document's texts however they come: the CLI sends them to /translate) are
        projected onto the translation without them (service.worker.projection)."""
        html = HtmlText(text, options.tags) if req.format == "html" else None
        segments = [protect(segment, options.terms, self.settings.protect_spans)
                    for segment in (html.texts if html else [text])]
        visible = " ".join(segment.text for segment in segments)  # a URL alone leaves nothing to translate
        pair, detected = self.route(visible, req) if translatable(visible) else (None, None)
        layouts = [self.layout(segment.text, pair, req.target, options) for segment in segments]
        numbers = partial(localize, source=pair.source, target=pair.target) if pair else None
        held = []
        for segment, layout in zip(segments, layouts):
            found = markup_placeholders(segment)
            numbering = plain_numbering(segment, found) if found else {}
            spans = [p for p in segment.spans if p not in segment.terms]
            sentences = sentences_of(layout)
            held += [Held(own, tags, numbering)
                     for own, tags in zip(held_in(sentences, spans), held_in(sentences, found), strict=True)]
        return Text(original, pair, detected, html, segments, layouts,
                    numbers if self.settings.localize_numbers else None, held)

    def layout(self, text: str, pair: Pair | None, target: str, options: Options) -> list[str]:
        """split_sentences()'s layout of a segment, cut as options.split asks ("0": the segment as one sentence),
        each sentence too long for the pair split at clause boundaries (split_long)."""
        language = pair.source if pair else target
        if options.split == "0":
            layout = [text.strip()]
        else:
            layout = split_sentences(" ".join(text.split("\n")) if options.split == "nonewlines" else text, language)
        return split_long(layout, self.too_long(pair)) if pair else layout

    async def translate(self, req: TranslateRequest, options: Options = Options()) -> TranslateResponse:
        """A request: at most max_chars characters, and max_request_work decoder row-steps."""
        return await self.run(req, [req.q] if isinstance(req.q, str) else req.q, request_limits=True, options=options)

    async def translate_document(
        self, texts: list[str], source: str, target: str, progress: Callable[[list[str]], None] | None = None,
        options: Options = Options(),
    ) -> list[str]:
        """A document's texts (service.worker.documents; TRANSLATOR_MAX_FILE_CHARS bounds it when it is read, not
        the request limits): with source "auto" its language is detected once, on the whole document; then
        DOCUMENT_BATCH texts a request, DOCUMENT_REQUESTS requests at a time, so that the running batch stays full.
        They go to the engine as bulk work, after interactive requests and never refused for the document's own
        requests waiting ahead of them (service.engine.admission). `progress` is called with the texts of each
        request once they are translated; `options` as a request's (a glossary's terms)."""
        check = TranslateRequest(q=texts or [""], source=source, target=target)
        self.check(check)
        if check.source == "auto":
            check.source = self.document_language(texts, check.target)
        translated: list[str] = list(texts)
        running = asyncio.Semaphore(DOCUMENT_REQUESTS)

        async def batch(begin: int) -> None:
            req = check.model_copy(update={"q": texts[begin : begin + DOCUMENT_BATCH]})
            async with running:
                answer = await self.run(req, req.q, request_limits=False, bulk=True, options=options)
            translated[begin : begin + DOCUMENT_BATCH] = answer.translatedText
            if progress:
                progress(req.q)

        await all_or_none(batch(begin) for begin in range(0, len(texts), DOCUMENT_BATCH))
        return translated

    def document_language(self, texts: list[str], target: str) -> str:
        """The language of a document, detected on its first DOCUMENT_SAMPLE characters of text: the target itself
        (everything is given back as it is), or the likeliest language with a pair into the target."""
        sample = " ".join(text for text in texts if translatable(text))[:DOCUMENT_SAMPLE]
        if not translatable(sample):
            return target
        pair, _ = self.route(sample, TranslateRequest(q=sample, source="auto", target=target))
        return pair.source if pair else target

    async def run(self, req: TranslateRequest, texts: list[str], request_limits: bool, bulk: bool = False,
                  options: Options = Options()) -> TranslateResponse:
        """Clean, route, split, tokenize and submit the texts; `request_limits`: a request's max_chars and
        max_request_work hold (a document has its own limit, checked when it is read); `bulk`: a document's texts,
        bulk work for the engine, prepared and put back in the DOCUMENT_TEXTS thread, off the event loop (a
        document's paragraph may be megabytes of text)."""
        prepared, ids, opts = await cpu_work(bulk, lambda: self.tokenized(req, texts, request_limits, options))

        async def translated(group: list[Text]) -> None:
            hyps = await self.submit(group[0].pair, ids[group[0].pair.name], opts, bulk)
            await cpu_work(bulk, lambda: self.place_translations(group, hyps, opts))

        await all_or_none(translated(group) for group in by_pair(prepared).values())
        return await cpu_work(bulk, lambda: self.answer(req, prepared))

    def tokenized(self, req: TranslateRequest, texts: list[str], request_limits: bool, options: Options
                  ) -> tuple[list[Text], dict[str, list[list[int]]], SearchOptions]:
        """The texts prepared, each pair's source ids (its texts' sentences in order) and the search options, every
        limit checked."""
        cleaned = [clean_text(text) for text in texts]
        if request_limits:
            self.check_texts(cleaned)
        self.check(req)
        prepared = [self.prepare(original, text, req, options) for original, text in zip(texts, cleaned)]
        ids = {name: group[0].pair.source_ids([s for t in group for s in t.model_input])
               for name, group in by_pair(prepared).items()}
        opts = self.search_options(req)
        self.check_sizes([x for pair_ids in ids.values() for x in pair_ids], opts, request_limits)
        return prepared, ids, opts

    def check_sizes(self, sentences: list[list[int]], opts: SearchOptions, work_limit: bool) -> None:
        """No sentence longer than max_sentence_tokens, and (`work_limit`) at most max_request_work decoder rows x
        steps in all, so that one request cannot hold the engine (and its memory) for long: beam size x the longest
        translation allowed, summed over the sentences."""
        s = self.settings
        if not sentences:
            return
        if (longest := max(len(x) for x in sentences)) > s.max_sentence_tokens:
            limit = s.max_sentence_tokens
            raise InvalidRequest(f"a sentence of {longest} tokens, the limit is {limit}")
        work = opts.beam_size * sum(opts.longest(len(x)) for x in sentences)
        if work_limit and work > s.max_request_work:
            raise InvalidRequest(
                f"{len(sentences)} sentences with beam size {opts.beam_size} may take {work} decoder row-steps, the "
                f"limit is {s.max_request_work}; send fewer sentences or a smaller beam"
            )

    async def submit(self, pair: Pair, ids: list[list[int]], opts: SearchOptions, bulk: bool = False
                     ) -> list[list[Hypothesis]]:
        """The hypotheses of sentences routed to one pair (`ids`, in order): max_sentences at a time, so that a long
        text is never refused for a count of sentences its client cannot see."""
        step, hyps, pair_opts = self.settings.max_sentences, [], pair.search_options(opts)
        for begin in range(0, len(ids), step):
            hyps += await self.engine.translate(pair.name, ids[begin : begin + step], pair_opts, bulk)
        return hyps

    @staticmethod
    def place_translations(texts: list[Text], hyps: list[list[Hypothesis]], opts: SearchOptions) -> None:
        """Each text of one pair given its translations: the hypotheses of its sentences, in order."""
        tokenizer, offset = texts[0].pair.tokenizer, 0
        nbest = [tokenizer.decode([nth(h, k).tokens for h in hyps]) for k in range(opts.n_best)]
        for text in texts:
            count = len(text.model_input)
            text.set_translations([alternative[offset : offset + count] for alternative in nbest])
            offset += count

    def answer(self, req: TranslateRequest, texts: list[Text]) -> TranslateResponse:
        """LibreTranslate's response: translatedText shaped like q, alternatives when asked, detectedLanguage with
        "auto"."""
        single = isinstance(req.q, str)
        alternatives = [[text.render(k) for k in range(req.alternatives + 1)] for text in texts]
        rendered = [[translation for translation, _ in text] for text in alternatives]
        spans = sum(len(segment.spans) for text in texts if text.translations for segment in text.segments)
        put_back = sum(text[0][1] for text in alternatives)  # of the best translations
        if spans:  # most texts hold none
            self.metrics.placeholders.labels("copied").inc(spans - put_back)
            self.metrics.placeholders.labels("put_back").inc(put_back)
        answer = TranslateResponse(translatedText=rendered[0][0] if single else [r[0] for r in rendered])
        if req.alternatives:
            answer.alternatives = rendered[0][1:] if single else [r[1:] for r in rendered]
        if req.source == "auto":
            detected = [
                DetectedLanguage(confidence=round(text.detected[1], 1), language=text.detected[0]) if text.detected
                else DetectedLanguage(confidence=NOTHING_DETECTED[1], language=NOTHING_DETECTED[0])
                for text in texts
            ]
            answer.detectedLanguage = detected[0] if single else detected
        return answer


def by_pair(texts: list[Text]) -> dict[str, list[Text]]:
    """The texts with sentences to translate, by the name of their pair."""
    groups: dict[str, list[Text]] = {}
    for text in texts:
        if text.pair and text.sentences:
            groups.setdefault(text.pair.name, []).append(text)
    return groups


async def cpu_work(bulk: bool, work: Callable[[], T]) -> T:
    """work(): a document's (bulk) in the DOCUMENT_TEXTS thread, so that the event loop keeps answering other
    requests meanwhile; a request's on the event loop."""
    if bulk:
        return await asyncio.get_running_loop().run_in_executor(DOCUMENT_TEXTS, work)
    return work()


async def all_or_none(coroutines: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run the coroutines together; the first error is raised at once and cancels the others, so that the engine
    drops their sentences at its next step (service.worker.remote sends Cancel) rather than decoding work whose
    answer nobody gets. A lone coroutine (a request of one pair) runs in this task."""
    coroutines = list(coroutines)
    if len(coroutines) == 1:
        return await coroutines[0]
    tasks = [asyncio.ensure_future(coroutine) for coroutine in coroutines]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()


def translatable(text: str) -> bool:
    """Whether a text has anything to translate: a letter, in any script. Blank text, emoji, digits, punctuation and
    symbols alone are given back as they are (LibreTranslate gives back emoji-only text)."""
    return any(char.isalpha() for char in text)


def nth(hyps: list[Hypothesis], k: int) -> Hypothesis:
    """The k-th best hypothesis; a sentence with fewer repeats its last one."""
    return hyps[min(k, len(hyps) - 1)]
