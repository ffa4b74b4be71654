"""The house rules that keep the layers and the processes apart: each is checked by importing every module in a
fresh interpreter.

Floors, lowest first: core/ (the model folder's format, tokenizers, search, corpora) needs neither PyTorch nor ONNX
Runtime; service/ (serving) never loads PyTorch; quality/ (scores: BLEU, and a model folder as served); model/
(training and evaluation, PyTorch) never loads ONNX Runtime; export/ (PyTorch to ONNX). bench/ and tests/ stand
outside and may import all.
No package imports in a circle, counting imports made only for type checking (a Protocol in a lower module breaks
them). Inside service/, by process: service/worker/ (the HTTP workers), service/protocol.py (between the processes) and
the supervisor's modules never load ONNX Runtime: only service/engine/ (the engine process) holds it. And no
module imports one of a floor above its own.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FLOORS = ["core", "service", "quality", "model", "export"]  # a package may import only itself and those before it
FORBIDDEN = {"core": ("torch", "onnxruntime"), "model": ("onnxruntime",), "service": ("torch",)}
# What runs outside the engine process: the HTTP workers, the protocol, and the supervisor's own modules.
NO_ONNXRUNTIME = ["service.worker", "service.protocol", "service.supervisor", "service.processes",
                  "service.settings", "service.metrics", "service.launch", "service.testing", "service.__main__"]


def modules(package: str) -> list[str]:
    """Every module of a package, subpackages included (not what hidden folders hold: bench/.envs is a venv of
    LibreTranslate's that bench.serving.servers makes)."""
    found = []
    for path in sorted((ROOT / package.replace(".", "/")).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if any(part.startswith(".") for part in parts):
            continue
        found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def imports(module: str) -> set[str]:
    """The modules that a module imports, anywhere in it (absolute imports: the house style); `from package import
    name` imports package.name where that is a module."""
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = ROOT / module.replace(".", "/") / "__init__.py"
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                path = ROOT / name.replace(".", "/")
                names.add(name if path.with_suffix(".py").exists() or path.is_dir() else node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def loaded_after_import(module: str, libraries: tuple[str, ...]) -> list[str]:
    code = f"import sys, {module}; print(' '.join(m for m in {libraries!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize("module", [m for package in FORBIDDEN for m in modules(package)])
def test_a_layer_never_loads_what_it_must_not(module: str):
    assert loaded_after_import(module, FORBIDDEN[module.split(".")[0]]) == []


@pytest.mark.parametrize("module", [m for name in NO_ONNXRUNTIME for m in modules(name) or [name]])
def test_what_runs_outside_the_engine_process_never_loads_onnxruntime(module: str):
    assert loaded_after_import(module, ("onnxruntime",)) == []


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_the_engine_on_the_cpu_never_loads_onnx(precision: str):
    """onnx makes the graphs the engine loads beside the folder's in a process of their own
    (service.engine.prepare): its import would stay in the engine's memory."""
    code = ("import sys; from core.search import SearchOptions; from service.engine.runner import ModelRunner; "
            f"from service.engine.config import ModelOptions; runner = ModelRunner('models/en-de', "
            f"ModelOptions(precision='{precision}', provider='cpu', threads=1)); "
            "runner.translate_ids([[12, 7, 3]] * 20, SearchOptions(beam_size=2)); "
            "print(runner.sessions.kernels, 'onnx' in sys.modules, 'google.protobuf' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "False"]


@pytest.mark.parametrize("package", FLOORS)
def test_no_import_climbs_a_floor(package: str):
    above = set(FLOORS[FLOORS.index(package) + 1 :]) | {"bench", "tests"}
    climbing = {m: up for m in modules(package) if (up := {i for i in imports(m) if i.split(".")[0] in above})}
    assert not climbing


@pytest.mark.parametrize("side,other", [("service.worker", "service.engine"), ("service.engine", "service.worker")])
def test_the_worker_and_the_engine_never_import_each_other(side: str, other: str):
    crossing = {m: up for m in modules(side) if (up := {i for i in imports(m) if i.startswith(other)})}
    assert not crossing


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The import circles of a graph (module -> the modules it imports): each a strongly connected set of 2 or more
    modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            circle = set()
            while not circle or module not in circle:
                circle.add(stack.pop())
            if len(circle) > 1:
                found.append(circle)

    for module in graph:
        if module not in index:
            visit(module)
    return found


@pytest.mark.parametrize("package", [*FLOORS, "bench"])
def test_no_package_imports_in_a_circle(package: str):
    inside = set(modules(package))
    assert circles({m: (imports(m) & inside) - {m} for m in inside}) == []


def test_the_circle_check_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_the_check_sees_a_library_that_is_loaded():
    assert loaded_after_import("export.graphs", ("torch", "onnxruntime")) == ["torch"]
