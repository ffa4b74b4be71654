"""What every benchmark shares: its defaults, the test sentences, the engines and the one way they are timed, engine
processes of their own, and the machine, memory, tables, plots and result files of a report.

Engines, by name (load_engine), each translating through the same search (core.search):
    ort-fp32, ort-int8          service.translator.Translator: what the service runs
    ort-fp32-spin, ort-int8-spin
                                the same with ONNX Runtime's idle threads spinning between operators, as
                                CTranslate2's OpenMP threads do by default (the service leaves it off: spin_threads;
                                not in bench.engines' default engines)
    pytorch-cache               model.decode.translate with the KV-cached decoder the model is evaluated with
    pytorch-nocache             the same re-running the decoder over the whole prefix at every step
    ct2-float32, ct2-int8       CTranslate2 (bench.ct2_engine) on the conversion of the same checkpoint
A timed run translates some test sentences in batches of one size after one untimed batch of that shape (warm_up).
Imports of torch, ONNX Runtime and CTranslate2 happen only where an engine is loaded, in the process that runs it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from model.data import TEST_SPLIT, data_file, multi30k_dir, read_lines

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from core.search import SearchOptions
    from service.translator import Translator

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
MODEL_DIR = REPO / "models" / "en-de"
THREADS = os.cpu_count() or 1  # inference threads of every engine and server
BATCH_SIZES = [1, 16, 64]
BEAMS = [1, 4]
COMPUTE_TYPES = {"fp32": "float32", "int8": "int8"}  # our precision -> CTranslate2's compute type
SHORT_RUN_SENTENCES = 200  # test sentences of a run at batch size 1 (PyTorch without a cache is slow there)
RUN_SENTENCES = 1000  # test sentences of a run at a larger batch size
REPEATS = 3  # interleaved repeats (rounds) of every run; medians are reported
LOAD_SECONDS = 20  # of closed-loop load per measurement (bench.loadgen)
# Short English sentences, for measurements that need no test set (and the soak when Multi30k is not there).
SENTENCES = [
    "A man is riding a bicycle.", "Two dogs are running on the green grass.", "The cat sleeps on the sofa.",
    "A girl in a red dress is dancing.", "People are fixing the roof of a house.", "She drinks hot tea in the kitchen.",
    "Five people stand in the snow.", "A woman with a large purse is walking by a gate.",
    "The children play outside with a ball.", "Where is the station?", "My brother is very tall.",
    "A boy jumps into the lake.", "An old man reads a newspaper on a bench.", "We are reading a book together.",
    "A dog catches a red frisbee.", "Workers build a wall of bricks.",
]  # fmt: skip

T = TypeVar("T")
Translate = Callable[[list[str], "SearchOptions", int], list[str]]  # (texts, opts, batch size) -> best translations


# --- the command line ------------------------------------------------------------------------------------------


def add_engine_arguments(p: argparse.ArgumentParser, ct2: bool = False) -> None:
    """--model-dir and --threads (and --ct2-dir), with the shared defaults."""
    p.add_argument("--model-dir", type=Path, default=MODEL_DIR, help="exported model folder (with model.pt)")
    p.add_argument("--threads", type=int, default=THREADS, help="inference threads of every engine or server")
    if ct2:
        p.add_argument("--ct2-dir", type=Path, help="CTranslate2 conversion (default: bench/results/tmp/ct2-NAME)")


def add_grid_arguments(p: argparse.ArgumentParser) -> None:
    """--batch-sizes and --beams, with the shared defaults."""
    p.add_argument("--batch-sizes", type=int, nargs="+", default=BATCH_SIZES)
    p.add_argument("--beams", type=int, nargs="+", default=BEAMS)


def parse_settings(pairs: list[str]) -> dict[str, str]:
    """`name=value` pairs (service settings, e.g. precision=int8) as a dict."""
    settings = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--setting wants name=value, got {pair!r}")
        settings[name.strip().lower()] = value.strip()
    return settings


def settings_of(args: argparse.Namespace, *leave_out: str) -> dict:
    """The arguments as JSON values (paths as strings)."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k not in leave_out}


def command_line(module: str, argv: list[str] | None = None) -> str:
    """The command that reproduces this run: python -m MODULE and its arguments."""
    return shlex.join(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)])


