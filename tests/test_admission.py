"""The admission policy (service.engine.admission) on its own: no thread, no clock, no model."""

from __future__ import annotations

from dataclasses import dataclass

from service.engine.admission import JOIN_SHARE, NEWCOMER_SHARE, Admission


@dataclass
class Waiting:
    ids: list[int]
    turn: int
    enqueued: float


def request(arrived: float, *lengths: int) -> list[Waiting]:
    """A request's sentences, in its order, all come at `arrived`."""
    return [Waiting([5] * length, turn, arrived) for turn, length in enumerate(lengths)]


POLICY = Admission(max_sentences=8, max_tokens=64, max_queue=20)


def test_the_queue_takes_what_fits_and_no_more():
    assert POLICY.accepts(waiting=15, arriving=5)
    assert not POLICY.accepts(waiting=16, arriving=5)


def test_requests_take_turns_first_sentences_before_any_second():
    long, short = request(0.0, *[3] * 6), request(1.0, 3)
    joining = POLICY.joining(long + short, running=[])
    assert joining[:2] == [long[0], short[0]]  # the later request's only sentence comes second, not seventh
    assert joining[2:] == long[1:]


def test_the_batch_holds_at_most_max_sentences_but_a_new_request_may_take_a_share_more():
    running = [3] * 8  # full
    assert POLICY.joining(request(0.0, 3, 3), running) == request(0.0, 3, 3)[:1]  # its first sentence only
    extra = max(1, int(NEWCOMER_SHARE * POLICY.max_sentences))
    assert POLICY.places(newcomer=True) == POLICY.max_sentences + extra
    seconds = [Waiting([5] * 3, 1, 0.0)]  # a second sentence: no newcomer's place
    assert POLICY.joining(seconds, running[:-1]) == seconds
    assert POLICY.joining(seconds, running) == []


def test_padded_source_tokens_stay_within_max_tokens():
    joining = POLICY.joining(request(0.0, *[20] * 8), running=[])
    assert len(joining) * 20 <= POLICY.max_tokens * POLICY.places(newcomer=True) / POLICY.max_sentences
    assert len(joining) == 3  # 3 x 20 = 60 tokens; a fourth would pad to 80 > 64 x 9 / 8


def test_without_a_newcomer_sentences_join_only_once_a_share_of_places_is_free():
    policy = Admission(max_sentences=32, max_tokens=4096, max_queue=100)
    wanted = int(JOIN_SHARE * policy.max_sentences)
    seconds = [Waiting([5] * 3, 1, float(i)) for i in range(10)]
    assert wanted == 4
    assert policy.joining(seconds, running=[3] * (policy.max_sentences - wanted + 1)) == []
    assert policy.joining(seconds, running=[3] * (policy.max_sentences - wanted)) == seconds[:wanted]


def test_nothing_waiting_joins_nothing():
    assert POLICY.joining([], running=[3, 4]) == []
