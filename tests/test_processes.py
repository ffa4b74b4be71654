"""The processes of `python -m service`: HTTP workers in front of one engine process (service.supervisor).

Each test runs the real command with 2 workers and checks what an operator relies on: the counts are the service's
whatever worker is asked and whichever workers have died; a dead worker is replaced; a dead engine turns into 503s
and exit status 1, never a hang; a stopped engine (SIGSTOP) turns /ready and requests into 503s within the issue's
bounds, and the service serves again once it resumes; work the engine does not answer in time gets 503 and is
dropped; the supervisor killed outright leaves no process behind; one process still serves everything with
--http-workers 0.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from client import TIMEOUT, assert_error, body, metrics, translate, wait_until

from service.launch import RunningService, running_service

WORKERS = 2


def children(pid: int) -> list[int]:
    """The service's own child processes (multiprocessing's resource tracker, if there is one, left out)."""
    kids = [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]
    return [kid for kid in kids if b"resource_tracker" not in Path(f"/proc/{kid}/cmdline").read_bytes()]


def maps_onnxruntime(pid: int) -> bool:
    return "onnxruntime" in Path(f"/proc/{pid}/maps").read_text()


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def processes(service: RunningService) -> tuple[int, list[int]]:
    """The engine's pid and the workers' pids (the engine is the one child that has loaded ONNX Runtime)."""
    kids = [pid for pid in children(service.process.pid) if alive(pid)]
    engines = [pid for pid in kids if maps_onnxruntime(pid)]
    assert len(engines) == 1, f"one engine process expected among {kids}"
    return engines[0], [pid for pid in kids if pid not in engines]


def translated_200s(url: str) -> float:
    return sum(value for (name, labels), value in metrics(url).items()
               if name == "translator_requests_total" and ("status", "200") in labels)


@pytest.fixture
def service(tiny_model_dir: Path, tmp_path: Path):
    with running_service(tiny_model_dir, tmp_path / "service.log", http_workers=WORKERS, threads=1,
                         drain_seconds=2) as running:
        yield running


ACCESS_LINE = '"POST /translate HTTP/1.1" 200'  # uvicorn's access log's line of an answered translation


def test_one_engine_process_holds_the_models_and_the_workers_do_not(service: RunningService):
    engine, workers = processes(service)
    assert len(workers) == WORKERS
    assert not maps_onnxruntime(service.process.pid)
    translate(service.url, "A dog runs.")
    assert ACCESS_LINE not in service.log.read_text(errors="replace")  # TRANSLATOR_ACCESS_LOG is off by default


def test_every_worker_reports_every_request_even_after_the_workers_died(service: RunningService):
    url = service.url
    for i in range(10):
        translate(url, f"A dog runs {i}.")
    scrapes = {translated_200s(url) for _ in range(20)}  # fresh connections: both workers answer some
    assert scrapes == {10.0}, scrapes
    _, workers = processes(service)
    for worker in workers:  # each replaced by a process that has served nothing
        os.kill(worker, signal.SIGKILL)
        wait_until(lambda worker=worker: not alive(worker), 10, "the worker did not die")
        wait_until(lambda: len(processes(service)[1]) == WORKERS, 30, "the worker was not replaced")
    new_engine, new_workers = processes(service)
    assert not set(new_workers) & set(workers)
    wait_until(lambda: httpx.get(url + "/ready", timeout=5).status_code == 200, 30, "not ready after replacement")
    assert {translated_200s(url) for _ in range(20)} == {10.0}
    assert engine_steps(url) > 0  # the engine's own figures are there too
    translate(url, "The service goes on.")
    assert translated_200s(url) == 11.0


def engine_steps(url: str) -> float:
    return metrics(url).get(("translator_decoder_steps_total", frozenset()), 0.0)


def queued(url: str) -> float:
    """Sentences waiting in the engine's queues (its gauges, read by whichever worker answers)."""
    return sum(value for (name, _), value in metrics(url).items() if name == "translator_queue_depth")


def ready_statuses(url: str) -> set[int]:
    """/ready's statuses, asked on fresh connections: every worker answers some."""
    return {httpx.get(url + "/ready", timeout=5).status_code for _ in range(10)}


def assert_503_with_retry_after(response: httpx.Response) -> None:
    assert_error(response, 503)
    assert int(response.headers["retry-after"]) >= 1


def test_when_the_engine_dies_requests_get_503_and_the_service_exits_1(tiny_model_dir: Path, tmp_path: Path):
    """A request in flight when the engine dies: its sentences wait for a batch that waits 2 s to fill, so the
    engine is killed while they are surely there, however fast the machine decodes."""
    with running_service(tiny_model_dir, tmp_path / "service.log", http_workers=WORKERS, threads=1,
                         max_wait_ms=2000) as service:
        url = service.url
        engine, _ = processes(service)
        answers: list[httpx.Response] = []

        def send() -> None:
            answers.append(httpx.post(url + "/translate", json=body(["A man rides a bicycle."] * 8), timeout=TIMEOUT))

        sender = threading.Thread(target=send)
        sender.start()
        wait_until(lambda: queued(url) > 0, 30, "the request's sentences never waited in the queue")
        os.kill(engine, signal.SIGKILL)
        sender.join(10)
        assert not sender.is_alive(), "the request in flight hung when the engine died"
        assert_error(answers[0], 503)
        assert service.process.wait(30) == 1, service.log_tail()


