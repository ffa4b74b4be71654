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
