"""The one way every benchmark times: one clock, an untimed batch first, and engines taking turns round by round."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from bench.common.sentences import batches

if TYPE_CHECKING:
    from bench.common.engines import Translate
    from core.search import SearchOptions

T = TypeVar("T")


def timed(fn: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, float]:
    """fn's result and the seconds it took (time.perf_counter): every benchmark's clock."""
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started


def while_running(work: Callable[[], T], alongside: Callable[[threading.Event], None]) -> T:
    """work()'s result, with alongside(done) running in a thread meanwhile: `done` is set once work() ends."""
    done = threading.Event()
    thread = threading.Thread(target=alongside, args=(done,))
    thread.start()
    try:
        return work()
    finally:
        done.set()
        thread.join()


def warm_up(translate: Translate, texts: list[str], opts: SearchOptions, batch_size: int) -> None:
    """One untimed batch of a run's shape: the libraries allocate and pick kernels on their first runs."""
    translate(texts[:batch_size], opts, batch_size)


def translate_all(
    translate: Translate, texts: list[str], opts: SearchOptions, batch_size: int, in_order: bool = False
) -> list[str]:
    """Every text translated in batches of batch_size: sentences of similar length together (the translators' own
    batching), or with in_order the texts cut into batches as they come, each translated as one batch."""
    if not in_order:
        return translate(texts, opts, batch_size)
    return [out for batch in batches(texts, batch_size) for out in translate(batch, opts, batch_size)]


def timed_run(
    translate: Translate, texts: list[str], opts: SearchOptions, batch_size: int, in_order: bool = False
) -> tuple[list[str], float]:
    """One warmed-up run: the translations and their seconds."""
    warm_up(translate, texts, opts, batch_size)
    return timed(translate_all, translate, texts, opts, batch_size, in_order)


def rotation(names: list[str], round_: int) -> list[str]:
    """The order of the engines (servers) in one round: rotated by one from round to round."""
    shift = round_ % len(names)
    return names[shift:] + names[:shift]
