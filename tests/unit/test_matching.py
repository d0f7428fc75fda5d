"""The matching engine's queues, with no sockets: MPI's matching rules in isolation."""
import pytest

from commlib._engine.matching import ANY_SOURCE, ANY_TAG, Matcher, Message, Posted

pytestmark = pytest.mark.timeout(30)


def msg(source, tag, n=0):
    return Message(source, tag, n)


def test_posted_receives_match_in_posting_order():
    m = Matcher()
    first, second = Posted(1, 5), Posted(1, 5)
    assert m.post(first) is None and m.post(second) is None
    taker, probes = m.arrive(msg(1, 5))
    assert taker is first and probes == []
    taker, _ = m.arrive(msg(1, 5))
    assert taker is second
    assert not m.posted and not m.unexpected


def test_unexpected_messages_are_taken_in_arrival_order():
    m = Matcher()
    a, b = msg(2, 7, 1), msg(2, 7, 2)
    assert m.arrive(a) == (None, []) and m.arrive(b) == (None, [])
    assert m.post(Posted(2, 7)) is a
    assert m.post(Posted(2, 7)) is b
    assert not m.unexpected


def test_wildcards_take_the_oldest_match():
    m = Matcher()
    m.arrive(msg(3, 1))
    m.arrive(msg(1, 2))
    m.arrive(msg(1, 1))
    assert m.post(Posted(1, ANY_TAG)).tag == 2
    assert m.post(Posted(ANY_SOURCE, 1)).source == 3
    assert m.post(Posted(ANY_SOURCE, ANY_TAG)).source == 1
    assert not m.unexpected


def test_a_message_skips_receives_that_do_not_match_it():
    m = Matcher()
    other, wanted = Posted(1, 9), Posted(ANY_SOURCE, 4)
    m.post(other)
    m.post(wanted)
    taker, _ = m.arrive(msg(2, 4))
    assert taker is wanted and list(m.posted) == [other]


def test_non_overtaking_per_sender_and_tag_with_other_tags_interleaved():
    m = Matcher()
    for i, tag in enumerate([1, 2, 1, 2, 1]):
        m.arrive(Message(0, tag, i))
    assert [m.post(Posted(0, 1)).nbytes for _ in range(3)] == [0, 2, 4]
    assert [m.post(Posted(0, 2)).nbytes for _ in range(2)] == [1, 3]


def test_probe_looks_without_taking_and_is_satisfied_by_an_arrival():
    m = Matcher()
    p = Posted(ANY_SOURCE, 3, probe=True)
    assert m.post(p) is None
    r = Posted(1, 3)
    m.post(r)
    taker, probes = m.arrive(msg(1, 3))
    assert probes == [p] and taker is r  # the probe saw it; the receive posted after it still takes it
    m.arrive(msg(2, 3))
    seen = m.post(Posted(2, 3, probe=True))
    assert seen is not None and seen.source == 2 and len(m.unexpected) == 1
    assert m.find(2, 3) is seen and m.find(5, 3) is None


def test_cancel_only_withdraws_an_unmatched_receive():
    m = Matcher()
    r = Posted(0, 1)
    m.post(r)
    assert m.cancel(r) is True
    assert m.arrive(msg(0, 1))[0] is None  # nobody takes it now: unexpected
    r2 = Posted(0, 1)
    assert m.post(r2) is not None  # matched at once
    assert m.cancel(r2) is False


def test_drop_posted_empties_the_queue():
    m = Matcher()
    rs = [Posted(i, 0) for i in range(3)]
    for r in rs:
        m.post(r)
    assert m.drop_posted() == rs and not m.posted


def test_requests_wait_any_and_friends_without_an_engine():
    from commlib._engine.requests import Request, test_all, test_any, wait_all, wait_any

    a, b, c = Request("a"), Request("b"), Request("c")
    assert test_any([a, b, c]) is None and not test_all([a, b])
    b._finish(2)
    assert test_any([a, b, c]) == (1, 2)
    c._finish(3)
    assert wait_any([a, b, c]) == (1, 2)
    a._finish(1)
    assert wait_all([a, b, c]) == [1, 2, 3] and test_all([a, b, c])
    failed = Request("f")
    failed._finish(error=ValueError("boom"))
    with pytest.raises(ValueError):
        wait_any([failed])
    with pytest.raises(ValueError):
        wait_any([])
    with pytest.raises(TypeError):
        test_all([object()])


def test_cancel_of_a_request():
    from commlib._engine.requests import Request

    r = Request("irecv", cancel=lambda req: True)
    assert r.cancel() is True and r.test() and r.cancelled and r.wait() is None
    assert r.cancel() is False
    s = Request("isend")
    assert s.cancel() is False


# ------------------------------------------------- the engine on a size-1 group (no transport)
@pytest.fixture
def solo():
    from commlib._engine import Engine, Group

    return Group(None, Engine(None), 0, [0], 0, 5.0)


def test_irecv_before_isend_to_self(solo):
    import numpy as np

    import commlib as cl

    r = cl.irecv((4,), np.float64, 0, tag=9, group=solo)
    assert not r.test()
    s = cl.isend(np.arange(4.0), 0, tag=9, group=solo)
    assert s.wait() is None and r.test()
    assert (r.wait() == np.arange(4.0)).all()


def test_issend_to_self_completes_when_matched(solo):
    import numpy as np

    import commlib as cl

    s = cl.issend(np.ones(3, np.int32), 0, tag=1, group=solo)
    assert not s.test()
    got, st = cl.recv((3,), np.int32, cl.ANY_SOURCE, cl.ANY_TAG, status=True, group=solo)
    assert s.test() and (got == 1).all() and (st.source, st.tag, st.nbytes) == (0, 1, 12)


def test_cancel_and_wait_any_on_self(solo):
    import numpy as np

    import commlib as cl

    never = cl.irecv((1,), np.int8, 0, tag=77, group=solo)
    later = cl.irecv((2,), np.int8, 0, tag=5, group=solo)
    cl.send(np.array([1, 2], np.int8), 0, tag=5, group=solo)
    i, got = cl.wait_any([never, later])
    assert i == 1 and got.tolist() == [1, 2]
    assert never.cancel() and never.wait() is None and never.cancelled
    with pytest.raises(cl.CommError, match="never complete"):
        cl.irecv((1,), np.int8, 0, tag=78, group=solo).wait()


def test_a_matched_probe_takes_a_waiting_message_out_of_matching():
    m = Matcher()
    a, b = msg(2, 7, 1), msg(2, 7, 2)
    m.arrive(a)
    m.arrive(b)
    assert m.claim(2, 7) is a  # the oldest; a plain probe now sees the next
    assert m.find(2, 7) is b
    assert m.post(Posted(2, 7, probe=True, claim=True)) is b
    assert m.claim(2, 7) is None and not m.unexpected


def test_a_posted_matched_probe_keeps_the_message_it_satisfies_out_of_the_queue():
    m = Matcher()
    plain, claim, recv = Posted(1, 3, probe=True), Posted(ANY_SOURCE, 3, probe=True, claim=True), Posted(1, 3)
    for p in (plain, claim, recv):
        assert m.post(p) is None
    first = msg(1, 3)
    taker, probes = m.arrive(first)
    assert taker is None and probes == [plain, claim]  # both probes see it; the receive does not get it
    assert not m.unexpected and list(m.posted) == [recv]
    second = msg(1, 3)
    assert m.arrive(second) == (recv, [])
