"""Every benchmark, in one list: `python -m bench` runs them all in order (what `make bench` does: well over an hour
on 2 cores), `python -m bench NAME [NAME ...]` the named ones, `python -m bench --list` lists them.

Each runs as `python -m MODULE ARGS` from the repository root, one after the other, and writes its results under
bench/results/; the run stops at the first that fails, and when all ran, `python -m bench.report` regenerates
BENCHMARKS.md from the results (a result file that no question of bench/report.py names yet stops it, naming the
file: give it a question, or remove what it supersedes). A benchmark
that needs what only a person can give (a checkout to compare with, a running server) is skipped with a line saying
how to run it; the GPU benchmarks run in the full run only where there is a GPU. For other arguments, run the module
itself: `python -m bench.offline.engines --help`.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from dataclasses import dataclass

from bench import report
from bench.common.defaults import REPO


@dataclass(frozen=True)
class Benchmark:
    name: str
    module: str
    measures: str
    args: tuple[str, ...] = ()
    needs: str = ""  # an argument only a person can give: the benchmark is skipped, saying so
    gpu: bool = False  # the full run skips it where there is no GPU

    def command(self) -> str:
        return " ".join(["python", "-m", self.module, *self.args])


BENCHMARKS = [
    Benchmark(
        "decode", "bench.offline.decode",
        "offline speed and memory: PyTorch without and with a KV cache against ONNX Runtime with one",
    ),
    Benchmark(
        "ct2_check", "bench.offline.ct2_check",
        "the share of CTranslate2's greedy translations of our model that are identical to ours",
    ),
    Benchmark(
        "engines", "bench.offline.engines",
        "offline speed, memory and BLEU of ONNX Runtime against CTranslate2 on the same weights",
    ),
    Benchmark(
        "large_model", "bench.offline.large_model",
        "a 600M-parameter model (NLLB-200-600M's shape, random weights): conversion and export (fp32, int8, fp16) "
        "time and peak memory, the folder's size, the service's RSS serving it",
    ),
    Benchmark(
        "engines_nllb", "bench.offline.engines",
        "ours against CTranslate2's own conversion of the same 600M NLLB-shaped model, int8 and fp32",
        needs="the 600M folders: python -m bench.offline.large_model --keep; then python -m bench.offline.engines "
        "--model-dir bench/results/tmp/nllb-600m/model --hf-dir bench/results/tmp/nllb-600m/hf --pair en de "
        "--max-length 16 --batch-sizes 1 16 --sentences 16 --batch1-sentences 4 --rounds 2 --random-weights "
        "--name engines-nllb-600m",
    ),
    Benchmark(
        "argos_model", "bench.offline.argos_model",
        "an Argos Translate package of LibreTranslate's size (Locomotive's defaults, random weights): conversion "
        "and export (fp32, int8) time and peak memory, the package's files against the folder's, the service's RSS",
    ),
    Benchmark(
        "engines_argos", "bench.offline.engines",
        "ours against CTranslate2 on that package's own model/ folder (what LibreTranslate runs), int8 and fp32",
        needs="the package and its folder: python -m bench.offline.argos_model --keep; then python -m "
        "bench.offline.engines --model-dir bench/results/tmp/argos-base/model --package "
        "bench/results/tmp/argos-base/translate-en_de-1_0 --random-weights --max-length 16 --engines ort-int8 "
        "ct2-int8 ort-fp32 ct2-float32 --batch-sizes 1 16 --sentences 32 --batch1-sentences 8 --name "
        "engines-argos-base",
    ),
    Benchmark(
        "profile_steps", "bench.offline.profile_steps",
        "where a decoder step's time goes: ONNX Runtime's sessions, or the search in Python around them",
    ),
    Benchmark(
        "gpu", "bench.offline.gpu",
        "offline speed on the GPU (ONNX Runtime fp32 and fp16, PyTorch) beside the CPU, ms per decoder step",
        gpu=True,
    ),
    Benchmark(
        "gpu_check", "bench.offline.gpu",
        "the GPU path checked: a CUDA kernel for every node, where the sessions run each node, every bucket's step "
        "(placement, ms, outputs against the CPU's), the GPU goals; exits 2 without a GPU",
        args=("--check",), gpu=True,
    ),
    Benchmark(
        "gpu_kernels", "bench.offline.gpu_kernels",
        "where a translation's time goes on the GPU: its kernels and copies read through CUPTI, the GPU's busy share "
        "of each decoder step's wall time, eager and with CUDA graphs; exits 2 without a GPU",
        gpu=True,
    ),
    Benchmark(
        "checkouts", "bench.offline.checkouts",
        "offline speed of this checkout against another one, side by side",
        needs="a checkout to compare with: git worktree add /tmp/base COMMIT; "
        "python -m bench.offline.checkouts /tmp/base",
    ),
    Benchmark(
        "serving_checkouts", "bench.serving.checkouts",
        "plain-text serving throughput of this checkout against another one, side by side",
        needs="a checkout to compare with: git worktree add /tmp/base COMMIT; "
        "python -m bench.serving.checkouts /tmp/base",
    ),
    Benchmark(
        "document", "bench.serving.document",
        "a 1 MB .docx translated through /translate_file in one request: its time, and its structure after",
    ),
    Benchmark(
        "deepl-document", "bench.serving.deepl_document",
        "a 1 MB .docx through DeepL's /v2/document against /translate_file: time ratio, longest request wait",
    ),
    Benchmark(
        "load", "bench.serving.load",
        "the service's throughput and latency with dynamic batching against batch size 1",
        args=("--compare", "--concurrency", "32", "--seconds", "20"),
    ),
    Benchmark(
        "servers", "bench.serving.servers",
        "our service against LibreTranslate on the same model, 1 to 64 clients",
    ),
    Benchmark(
        "lone_path", "bench.serving.lone_path",
        "what a lone client's request costs beyond its translation, ours against LibreTranslate's",
    ),
    Benchmark(
        "frontend", "bench.serving.frontend",
        "what the HTTP workers sustain alone and with the real engine, against one process",
    ),
    Benchmark(
        "store_cost", "bench.serving.store_cost",
        "one client's p50 and 32 clients' throughput with keys and limits off, and on with SQLite and PostgreSQL",
    ),
    Benchmark(
        "exact_limits", "bench.serving.exact_limits",
        "one key's requests a minute accepted across 2 instances of 2 HTTP workers sharing PostgreSQL, 3 minutes",
    ),
    Benchmark(
        "probes", "bench.serving.probes",
        "the figures behind tests/test_faults.py: abandoned work, memory given back, a lone request's wait",
        args=("--repeat", "3"),
    ),
    Benchmark(
        "hostile_load", "bench.serving.hostile_load",
        "64 clients each sending 64 sentences at beam 8, and a stopped engine: answer times, 503s with Retry-After",
    ),
    Benchmark(
        "hostile", "bench.serving.hostile",
        "hostile clients: header floods, idle and slow connections, markup and repeated parameters that would hold "
        "the event loop, file names, keep-alive through a drain; the cost of the bounded HTTP protocol",
    ),
    Benchmark(
        "soak", "bench.serving.soak",
        "ten minutes of mixed load: the service's RSS growth and responses 500",
        args=("--minutes", "10", "--setting", "threads=1"),
    ),
    Benchmark(
        "loadgen", "bench.serving.loadgen",
        "a running server's throughput and latency under closed-loop clients (wrk)",
        needs="a running server: python -m bench.serving.loadgen URL < sentences.txt",
    ),
    Benchmark(
        "images", "bench.deploy.images",
        "our CPU image beside LibreTranslate's, both built here by podman from their Dockerfiles: size (podman's "
        ".Size) and what each carries (torch, ONNX Runtime, CTranslate2)",
    ),
    Benchmark(
        "image_start", "bench.deploy.start",
        "the CPU image's start: seconds from `podman run` to /ready, as compose runs it",
    ),
    Benchmark(
        "detect", "bench.studies.detect",
        "offline language identifiers: accuracy on short sentences, latency, load time and memory",
    ),
    Benchmark(
        "placeholders", "bench.studies.placeholders",
        "which placeholder forms the shipped models copy, and how protected spans come back through them",
    ),
    Benchmark(
        "glossary", "bench.studies.glossary",
        "glossary terms through the DeepL API: the share of translations with the target term, chrF with and without",
    ),
    Benchmark(
        "splitters", "bench.studies.splitters",
        "sentence splitters on our labelled texts: the share split right, time per text",
    ),
    Benchmark(
        "decoding-attention", "bench.studies.decoding_attention",
        "the exported decoder step against other attention kernels: agreement and time of one run",
    ),
]  # fmt: skip
BY_NAME = {b.name: b for b in BENCHMARKS}


def has_gpu() -> bool:
    """Whether NVIDIA's driver is installed (its nvidia-smi is on PATH)."""
    return shutil.which("nvidia-smi") is not None


