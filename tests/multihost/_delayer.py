"""A userspace link emulator for network-namespace tests (this kernel has no netem).

Run inside a router namespace: it creates two TUN devices, `in_dev` and `out_dev`. The test
routes the traffic it wants to shape into `in_dev` (policy routing: everything that arrives from
the hosts); every IP packet read there is dropped with probability `--loss`, held for
`--delay` ± `--jitter` seconds (a uniform draw per packet, so jitter reorders packets), written
to `out_dev` (the kernel then forwards it on as if it had arrived there), and with probability
`--dup` written twice. `--down FILE`: while FILE exists every packet is dropped (a link down).

TUN devices without offloads get whole, checksummed packets (no GSO super-frames), so what is
written back is a valid packet. The process prints "ready" once both devices exist, runs until
SIGTERM, and prints its counters at the end: `read N dropped N duplicated N written N`.
"""
import argparse
import fcntl
import heapq
import os
import random
import select
import signal
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
MAX_HELD = 100_000  # packets in flight at most (bounded memory); beyond it, a packet is dropped


def open_tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    os.set_blocking(fd, False)
    return fd


def main():
    p = argparse.ArgumentParser()
    p.add_argument("in_dev")
    p.add_argument("out_dev")
    p.add_argument("--delay", type=float, default=0.0, help="seconds added to every packet")
    p.add_argument("--jitter", type=float, default=0.0, help="± seconds, uniform per packet")
    p.add_argument("--loss", type=float, default=0.0, help="probability a packet is dropped")
    p.add_argument("--dup", type=float, default=0.0, help="probability a packet is sent twice")
    p.add_argument("--down", help="while this file exists, every packet is dropped")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    rng = random.Random(a.seed)
    src, dst = open_tun(a.in_dev), open_tun(a.out_dev)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    held, seq = [], 0
    counts = {"read": 0, "dropped": 0, "duplicated": 0, "written": 0}
    print("ready", flush=True)
    down_checked, down = 0.0, False
    while not stop:
        now = time.monotonic()
        timeout = max(0.0, held[0][0] - now) if held else 0.2
        try:
            ready, _, _ = select.select([src], [], [], min(timeout, 0.2))
        except InterruptedError:
            continue
        now = time.monotonic()
        if a.down and now - down_checked > 0.01:
            down, down_checked = os.path.exists(a.down), now
        for _ in range(256 if ready else 0):  # drain what is there, bounded
            try:
                pkt = os.read(src, 65536)
            except BlockingIOError:
                break
            counts["read"] += 1
            if down or rng.random() < a.loss or len(held) >= MAX_HELD:
                counts["dropped"] += 1
                continue
            copies = 2 if rng.random() < a.dup else 1
            counts["duplicated"] += copies - 1
            for _ in range(copies):
                wait = max(0.0, a.delay + rng.uniform(-a.jitter, a.jitter))
                heapq.heappush(held, (now + wait, seq, pkt))
                seq += 1
        now = time.monotonic()
        while held and held[0][0] <= now:
            _, _, pkt = heapq.heappop(held)
            try:
                os.write(dst, pkt)
                counts["written"] += 1
            except OSError:  # the device's queue is full: the packet is lost, as on a real link
                counts["dropped"] += 1
    print(" ".join(f"{k} {v}" for k, v in counts.items()), flush=True)


if __name__ == "__main__":
    sys.exit(main())
