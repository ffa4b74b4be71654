"""The admission policy (service.engine.admission) on its own: no thread, no clock, no model."""

from __future__ import annotations

from dataclasses import dataclass

from service.engine.admission import (
    ADMIT_SHARE,
    BULK_SHARE,
    JOIN_SHARE,
    LATE_SHARE,
    NEWCOMER_SHARE,
    RATE_HORIZON_S,
    RATE_KNOWN_S,
    Admission,
    Throughput,
)


@dataclass
class Waiting:
    ids: list[int]
    turn: int
    enqueued: float
    work: int = 10
    bulk: bool = False


def request(arrived: float, *lengths: int, work: int = 10, bulk: bool = False) -> list[Waiting]:
    """A request's sentences, in its order, all come at `arrived`, each of `work` row-steps (bulk: a document's)."""
    return [Waiting([5] * length, turn, arrived, work, bulk) for turn, length in enumerate(lengths)]


POLICY = Admission(max_sentences=8, max_tokens=64, max_queue=20)
NOW = 0.0


# --- what may queue ---------------------------------------------------------------------------------------------


def test_the_queue_takes_what_fits_and_no_more():
    assert POLICY.accepts(request(0.0, *[3] * 15), request(1.0, *[3] * 5), rate=None)
    assert not POLICY.accepts(request(0.0, *[3] * 16), request(1.0, *[3] * 5), rate=None)
    assert not POLICY.accepts([], request(1.0, *[3] * 21), rate=None)  # the sentence bound holds even when empty


def test_work_counts_not_sentences():
    policy = Admission(max_sentences=8, max_tokens=64, max_queue=1000, max_queue_work=1000)
    waiting = request(0.0, 3, 3, work=400)  # 800 row-steps in two sentences
    assert policy.accepts(waiting, request(1.0, 3, work=200), rate=None)
    assert not policy.accepts(waiting, request(1.0, 3, work=201), rate=None)
    assert policy.accepts(waiting, request(1.0, *[3] * 20, work=10), rate=None)  # 20 light sentences: 200


def test_a_request_that_finds_nothing_waiting_is_always_taken():
    policy = Admission(max_sentences=8, max_tokens=64, max_queue=1000, max_queue_work=100, max_queue_wait=1.0)
    heavy = request(1.0, *[3] * 10, work=50)  # 500 row-steps: five times the bound, 50 s at the rate
    assert policy.accepts([], heavy, rate=10.0)
    assert not policy.accepts(request(0.0, 3, work=1), heavy, rate=10.0)


def test_at_a_known_rate_work_that_cannot_start_well_within_the_deadline_is_refused():
    """Admitted work must be able to start within ADMIT_SHARE of the deadline: room for the rate to fall."""
    policy = Admission(max_sentences=8, max_tokens=64, max_queue=1000, max_queue_wait=10.0)
    waiting = request(0.0, *[3] * 10, work=600)  # 6,000 row-steps
    arriving = request(1.0, *[3] * 4, work=1000)  # 4,000 more
    enough = 10_000 / (ADMIT_SHARE * policy.max_queue_wait)  # row-steps a second
    assert policy.accepts(waiting, arriving, rate=enough)
    assert not policy.accepts(waiting, arriving, rate=enough * 0.99)
    assert policy.accepts(waiting, arriving, rate=None)  # no rate yet: only the static bounds


def test_requests_whose_sentences_waited_past_the_deadline_are_overdue():
    policy = Admission(max_sentences=8, max_tokens=64, max_queue=100, max_queue_wait=10.0)
    old, young = request(0.0, 3, 3), request(5.0, 3)
    assert policy.overdue(old + young, now=10.0, rate=None) == []
    assert policy.overdue(old + young, now=10.5, rate=None) == old
    assert policy.overdue(old + young, now=15.5, rate=None) == old + young
    assert POLICY.overdue(old + young, now=1e9, rate=None) == []  # no deadline set: nothing is overdue


