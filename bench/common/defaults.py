"""Where things are and the defaults every benchmark starts from."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
MODEL_DIR = REPO / "models" / "en-de"
THREADS = os.cpu_count() or 1  # inference threads of every engine and server
BATCH_SIZES = [1, 16, 64]
BEAMS = [1, 4]
SHORT_RUN_SENTENCES = 200  # test sentences of a run at batch size 1 (PyTorch without a cache is slow there)
RUN_SENTENCES = 1000  # test sentences of a run at a larger batch size
REPEATS = 3  # interleaved repeats (rounds) of every run; medians are reported
LOAD_SECONDS = 20  # of closed-loop load per measurement (bench.serving.loadgen)
LIBRETRANSLATE_VERSION = "1.9.6"  # the one bench.serving.servers runs and bench.deploy.images builds the image of
