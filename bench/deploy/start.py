"""The CPU image's start: seconds from `podman run` to GET /ready 200, as compose runs it (read-only root, /tmp on
tmpfs, the image's own user and the shipped models).

    python -m bench.deploy.start [--rounds 8]

The image is built first as `make test-deploy` builds it (tests/deploy; podman's layer cache makes that quick when
nothing changed). Each round starts a fresh container on a free 127.0.0.1 port and removes it once ready; the load
average before each round is recorded beside its time. Writes bench/results/image-start.json and .md.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import httpx

from bench.common.defaults import RESULTS
from bench.common.report import markdown_table, median, provenance, write_results
from bench.deploy.images import engine
from service.launch import free_port

READY_TIMEOUT_S = 180
GOAL_S = 10.0  # issue #54: ready within 10 s of the start
IMAGE = "localhost/mt-translator:cpu"  # tests/deploy's tag


def start_to_ready(image: str) -> float:
    """One fresh container's seconds from launching `podman run` to /ready 200."""
    port = free_port()
    name = f"mt-bench-start-{port}"
    url = f"http://127.0.0.1:{port}/ready"
    started = time.monotonic()
    engine.podman("run", "--detach", "--name", name, "--publish", f"127.0.0.1:{port}:8000", "--read-only",
                  "--tmpfs", "/tmp", image)
    try:
        while time.monotonic() - started < READY_TIMEOUT_S:
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return time.monotonic() - started
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{image} not ready after {READY_TIMEOUT_S} s")
    finally:
        engine.podman("rm", "--force", "--time", "0", name, check=False)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=8)
    args = p.parse_args(argv)
    rounds = []
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["CONTAINERS_CONF"] = str(engine.containers_conf(Path(scratch)))
        for base in (engine.PYTHON, engine.PYTHON_BUILD):
            engine.make_base(base)
        engine.build("cpu", IMAGE)
        image_id = engine.podman("image", "inspect", "--format", "{{.Id}}", IMAGE).stdout.strip()[:12]
        size_mb = engine.image_bytes(IMAGE) / 1e6
        for _ in range(args.rounds):
            load = os.getloadavg()[0]
            rounds.append({"seconds": round(start_to_ready(IMAGE), 2), "load_1min": round(load, 2)})
            print(rounds[-1], flush=True)
    seconds = [r["seconds"] for r in rounds]
    data = {"provenance": provenance(), "cores": os.cpu_count(), "image": IMAGE, "image_id": image_id,
            "size_mb": round(size_mb), "rounds": rounds, "median_s": median(seconds), "longest_s": max(seconds),
            "goal_s": GOAL_S, "within_goal": sum(s <= GOAL_S for s in seconds)}
    rows = [[i + 1, f"{r['seconds']:.2f}", f"{r['load_1min']:.2f}"] for i, r in enumerate(rounds)]
    markdown = (f"# The CPU image's start\n\n`{data['provenance']['command']}` at {data['provenance']['commit']}, "
                f"{data['provenance']['date']}, {data['provenance']['machine']}\n\n{IMAGE} ({image_id}, "
                f"{size_mb:.0f} MB), read-only root and /tmp on tmpfs as compose runs it. Seconds from `podman run` "
                f"to /ready 200:\n\n" + markdown_table(["round", "seconds", "load (1 min) before"], rows)
                + f"\nMedian {data['median_s']:.2f} s, longest {data['longest_s']:.2f} s; "
                f"{data['within_goal']} of {len(seconds)} within the goal of {GOAL_S:.0f} s.\n")
    for path in write_results(RESULTS, "image-start", data, markdown):
        print(path)
    print(markdown)


if __name__ == "__main__":
    main()