def test_at_the_rate_of_the_moment_requests_that_cannot_start_in_time_are_overdue_older_ones_first():
    """Three requests of 5,000 row-steps that came at 0, 1 and 2 s; at 2 s the rate is 1,000 a second. The first can
    start within its 8 s left; the second cannot behind it (10,000 > 9 s); without the second's work, the third
    can (10,000 in its 10 s)."""
    policy = Admission(max_sentences=8, max_tokens=64, max_queue=100, max_queue_wait=10.0)
    first, second, third = (request(float(t), 3, 3, work=2500) for t in range(3))
    waiting = third + first + second  # in any order
    assert policy.overdue(waiting, now=2.0, rate=1000.0) == second
    assert policy.overdue(waiting, now=2.0, rate=2000.0) == []
    assert policy.overdue(waiting, now=2.0, rate=None) == []


# --- what joins the batch ---------------------------------------------------------------------------------------


def test_requests_take_turns_first_sentences_before_any_second():
    long, short = request(0.0, *[3] * 6), request(1.0, 3)
    joining = POLICY.joining(long + short, running=[], now=NOW)
    assert joining[:2] == [long[0], short[0]]  # the later request's only sentence comes second, not seventh
    assert joining[2:] == long[1:]


def test_the_batch_holds_at_most_max_sentences_but_a_new_request_may_take_a_share_more():
    running = [3] * 8  # full
    assert POLICY.joining(request(0.0, 3, 3), running, now=NOW) == request(0.0, 3, 3)[:1]  # its first sentence only
    extra = max(1, int(NEWCOMER_SHARE * POLICY.max_sentences))
    assert POLICY.places(newcomer=True) == POLICY.max_sentences + extra
    seconds = [Waiting([5] * 3, 1, 0.0)]  # a second sentence: no newcomer's place
    assert POLICY.joining(seconds, running[:-1], now=NOW) == seconds
    assert POLICY.joining(seconds, running, now=NOW) == []


def test_padded_source_tokens_stay_within_max_tokens():
    joining = POLICY.joining(request(0.0, *[20] * 8), running=[], now=NOW)
    assert len(joining) * 20 <= POLICY.max_tokens * POLICY.places(newcomer=True) / POLICY.max_sentences
    assert len(joining) == 3  # 3 x 20 = 60 tokens; a fourth would pad to 80 > 64 x 9 / 8


def test_without_a_newcomer_sentences_join_only_once_a_share_of_places_is_free():
    policy = Admission(max_sentences=32, max_tokens=4096, max_queue=100)
    wanted = int(JOIN_SHARE * policy.max_sentences)
    seconds = [Waiting([5] * 3, 1, float(i)) for i in range(10)]
    assert wanted == 4
    assert policy.joining(seconds, running=[3] * (policy.max_sentences - wanted + 1), now=NOW) == []
    assert policy.joining(seconds, running=[3] * (policy.max_sentences - wanted), now=NOW) == seconds[:wanted]


def test_late_sentences_join_first_oldest_first():
    """Past LATE_SHARE of the deadline, the oldest request's sentences go before the turns of younger requests: the
    work accepted first is answered first, rather than every request running out of time together."""
    policy = Admission(max_sentences=32, max_tokens=4096, max_queue=100, max_queue_wait=10.0)
    old, young = request(0.0, *[3] * 4), request(1.0, *[3] * 4)
    waiting = old[2:] + young[1:]  # both requests' first sentences run already
    late = LATE_SHARE * policy.max_queue_wait
    assert policy.joining(waiting, running=[], now=late)[:2] == [young[1], old[2]]  # not late yet: turns
    assert policy.joining(waiting, running=[], now=late + 0.5) == old[2:] + young[1:]  # the old one's are late
    wanted = int(JOIN_SHARE * policy.max_sentences)  # and they join as others do, a share of places at a time
    assert policy.joining(waiting, running=[3] * (policy.max_sentences - wanted + 1), now=late + 0.5) == []
    assert policy.joining(waiting, running=[3] * (policy.max_sentences - wanted), now=late + 0.5) == waiting[:wanted]


def test_a_newcomer_still_joins_a_full_batch_behind_late_sentences():
    policy = Admission(max_sentences=8, max_tokens=4096, max_queue=100, max_queue_wait=10.0)
    late, newcomer = request(0.0, 3, 3)[1:], request(9.0, 3)
    assert policy.joining(late + newcomer, running=[3] * 8, now=9.0) == newcomer