def test_a_stopped_engine_gets_503s_within_bounds_and_serves_again_once_it_resumes(
    tiny_model_dir: Path, tmp_path: Path
):
    """The engine process stopped (SIGSTOP) while a request waits for it (a batch waits 2 s to fill): /ready turns
    503 on every worker within 10 s, the request in flight is answered 503 with Retry-After within 30 s, and a new
    one at once, not when the engine resumes; after SIGCONT every worker is ready again and translates."""
    with running_service(tiny_model_dir, tmp_path / "service.log", http_workers=WORKERS, threads=1,
                         max_wait_ms=2000) as service:
        url = service.url
        engine, _ = processes(service)
        wait_until(lambda: ready_statuses(url) == {200}, 30, "a worker never got ready")
        answers: list[httpx.Response] = []
        sender = threading.Thread(target=lambda: answers.append(
            httpx.post(url + "/translate", json=body(["A man rides a bicycle."] * 8), timeout=TIMEOUT)))
        sender.start()
        wait_until(lambda: queued(url) > 0, 30, "the request's sentences never waited in the queue")
        os.kill(engine, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            wait_until(lambda: ready_statuses(url) == {503}, 10, "/ready did not turn 503 on every worker within 10 s")
            sender.join(max(0.0, stopped + 30 - time.monotonic()))
            assert not sender.is_alive(), "the request in flight got no answer within 30 s"
            assert_503_with_retry_after(answers[0])
            asked = time.monotonic()
            assert_503_with_retry_after(httpx.post(url + "/translate", json=body("A dog runs."), timeout=TIMEOUT))
            assert time.monotonic() - asked < 5, "a new request waited for the stopped engine"
            assert alive(engine) and service.process.poll() is None  # stopped is not dead: nothing restarts
        finally:
            os.kill(engine, signal.SIGCONT)
        wait_until(lambda: ready_statuses(url) == {200}, 30, "not ready again after SIGCONT")
        assert translate(url, "A man rides a bicycle.")


@pytest.mark.parametrize("workers", [WORKERS, 0], ids=["engine-process", "one-process"])
def test_work_the_engine_does_not_answer_in_time_gets_503_and_is_dropped(
    tiny_model_dir: Path, tmp_path: Path, workers: int
):
    """A lone sentence waits 5 s for company (max_wait_ms), past a deadline of 1 s (engine_timeout_s): it is answered
    503 with Retry-After at the deadline, and the engine drops it, so no decoder step runs for it; the same with the
    engine in the HTTP server's own process."""
    with running_service(tiny_model_dir, tmp_path / "service.log", http_workers=workers, threads=1,
                         max_wait_ms=5000, engine_timeout_s=1) as service:
        url = service.url
        wait_until(lambda: ready_statuses(url) == {200}, 30, "a worker never got ready")
        steps = engine_steps(url)
        started = time.monotonic()
        assert_503_with_retry_after(httpx.post(url + "/translate", json=body("A dog runs."), timeout=TIMEOUT))
        assert time.monotonic() - started < 5, "answered when the batch started, not at the deadline"
        wait_until(lambda: queued(url) == 0, 2, "the sentence stayed in the queue")
        time.sleep(max(0.0, started + 6 - time.monotonic()))  # past the 5 s it would have waited for company
        assert engine_steps(url) == steps, "the engine decoded the dropped sentence"
        assert ready_statuses(url) == {200}  # a slow answer is not a stalled engine


def test_workers_that_keep_dying_stop_the_service_with_status_1(service: RunningService):
    """A crash loop is no service: past 10 replacements within a minute the supervisor gives up (exit 1), so that
    docker's or Kubernetes' restart back-off and alerts take over."""
    engine, _ = processes(service)
    killed: set[int] = set()
    while service.process.poll() is None and len(killed) < 20:
        try:
            workers = [pid for pid in children(service.process.pid) if pid != engine and alive(pid)]
        except FileNotFoundError:  # the supervisor has just exited
            break
        for pid in set(workers) - killed:
            os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.05)
    assert service.process.wait(30) == 1, service.log_tail()
    assert 11 <= len(killed) <= 13, killed  # 10 replaced, and the 11th death ends it


def test_the_supervisor_killed_outright_leaves_no_process_behind(service: RunningService):
    engine, workers = processes(service)
    service.process.kill()
    service.process.wait()
    for pid in (engine, *workers):
        wait_until(lambda pid=pid: not alive(pid), 30, f"process {pid} outlived the supervisor")
    with pytest.raises(httpx.ConnectError):
        httpx.get(service.url + "/health", timeout=5)


def test_one_process_serves_everything_with_no_workers(tiny_model_dir: Path, tmp_path: Path):
    with running_service(tiny_model_dir, tmp_path / "service.log", http_workers=0, threads=1,
                         access_log=True) as running:
        assert children(running.process.pid) == []
        assert maps_onnxruntime(running.process.pid)
        translate(running.url, "A dog runs.")
        assert translated_200s(running.url) == 1.0
        assert ACCESS_LINE in running.log.read_text(errors="replace")
        assert_error(httpx.post(running.url + "/translate", json=body("Hi.", target="xx"), timeout=TIMEOUT), 400)


def test_a_translated_file_downloads_from_whichever_worker_answers(service: RunningService):
    uploaded = httpx.post(service.url + "/translate_file", data={"source": "en", "target": "de"},
                          files={"file": ("story.txt", b"A dog runs.", "text/plain")}, timeout=TIMEOUT)
    assert uploaded.status_code == 200, uploaded.text
    file_url = uploaded.json()["translatedFileUrl"]
    downloads = [httpx.get(file_url, timeout=TIMEOUT) for _ in range(20)]  # fresh connections: both workers
    assert {d.status_code for d in downloads} == {200}
    assert {d.text for d in downloads} == {translate(service.url, "A dog runs.")}
