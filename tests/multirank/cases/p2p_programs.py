"""The point-to-point rank programs, each run whole as a check of one job (_batch.script):

p2p.py          send/recv/recv_like/recv_into, Status, wildcards, ordering, eager sends, sendrecv,
                probe/iprobe, every dtype, buffer-protocol inputs (at one rank: sends to self)
send_first.py   16 MiB blocking sends to both neighbours before any receive do not deadlock
p2p_fast.py     blocking send/recv take the one-call path, interoperate with the Python path, survive
                a late sender and out-of-order tags, and still raise MismatchError
shared_p2p.py   one point-to-point connection each way per peer for every group: frames of a group
                the receiver has not made yet are kept for it, same source and tag on three groups
                never cross, two threads exchange on two groups at once

Each also runs alone: `commrun -n N p2p.py SEED`.
"""
from _batch import script

script("p2p.py")
script("send_first.py", min_n=2)
script("p2p_fast.py", ns=[2, 3])
script("shared_p2p.py", min_n=2)