def test_nothing_waiting_joins_nothing():
    assert POLICY.joining([], running=[3, 4], now=NOW) == []


# --- the rate the estimate reads --------------------------------------------------------------------------------


def test_the_rate_is_unknown_until_enough_decoding():
    throughput = Throughput()
    throughput.decoded(rows=500, seconds=RATE_KNOWN_S / 2)
    assert throughput.rate is None
    throughput.decoded(rows=500, seconds=RATE_KNOWN_S)
    assert throughput.rate is not None


def test_the_rate_is_in_the_work_sentences_are_counted_as():
    """Rows stepped per second, times the work a sentence is counted as per row-step it took: sentences that end
    after half their longest translation make every row-step count twice."""
    throughput = Throughput()
    for _ in range(100):  # 1,000 rows a second for 10 s
        throughput.decoded(rows=100, seconds=0.1)
    assert abs(throughput.rate - 1000) < 1e-6  # nothing ended yet: a row-step counts as one
    throughput.ended(used=8 * 15, counted=8 * 30)  # a beam-8 sentence that took 15 of its 30 steps
    assert abs(throughput.rate - 2000) < 1e-6


def test_the_rate_follows_the_recent_seconds():
    throughput = Throughput()
    for _ in range(100):  # 1,000 rows a second for 10 s
        throughput.decoded(rows=100, seconds=0.1)
    for _ in range(int(3 * RATE_HORIZON_S / 0.1)):  # then 4,000 for three horizons
        throughput.decoded(rows=400, seconds=0.1)
    assert 3800 < throughput.rate < 4000


# --- bulk work (a document's sentences) -------------------------------------------------------------------------


def test_bulk_and_interactive_work_queue_apart():
    """A document's waiting sentences never get an interactive request refused, nor the other way round; each kind
    is bounded by max_queue sentences of its own, and bulk work by no rate: a document is never refused because of
    its own earlier requests."""
    policy = Admission(max_sentences=8, max_tokens=64, max_queue=20, max_queue_work=100, max_queue_wait=1.0)
    document = request(0.0, *[3] * 20, work=1000, bulk=True)
    assert policy.accepts(document, request(1.0, 3, work=10), rate=10.0)
    assert policy.accepts(request(0.0, *[3] * 20, work=5), request(1.0, 3, work=1000, bulk=True), rate=1.0)
    assert not policy.accepts(document, request(1.0, 3, bulk=True), rate=None)  # the 21st waiting bulk sentence
    assert not policy.accepts(request(0.0, 3, work=100), request(1.0, 3, work=10), rate=None)  # interactive: as before


def test_bulk_work_is_never_overdue():
    policy = Admission(max_sentences=8, max_tokens=64, max_queue=100, max_queue_wait=10.0)
    document, interactive = request(0.0, 3, 3, bulk=True), request(0.0, 3)
    assert policy.overdue(document + interactive, now=1e6, rate=1.0) == interactive


def test_interactive_sentences_join_before_bulk_ones_and_bulk_ones_keep_to_their_share():
    policy = Admission(max_sentences=16, max_tokens=4096, max_queue=100)
    share = int(BULK_SHARE * policy.max_sentences)
    document, interactive = request(0.0, *[3] * 12, bulk=True), request(5.0, 3, 3)
    joining = policy.joining(document + interactive, running=[], now=NOW)
    assert joining[:2] == interactive and joining[2:] == document[:share]  # bulk within its share
    assert len([w for w in joining if w.bulk]) == share
    # alone, a document fills the batch, a share of its places at each join
    assert policy.joining(document, running=[], now=NOW) == document[:share]
    assert policy.joining(document[share:], [3] * share, now=NOW, bulk_running=share) == document[share : 2 * share]
    # while an interactive sentence runs, bulk ones join only within their share
    running = [3] * (share + 1)  # one interactive, `share` bulk
    assert policy.joining(document, running, now=NOW, bulk_running=share) == []
    assert policy.joining(document, running[:1], now=NOW, bulk_running=0) == document[:share]