# --- test sentences ----------------------------------------------------------------------------------------------


def multi30k_sentences(directory: Path | None = None, split: str = TEST_SPLIT, lang: str = "en") -> list[str]:
    """One side of a Multi30k split (from MULTI30K_DIR unless directory is given), empty lines left out."""
    return [line for line in read_lines(data_file(directory or multi30k_dir(), split, lang)) if line.strip()]


def run_sentences(batch_size: int, short_run: int, run: int, available: int) -> int:
    """How many test sentences a run translates: fewer at batch size 1."""
    return min(available, short_run if batch_size == 1 else run)


def rotation(names: list[str], round_: int) -> list[str]:
    """The order of the engines (servers) in one round: rotated by one from round to round."""
    shift = round_ % len(names)
    return names[shift:] + names[:shift]


# --- engines and timing ------------------------------------------------------------------------------------------


def load_engine(name: str, model_dir: Path, threads: int, ct2_dir: Path | None = None) -> Translate:
    """One engine by name (see the module's docstring), on the CPU with this many threads."""
    kind, variant = name.split("-", 1)
    if kind == "ort":
        from service.translator import Translator

        precision, _, suffix = variant.partition("-")
        if suffix not in ("", "spin"):
            raise ValueError(f"unknown engine {name}")
        translator = Translator(model_dir, precision, provider="cpu", threads=threads, spin_threads=suffix == "spin")
        return ort_engine(translator)
    if kind == "ct2":
        from bench.ct2_engine import CT2Translator

        return CT2Translator(ct2_dir, compute_type=variant, threads=threads).translate
    if kind == "pytorch" and variant in ("cache", "nocache"):
        import torch

        from core.tokenizer import Tokenizer
        from model.checkpoint import load_model
        from model.decode import translate

        torch.set_num_threads(threads)
        model = load_model(model_dir / "model.pt")
        tokenizer = Tokenizer(model_dir / "spm.model", model.cfg.case_tags)
        cached = variant == "cache"
        return lambda texts, opts, batch: translate(model, tokenizer, texts, opts, batch_size=batch, cached=cached)
    raise ValueError(f"unknown engine {name}")


def ort_engine(translator: Translator) -> Translate:
    return lambda texts, opts, batch: [h[0].text for h in translator.translate(texts, opts, batch_size=batch)]


def ensure_ct2_model(model_dir: Path, ct2_dir: Path | None = None) -> Path:
    """The CTranslate2 conversion of MODEL_DIR/model.pt in ct2_dir (default: bench/results/tmp/ct2-NAME), converted
    now unless it is there and newer than the checkpoint."""
    ct2_dir = ct2_dir or RESULTS / "tmp" / f"ct2-{model_dir.resolve().name}"
    checkpoint, converted = model_dir / "model.pt", ct2_dir / "model.bin"
    if not converted.exists() or converted.stat().st_mtime < checkpoint.stat().st_mtime:
        from bench.ct2_convert import convert  # imports torch: only here, in the driver

        convert(checkpoint, model_dir / "spm.model", ct2_dir)
    return ct2_dir


def timed(fn: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, float]:
    """fn's result and the seconds it took (time.perf_counter): every benchmark's clock."""
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started


def warm_up(translate: Translate, texts: list[str], opts: SearchOptions, batch_size: int) -> None:
    """One untimed batch of a run's shape: the libraries allocate and pick kernels on their first runs."""
    translate(texts[:batch_size], opts, batch_size)


def translate_all(
    translate: Translate, texts: list[str], opts: SearchOptions, batch_size: int, in_order: bool = False
) -> list[str]:
    """Every text translated in batches of batch_size: sentences of similar length together (the translators' own
    batching), or with in_order the texts cut into batches as they come, each translated as one batch."""
    if not in_order:
        return translate(texts, opts, batch_size)
    batches = (texts[start : start + batch_size] for start in range(0, len(texts), batch_size))
    return [out for batch in batches for out in translate(batch, opts, batch_size)]


def timed_run(
    translate: Translate, texts: list[str], opts: SearchOptions, batch_size: int, in_order: bool = False
) -> tuple[list[str], float]:
    """One warmed-up run: the translations and their seconds."""
    warm_up(translate, texts, opts, batch_size)
    return timed(translate_all, translate, texts, opts, batch_size, in_order)


