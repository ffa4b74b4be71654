"""The house rules that keep the layers apart: each is checked by importing every module in a fresh interpreter.

core/ (the model folder's format, tokenizers, search, translate loop) needs neither PyTorch nor ONNX Runtime;
model/ (training, PyTorch) never loads ONNX Runtime; service/ (serving, ONNX Runtime) never loads PyTorch; and
what an HTTP worker runs never loads ONNX Runtime either: only the engine process holds it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {"core": ("torch", "onnxruntime"), "model": ("onnxruntime",), "service": ("torch",)}
HTTP_WORKER = ("service.__main__", "service.app", "service.remote", "service.server", "service.supervisor")


def modules(package: str) -> list[str]:
    return sorted(f"{package}.{p.stem}" for p in (ROOT / package).glob("*.py") if p.stem != "__init__")


def loaded_after_import(module: str, libraries: tuple[str, ...]) -> list[str]:
    code = f"import sys, {module}; print(' '.join(m for m in {libraries!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize("module", [m for package in FORBIDDEN for m in modules(package)])
def test_a_layer_never_loads_what_it_must_not(module: str):
    assert loaded_after_import(module, FORBIDDEN[module.split(".")[0]]) == []


@pytest.mark.parametrize("module", HTTP_WORKER)
def test_an_http_worker_never_loads_onnxruntime(module: str):
    assert loaded_after_import(module, ("onnxruntime",)) == []


def test_the_check_sees_a_library_that_is_loaded():
    assert loaded_after_import("export.graphs", ("torch", "onnxruntime")) == ["torch"]
