"""What every benchmark shares: the provenance of its result files, and memory measured over a process tree."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from bench.common.machine import cpu_model, rss_mib, tree_peak_rss_mib, tree_rss_mib
from bench.common.report import write_results

# A parent that starts a child holding 200 MiB of touched memory; each says when it is ready.
CHILD = "b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096]); print('ready', flush=True); input()"
PARENT = (
    "import subprocess, sys; "
    f"c = subprocess.Popen([sys.executable, '-c', {CHILD!r}], stdin=subprocess.PIPE, stdout=subprocess.PIPE, "
    "text=True); print(c.stdout.readline().strip(), flush=True); input(); c.communicate('')"
)


def test_write_results_records_commit_date_machine_and_command(tmp_path):
    (path,) = write_results(tmp_path, "example", {"command": "python -m bench.example --x 1", "figure": 1.0})
    data = json.loads(path.read_text())
    provenance = data["provenance"]
    assert provenance["command"] == "python -m bench.example --x 1"
    assert provenance["machine"] == cpu_model()
    assert len(provenance["commit"].split("+")[0]) >= 7
    assert time.strptime(provenance["date"], "%Y-%m-%dT%H:%M:%SZ")
    assert data["figure"] == 1.0


def test_tree_memory_counts_the_children():
    """The child's 200 MiB are counted in the tree's RSS and peak, not in the parent's own."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "ready"
        own, tree, peak = rss_mib(parent.pid), tree_rss_mib(parent.pid), tree_peak_rss_mib(parent.pid)
        assert own < 100
        assert tree >= own + 190
        assert peak >= tree
    finally:
        parent.communicate("\n", timeout=30)


def test_the_projection_bound_is_the_faster_library_at_each_row_count_summed_over_the_steps():
    from collections import Counter

    from bench.offline.projection_bound import products

    measured = products(Counter({1: 3, 4: 2}), d_model=16, vocab=64, threads=1)
    libraries = measured["library_s"]
    assert set(libraries) == {"onnxruntime", "pytorch"}
    assert 0 < measured["bound_s"] <= min(libraries.values())


def test_the_projection_bound_counts_the_rows_of_every_decoder_step(tiny_model_dir):
    from bench.offline.projection_bound import step_rows
    from core.search import SearchOptions
    from service.translator import Translator

    translator = Translator(tiny_model_dir, "fp32", provider="cpu", threads=1)
    texts = ["a b c", "d e", "f"]
    greedy = step_rows(translator, texts, SearchOptions(max_length=6), batch_size=3)
    beam = step_rows(translator, texts, SearchOptions(beam_size=2, max_length=6), batch_size=3)
    assert greedy and greedy[0] == 3 and all(0 < rows <= 3 for rows in greedy)
    assert beam and beam[0] == 3 and all(0 < rows <= 6 for rows in beam)  # a row a sentence at its first step
    assert greedy == sorted(greedy, reverse=True)  # a finished sentence leaves, none joins