# --- processes of their own --------------------------------------------------------------------------------------


class Spawned:
    """target(conn, *args) in a spawned process (a fresh interpreter: its imports, memory and threads are its own),
    spoken to over a pipe; closing the pipe asks it to end."""

    def __init__(self, name: str, target: Callable[..., None], *args: object):
        self.name = name
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=target, args=(child, *args), name=name)
        self.process.start()
        child.close()

    def send(self, message: object) -> None:
        self.conn.send(message)

    def receive(self) -> Any:
        try:
            return self.conn.recv()
        except EOFError:
            self.process.join()
            raise RuntimeError(f"{self.name} ended (exit code {self.process.exitcode})") from None

    def close(self) -> None:
        self.conn.close()
        self.process.join(timeout=60)


def serve_engine(conn: Connection, name: str, model_dir: Path, threads: int, ct2_dir: Path | None) -> None:
    """An engine process: load the engine, say its memory, then answer every run asked for until the pipe closes."""
    from core.tokenizer import Tokenizer

    rss_start = rss_mib()
    translate = load_engine(name, model_dir, threads, ct2_dir)
    conn.send({"rss_start_mib": rss_start, "rss_loaded_mib": rss_mib()})
    counter = Tokenizer(model_dir / "spm.model")  # target tokens counted alike for every engine
    while True:
        try:
            texts, opts, batch_size, in_order = conn.recv()
        except EOFError:
            return
        outputs, seconds = timed_run(translate, texts, opts, batch_size, in_order)
        tokens = sum(len(ids) for ids in counter.encode(outputs))
        conn.send({"seconds": seconds, "target_tokens": tokens, "outputs": outputs, "peak_rss_mib": peak_rss_mib()})


class EngineProcess(Spawned):
    """One engine in a process of its own, so that its peak memory is its own and no engine's idle thread pool sits
    in another's process. `memory`: its RSS before and after loading the engine."""

    def __init__(self, name: str, model_dir: Path, threads: int, ct2_dir: Path | None = None):
        super().__init__(name, serve_engine, name, model_dir, threads, ct2_dir)
        self.memory: dict[str, float] = self.receive()

    def run(self, texts: list[str], opts: SearchOptions, batch_size: int, in_order: bool = False) -> dict:
        """One warmed-up run (timed_run): seconds, target_tokens, outputs and the process's peak_rss_mib so far."""
        self.send((texts, opts, batch_size, in_order))
        return self.receive()


# --- the machine and its memory ----------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def versions(packages: list[str]) -> dict[str, str]:
    """Installed versions of these distributions in this interpreter's environment."""
    found = {}
    for name in packages:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def environment(packages: list[str]) -> dict:
    """The machine and library versions a result was measured with."""
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "versions": versions(packages),
    }


def _proc_status_mib(field: str, pid: int | str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for process {pid}")


def rss_mib(pid: int | str = "self") -> float:
    """A process's current resident set size (VmRSS), from /proc."""
    return _proc_status_mib("VmRSS", pid)


def peak_rss_mib(pid: int | str = "self") -> float:
    """A process's peak resident set size (VmHWM), from /proc.

    Not getrusage's ru_maxrss: Linux carries that over fork and exec, so a worker started by a big
    driver would report the driver's peak.
    """
    return _proc_status_mib("VmHWM", pid)


# --- reports -----------------------------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def markdown_table(header: list[str], rows: list[list]) -> str:
    def cell(value) -> str:
        return f"{value:,.1f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_results(out_dir: Path, name: str, data: dict, markdown: str | None = None) -> tuple[Path, ...]:
    """bench/results/NAME.json (or under out_dir), and NAME.md beside it when there is markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    if markdown is None:
        return (json_path,)
    md_path.write_text(markdown)
    return json_path, md_path


@contextmanager
def figure(path: Path, panels: int) -> Iterator[list]:
    """The axes of a figure of panels side by side, written to path (PNG) on leaving."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4), squeeze=False)
    yield list(axes[0])
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def log_x_panel(ax, values: list[int]) -> None:
    """A log x axis labelled at exactly these values (batch sizes, concurrency levels), a light grid, the legend."""
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log")
    ax.set_xticks(values, [str(v) for v in values])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.grid(alpha=0.3)
    ax.legend()