def why_skipped(benchmark: Benchmark, full_run: bool) -> str:
    """Why this run leaves the benchmark out, or "" when it runs it."""
    if benchmark.needs:
        return f"needs {benchmark.needs}"
    if benchmark.gpu and full_run and not has_gpu():
        return f"needs a GPU (nvidia-smi finds none); python -m bench {benchmark.name} runs it anyway"
    return ""


def run(benchmarks: list[Benchmark], full_run: bool) -> None:
    """Each benchmark in turn, from the repository root; stops at the first that fails."""
    for benchmark in benchmarks:
        if reason := why_skipped(benchmark, full_run):
            print(f"== bench {benchmark.name}: skipped, {reason}", flush=True)
            continue
        print(f"== bench {benchmark.name}: {benchmark.command()}", flush=True)
        done = subprocess.run([sys.executable, "-m", benchmark.module, *benchmark.args], cwd=REPO)
        if done.returncode:
            raise SystemExit(f"bench {benchmark.name} failed (exit code {done.returncode})")


def listing() -> str:
    """One entry per benchmark: its name and what it measures, then its command or what it needs."""
    width = max(len(b.name) for b in BENCHMARKS) + 2
    entries = []
    for b in BENCHMARKS:
        how = f"needs {b.needs}" if b.needs else b.command() + (" (where there is a GPU)" if b.gpu else "")
        entries.append(f"{b.name:{width}}{b.measures}\n{'':{width}}{how}")
    return "\n".join(entries)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        "python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="the benchmarks to run (default: all, in order)")
    p.add_argument("--list", action="store_true", help="list the benchmarks and what each measures")
    args = p.parse_args(argv)
    if args.list:
        print(listing())
        return
    unknown = [name for name in args.names if name not in BY_NAME]
    if unknown:
        p.error(f"unknown benchmark {', '.join(unknown)}; python -m bench --list names them")
    run([BY_NAME[name] for name in args.names] or BENCHMARKS, full_run=not args.names)
    report.main([])


if __name__ == "__main__":
    main()
