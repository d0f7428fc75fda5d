"""Thousands of fake ranks against the real coordinator: start-up, a lost rank, finalize.

A fake rank is a coroutine that speaks the coordinator's real protocol (`commlib._rendezvous`:
the HMAC handshake, length-prefixed JSON, the table as `_rendezvous.table` hands it out) and nothing else: no NumPy, no data
path. The coordinator runs in its own process (as under commrun), so its CPU time and threads
can be read from /proc. `run(n)` returns, per phase, the wall time, the bytes and messages the
fake ranks received, and the coordinator's CPU seconds and threads:

  start     every rank connects, proves the secret, registers and is told every rank's host and the
            addresses of its likely peers; a sample of ranks asks for a block of other addresses,
            and the last rank for all of them
  lost      one rank drops its connection without a goodbye; every other rank hears of it
  stall     every rank times out at once and asks what the others are doing: the coordinator takes
            one census (a query to each rank, its answer) and answers every asker with it
  finalize  every other rank sends its collective digest (one group, 32 recent headers: 3.8 kB, as
            a real rank's) and waits for the coordinator's verdict, then says goodbye and waits for
            the coordinator to hang up. With digests="relay" the digests go instead to every rank,
            through the coordinator's relay, and each rank waits for all of them: what finalize()
            cost before the coordinator compared them (n² digests)
"""
import asyncio
import json
import os
import resource
import secrets
import struct
import subprocess
import sys
import time

from commlib import _auth
from commlib import _control
from commlib._rendezvous import framing, table as table_mod

COORDINATOR = """
import sys
from commlib._transport.limits import raise_fd_limit
raise_fd_limit()
from commlib._rendezvous import Coordinator
c = Coordinator(int(sys.argv[1]), bytes.fromhex(sys.argv[2]), host="127.0.0.1", log=lambda line: None)
c.start()
print(c.address[1], flush=True)
sys.stdin.read()
c.close()
"""
_LEN = struct.Struct(">I")


