"""A userspace link emulator for network-namespace tests (this kernel has no netem).

Run inside a router namespace: it creates two TUN devices, `in_dev` and `out_dev`. The test
routes the traffic it wants to shape into `in_dev` (policy routing: everything that arrives from
the hosts); every IP packet read there is dropped with probability `--loss`, held for
`--delay` ± `--jitter` seconds (a uniform draw per packet, so jitter reorders packets), written
to `out_dev` (the kernel then forwards it on as if it had arrived there), and with probability
`--dup` written twice. `--down FILE`: while FILE exists every packet is dropped (a link down).

Two options look into IPv4 TCP packets (unfragmented ones; IPv6 and other protocols pass
untouched). `--tamper-after N` (with `--tamper-min BYTES`, default 1000): of the TCP packets that
are forwarded (not dropped) and carry at least BYTES of payload, the (N+1)-th gets the byte in the
middle of its payload XOR-ed with 0x01 and its TCP checksum recomputed, so the receiver's TCP
accepts it: a corruption that only an end-to-end integrity check can see. One packet only, ever
(a duplicate of it carries the same change). `--capture FILE`: the TCP payload of every packet
written to `out_dev` (duplicates and retransmissions included) is appended to FILE, up to 64 MiB,
to check what crossed the link in clear.

TUN devices without offloads get whole, checksummed packets (no GSO super-frames), so what is
written back is a valid packet. The process prints "ready" once both devices exist, runs until
SIGTERM, and prints its counters at the end: `read N dropped N duplicated N written N tampered N`.
"""
import argparse
import contextlib
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
CAPTURE_MAX = 64 << 20  # bytes written to --capture at most


def open_tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    os.set_blocking(fd, False)
    return fd


def tcp_payload(pkt):
    """(offset of the TCP header, offset of the payload) of an unfragmented IPv4 TCP packet, else None."""
    if len(pkt) < 20 or pkt[0] >> 4 != 4 or pkt[9] != 6:
        return None
    ihl = (pkt[0] & 0x0F) * 4
    total = struct.unpack_from("!H", pkt, 2)[0]
    if ihl < 20 or total > len(pkt) or struct.unpack_from("!H", pkt, 6)[0] & 0x3FFF:  # MF or an offset
        return None
    if total < ihl + 20:
        return None
    data = ihl + (pkt[ihl + 12] >> 4) * 4
    if data < ihl + 20 or data > total:
        return None
    return ihl, data


def ones_sum(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def tamper(pkt, ihl, data):
    """The packet with the middle byte of its TCP payload XOR-ed with 0x01, TCP checksum recomputed."""
    total = struct.unpack_from("!H", pkt, 2)[0]
    out = bytearray(pkt[:total])
    out[data + (total - data) // 2] ^= 0x01
    struct.pack_into("!H", out, ihl + 16, 0)
    pseudo = bytes(out[12:20]) + struct.pack("!BBH", 0, 6, total - ihl)
    csum = 0xFFFF - ones_sum(pseudo + bytes(out[ihl:]))
    struct.pack_into("!H", out, ihl + 16, csum)  # (for TCP, unlike UDP, 0 is an ordinary checksum value)
    return bytes(out)


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
    p.add_argument("--tamper-after", type=int, default=None,
                   help="flip one payload bit of the (N+1)-th forwarded TCP packet with >= --tamper-min bytes")
    p.add_argument("--tamper-min", type=int, default=1000, help="payload bytes a packet needs to count")
    p.add_argument("--capture", help="append the TCP payload of every written packet to this file")
    a = p.parse_args()
    with open(a.capture, "ab", buffering=0) if a.capture else contextlib.nullcontext() as capture:
        return run(a, capture)


def run(a, capture):
    captured, big_seen = 0, 0
    rng = random.Random(a.seed)
    src, dst = open_tun(a.in_dev), open_tun(a.out_dev)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    held, seq = [], 0
    counts = {"read": 0, "dropped": 0, "duplicated": 0, "written": 0, "tampered": 0}
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
            if a.tamper_after is not None and not counts["tampered"]:
                tcp = tcp_payload(pkt)
                if tcp is not None and struct.unpack_from("!H", pkt, 2)[0] - tcp[1] >= a.tamper_min:
                    big_seen += 1
                    if big_seen > a.tamper_after:
                        pkt = tamper(pkt, *tcp)
                        counts["tampered"] += 1
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
                continue
            if capture is not None and captured < CAPTURE_MAX:
                tcp = tcp_payload(pkt)
                if tcp is not None:
                    payload = pkt[tcp[1]:struct.unpack_from("!H", pkt, 2)[0]][:CAPTURE_MAX - captured]
                    if payload:
                        capture.write(payload)
                        captured += len(payload)
    print(" ".join(f"{k} {v}" for k, v in counts.items()), flush=True)


if __name__ == "__main__":
    sys.exit(main())
