"""The figures behind tests/test_faults.py's bounds, measured on the shipped model (one thread), written to
bench/results/probes.json (--out) and printed.

    python -m bench.serving.probes [--model-dir models/en-de] [--repeat 3] [--probes abandoned memory lone]
                                   [--baseline-repo PATH]

abandoned: 16 clients each send 64 sentences with beam 4 and hang up at once; the seconds the next single-sentence
    request then takes (goal: < 1 s), and the same with the 16 clients staying
    connected (the work that hanging up saves).
memory: the service's RSS idle, at the peak of one heavy request (64 sentences, beam 8, 3 alternatives) and how long
    after its answer RSS is back to <= 1.5 x idle (TRANSLATOR_RELEASE_MEMORY_AFTER_S is 1 s).
lone: four clients each send 64 sentences with beam 4; 0.1 s later, while they run, a fifth sends one short greedy
    sentence. Its
    latency over the four's mean (goal: <= 0.3).
    The service runs with its defaults (every core). With --baseline-repo, the same service from another checkout
    (`git worktree add /tmp/base COMMIT`) is measured too, serving its own copy of --model-dir (which must lie in
    this checkout), the two alternating from repeat to repeat.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

from bench.common.defaults import MODEL_DIR, REPO, RESULTS
from bench.common.machine import environment, rss_mib
from bench.common.report import write_results
from bench.common.sentences import SENTENCES
from bench.common.timing import timed
from service.launch import RunningService, running_service

SIXTY_FOUR = " ".join(SENTENCES * 4)
NEXT = {"q": "The cat sleeps on the sofa.", "source": "en", "target": "de"}
LONE_AFTER = 0.1  # seconds: the four heavy requests run by then, and for about a second more


def post_raw(port: int, payload: dict) -> socket.socket:
    content = json.dumps(payload).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    head = f"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" \
           f"Content-Length: {len(content)}\r\n\r\n"
    sock.sendall(head.encode() + content)
    return sock


@contextmanager
def one_thread_service(model_dir: Path) -> Iterator[RunningService]:
    """The service with one inference thread, its log in a temporary folder."""
    with tempfile.TemporaryDirectory() as logs:
        with running_service(model_dir, Path(logs) / "service.log", threads=1, log_level="warning") as service:
            yield service


def next_request_seconds(url: str, hang_up: bool) -> float:
    """Seconds the next request takes after 16 heavy ones were sent (and abandoned, or waited for)."""
    port = int(url.rsplit(":", 1)[1])
    sockets = [post_raw(port, {"q": SIXTY_FOUR, "source": "en", "target": "de", "beam_size": 4}) for _ in range(16)]
    if hang_up:
        for sock in sockets:
            sock.close()
    response, elapsed = timed(httpx.post, url + "/translate", json=NEXT, timeout=300)
    assert response.status_code == 200, response.text
    for sock in sockets:  # the ones kept: read their answers (or see them gone)
        try:
            sock.recv(1)
        except OSError:
            pass
        sock.close()
    return round(elapsed, 3)


def wait_for_empty_queue(url: str) -> None:
    while True:
        text = httpx.get(url + "/metrics", timeout=60).text
        depth = [line for line in text.splitlines() if line.startswith("translator_queue_depth{")]
        if all(float(line.split()[-1]) == 0 for line in depth):
            return
        time.sleep(0.1)


def abandoned(model_dir: Path, repeat: int) -> dict:
    with one_thread_service(model_dir) as service:
        hung_up = []
        for _ in range(repeat):
            hung_up.append(next_request_seconds(service.url, hang_up=True))
            wait_for_empty_queue(service.url)
        stayed = next_request_seconds(service.url, hang_up=False)
        wait_for_empty_queue(service.url)
    return {"next_request_s_after_16_abandoned": hung_up, "next_request_s_after_16_waited_for": stayed}


def watch_rss(pid: int, stop: threading.Event, samples: list[float]) -> None:
    while not stop.wait(0.05):
        samples.append(rss_mib(pid))


def memory(model_dir: Path, repeat: int) -> dict:
    runs = []
    with one_thread_service(model_dir) as service:
        pid = service.process.pid
        for _ in range(repeat):
            time.sleep(2)
            idle, peak, stop = rss_mib(pid), [], threading.Event()
            watcher = threading.Thread(target=watch_rss, args=(pid, stop, peak))
            watcher.start()
            heavy = {"q": SIXTY_FOUR, "source": "en", "target": "de", "beam_size": 8, "alternatives": 3}
            response, request_s = timed(httpx.post, service.url + "/translate", json=heavy, timeout=300)
            answered = time.perf_counter()
            stop.set()
            watcher.join()
            assert response.status_code == 200, response.text
            while rss_mib(pid) > 1.5 * idle and time.perf_counter() - answered < 30:
                time.sleep(0.05)
            back = time.perf_counter()
            time.sleep(1)
            runs.append({
                "idle_mib": round(idle, 1), "peak_mib": round(max(peak, default=idle), 1),
                "request_s": round(request_s, 2), "back_to_1.5x_idle_s": round(back - answered, 2),
                "rss_1s_later_mib": round(rss_mib(pid), 1),
            })
    return {"heavy_request": runs}


def lone_greedy_run(url: str) -> dict:
    """One round: four heavy beam-4 requests, and one short greedy request sent LONE_AFTER seconds after them."""
    heavy = {"q": SIXTY_FOUR, "source": "en", "target": "de", "beam_size": 4}
    with httpx.Client(timeout=600) as client, ThreadPoolExecutor(4) as pool:
        started = time.perf_counter()
        futures = [pool.submit(timed, client.post, url + "/translate", json=heavy) for _ in range(4)]
        time.sleep(LONE_AFTER)
        lone, lone_s = timed(client.post, url + "/translate", json=NEXT)
        heavy_s = [f.result()[1] for f in futures]
        assert lone.status_code == 200 and all(f.result()[0].status_code == 200 for f in futures)
    heavy_mean = sum(heavy_s) / len(heavy_s)
    all_s = time.perf_counter() - started
    return {"lone_s": round(lone_s, 3), "heavy_mean_s": round(heavy_mean, 3), "heavy_all_s": round(all_s, 3),
            "ratio": round(lone_s / heavy_mean, 3)}


def lone_greedy(model_dir: Path, repeat: int, baseline_repo: Path | None) -> dict:
    """The lone probe on this checkout's service, and on the baseline's when given, alternating."""
    checkouts = {"this": REPO} | ({"baseline": baseline_repo} if baseline_repo else {})
    runs: dict[str, list[dict]] = {name: [] for name in checkouts}
    with tempfile.TemporaryDirectory() as logs, ExitStack() as stack:
        urls = {}
        for name, repo in checkouts.items():
            folder = repo / model_dir.resolve().relative_to(REPO)  # each checkout serves its own export of it
            log = Path(logs) / f"{name}.log"
            urls[name] = stack.enter_context(running_service(folder, log, checkout=repo, log_level="warning")).url
        for _ in range(repeat):
            for name, url in urls.items():
                runs[name].append(lone_greedy_run(url))
    return {name: {"runs": r, "median_ratio": statistics.median(x["ratio"] for x in r)} for name, r in runs.items()}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=MODEL_DIR)
    p.add_argument("--repeat", type=int, default=3)
    names = ["abandoned", "memory", "lone"]
    p.add_argument("--probes", nargs="+", choices=names, default=names)
    p.add_argument("--baseline-repo", type=Path, help="a checkout whose service the lone probe measures too")
    p.add_argument("--out", type=Path, default=RESULTS / "probes.json", help="the result file")
    args = p.parse_args(argv)
    probes = {
        "abandoned": lambda: abandoned(args.model_dir, args.repeat),
        "memory": lambda: memory(args.model_dir, args.repeat),
        "lone": lambda: lone_greedy(args.model_dir, args.repeat, args.baseline_repo),
    }
    results = {"machine": environment(["onnxruntime", "onnxruntime-gpu", "uvicorn"])}
    results |= {name: probes[name]() for name in args.probes}
    write_results(args.out.parent, args.out.stem, results)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
