"""No measured figure in a docstring, a comment or a setting's description: measurements live in bench/results and
BENCHMARKS.md, where they say when, where and on which commit they were measured, and the code links there.

A figure is a number with the unit of a measurement: a ratio with decimals (2.15×, 0.42x), a time (ms, µs, seconds
with decimals), memory in MiB or GiB, a share (%), a rate (sentences/s). A goal or a bound (after ≤, ≥, <, >) is
not a measurement, nor are the few limits and parameters named in NOT_MEASURED.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["service", "core", "model", "export", "quality", "deploy", "bench"]
FIGURE = re.compile(
    r"""\d+\.\d+\s?[×x](?!\w)                            # a ratio: 2.15×, 0.42x
    | \d+(\.\d+)?\s?(ms|µs|us|ns)\b                     # a time
    | \d+\.\d+\s?s\b                                    # seconds, with decimals
    | \d+(\.\d+)?\s?(MiB|GiB)\b                         # memory
    | \d+(\.\d+)?\s?%                                   # a share
    | \d[\d,.]*\s?(sentences|requests|tokens|steps)/s   # a rate
    """,
    re.VERBOSE,
)
BOUND = re.compile(r"[≤≥<>]=?\s*$")  # what comes just before a goal or a bound
# limits and parameters, not measurements
NOT_MEASURED = ["protobuf's 2 GiB", "past 2 GiB", "1 GiB of weights or more", "grew 25 % past", "every 5 ms",
                "within 1 MiB", "0.1 s later"]  # fmt: skip


def texts(source: str) -> list[tuple[int, str]]:
    """The comments, docstrings and `description=` strings of a module's source, with their line numbers."""
    found = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
             if t.type == tokenize.COMMENT]  # fmt: skip
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                found.append((node.body[0].lineno, docstring))
        elif isinstance(node, ast.keyword) and node.arg == "description":
            found += [(n.lineno, n.value) for n in ast.walk(node.value)
                      if isinstance(n, ast.Constant) and isinstance(n.value, str)]  # fmt: skip
    return found


def figures(source: str) -> list[tuple[int, str]]:
    """Each measured figure in the source's comments, docstrings and descriptions: (line, the figure in context)."""
    found = []
    for line, text in texts(source):
        flat = " ".join(text.split())
        for match in FIGURE.finditer(flat):
            context = flat[max(0, match.start() - 40) : match.end() + 20]
            if BOUND.search(flat[: match.start()]) or any(phrase in context for phrase in NOT_MEASURED):
                continue
            found.append((line, context))
    return found


def test_figures_are_found_where_they_would_go_stale():
    source = '''
"""A decoder (on one H200 2.15x as fast at batch 1)."""
from pydantic import Field
x = Field(1, description="spins: " "1.21–1.42× as fast with one client")
def f():
    """Frees the arenas (600 MiB after a beam-8 batch)."""
    return 1  # the lookup costs 50 us every run, 16 % of a step
'''
    found = [context for _, context in figures(source)]
    assert len(found) == 5, found
    assert figures('"""Greedy at batch 1 (goal: >= 250 sentences/s), within 1 MiB over a second."""') == []


def python_files(package: str) -> list[str]:
    """The package's Python files that git tracks (not bench/.envs' virtual environments)."""
    listed = subprocess.run(["git", "ls-files", "--", f"{package}/*.py"], cwd=ROOT, capture_output=True, text=True)
    return listed.stdout.split()


@pytest.mark.parametrize("package", PACKAGES)
def test_no_measured_figure_in_docstrings_comments_or_settings(package: str):
    files = python_files(package)
    assert files, f"git lists no Python file under {package}/"
    stale = [f"{name}:{line}: …{context}…" for name in files for line, context in figures((ROOT / name).read_text())]
    assert not stale, "measured figures belong in BENCHMARKS.md (link to its section):\n" + "\n".join(stale)
