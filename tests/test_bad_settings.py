"""`python -m service` with a malformed TRANSLATOR_* variable: one line per bad setting, exit 2, nothing started."""

from __future__ import annotations

import os
import subprocess
import sys


def start(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TRANSLATOR_")}
    return subprocess.run([sys.executable, "-m", "service"], env=clean | env, capture_output=True, text=True,
                          timeout=60)


def test_a_malformed_setting_is_one_line_naming_the_variable_and_its_value():
    done = start(TRANSLATOR_THREADS="many")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "invalid setting TRANSLATOR_THREADS = 'many': Input should be a valid integer, unable to parse string as an "
        "integer"
    ]


def test_each_malformed_setting_has_its_line_and_a_flags_setting_names_its_flag():
    lines = start(TRANSLATOR_THREADS="many", TRANSLATOR_PORT="eighty").stderr.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("invalid setting TRANSLATOR_PORT (--port) = 'eighty': ")
    assert lines[1].startswith("invalid setting TRANSLATOR_THREADS = 'many': ")
