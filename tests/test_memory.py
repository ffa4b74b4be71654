"""Memory given back: what a thread of a service process frees goes back to the system at trim_malloc.

The engine gives a heavy batch's memory back once idle (service.engine.memory), and a worker its documents'; both
rely on trim_malloc, which returns only the main arena's free top. The child below is started as the service
starts its processes (service.processes.run): a thread frees 20 MiB under glibc's raised trim threshold, and
trim_malloc must give it back.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20

CHILD = """
import threading
from service import processes
from service.engine.memory import resident_bytes
from service.memory import trim_malloc

def heavy_thread() -> None:
    big = b"x" * (16 << 20)
    del big  # allocated by mmap, and freed: glibc raises its mmap threshold to it, and its trim threshold to twice
    held = [b"x" * (1 << 20) for _ in range(20)]  # under the mmap threshold now: from the heap of the thread's arena
    print(resident_bytes())
    del held

def main() -> None:
    print(resident_bytes())
    thread = threading.Thread(target=heavy_thread)
    thread.start()
    thread.join()
    trim_malloc()
    print(resident_bytes())

if __name__ == "__main__":
    processes.run("__main__:main")
"""


def test_what_a_thread_frees_goes_back_to_the_system_at_trim():
    run = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    before, held, after = (int(line) for line in run.stdout.split())
    report = f"{before / MIB:.0f} MiB, {held / MIB:.0f} with the thread's, then {after / MIB:.0f} after the trim"
    assert held - before > 16 * MIB, "the thread did not grow the process: a weak test; " + report
    assert after - before < 4 * MIB, report
