"""The coordinator's wire: the handshake's constants and length-prefixed JSON messages.

Each message is a 4-byte big-endian length and a UTF-8 JSON object of at
most 1 MiB with a string "kind". Nothing is ever unpickled. Before any
message, the handshake (the HMAC and the exact read are `_auth`'s, shared
with the transport's handshake between ranks)::

    server -> client  MAGIC + server_nonce(32)
    client -> server  rank(4, big-endian) + client_nonce(32)
                      + HMAC(secret, b"commlib/coord/client" + server_nonce + client_nonce + rank)
    server -> client  HMAC(secret, b"commlib/coord/server" + client_nonce + server_nonce)

With COMMLIB_ENCRYPT both labels end in b"/sealed" (so a side that disagrees is refused, and the
coordinator says why) and everything after the handshake travels in sealed records
(`_transport/seal.py`), keyed by the secret and both nonces like a connection between ranks.

A connection that fails the handshake, stays silent past the deadline, or
sends an oversized or malformed message is dropped and logged; the job goes on.

Messages pushed by the coordinator to ranks (``kind``):
  ``assembled`` once all registered: the hosts of every rank and the addresses of this rank's
              likely peers; ``rows`` the addresses a rank asked for (table.py)
  ``died``    {"rank", "code", "message"} from the supervisor (commrun), see notify_died
  ``left``    {"rank", "ranks"} these ranks said goodbye (Client.close) and disconnected: the
              goodbyes close together share one message (coordinator.LEFT_COALESCE_S); "ranks" as pack_ranks writes a set
  ``lost``    {"rank", "message"} the rank's connection closed without a goodbye
  ``finishing`` {"rank", "ranks", "ends"} these ranks sent their finalize() digest (coalesced like
              goodbyes); "ends": [[at_exit, exit_code, ranks]] for those whose program ended
  ``verdict`` {"peers"} once every rank sent its digest or is gone: {} when this rank's collectives
              agree with every other rank's, else {"rank": digest} of the lowest rank that differs
  ``census``  {"missing": [...], "dead": [...]} the answer to a census request
  ``stall``   {"epoch", "groups": [[state, ranks, peer or pack_peers runs]], "omitted"} a census of what every
              rank is doing (asked of each with a ``status_query`` {"census": epoch}), for a rank
              that timed out; one census answers every rank that asks within CENSUS_FRESH_S
  ``welcome`` {"size"} first message after the handshake, or instead
  ``error``   {"message"} a refusal (rank out of range, duplicate); the connection closes
  anything a rank sent with "to", plus "from": the sender's rank

Messages from ranks with no "to" are the coordinator's own: ``register``, ``rows``, ``bye``, ``clock``,
``census``, ``stall``, ``status`` with "census" (the answer to its query), ``digest`` (finalize(): {"groups", "at_exit", "exit_code"}) and ``release`` (this rank
failed waiting on one that finished: it will send no digest).
"""
import json
import logging
import os
import struct

from .._auth import recv_exact

MAGIC = b"commlib-coord/1\n"
MAX_MESSAGE = 1 << 20
CLIENT_LABEL = b"commlib/coord/client"
SERVER_LABEL = b"commlib/coord/server"
SEALED = b"/sealed"  # appended to both labels when the connection is encrypted (COMMLIB_ENCRYPT)
AGENT_LABEL = b"commlib/coord/agent"  # a host's agent proving the secret for its link (client label's place)


def sealing_pumps(me):
    """Pumps that encrypt this process's coordinator connections when COMMLIB_ENCRYPT asks (else
    None); imported only then, so a plain job's launcher never loads the transport."""
    if not os.environ.get("COMMLIB_ENCRYPT", "").strip():
        return None
    from .._transport import seal
    return seal.Pumps(me, lambda peer, text: _log.warning("commlib %s", text)) if seal.enabled() else None
_LEN = struct.Struct(">I")
_log = logging.getLogger("commlib")


