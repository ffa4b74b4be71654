"""The link between the HTTP workers and the engine (service.channel), and a request's answer in the batcher
(service.engine.batcher.Submission): what arrives is whole, in order and once, whichever thread sends or settles."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from core.search import Hypothesis
from service.channel import HEADER, Channel, accept, connect, engine_listener
from service.engine.batcher import Submission


async def linked(path: Path) -> tuple[Channel, list[bytes], asyncio.Event, asyncio.Event]:
    """A connection to a listener at `path`: the connecting side's channel; what the accepting side received, an
    event set at each message, and one set when its connection is lost."""
    received, arrived, lost = [], asyncio.Event(), asyncio.Event()

    def keep(_: Channel, message: bytes) -> None:
        received.append(message)
        arrived.set()

    accept(engine_listener(str(path)), keep, lambda _: lost.set())
    return await connect(str(path), lambda *_: None, lambda _: None), received, arrived, lost


async def until(condition, seconds: float = 10) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.01)


def test_messages_sent_from_threads_arrive_whole_and_in_each_threads_order(tmp_path: Path):
    big = bytes(range(256)) * 40_000  # 10 MB: far more than the socket takes at once, so most of it is queued

    async def main() -> list[bytes]:
        channel, received, _, _ = await linked(tmp_path / "engine")

        def send(name: bytes) -> None:
            for i in range(200):
                channel.send(name + b"%d" % i)
            channel.send(name + big)

        threads = [threading.Thread(target=send, args=(name,)) for name in (b"a", b"b")]
        for thread in threads:
            thread.start()
        await until(lambda: len(received) == 402)
        for thread in threads:
            thread.join()
        return received

    received = asyncio.run(main())
    for name in (b"a", b"b"):
        mine = [m[1:] for m in received if m[:1] == name]
        assert mine == [b"%d" % i for i in range(200)] + [big]


def test_a_frame_in_pieces_is_read_once_whole(tmp_path: Path):
    async def main() -> list[bytes]:
        channel, received, arrived, _ = await linked(tmp_path / "engine")
        frame = HEADER.pack(5) + b"hello" + HEADER.pack(3)
        for piece in (frame[:2], frame[2:6], frame[6:], b"bye"):  # the raw socket, bypassing send's framing
            channel.connection.send(piece)
            await asyncio.sleep(0.05)
        await until(lambda: len(received) == 2)
        return received

    assert asyncio.run(main()) == [b"hello", b"bye"]


def test_the_other_side_closing_is_heard(tmp_path: Path):
    async def main() -> bool:
        channel, _, _, lost = await linked(tmp_path / "engine")
        channel.close()
        await asyncio.wait_for(lost.wait(), 10)
        channel.send(b"after the end")  # dropped, not raised
        return lost.is_set()

    assert asyncio.run(main())


def test_a_submission_is_answered_once_with_every_sentence_in_order():
    answers = []
    request = Submission(2, answers.append)
    request.ended(1, [Hypothesis([7], 0.0)])
    assert answers == [] and not request.done
    request.ended(0, [Hypothesis([5], 0.0)])
    request.settle(RuntimeError("too late"))
    assert answers == [[[Hypothesis([5], 0.0)], [Hypothesis([7], 0.0)]]] and request.done


def test_a_failed_or_cancelled_submission_answers_no_more():
    answers = []
    failed, cancelled = Submission(2, answers.append), Submission(1, answers.append)
    failed.settle(error := RuntimeError("fault"))
    failed.ended(0, [Hypothesis([5], 0.0)])
    failed.ended(1, [Hypothesis([5], 0.0)])
    cancelled.cancel()
    cancelled.settle(RuntimeError("shutting down"))
    assert answers == [error]
