"""The project's dependencies as pip requirements, one a line: `python requirements.py [--cpu] pyproject.toml`.

With --cpu, ONNX Runtime's CPU build (`onnxruntime`) takes the place of `onnxruntime-gpu` at the same version: the
CPU image installs these, then the project with --no-deps, and so carries no CUDA provider. Standard library only
(it runs on the build image's bare Python).
"""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path

GPU, CPU = "onnxruntime-gpu", "onnxruntime"


def requirements(pyproject: Path, cpu: bool) -> list[str]:
    """pyproject's [project] dependencies, with the CPU build of ONNX Runtime swapped in when asked."""
    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    if not cpu:
        return dependencies
    swapped = [re.sub(rf"^{GPU}(?=[^\w.-]|$)", CPU, d) for d in dependencies]
    if swapped == dependencies:
        raise SystemExit(f"{pyproject} has no {GPU} dependency to swap for {CPU}")
    return swapped


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cpu", action="store_true", help=f"{CPU} in place of {GPU}")
    p.add_argument("pyproject", type=Path)
    args = p.parse_args()
    print("\n".join(requirements(args.pyproject, args.cpu)))


if __name__ == "__main__":
    main()