def _cpu_and_threads(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    with open(f"/proc/{pid}/status") as f:
        threads = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    return cpu, threads


class _Tally:
    def __init__(self):
        self.bytes = self.messages = 0


async def _read(reader, tally):
    """The next message."""
    (n,) = _LEN.unpack(await reader.readexactly(4))
    body = await reader.readexactly(n)
    tally.bytes += 4 + n
    tally.messages += 1
    return json.loads(body)


def _info(rank, per_host=64):
    h = rank // per_host
    return {"host": f"nid{h:06d}", "host_id": f"nid{h:06d}/0f1e2d3c-boot/4026531840",
            "tcp": [f"10.1.{h % 256}.{rank % per_host + 2}", 40000 + rank % 20000],
            "unix": f"commlib-{100000 + rank}-{rank:016x}", "pid": 100000 + rank}


def _digest(rank):
    recent = [f"{rank % 7:02x}" * 56 for _ in range(32)]  # 32 collective headers of 56 bytes, in hex
    return {"groups": {"0": {"n": 1000, "digest": 123456789, "recent": recent}}, "at_exit": False,
            "exit_code": None}


async def _connect(port, secret, who, label, rank_bytes):
    """An authenticated (reader, writer) to the coordinator."""
    for attempt in range(200):  # a burst of connects overflows the backlog: retry, as Client does
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            break
        except OSError:
            await asyncio.sleep(0.01 * (1 + attempt % 10))
    else:
        raise RuntimeError(f"{who} could not connect")
    hello = await reader.readexactly(len(framing.MAGIC) + _auth.NONCE_BYTES)
    server_nonce, client_nonce = hello[len(framing.MAGIC):], secrets.token_bytes(_auth.NONCE_BYTES)
    writer.write(rank_bytes + client_nonce + _auth.mac(secret, label, server_nonce, client_nonce, rank_bytes))
    proof = await reader.readexactly(_auth.DIGEST_BYTES)
    assert _auth.verify(proof, secret, framing.SERVER_LABEL, client_nonce, server_nonce), who
    return reader, writer


class _Own:
    """A fake rank's own coordinator connection."""

    def __init__(self, reader, writer, tally):
        self.reader, self.writer, self.tally = reader, writer, tally

    async def read(self):
        return await _read(self.reader, self.tally)

    def write(self, data):
        self.writer.write(data)

    def abort(self):
        self.writer.transport.abort()

    def write_eof(self):
        self.writer.write_eof()

    def close(self):
        self.writer.close()


class _Hosted:
    """A fake rank behind its host's fake agent: messages arrive in its inbox (None: the hang-up),
    and what it sends goes up the agent's link."""

    def __init__(self, rank):
        self.rank, self.inbox, self.writer = rank, asyncio.Queue(), None

    async def read(self):
        msg = await self.inbox.get()
        if msg is None:
            raise asyncio.IncompleteReadError(b"", 4)
        return msg

    def write(self, data):
        self.writer.write(framing.link_frame(framing.LINK_DATA, self.rank, data))

    def abort(self):
        self.writer.write(framing.link_frame(framing.LINK_GONE, self.rank, b"reset its connection"))
        self.inbox.put_nowait(None)

    def write_eof(self):
        return None  # its goodbye is answered with LINK_DROP

    def close(self):
        return None


async def _agent(host, hosted, port, secret, tally):
    """A host's fake agent: one link for the fake ranks `hosted` ({rank: _Hosted}); counts what the
    coordinator sends it (frames as messages)."""
    reader, writer = await _connect(port, secret, f"fake agent {host}", framing.AGENT_LABEL, bytes(4))
    writer.write(framing.link_frame(framing.LINK_HOST, 0, host.encode()))
    for r, chan in hosted.items():
        chan.writer = writer
        writer.write(framing.link_frame(framing.LINK_JOIN, r))
    frames = framing.LinkFrames()
    while data := await reader.read(1 << 18):
        tally.bytes += len(data)
        for kind, r, payload in frames.feed(data):
            tally.messages += 1
            if kind == framing.LINK_DROP:
                hosted[r].inbox.put_nowait(None)
                continue
            assert kind == framing.LINK_TO, (host, kind)
            targets, body = framing.link_targets(r, payload)
            msgs, at = [], 0
            while at < len(body):
                (n,) = _LEN.unpack_from(body, at)
                msgs.append(json.loads(body[at + 4:at + 4 + n]))
                at += 4 + n
            for t in targets:
                for m in msgs:
                    hosted[t].inbox.put_nowait(m)
    for chan in hosted.values():
        chan.inbox.put_nowait(None)
    writer.close()


async def _rank(rank, chan, port, secret, tally, table_done, go_bye, lost_heard, stalled, drop, digests):
    if chan is None:
        chan = _Own(*await _connect(port, secret, f"fake rank {rank}", framing.CLIENT_LABEL, rank.to_bytes(4, "big")),
                    tally)
    assert (await chan.read())["kind"] == "welcome"
    chan.write(framing.encode({"kind": "register", "info": _info(rank)}))
    # every rank is told the hosts and its likely peers' addresses; a sample asks for a block of
    # others (a split's or an all_to_all's peers), the last rank for every address
    n = len(table_done.want)
    msg = await chan.read()
    assert msg["kind"] == "assembled", (rank, msg["kind"])
    rows = {}

    def take(msg):
        table = msg.get("names", {})
        for row in msg["rows"]:
            info = dict(zip(msg["keys"], row[2:]))
            info["host_id"] = table[str(row[1])]
            rows[row[0]] = info

    take(msg)
    assert rows[rank] == _info(rank) and (rank + 1) % n in rows and (rank - 1) % n in rows, rank
    hosts = table_mod.unpack_hosts(msg["hosts"], n)
    assert hosts[rank] == rank // 64 and hosts[-1] == (n - 1) // 64, rank
    want = range(0, n) if rank == n - 1 else range(rank * 7919 % n // 64 * 64, min(n, rank * 7919 % n // 64 * 64 + 64)) \
        if rank % 97 == 0 else range(0)
    if want:
        chan.write(framing.encode({"kind": "rows", "first": want[0], "last": want[-1]}))
        while not all(r in rows for r in want):
            take(await chan.read())
        assert all(rows[r] == _info(r) for r in want), rank
    table_done.arrive()
    if rank == drop:
        await go_bye.wait()  # phase 2: this one vanishes without a goodbye
        chan.abort()
        return
    verdict, relayed, census = asyncio.Event(), set(), asyncio.Event()

    async def listen():  # every later message, until the coordinator hangs up
        try:
            while True:
                msg = await chan.read()
                kind = msg["kind"]
                if kind == "lost" and msg["rank"] == drop:
                    lost_heard.arrive()
                elif kind == "status_query" and "census" in msg:  # in a ring all-reduce, waiting on its left
                    chan.write(framing.encode({"kind": "status", "census": msg["census"], "rank": rank,
                                                 "state": "in all_reduce #17 (float32, 1048576, op=sum)",
                                                 "peer": (rank - 1) % n}))
                elif kind == "stall":
                    groups = [(state, _control.unpack_ranks(ranks, n), peers) for state, ranks, peers in msg["groups"]]
                    answered = sum(len(ranks) for _, ranks, _ in groups) + len(_control.unpack_ranks(msg["omitted"], n))
                    assert answered == n - 1 and len(groups) == 1, (rank, answered, msg["groups"][:3])
                    ranks, peers = groups[0][1], groups[0][2]  # each waits on its left neighbour
                    assert _control.unpack_peers(ranks, peers, n) == [(r - 1) % n for r in ranks], (rank, peers)
                    census.set()
                elif kind == "verdict":
                    assert msg["peers"] == {}, (rank, msg)  # every fake rank ran the same collectives
                    verdict.set()
                elif kind == "report" and msg.get("topic") == "digest":
                    relayed.add(msg["from"])
                    if len(relayed) == len(table_done.want) - 2:  # all but its own and the dropped rank's
                        verdict.set()
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    listener = asyncio.ensure_future(listen())
    await go_bye.stall.wait()  # phase 3: every rank asks for a stall report at once
    chan.write(framing.encode({"kind": "stall", "rank": rank}))
    await census.wait()
    stalled.arrive()
    await go_bye.finalize.wait()  # phase 4: the digest, its verdict, goodbye, the coordinator hangs up
    if digests == "relay":
        chan.write(framing.encode(dict(_digest(rank), kind="report", topic="digest", to="all", rank=rank)))
    else:
        chan.write(framing.encode(dict(_digest(rank), kind="digest", rank=rank)))
    await verdict.wait()
    chan.write(framing.encode({"kind": "bye"}))
    chan.write_eof()
    await listener
    chan.close()


class _Count:
    def __init__(self, want):
        self.want, self.got, self.done = range(want), 0, asyncio.Event()

    def arrive(self):
        self.got += 1
        if self.got == len(self.want):
            self.done.set()


async def _job(n, port, secret, pid, timeout, digests, agents):
    tally, phases = _Tally(), {}
    table_done, lost_heard, stalled = _Count(n), _Count(n - 1), _Count(n - 1)
    go_bye = asyncio.Event()
    go_bye.stall, go_bye.finalize = asyncio.Event(), asyncio.Event()
    cpu0, _ = _cpu_and_threads(pid)
    t0 = time.monotonic()
    chans = [_Hosted(r) for r in range(n)] if agents else [None] * n
    tasks = [asyncio.ensure_future(_rank(r, chans[r], port, secret, tally, table_done, go_bye, lost_heard, stalled,
                                         n - 1, digests)) for r in range(n)]
    links = [asyncio.ensure_future(_agent(f"nid{h:06d}", {r: chans[r] for r in range(h * 64, min(n, h * 64 + 64))}, port,
                                          secret, tally)) for h in range((n + 63) // 64)] if agents else []

    async def phase(name, event, start_t, start_cpu):
        await asyncio.wait_for(event.wait(), timeout)
        cpu, threads = _cpu_and_threads(pid)
        phases[name] = {"seconds": time.monotonic() - start_t, "bytes": tally.bytes, "messages": tally.messages,
                        "cpu_s": cpu - start_cpu, "threads": threads}
        tally.bytes = tally.messages = 0
        return time.monotonic(), cpu

    t, cpu = await phase("start", table_done.done, t0, cpu0)
    go_bye.set()
    t, cpu = await phase("lost", lost_heard.done, t, cpu)
    go_bye.stall.set()
    t, cpu = await phase("stall", stalled.done, t, cpu)
    go_bye.finalize.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout)
    cpu_end, threads = _cpu_and_threads(pid)
    for link in links:  # the agents are done once their ranks are (their links close)
        link.cancel()
    phases["finalize"] = {"seconds": time.monotonic() - t, "bytes": tally.bytes, "messages": tally.messages,
                          "cpu_s": cpu_end - cpu, "threads": threads}
    return phases


def run(n, timeout=300, digests="coordinator", agents=False):
    """{phase: {seconds, bytes, messages, cpu_s, threads}} for a job of n fake ranks; `digests`:
    "coordinator" (finalize() as it is) or "relay" (every digest to every rank, as it was);
    `agents`: the ranks of each host of 64 behind one fake agent's link (what the coordinator sends
    counted on the links, a frame as a message), else each rank on its own connection."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < n + 100:
        raise RuntimeError(f"{n} fake ranks need {n + 100} descriptors; the limit is {hard}")
    secret = secrets.token_bytes(32)
    proc = subprocess.Popen([sys.executable, "-c", COORDINATOR, str(n), secret.hex()], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        return asyncio.run(_job(n, port, secret, proc.pid, timeout, digests, agents))
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


if __name__ == "__main__":
    args = sys.argv[1:]
    mode = "relay" if "--relay" in args else "coordinator"
    agents = "--agents" in args
    for size in [int(a) for a in args if not a.startswith("--")] or [1000]:
        print(size, mode, "agents" if agents else "own", json.dumps(run(size, digests=mode, agents=agents)), flush=True)
