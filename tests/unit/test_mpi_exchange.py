"""commlib.MPI's exchange (all-to-all and neighbourhood collectives): a block a rank sends itself is
copied into the receive that matching would give it, in-process; what it cannot pair is left, in
order, to the engine."""
import numpy as np

from commlib.MPI._p2p import _copy_to_self


def _u8(value, n=4):
    return np.full(n, value, np.uint8)


def test_each_receive_from_self_takes_the_first_send_of_its_tag():
    recvs = [(0, 5, _u8(0)), (1, 5, _u8(0)), (0, 5, _u8(0)), (0, 6, _u8(0))]
    sends = [(0, 5, _u8(1)), (0, 6, _u8(2)), (0, 5, _u8(3)), (1, 5, _u8(4))]
    left, rest = _copy_to_self(0, recvs, sends)
    assert [int(b[0]) for _, _, b in recvs] == [1, 0, 3, 2]
    assert [(s, t) for s, t, _ in left] == [(1, 5)]  # from another rank: the engine's
    assert [(d, t, int(b[0])) for d, t, b in rest] == [(1, 5, 4)]


def test_from_a_pair_of_two_sizes_on_the_engine_matches_the_rest_in_order():
    recvs = [(0, 5, _u8(0)), (0, 5, _u8(0, 8)), (0, 5, _u8(0))]
    sends = [(0, 5, _u8(1)), (0, 5, _u8(2)), (0, 5, _u8(3))]
    left, rest = _copy_to_self(0, recvs, sends)
    assert [int(b[0]) for _, _, b in recvs] == [1, 0, 0]
    assert [b.nbytes for _, _, b in left] == [8, 4]
    assert [int(b[0]) for _, _, b in rest] == [2, 3]


def test_a_receive_from_self_with_no_send_of_its_tag_waits_for_the_engine():
    recvs = [(0, 7, _u8(0)), (0, 5, _u8(0))]
    sends = [(0, 5, _u8(9))]
    left, rest = _copy_to_self(0, recvs, sends)
    assert [(s, t) for s, t, _ in left] == [(0, 7)] and rest == [] and int(recvs[1][2][0]) == 9