# ---------------------------------------------------- a host's link: one connection for its ranks
# commrun's agent on a host (launcher/agent.py) authenticates that host's ranks itself (the
# handshake above, on loopback) and carries all their coordinator traffic on one connection: the
# coordinator holds one connection a host, not one a rank, and a notice for every rank crosses
# each host's link once. The link speaks frames (kind: 1 byte, rank: int32, length: uint32,
# big-endian; then `length` bytes), after a handshake like a rank's with AGENT_LABEL for
# CLIENT_LABEL (and rank 0). The ranks' own messages travel inside, unchanged.
#   agent -> coordinator: LINK_HOST (payload: the host's name), LINK_JOIN (the rank passed the
#     handshake), LINK_DATA (bytes the rank sent), LINK_GONE (its connection ended; payload: how)
#   coordinator -> agent: LINK_TO (payload: bytes for the rank; rank -1: for several, as a uint32
#     count of runs and that many int32 pairs, first and last rank, before the bytes), LINK_DROP
#     (close the rank's connection once its bytes are out)
LINK_HEADER = struct.Struct("!BiI")
LINK_HOST, LINK_JOIN, LINK_DATA, LINK_GONE, LINK_TO, LINK_DROP = 1, 2, 3, 4, 5, 6
LINK_MANY = -1
_COUNT = struct.Struct("!I")


def link_frame(kind, rank, payload=b""):
    return LINK_HEADER.pack(kind, rank, len(payload)) + payload


def link_to(ranks, data):
    """The LINK_TO frame carrying `data` (encoded messages) to each of the sorted `ranks` on one host
    (a host's consecutive ranks: one run of 8 bytes)."""
    if len(ranks) == 1:
        return link_frame(LINK_TO, ranks[0], data)
    runs, first = [], 0
    for i in range(1, len(ranks) + 1):
        if i == len(ranks) or ranks[i] != ranks[i - 1] + 1:
            runs += (ranks[first], ranks[i - 1])
            first = i
    return link_frame(LINK_TO, LINK_MANY, _COUNT.pack(len(runs) // 2) + struct.pack(f"!{len(runs)}i", *runs) + data)


def link_targets(rank, payload):
    """(ranks, data) of a LINK_TO frame's rank and payload; ValueError for a malformed one."""
    if rank != LINK_MANY:
        return [rank], payload
    if len(payload) < _COUNT.size:
        raise ValueError("LINK_TO frame without its rank count")
    (n,) = _COUNT.unpack_from(payload)
    if len(payload) < _COUNT.size + 8 * n:
        raise ValueError(f"LINK_TO frame shorter than its {n} runs of ranks")
    runs = struct.unpack_from(f"!{2 * n}i", payload, _COUNT.size)
    ranks = [r for first, last in zip(runs[::2], runs[1::2]) for r in range(first, last + 1)]
    return ranks, payload[_COUNT.size + 8 * n:]


class LinkFrames:
    """Incremental reader of a host link's frames: feed(bytes) -> [(kind, rank, payload)]. (commrun's
    agents speak the same frames to commrun, with a larger `limit`.)"""

    def __init__(self, limit=MAX_MESSAGE + (1 << 16), what="a host link"):
        self.buf, self.limit, self.what = bytearray(), limit, what

    def feed(self, data):
        """The complete frames in `data` (with what came before); ValueError for an oversized one."""
        self.buf += data
        out, at = [], 0
        while len(self.buf) - at >= LINK_HEADER.size:
            kind, rank, length = LINK_HEADER.unpack_from(self.buf, at)
            if length > self.limit:
                raise ValueError(f"frame of {length} bytes (kind {kind}) exceeds {self.limit}: not {self.what}")
            if len(self.buf) - at - LINK_HEADER.size < length:
                break
            start = at + LINK_HEADER.size
            out.append((kind, rank, bytes(self.buf[start:start + length])))
            at = start + length
        del self.buf[:at]
        return out


def encode(msg):
    body = json.dumps(msg, separators=(",", ":")).encode()
    if len(body) > MAX_MESSAGE:
        raise ValueError(f"coordinator message of {len(body)} bytes exceeds {MAX_MESSAGE}")
    return _LEN.pack(len(body)) + body


def recv_message(sock):
    """One framed JSON object; ValueError for anything malformed or too large."""
    (length,) = _LEN.unpack(recv_exact(sock, 4))
    if length > MAX_MESSAGE:
        raise ValueError(f"message of {length} bytes exceeds the {MAX_MESSAGE}-byte limit")
    return decode(recv_exact(sock, length))


def decode(body):
    """A message's body (after its length) as the object it holds; ValueError for anything malformed."""
    try:
        msg = json.loads(body.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"bad JSON ({e})") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("kind"), str):
        raise ValueError("message is not an object with a 'kind'")
    return msg


def fmt_address(address):
    """(host, port) -> 'host:port', or '[v6]:port'."""
    host, port = address[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
