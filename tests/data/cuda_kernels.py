"""Write ort-1.31-cuda-kernels.json, the CUDA provider's kernels that export.cuda_contract checks graphs against,
from ONNX Runtime's docs/OperatorKernels.md (see SOURCE for which one).

    python tests/data/cuda_kernels.py OperatorKernels.md > tests/data/ort-1.31-cuda-kernels.json

ONNX Runtime generates OperatorKernels.md from its registered kernels (tools/python/gen_opkernel_doc.py). Its table
"Operators implemented by CUDAExecutionProvider" gives, per domain and operator, the formal inputs and outputs with
their type constraints, and for each kernel the opset versions it covers ("13+", "[6, 12]", "13") and the types each
constraint allows. The JSON keeps the domains our graphs can hold, one operator a line.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

SOURCE = {
    "document": "docs/OperatorKernels.md, section 'Operators implemented by CUDAExecutionProvider'",
    "url": "https://github.com/microsoft/onnxruntime/blob/001d12d2623fd411ce0f83d05abb5e82304a3389/docs/OperatorKernels.md",
    "commit": "001d12d2623fd411ce0f83d05abb5e82304a3389",
    "read": "2026-11-25, through the project's store of public GitHub files, which holds this version of the file; the "
            "rel-1.31 branch's own commit could not be looked up there (the installed onnxruntime-gpu 1.31.1 reports "
            "git-commit-id 6af1a932e, a version the store does not hold). Its kernels reach opsets 23-25 (Cast 23+, "
            "Attention 24+, TensorScatter 24+); that they are exactly 1.31's is not checked here: on a GPU, "
            "`python -m bench.offline.gpu --check` reads where the real sessions run each node.",
    "contrib": "docs/ContribOperators.md (commit 004b79eda305a216ab8d0e21eabe81d7713eb768): every com.microsoft "
               "operator is available since version 1 of that operator set",
}
DOMAINS = ("ai.onnx", "com.microsoft")
SECTION = '<a name="cudaexecutionprovider"/>'
DOMAIN_ROW = re.compile(r"^\|\*\*Operator Domain:\*\* \*(?P<domain>[^*]+)\*\|")
PARAMETER = re.compile(r"\*(?P<way>in|out)\* (?P<name>[^:]+):\*\*(?P<type>.+)\*\*")
TYPES = re.compile(r"\*\*(?P<constraint>[^*]+)\*\* = (?P<types>.+)")


def versions(cell: str) -> tuple[int, int | None]:
    """'13+' -> (13, None), '[6, 12]' -> (6, 12), '13' -> (13, 13)."""
    if cell.endswith("+"):
        return int(cell[:-1]), None
    if cell.startswith("["):
        since, until = cell.strip("[]").split(",")
        return int(since), int(until)
    return int(cell), int(cell)


def parameters(cell: str) -> dict[str, list[list[str]]]:
    """The formal inputs and outputs of an operator's first listed schema, [name, type constraint] each."""
    found: dict[str, list[list[str]]] = {"inputs": [], "outputs": []}
    for item in cell.split("<br><br>or<br><br>")[0].split("<br>"):
        if match := PARAMETER.search(item):
            found["inputs" if match["way"] == "in" else "outputs"].append([match["name"], match["type"]])
    return found


def type_constraints(cell: str) -> dict[str, list[str]]:
    """'**T** = tensor(float), tensor(float16)<br/> **I** = tensor(int64)' -> {"T": [...], "I": [...]}."""
    return {m["constraint"]: m["types"].split(", ") for part in cell.split("<br/>") if (m := TYPES.search(part))}


def cuda_operators(markdown: str) -> dict[str, dict]:
    """Every operator of the CUDA section in DOMAINS, by "domain:name": its parameters and its kernels."""
    section = markdown.split(SECTION, 1)[1].split('<a name="', 1)[0]
    operators: dict[str, dict] = {}
    domain, key = "", ""
    for line in section.splitlines():
        if match := DOMAIN_ROW.match(line):
            domain = match["domain"]
            continue
        cells = line[1:-1].split("|")
        if domain not in DOMAINS or len(cells) != 4 or cells[0].startswith(("Op Name", "---")):
            continue
        name, params, opsets, types = cells
        if name:
            key = f"{domain}:{name}"
            operators[key] = {**parameters(params), "kernels": []}
        since, until = versions(opsets)
        operators[key]["kernels"].append({"since": since, "until": until, "types": type_constraints(types)})
    return operators


def main(markdown: Path) -> None:
    operators = cuda_operators(markdown.read_text())
    lines = [f"  {json.dumps(key)}: {json.dumps(value)}" for key, value in sorted(operators.items())]
    print('{\n "source": ' + json.dumps(SOURCE, indent=2).replace("\n", "\n ") + ',\n "operators": {\n'
          + ",\n".join(lines) + "\n }\n}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
