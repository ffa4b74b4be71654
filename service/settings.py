"""Every setting of the service, in one place: defaults, or TRANSLATOR_* environment variables, or flags.

README.md's settings table is generated from the fields below: `python -m service.settings` prints it, and
`python -m service.settings --write README.md` puts it between the README's settings-table markers.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import Field, TypeAdapter, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core.search import SearchOptions
from service.engine.config import CUDA_GRAPHS_MAX_ROWS, CUDA_GRAPHS_MEMORY_MB, Spin

BOOLEAN = TypeAdapter(bool)  # how pydantic reads a boolean setting: `true`, `1`, `yes`, `on`, ...
SHIPPED_MODELS = Path(__file__).resolve().parent.parent / "models"
ARGOS_INDEX = "https://raw.githubusercontent.com/argosopentech/argospm-index/main/index.json"  # LibreTranslate's
DEFAULT_MODEL_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mt-service" / "models"
MAX_HTTP_WORKERS = 8
DEFAULT_DATA_DIR = Path.home() / ".local" / "share" / "translator"


def default_http_workers() -> int:
    """One HTTP worker per core this process may use, at most MAX_HTTP_WORKERS."""
    return min(len(os.sched_getaffinity(0)), MAX_HTTP_WORKERS)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TRANSLATOR_", protected_namespaces=())

    model_dir: Path = Field(
        SHIPPED_MODELS,
        description="a model folder written by `python -m export`, or a folder of them: every language pair in it "
        "is served",
    )
    models: Annotated[list[str], NoDecode] = Field(
        [], description="comma-separated models to serve besides `TRANSLATOR_MODEL_DIR`'s, fetched, converted and "
        "exported into `TRANSLATOR_MODEL_CACHE` at the first start (later starts use the cache, without the network): "
        "Argos Translate packages by pair (`en-de`), Hugging Face models by repository (`Helsinki-NLP/opus-mt-en-de`, "
        "`facebook/nllb-200-distilled-600M:en,de,fr`, `REPO@REVISION`); see `python -m model.pull --help`. Where two "
        "models serve one pair, the first named serves it, and these before `TRANSLATOR_MODEL_DIR`'s"
    )
    models_required: bool = Field(
        False, description="refuse to start when one of `TRANSLATOR_MODELS` cannot be made; `false`: it is logged "
        "in one line and the service starts with the others"
    )
    model_cache: Path = Field(
        DEFAULT_MODEL_CACHE, description="where `TRANSLATOR_MODELS` are kept (`python -m model.pull --list`, "
        "`--remove`); replicas may share it"
    )
    argos_index: str = Field(
        ARGOS_INDEX, description="the Argos Translate package index that `TRANSLATOR_MODELS`' pairs are found in"
    )
    host: str = Field("127.0.0.1", description="address to listen on; `0.0.0.0` in a container")
    port: int = Field(8000, description="port to listen on")
    http_workers: int = Field(
        default_factory=default_http_workers, ge=0,
        description="HTTP worker processes in front of the one engine process that runs the models; `0`: one "
        "process serves everything",
    )
    provider: Literal["auto", "cuda", "cpu"] = Field(
        "auto", description="ONNX Runtime's execution provider: `auto` (CUDA if usable, else CPU), `cuda`, `cpu`"
    )
    precision: Literal["fp32", "fp16", "int8"] = Field(
        "fp32", description="which graphs of the model folder: `fp32`, `int8` (CPU), `fp16` (GPU; export with "
        "`--variants fp16`)"
    )
    threads: int = Field(0, ge=0, description="ONNX Runtime intra-op threads (0: one per core)")
    optimization: Literal["disable", "basic", "extended", "all"] = Field(
        "all", description="ONNX Runtime graph optimizations: `disable`, `basic`, `extended`, `all`"
    )
    spin_threads: Spin = Field(
        "step", description="when the decoder's idle ONNX Runtime threads spin for work rather than sleep between "
        "its operators (the other graphs' threads, but with `never`, within their runs alone): `never`; `step`, "
        "within a decoder step, stopping as it returns, so that the search and the HTTP workers have the cores "
        "between steps; `always` (`true`), "
        "between steps too, as the offline Translator does: faster for a lone client, slower under load "
        "(BENCHMARKS.md#the-decoders-threads-spinning). `false` is `never`"
    )
    cuda_graphs: bool = Field(
        True, description="on the CUDA provider, run the decoder step in buckets of fixed shapes, each captured in a "
        "CUDA graph and replayed, and encode joining sentences in buckets captured the same way "
        "(service/engine/graphed.py); elsewhere, or where ONNX Runtime refuses the capture, "
        "the reason is logged and the usual decoder runs; a running batch of more than "
        "`TRANSLATOR_CUDA_GRAPHS_MAX_ROWS` rows steps eagerly (BENCHMARKS.md#the-gpu-one-h200)"
    )
    cuda_graphs_memory_mb: int = Field(
        CUDA_GRAPHS_MEMORY_MB, ge=0, description="with `TRANSLATOR_CUDA_GRAPHS`, the most GPU memory its buckets' "
        "caches and its encoder buckets' outputs take, per model (they stay as long as the model: a captured graph "
        "holds their addresses); a batch whose bucket is not made yet and would not fit steps eagerly, sentences "
        "whose encoder bucket would not fit are encoded eagerly. A bucket holds a second set of self-attention "
        "caches only once beams run in it; a bucket's size grows with its rows, slots and the model's layers"
    )
    cuda_graphs_max_rows: int = Field(
        CUDA_GRAPHS_MAX_ROWS, ge=1, description="with `TRANSLATOR_CUDA_GRAPHS`, the most rows (sentences × beams) a "
        "running batch steps with in the captured buckets; a larger one steps eagerly, and moves back into a bucket "
        "once it holds half as many (BENCHMARKS.md#cuda-graphs-how-many-rows-a-bucket-holds)"
    )
    kernels: bool = Field(
        True, description="on the CPU provider, run the decoder step with kernels of our own: each attention, the "
        "best tokens' log-probabilities, and on CPUs with AVX-512 the projections of weights exported in fp16, read "
        "in fp16 (service/engine/kernels, built by `make serve`; docs/decisions.md); where they are not built, or the "
        "graph is not of our export, the reason is logged and the step runs as exported"
    )
    max_batch_sentences: int = Field(
        64, ge=1, description="sentences in the running batch at once (beams count once); the first sentence of a "
        "new request may join a full batch, up to an eighth more, so that it waits for no running sentence to end"
    )
    max_batch_tokens: int = Field(
        4096, ge=1, description="padded source tokens in the running batch (sentences × longest source); the first "
        "sentence of a new request may likewise take an eighth more"
    )
    max_wait_ms: float = Field(
        0.0, ge=0, description="how long an empty batch's first sentence waits for company; with 0 a lone request "
        "runs at once, and under load sentences join the running batch at every step anyway"
    )
    max_queue: int = Field(
        1024, ge=1, description="sentences waiting (what the queue holds; its work is bounded by the two settings "
        "below); beyond it requests get 503 with `Retry-After` at once"
    )
    max_queue_work: int = Field(
        131072, ge=1, description="decoder rows × steps waiting, each sentence counted as in "
        "`TRANSLATOR_MAX_REQUEST_WORK` (beam 8 counts eight times); beyond it requests get 503 with `Retry-After` "
        "at once, but a request that finds nothing waiting is always taken. Until the engine knows its rate (after "
        "some seconds of decoding with work waiting) this alone bounds the queue"
    )
    max_queue_wait_s: float = Field(
        10.0, gt=0, description="how long a sentence may wait to join the running batch: a request whose work "
        "could not start within three quarters of it, at the rate of the last seconds, gets 503 with `Retry-After` "
        "at once; one whose waiting sentences can no longer start within it (the engine slowed down, or its rate "
        "was not known yet) gets it as soon as that is known, before they start (in a drain, "
        "`TRANSLATOR_DRAIN_SECONDS` holds instead). An accepted request is answered within this plus the decoding "
        "of its own sentences"
    )
    max_chars: int = Field(5000, ge=1, description="characters in one request")
    max_file_chars: int = Field(
        4_000_000, ge=1, description="characters of text in one file of `/translate_file` (its own limit, not "
        "`TRANSLATOR_MAX_CHARS`); a larger file gets 413. A 1 MB .docx of plain English text holds about 2.7 million, "
        "a long novel 1 to 3 million"
    )
    max_file_nodes: int = Field(
        140_000, ge=1, description="XML elements (all the parts of a .docx, .pptx, .odt, .odp or .epub together), "
        "lines of a .txt or cues of an .srt in one file of `/translate_file`, counted as the file is read, before "
        "its tree is built; a file with more gets 413"
    )
    max_html_nodes: int = Field(
        70_000, ge=1, description="HTML tags, elements, texts and comments in one .html or .htm file of "
        "`/translate_file`, or in all the XHTML documents of an .epub together (its chapters, its table of contents), "
        "counted as they are parsed, before their trees grow past it (such a tree takes more memory a node than the "
        "other XML formats' elements: `TRANSLATOR_MAX_FILE_NODES`); a file with more gets 413"
    )
    documents_at_once: int = Field(
        1, ge=1, description="documents of `/translate_file` and `/v2/document` that one HTTP worker reads, "
        "translates and writes at once; the others wait their turn in the worker as the bytes uploaded (their clients "
        "may hang up), holding no parsed document and no place in the engine's queue, which stays open to other "
        "requests"
    )
    max_body_bytes: int = Field(
        1 << 20, ge=1, description="bytes of one request body; a larger one gets 413 before it is read"
    )
    max_file_bytes: int = Field(
        32 << 20, ge=1, description="bytes of one `/translate_file` body (the file and its form fields); a larger one "
        "gets 413 before it is read"
    )
    max_header_bytes: int = Field(
        65536, ge=1024, description="bytes of a request's head: its request line with the query string, and its "
        "header fields (deep-translator sends `q` in the query string: 5,000 characters of any script fit); a "
        "larger one gets 431 and its connection closes, a worker holding no more of it than this and one read"
    )
    max_header_fields: int = Field(100, ge=1, description="header fields of one request; more get 431")
    keep_alive_s: float = Field(
        75.0, gt=0, description="how long a connection may stay idle after an answer; then it closes. Keep it "
        "longer than any client or proxy in front keeps an idle connection to reuse (a client polling at a fixed "
        "interval, a load balancer's idle timeout, nginx's upstream `keepalive_timeout`): a connection closed just "
        "as such a client sends its next request on it loses that request"
    )
    header_timeout_s: float = Field(
        10.0, gt=0, description="how long a new connection may wait before it sends its first request (then it "
        "closes), and a request's head may take from its first byte (then 408 and its connection closes; a client "
        "sending a byte now and then holds no connection)"
    )
    body_timeout_s: float = Field(
        30.0, gt=0, description="how long a request's body may take after its head; then 408 and its connection "
        "closes (`TRANSLATOR_MAX_BODY_BYTES` in 30 s: 35 kB/s)"
    )
    max_sentences: int = Field(
        64, ge=1, description="sentences of one request submitted to the engine at once; a request with more is "
        "submitted in turns, never refused for its count"
    )
    protect_spans: bool = Field(
        True, description="URLs, emails, @mentions, #hashtags, file paths, inline code, emoji and codes mixing letters "
        "and digits come back exactly as written (service/worker/spans.py); false: translated like any text"
    )
    localize_numbers: bool = Field(
        True, description="numbers with a decimal mark or thousands separators are written as the target language "
        "writes them (1,299.99 -> 1.299,99 in German; the rule: service/worker/numbers.py); false: every number comes "
        "back exactly as written"
    )
    max_sentence_tokens: int = Field(
        250, ge=1, description="source tokens of one sentence the engine translates; a longer one is split (as by "
        "`TRANSLATOR_SPLIT_TOKENS`), never refused"
    )
    split_tokens: int = Field(
        80, ge=8, description="a sentence of more source tokens is split at clause boundaries (after , ; : and "
        "dashes, else between words) into parts translated one by one and joined"
    )
    no_repeat_ngram_size: int = Field(
        4, ge=0, description="repetition guard (CTranslate2's option): a translation holds an n-gram of this many "
        "tokens at most `TRANSLATOR_NGRAM_REPEATS` times; 0: off"
    )
    ngram_repeats: int = Field(
        2, ge=1, description="how often an n-gram of `TRANSLATOR_NO_REPEAT_NGRAM_SIZE` tokens may occur in a "
        "translation (1: CTranslate2's no_repeat_ngram_size; 2 only cuts loops)"
    )
    repetition_penalty: float = Field(
        1.0, ge=1.0, description="repetition guard (CTranslate2's option): a token the translation holds already is "
        "this much less likely; 1: off"
    )
    unserved_confidence: float = Field(
        90.0, ge=0, le=100, description="with source `auto`, a text that the detector (over all the languages it "
        "knows) gives to languages no model serves with at least this confidence (percent, together) gets 400 "
        "naming the likeliest"
    )
    unserved_min_chars: int = Field(
        20, ge=0, description="texts shorter than this (letters and spaces) are never refused as an unserved "
        "language"
    )
    beam_size: int = Field(1, ge=1, description="default beam size (1: greedy)")
    max_beam_size: int = Field(8, ge=1, description="largest `beam_size` a request may ask for")
    max_alternatives: int = Field(3, ge=0, description="most `alternatives` a request may ask for")
    length_penalty: float = Field(0.6, ge=0, description="beam search length normalization (GNMT alpha)")
    max_length_ratio: float = Field(
        1.5, gt=0, description="a translation has at most ratio × source tokens "
        f"+ {SearchOptions.max_length_extra} tokens"
    )
    max_request_work: int = Field(
        65536, ge=1, description="decoder rows × steps one request may ask for: the sum over its sentences of beam "
        "size × longest translation; beyond it 400 (64 sentences of 20 tokens at beam 8 take 20,480)"
    )
    release_memory_after_s: float = Field(
        1.0, gt=0, description="once idle this long, memory that a heavy batch took (ONNX Runtime's arenas) is "
        "given back if the process grew 25 % past its size at start"
    )
    engine_stall_s: float = Field(
        3.0, gt=0, description="an HTTP worker pings the engine process twice a second: silent this long, the "
        "engine counts as stalled until it answers again (stopped or wedged): `/ready` answers 503, new requests "
        "get 503 with `Retry-After` at once, and so do those waiting for it, whose work the engine drops"
    )
    engine_timeout_s: float = Field(
        60.0, gt=0, description="the longest a request waits for the engine's answer: then it gets 503 with "
        "`Retry-After` and the engine drops its work, as for a client that hung up"
    )
    drain_seconds: float = Field(
        20.0, ge=0, description="on SIGTERM: accepted work runs up to this long, what is left is answered 503 with "
        "`Retry-After`, and the process exits 0 (the compose files' `stop_grace_period` is 30 s)"
    )
    public_url: str = Field(
        "", description="the service's URL as its clients reach it (`https://translate.example.org/`): "
        "`translatedFileUrl` is built from it; empty: from the request's own Host, if it is one of "
        "`TRANSLATOR_ALLOWED_HOSTS`, else from the address the server listens on"
    )
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        ["localhost", "127.0.0.1", "[::1]"], description="comma-separated Host names (with or without a port) from "
        "which `translatedFileUrl` may be built when `TRANSLATOR_PUBLIC_URL` is empty; `*`: any Host"
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        ["*"], description="comma-separated origins whose pages may call the API; `*`: any, as LibreTranslate "
        "answers; empty: no CORS headers"
    )
    api_keys: Annotated[list[str], NoDecode] = Field(
        [], description="comma-separated API keys, imported into the store as keys without limits; any key "
        "turns keys on"
    )
    require_api_keys: bool = Field(
        False, description="every request of the API needs a key of the store (`python -m service.keys`), "
        "as when `TRANSLATOR_API_KEYS` names any; unknown or revoked keys get 403"
    )
    data_dir: Path = Field(
        DEFAULT_DATA_DIR, description="where the service keeps what must last: the SQLite store (unless "
        "`TRANSLATOR_STORE_URL` names another) and the translated files; replicas share it as a volume"
    )
    store_url: str = Field(
        "", description="SQLAlchemy URL of the store of keys, limits' counters, usage, files' owners, DeepL's "
        "glossaries and document jobs; empty: SQLite in `TRANSLATOR_DATA_DIR`; "
        "`postgresql+psycopg://user:password@host/db` for replicas, which share it. Migrated at start (when keys "
        "or limits are on; else once the models are loaded, for DeepL's document jobs)"
    )
    anonymous_req_limit: int = Field(
        0, ge=0, description="requests a minute from one address without a key (0: no limit); over it 429 with "
        "`Retry-After`"
    )
    anonymous_daily_req_limit: int = Field(
        0, ge=0, description="requests a day (UTC) from one address without a key (0: no limit)"
    )
    limit_window_s: int = Field(
        60, ge=1, description="the window of the per-minute request limits, in seconds; windows start at "
        "multiples of it since the epoch"
    )
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        [], description="comma-separated addresses or networks (`10.0.0.0/8`) of proxies whose "
        "`X-Forwarded-For` names the client, whom the limits and files' owners then count; empty: the "
        "connection's address is the client"
    )
    file_retention_s: float = Field(
        3600.0, gt=0, description="how long `/download_file` serves a translated file, and how long a DeepL "
        "document job and its result are kept after its upload"
    )
    file_budget_bytes: int = Field(
        256 << 20, ge=1, description="bytes of translated files kept per owner (a key, or an address when keys "
        "are off); beyond it the owner's oldest go, never another's"
    )
    document_lease_s: float = Field(
        30.0, gt=0, description="how long a DeepL document job stays with the HTTP worker translating it without "
        "word from it; a job whose worker died is taken up by another worker (of any replica sharing the store) "
        "once its lease runs out, a job of a service that stopped at once when it starts again"
    )
    log_level: str = Field("info", description="log level of the service's processes and of uvicorn")
    access_log: bool = Field(
        False, description="a line in the log for each HTTP request (uvicorn's access log); `/metrics` counts "
        "them either way, and the scale-out's nginx logs each one"
    )

    @property
    def keys_required(self) -> bool:
        """Whether requests need a key of the store."""
        return self.require_api_keys or bool(self.api_keys)

    @property
    def limits_on(self) -> bool:
        """Whether a request is counted against a limit (a key's own limits count whenever keys are on)."""
        return self.keys_required or bool(self.anonymous_req_limit or self.anonymous_daily_req_limit)

    @field_validator("spin_threads", mode="before")
    @classmethod
    def spin_booleans(cls, value: object) -> object:
        """The setting was a boolean: what pydantic reads as true spins always, as false never."""
        if value in get_args(Spin):
            return value
        try:
            return "always" if BOOLEAN.validate_python(value) else "never"
        except ValidationError:
            return value  # neither: the field's own error names the values

    @field_validator("api_keys", "cors_origins", "allowed_hosts", "models", "trusted_proxies", mode="before")
    @classmethod
    def split_commas(cls, value: str | list[str]) -> list[str]:
        if isinstance(value, str):
            return [k.strip() for k in value.split(",") if k.strip()]
        return value


# === README.md's settings table, generated from the fields above ==================================================

# Defaults whose value would not help a reader of the table.
SHOWN_DEFAULTS = {
    "model_dir": "`models` (shipped)",
    "model_cache": "`$XDG_CACHE_HOME/mt-service/models` (`~/.cache/...`)",
    "http_workers": f"one per core, at most {MAX_HTTP_WORKERS}",
    "data_dir": "`~/.local/share/translator`",
}
# The settings that `python -m service` also takes as flags (service/__main__.py).
FLAGS = ("model_dir", "host", "port", "http_workers")
TABLE_BEGIN = "<!-- settings-table:begin -->"
TABLE_END = "<!-- settings-table:end -->"


def flag(name: str) -> str:
    """The flag of a setting in FLAGS: model_dir is --model-dir."""
    return "--" + name.replace("_", "-")


def shown_default(name: str, field: FieldInfo) -> str:
    """The default as the table shows it: SHOWN_DEFAULTS, else the value as one would write it in the environment."""
    if name in SHOWN_DEFAULTS:
        return SHOWN_DEFAULTS[name]
    value = field.default
    if value == []:
        return "(empty)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, list):
        return f"`{','.join(value)}`"
    return f"`{value}`"


def settings_table() -> str:
    """The markdown table of every setting: variable, flag, default, meaning."""
    prefix = Settings.model_config["env_prefix"]
    rows = ["| variable | flag | default | meaning |", "|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        cells = [
            f"`{prefix}{name.upper()}`",
            f"`{flag(name)}`" if name in FLAGS else "",
            shown_default(name, field),
            (field.description or "").replace("|", "\\|"),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def with_table(readme: str) -> str:
    """`readme` with settings_table() between TABLE_BEGIN and TABLE_END."""
    start, end = readme.index(TABLE_BEGIN) + len(TABLE_BEGIN), readme.index(TABLE_END)
    return readme[:start] + "\n" + settings_table() + readme[end:]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Print README.md's settings table, or write it into a README.")
    p.add_argument("--write", type=Path, metavar="README", help=f"replace the table between {TABLE_BEGIN} and "
                   f"{TABLE_END} in this file")
    args = p.parse_args(argv)
    if args.write is None:
        sys.stdout.write(settings_table())
    else:
        args.write.write_text(with_table(args.write.read_text()))


if __name__ == "__main__":
    main()
