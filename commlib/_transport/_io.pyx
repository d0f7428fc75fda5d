# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The data path: one step of an algorithm, full duplex, on raw descriptors.

A step (a row of a collective's plan, `_plan.pxi`, or `Stepper.raw` for point-to-point) sends (header + payload) on one non-blocking socket while it
receives (header + payload) on another, with the GIL released throughout.
Received bytes can be reduced into a destination as they arrive, through a
small scratch ring that stays in cache, so a reduce-scatter step costs one
pass over memory. In relay mode the bytes received (or reduced) are
forwarded as they become ready (pipelined chains). The loop never raises: it returns a status code and
leaves progress in `state`, and `_transport.py` turns codes into exceptions.

Waiting blocks in poll(2) with the operation's deadline, and it also watches
a "wake" descriptor that the process makes readable when the job fails (a
peer died or aborted), so a rank blocked on a healthy peer still learns at
once. Optional spinning trades CPU for latency: a fixed budget (the caller's),
or one learned per peer from recent waits (`spin_budget`, `learn_wait`).
"""
import os

from libc.string cimport memcpy, memcmp, memmove, memset
from libc.errno cimport errno, EINTR

cdef extern from *:
    """
    #include <errno.h>
    static int cl_again(int e) { return e == EAGAIN || e == EWOULDBLOCK; }
    """
    int cl_again(int e) noexcept nogil
from posix.time cimport clock_gettime, CLOCK_MONOTONIC, timespec

from commlib._kernels cimport reduce_raw, itemsize_of
from commlib._lock cimport RLock

cdef extern from "<sched.h>" nogil:
    int sched_yield()

# Connections of the collective channel are shared by every group (sockets.py): one message at a
# time per direction and descriptor. A step claims a descriptor's direction for its message, from
# the first byte to the last (`cl_claim`), so the steps of groups running at once in other threads
# wait for it, message by message, instead of interleaving bytes. A message of another group read
# by a step is parked by the Python layer (CollectiveChannel._parked), which bumps `park_gen`: a step
# about to read checks it, so it never reads past a message parked for its own group.
cdef extern from *:
    """
    #include <stdlib.h>
    static int* cl_claims = NULL;   /* [2 * fd + direction] -> token of the stepper in a message */
    static long cl_claims_n = 0;    /* descriptors covered */
    static int cl_park_gen = 0;
    static int cl_claims_init(long n) {
        if (cl_claims != NULL) return 0;
        cl_claims = (int*)calloc((size_t)n * 2, sizeof(int));
        if (cl_claims == NULL) return -1;
        cl_claims_n = n;
        return 0;
    }
    static int cl_claim(int fd, int dir, int token) {
        int expected = 0;
        int* slot;
        if (fd < 0 || fd >= cl_claims_n) return 0;
        slot = &cl_claims[2 * fd + dir];
        if (__atomic_load_n(slot, __ATOMIC_ACQUIRE) == token) return 1;
        return __atomic_compare_exchange_n(slot, &expected, token, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
    static void cl_unclaim(int fd, int dir, int token) {
        if (fd < 0 || fd >= cl_claims_n) return;
        if (__atomic_load_n(&cl_claims[2 * fd + dir], __ATOMIC_ACQUIRE) == token)
            __atomic_store_n(&cl_claims[2 * fd + dir], 0, __ATOMIC_RELEASE);
    }
    static int cl_claimed_by(int fd, int dir) {
        if (fd < 0 || fd >= cl_claims_n) return 0;
        return __atomic_load_n(&cl_claims[2 * fd + dir], __ATOMIC_ACQUIRE);
    }
    static int cl_gen(void) { return __atomic_load_n(&cl_park_gen, __ATOMIC_ACQUIRE); }
    static int cl_gen_bump(void) { return __atomic_add_fetch(&cl_park_gen, 1, __ATOMIC_ACQ_REL); }
    """
    int cl_claims_init(long n)
    int cl_claim(int fd, int dir, int token) noexcept nogil
    void cl_unclaim(int fd, int dir, int token) noexcept nogil
    int cl_claimed_by(int fd, int dir) noexcept nogil
    int cl_gen() noexcept nogil
    int cl_gen_bump() noexcept nogil
    long cl_claims_n

def _claims_capacity():
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return max(65536, min(hard if hard != resource.RLIM_INFINITY else 1 << 22, 1 << 22))

if cl_claims_init(_claims_capacity()) != 0:
    raise MemoryError("no memory for the connection claim table")

CLAIMS_CAPACITY = cl_claims_n  # descriptors a shared connection may have (sockets.py checks)
cdef int _next_token = 0


def park_gen():
    """How many messages were parked so far in this process (read before looking at the queues)."""
    return cl_gen()


def bump_park_gen():
    """A message was parked (call after queueing it, before releasing its descriptor)."""
    return cl_gen_bump()


def clear_claims(int fd):
    """fd is being closed: no step holds either of its directions any more."""
    cl_unclaim(fd, 0, cl_claimed_by(fd, 0))
    cl_unclaim(fd, 1, cl_claimed_by(fd, 1))


def claimed_by(int fd, int direction):
    """The token of the stepper holding fd's direction (1 out, 0 in) mid-message; 0: none."""
    return cl_claimed_by(fd, direction)

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd* fds, unsigned long nfds, int timeout)
    enum:
        POLLIN
        POLLOUT

cdef extern from "<sys/uio.h>" nogil:
    struct iovec:
        void* iov_base
        size_t iov_len
    ssize_t readv(int fd, const iovec* iov, int iovcnt)

cdef extern from "<sys/socket.h>" nogil:
    struct msghdr:
        void* msg_name
        unsigned int msg_namelen
        iovec* msg_iov
        size_t msg_iovlen
        void* msg_control
        size_t msg_controllen
        int msg_flags
    ssize_t sendmsg(int fd, const msghdr* msg, int flags)
    enum:
        MSG_NOSIGNAL

cdef extern from "_shm.h" nogil:
    ctypedef struct cl_segment_view "cl_segment":
        unsigned int can_pull[2]
    ctypedef struct cl_link_view "cl_link":
        cl_segment_view* seg
        int side
    ssize_t cl_readv(int fd, const iovec* iov, int niov)
    ssize_t cl_sendmsg(int fd, const msghdr* msg, int flags)
    int cl_prepare_wait(int fd, int want_in, int want_out)
    void* cl_get(int fd)
    int cl_link_pending(int fd, void* link)
    unsigned long long cl_link_queued(void* link, int out)
    unsigned long long cl_link_peek(void* link, char** at)
    void cl_link_consume(int fd, void* link, unsigned long long n)
    int cl_attach(int fd, int memfd, unsigned long long ring_bytes, int creator, int connector, int cma)
    int cl_prime(int memfd)
    unsigned long long cl_cma_min
    void cl_detach(int fd)
    void cl_release(int fd)
    size_t cl_segment_bytes(unsigned long long ring_bytes)

# Status codes, returned by step() and read by _transport.py.
cdef enum:
    ST_OK = 0
    ST_TIMEOUT = 1
    ST_EOF = 2          # the receive side was closed by the peer
    ST_SEND_ERROR = 3   # errno in state[3]
    ST_RECV_ERROR = 4   # errno in state[3]; errno 0: the kernel refused the dtype/op
    ST_MISMATCH = 5     # received header differs from the expected one (left in recv_hdr)
    ST_WAKE = 6         # the wake descriptor became readable: the job is failing
    ST_POLL_ERROR = 7
    ST_SLOW = 8         # no progress for check_s seconds: the caller may look at the peer, then resume
    ST_NEED_PEER = 9    # (plans) a row's peer has no connection yet: the caller connects, then resumes
    ST_BUSY = 10        # (shared connections) a message may have been parked for this step: the caller
                        # looks (CollectiveChannel.busy), hands it over or clears the step, then resumes
    ST_DRAINED = 11     # (shared connections) another group's message read whole (Stepper.drain_into),
                        # the row's send going on meanwhile: the caller parks it, then resumes the row
    ST_AGAIN = 12       # (a step's first pass, Step.once) it would wait now: _go goes on without the GIL

OK, TIMEOUT, EOF, SEND_ERROR, RECV_ERROR = ST_OK, ST_TIMEOUT, ST_EOF, ST_SEND_ERROR, ST_RECV_ERROR
MISMATCH, WAKE, POLL_ERROR, SLOW, NEED_PEER, BUSY, DRAINED = (ST_MISMATCH, ST_WAKE, ST_POLL_ERROR, ST_SLOW,
                                                              ST_NEED_PEER, ST_BUSY, ST_DRAINED)

# Relay modes: the send side may only send what has arrived (chain broadcast)
# or what has been reduced (chain reduce: send_buf is then the reduce destination).
cdef enum:
    RELAY_NONE = 0
    RELAY_RECEIVED = 1
    RELAY_REDUCED = 2

# state[] slots: progress survives a return, so a caller may resume a step.
cdef enum:
    S_SENT = 0      # header + payload bytes sent
    S_RECVD = 1     # header + payload bytes received
    S_REDUCED = 2   # payload bytes reduced into the destination
    S_ERRNO = 3

cdef extern from *:
    """
    #include <time.h>
    /* A clock read in a few nanoseconds where the kernel offers one (Linux: the last tick's time,
       up to a tick behind CLOCK_MONOTONIC, on the same time line): for deadlines of seconds and
       idle clocks, never for measuring a wait. */
    static inline double cl_coarse_now(void) {
        struct timespec ts;
    #ifdef CLOCK_MONOTONIC_COARSE
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    #else
        clock_gettime(CLOCK_MONOTONIC, &ts);
    #endif
        return ts.tv_sec + ts.tv_nsec * 1e-9;
    }
    """
    double cl_coarse_now() noexcept nogil


cdef inline double _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


# Adaptive spinning. Spinning pays only when the partner answers within about
# a wake-up from poll (~10-20 us): then it saves that wake-up; when the partner
# is late (busy computing, or waiting for our core because ranks outnumber
# cores) every spun microsecond is a wasted one. So each peer keeps an average
# of its recent waits (each clipped, so one long idle period costs a few
# waits of memory, not forever), and the budget is the cap while that average
# is within `fast`, falling linearly to nothing at twice that. A busy spin's
# `fast` is SPIN_FAST_S. A yielding spin (ranks outnumber cores) hands the core
# over each turn, so its spun time is the sharing rank's time, not lost; and
# there a prompt peer's answer includes its turn on our core: SPIN_FAST_YIELD_S.
# With 25 us there, 8 B all_reduce at n = 4 on 2 cores flipped to sleeping once
# a front-end added ~10 us of CPU a call (torch: 85 -> 35 us with 100 us).
# the most payload a step moves in a first pass with the GIL held (Stepper._go): a memcpy or a
# non-blocking system call's worth, well under what a thread switch would cost another thread
cdef Py_ssize_t ONCE_MAX_BYTES = 16384
AGAIN, ONCE_MAX = ST_AGAIN, ONCE_MAX_BYTES
# how long that first pass goes on with the GIL held for a step that would wait: the time a prompt
# peer takes to answer on one host, well under a thread switch's worth of the GIL for other threads
cdef double HOT_SPIN_S = 3e-6
cdef double SPIN_FAST_S = 25e-6
cdef double SPIN_FAST_YIELD_S = 100e-6
cdef Py_ssize_t YIELD_SPIN_MAX_BYTES = 64 << 10  # yield-spin only on latency-bound steps
cdef double SPIN_LEARN = 0.25   # weight of the newest wait
cdef enum:
    SPIN_SLOTS = 256            # learned averages, one per descriptor (fd % SPIN_SLOTS)
SPIN_FAST = SPIN_FAST_S
SPIN_FAST_YIELD = SPIN_FAST_YIELD_S

cdef inline double _spin_budget(double avg, double cap, double fast) noexcept nogil:
    if avg <= fast:
        return cap
    if avg >= 2 * fast:
        return 0.0
    return cap * (2 * fast - avg) / fast

cdef inline double _learn_wait(double avg, double waited, double cap, double fast) noexcept nogil:
    cdef double clip = 4 * fast if cap < 2 * fast else 2 * cap
    if waited > clip:
        waited = clip
    return avg + (waited - avg) * SPIN_LEARN


def spin_budget(double avg, double cap, bint yielding=False):
    """Seconds a step spins on a peer whose recent waits average `avg` seconds (cap: the most);
    yielding: the spin calls sched_yield() each turn (ranks outnumber cores)."""
    return _spin_budget(avg, cap, SPIN_FAST_YIELD_S if yielding else SPIN_FAST_S)


def learn_wait(double avg, double waited, double cap, bint yielding=False):
    """The peer's new average after a wait of `waited` seconds."""
    return _learn_wait(avg, waited, cap, SPIN_FAST_YIELD_S if yielding else SPIN_FAST_S)


cdef struct Step:
    int send_fd
    const char* send_hdr
    Py_ssize_t send_hdr_len
    const char* send_buf
    Py_ssize_t send_len
    int recv_fd
    char* recv_hdr
    const char* expect_hdr
    Py_ssize_t recv_hdr_len
    char* recv_buf           # destination, or the scratch ring when reducing
    Py_ssize_t recv_len
    char* reduce_dst         # NULL: plain receive
    const char* init_src     # reduce: copy this into reduce_dst before reducing (out-of-place)
    Py_ssize_t ring_len      # scratch ring size in bytes (multiple of 16)
    int dtype
    int op
    bint swap                # reduce as dst = op(received, dst): the lower rank's data first
    Py_ssize_t item
    int relay                # RELAY_*: forward payload to send_fd as it arrives / is reduced
    Py_ssize_t chunk
    int wake_fd
    double deadline
    double spin_s
    bint yield_spin          # spin by sched_yield(): hand the core to a rank sharing it
    double* learned          # not NULL: adapt the spin to this peer's average wait (spin_s is the cap)
    double check_s           # > 0: return ST_SLOW after this long without progress
    long long* state
    long long* waits         # [waits, sleeps in poll, waits that slept]: the spin's record (COMMLIB_DEBUG)
    int token                # > 0: claim each descriptor's direction per message (shared connections)
    int* clean               # [gen, fd, gen for fd]: park generations at which nothing was parked for this step
    int* held                # [send fd, recv fd] claimed now (-1: none), for the stepper's release()
    const char* mem          # recv_fd == FD_MEM: the parked message (header and payload) to read instead
    Py_ssize_t mem_len
    bint draining            # the receive is another group's payload (recv_buf): DRAINED once it is in
    bint lane_send           # the send (a relay) goes on the group's own lane: no claim
    bint lane_recv           # ... the receive (from a relay)
    bint once                # one pass, no wait: ST_AGAIN where it would wait (the GIL held; _go)


cdef inline int _reduce_ready(Step* s, bint final) noexcept nogil:
    """Reduce whole elements that have arrived in the scratch ring."""
    cdef Py_ssize_t got = s.state[S_RECVD] - s.recv_hdr_len
    cdef Py_ssize_t q = s.state[S_REDUCED]
    cdef Py_ssize_t end, n, off
    got -= got % s.item
    if not final and got - q < s.chunk and got < s.recv_len:
        return 0
    while q < got:
        off = q % s.ring_len
        end = got if got - q < s.ring_len - off else q + (s.ring_len - off)
        n = end - q
        if s.init_src != NULL:
            memcpy(s.reduce_dst + q, s.init_src + q, n)
        if s.swap:  # op(received, mine): both partners of an exchange then compute the same bits
            if reduce_raw(s.recv_buf + off, s.reduce_dst + q, n // s.item, s.dtype, s.op) != 0:
                return -1
            memcpy(s.reduce_dst + q, s.recv_buf + off, n)
        elif reduce_raw(s.reduce_dst + q, s.recv_buf + off, n // s.item, s.dtype, s.op) != 0:
            return -1
        q = end
    s.state[S_REDUCED] = q
    return 0


cdef inline Py_ssize_t _reduce_link(Step* s, void* link) noexcept nogil:
    """Reduce straight out of a shared-memory ring into the destination, no copy on the way.

    Takes the whole elements of the payload that lie contiguous and aligned in the ring now (the
    swap order reduces into the ring's bytes in place, which are the reader's until consumed).
    Returns the bytes reduced and consumed; 0 when none can go this way now (an empty ring, a
    region, an element across the ring's wrap or an unaligned stream: the caller reads them as
    bytes into the scratch ring); -1 when the kernel refused the dtype/op.
    """
    cdef char* at = NULL
    cdef Py_ssize_t q = s.state[S_REDUCED]
    cdef Py_ssize_t n = <Py_ssize_t>cl_link_peek(link, &at)
    cdef Py_ssize_t align = s.item if s.item < 8 else 8
    if n > s.recv_len - q:
        n = s.recv_len - q
    n -= n % s.item
    if n <= 0 or (<size_t>at) % align != 0:
        return 0
    if s.init_src != NULL:
        memcpy(s.reduce_dst + q, s.init_src + q, n)
    if s.swap:
        if reduce_raw(at, s.reduce_dst + q, n // s.item, s.dtype, s.op) != 0:
            return -1
        memcpy(s.reduce_dst + q, at, n)
    elif reduce_raw(s.reduce_dst + q, at, n // s.item, s.dtype, s.op) != 0:
        return -1
    cl_link_consume(s.recv_fd, link, n)
    s.state[S_REDUCED] = q + n
    s.state[S_RECVD] += n
    return n


cdef enum:
    FD_MEM_ = -3  # a row's receive descriptor that reads the stepper's parked message instead
FD_MEM = FD_MEM_


cdef inline ssize_t _mem_readv(Step* s, iovec* iov, int niov) noexcept nogil:
    """readv from the step's parked message (recv_fd FD_MEM): 0 once it is all read."""
    cdef Py_ssize_t pos = s.state[S_RECVD], n = 0, k
    cdef int i
    for i in range(niov):
        k = s.mem_len - pos
        if k <= 0:
            break
        if k > <Py_ssize_t>iov[i].iov_len:
            k = iov[i].iov_len
        memcpy(iov[i].iov_base, s.mem + pos, k)
        pos += k
        n += k
    return n


cdef int _run(Step* s) noexcept nogil:
    """Run a step (`_step`); a descriptor claimed for a message not begun is let go on return, so a
    step waiting elsewhere (its caller checking a peer, or another row) holds no other group up."""
    cdef int rc = _step(s)
    if s.token > 0:
        if s.held[1] >= 0 and s.state[S_RECVD] == 0:
            cl_unclaim(s.held[1], 0, s.token)
            s.held[1] = -1
        if s.held[0] >= 0 and s.state[S_SENT] == 0:
            cl_unclaim(s.held[0], 1, s.token)
            s.held[0] = -1
    return rc


cdef int _step(Step* s) noexcept nogil:
    cdef long long* st = s.state
    cdef Py_ssize_t send_total = s.send_hdr_len + s.send_len
    cdef Py_ssize_t recv_total = s.recv_hdr_len + s.recv_len
    cdef iovec iov[2]
    cdef msghdr msg
    cdef pollfd fds[3]
    cdef int nfds, rc, timeout_ms, niov
    cdef ssize_t n
    cdef Py_ssize_t pos, avail, want, p, q, room, off
    cdef bint progress, want_out, want_in, both
    cdef bint send_link = s.send_fd >= 0 and cl_get(s.send_fd) != NULL
    cdef bint recv_link = s.recv_fd >= 0 and cl_get(s.recv_fd) != NULL
    cdef int link
    cdef double now, spin_until = 0.0, last_progress = 0.0, wait_until, spin_s
    cdef double waiting_since = 0.0
    cdef bint slept = False  # this wait has slept in poll at least once
    # Only a wait for the peer's first byte says whether the peer is prompt: a wait inside a transfer
    # (a ring or socket buffer refilling) is the transfer's own pace, and learning from it switched
    # the spin off for good on large shared-memory transfers (1 MiB ping-pong 43 -> 498 us, bimodal)
    cdef bint arrival_wait = False
    # the most this step spins: a yielding spin is for latency-bound steps only (a bandwidth-bound
    # one pays its wake-up once; the yields would be paid per chunk)
    cdef double cap = 0.0 if s.yield_spin and s.send_len + s.recv_len > YIELD_SPIN_MAX_BYTES else s.spin_s
    cdef bint timed = (s.spin_s > 0 or s.check_s > 0 or s.learned != NULL) and not s.once
    cdef bint checked = s.expect_hdr == NULL or st[S_RECVD] >= s.recv_hdr_len
    # claims (shared connections): a direction is held from a message's first byte to its last
    cdef bint claims_send = s.token > 0 and s.send_fd >= 0 and not s.lane_send
    cdef bint claims_recv = s.token > 0 and s.recv_fd >= 0 and not s.lane_recv
    cdef bint send_held = False, recv_held = False, claim_wait, can
    cdef int g

    if s.send_fd < 0:
        send_total = 0
    if s.recv_fd < 0 and s.recv_fd != FD_MEM_:
        recv_total = 0
    msg.msg_name = NULL
    msg.msg_namelen = 0
    msg.msg_control = NULL
    msg.msg_controllen = 0
    msg.msg_flags = 0
    msg.msg_iov = iov
    cdef double fast = SPIN_FAST_YIELD_S if s.yield_spin else SPIN_FAST_S
    spin_s = _spin_budget(s.learned[0], cap, fast) if s.learned != NULL else cap
    if timed:
        last_progress = _now()
        spin_until = last_progress + spin_s
    if s.draining and st[S_RECVD] == recv_total:  # an empty message of another group (its header alone)
        return ST_DRAINED

    while st[S_SENT] < send_total or st[S_RECVD] < recv_total or (
            s.reduce_dst != NULL and st[S_REDUCED] < s.recv_len):
        progress = False
        want_out = False
        want_in = False
        claim_wait = False
        # ---- receive: header into recv_hdr, payload into recv_buf (or the ring)
        # a reduction from a shared-memory link reads its payload in place, once the header checked
        # (and nothing waits in the scratch ring: elements are reduced in stream order)
        if (recv_link and s.reduce_dst != NULL and checked and s.relay != RELAY_RECEIVED
                and st[S_RECVD] < recv_total and st[S_RECVD] >= s.recv_hdr_len
                and st[S_REDUCED] == st[S_RECVD] - s.recv_hdr_len):
            n = _reduce_link(s, cl_get(s.recv_fd))
            if n < 0:
                st[S_ERRNO] = 0
                return ST_RECV_ERROR
            progress = n > 0
        can = st[S_RECVD] < recv_total and not progress
        if can and claims_recv and not recv_held:
            # a new message (S_RECVD 0): one of ours may have been parked by the step that holds
            # the descriptor, or since we last looked: the caller looks first
            if st[S_RECVD] == 0:
                g = cl_gen()
                if g != s.clean[0] and not (s.clean[1] == s.recv_fd and g == s.clean[2]):
                    return ST_BUSY
            if cl_claim(s.recv_fd, 0, s.token):
                recv_held = True
                s.held[1] = s.recv_fd
                if st[S_RECVD] == 0 and cl_gen() != g:  # parked between the look and the claim
                    cl_unclaim(s.recv_fd, 0, s.token)
                    s.held[1] = -1
                    return ST_BUSY
            else:
                can = False
                claim_wait = True
        if can:
            pos = st[S_RECVD]
            niov = 0
            if pos < s.recv_hdr_len:
                iov[0].iov_base = s.recv_hdr + pos
                iov[0].iov_len = s.recv_hdr_len - pos
                niov = 1
                p = 0
            else:
                p = pos - s.recv_hdr_len
            # The payload may share a read with an unchecked header only when it
            # lands in scratch (reduce mode: it is reduced after the check);
            # otherwise a mismatched message must never reach the destination.
            # Not on a shared connection: a message of another group there may
            # be shorter than ours, and the read would take the next one's bytes.
            if (checked or pos >= s.recv_hdr_len or s.reduce_dst != NULL and not claims_recv) and not (
                    recv_link and s.reduce_dst != NULL and pos < s.recv_hdr_len):  # the header alone first
                want = s.recv_len - p
                if want > s.chunk and not recv_link:  # a link gives what it has (its own pieces)
                    want = s.chunk
                if s.reduce_dst != NULL:
                    off = p % s.ring_len
                    room = s.ring_len - (p - st[S_REDUCED])
                    if want > room:
                        want = room
                    if want > s.ring_len - off:
                        want = s.ring_len - off
                    if want > 0:
                        iov[niov].iov_base = s.recv_buf + off
                        iov[niov].iov_len = want
                        niov += 1
                elif want > 0:
                    iov[niov].iov_base = s.recv_buf + p
                    iov[niov].iov_len = want
                    niov += 1
            if niov > 0:
                n = _mem_readv(s, iov, niov) if s.recv_fd == FD_MEM_ else cl_readv(s.recv_fd, iov, niov)
                if n > 0:
                    st[S_RECVD] += n
                    progress = True
                    if not checked and st[S_RECVD] >= s.recv_hdr_len:
                        if memcmp(s.recv_hdr, s.expect_hdr, s.recv_hdr_len) != 0:
                            return ST_MISMATCH
                        checked = True
                elif n == 0:
                    return ST_EOF
                elif cl_again(errno):
                    want_in = True
                elif errno != EINTR:
                    st[S_ERRNO] = errno
                    return ST_RECV_ERROR
        if s.draining and st[S_RECVD] == recv_total:
            return ST_DRAINED  # the claim stays until the message is queued (CollectiveChannel)
        if claims_recv and st[S_RECVD] == recv_total and s.held[1] >= 0:
            cl_unclaim(s.recv_fd, 0, s.token)  # the whole message is in: another step may read on
            s.held[1] = -1
        if s.reduce_dst != NULL and st[S_RECVD] > s.recv_hdr_len:
            if _reduce_ready(s, st[S_RECVD] == recv_total) != 0:
                st[S_ERRNO] = 0
                return ST_RECV_ERROR
        # ---- send: header then payload, at most one chunk of payload per call
        can = st[S_SENT] < send_total
        if can and claims_send and not send_held:
            if cl_claim(s.send_fd, 1, s.token):
                send_held = True
                s.held[0] = s.send_fd
            else:
                can = False
                claim_wait = True
        if can:
            pos = st[S_SENT]
            niov = 0
            if pos < s.send_hdr_len:
                iov[0].iov_base = <void*>(s.send_hdr + pos)
                iov[0].iov_len = s.send_hdr_len - pos
                niov = 1
                p = 0
            else:
                p = pos - s.send_hdr_len
            avail = s.send_len
            if s.relay == RELAY_RECEIVED:
                avail = st[S_RECVD] - s.recv_hdr_len
                if avail < 0:
                    avail = 0
            elif s.relay == RELAY_REDUCED:
                avail = st[S_REDUCED]
            want = avail - p
            if want > s.chunk and not send_link:  # a link takes what it can: ring pieces, or a region
                want = s.chunk
            if want > 0:
                iov[niov].iov_base = <void*>(s.send_buf + p)
                iov[niov].iov_len = want
                niov += 1
            if niov > 0:
                msg.msg_iovlen = niov
                n = cl_sendmsg(s.send_fd, &msg, MSG_NOSIGNAL)
                if n > 0:
                    st[S_SENT] += n
                    progress = True
                    if claims_send and st[S_SENT] == send_total:
                        cl_unclaim(s.send_fd, 1, s.token)
                        s.held[0] = -1
                elif n < 0 and (cl_again(errno)):
                    want_out = True
                elif n < 0 and errno != EINTR:
                    st[S_ERRNO] = errno
                    return ST_SEND_ERROR
        if progress:
            if timed:
                last_progress = _now()
                if waiting_since > 0.0 and s.learned != NULL and arrival_wait:
                    s.learned[0] = _learn_wait(s.learned[0], last_progress - waiting_since, s.spin_s, fast)
                    spin_s = _spin_budget(s.learned[0], cap, fast)
                spin_until = last_progress + spin_s
            waiting_since = 0.0
            continue
        if not want_in and not want_out and not claim_wait:
            # Relay waiting for bytes that are still to arrive, with the
            # receive side idle, cannot happen: receive is then pending.
            continue
        if s.once:
            return ST_AGAIN
        now = _now()
        if waiting_since == 0.0:
            waiting_since = now
            arrival_wait = st[S_RECVD] == 0 if recv_total > 0 else st[S_SENT] == 0
            s.waits[0] += 1
            slept = False
        if now < spin_until:
            if s.yield_spin:
                sched_yield()
            continue
        if now >= s.deadline:
            return ST_TIMEOUT
        wait_until = s.deadline
        if s.check_s > 0:
            if now - last_progress >= s.check_s:
                return ST_SLOW
            if last_progress + s.check_s < wait_until:
                wait_until = last_progress + s.check_s
        # a shared-memory link sleeps on its doorbell (POLLIN on the socket) with its waiting
        # flags set, unless it can go on now (cl_prepare_wait: then loop again, no sleep)
        nfds = 0
        both = want_out and want_in and s.recv_fd == s.send_fd
        if want_out:
            link = cl_prepare_wait(s.send_fd, both, 1)
            if link > 0:
                continue
            fds[nfds].fd = s.send_fd
            fds[nfds].events = POLLOUT if link < 0 else POLLIN
            if both and link < 0:
                fds[nfds].events |= POLLIN
            nfds += 1
        if want_in and not both:
            link = cl_prepare_wait(s.recv_fd, 1, 0)
            if link > 0:
                continue
            fds[nfds].fd = s.recv_fd
            fds[nfds].events = POLLIN
            nfds += 1
        if s.wake_fd >= 0:
            fds[nfds].fd = s.wake_fd
            fds[nfds].events = POLLIN
            nfds += 1
        timeout_ms = <int>((wait_until - now) * 1000.0) + 1
        if claim_wait and timeout_ms > 1:  # another thread's step is in a message there: look again soon
            timeout_ms = 1
        s.waits[1] += 1
        if not slept:
            slept = True
            s.waits[2] += 1
        rc = poll(fds, nfds, timeout_ms)
        if rc < 0:
            if errno == EINTR:
                continue
            st[S_ERRNO] = errno
            return ST_POLL_ERROR
        if s.wake_fd >= 0 and fds[nfds - 1].revents != 0 and rc == 1:
            # The job is failing. Bytes a peer sent before the failure (or room
            # to send) still come first: a step that can go on goes on, so one
            # the peers completed completes here too; a step with nothing left
            # to do but wait stops now.
            return ST_WAKE
    return ST_OK


cdef inline char* _ptr(Py_ssize_t address) noexcept nogil:
    return <char*>address


from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Malloc, PyMem_Calloc, PyMem_Free
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS, PyBUF_WRITABLE


cdef class Stepper:
    """step() with the per-group constants bound once: the fast path for small messages.

    Holds the chunk size, wake descriptor, scratch ring, spin and peer-check
    intervals, the progress state and the received-header buffer, so each
    call passes only what changes (positional, no buffer acquisition).
    """
    cdef public object state        # int64[4] ndarray, as for step()
    cdef public bytearray rhdr      # the received header (valid after MISMATCH)
    cdef char* rhdr_ptr
    cdef long long[::1] _state
    cdef Py_ssize_t chunk, ring_ptr, ring_len
    cdef int wake_fd
    cdef double spin_s
    cdef public double check_s      # the peer-check interval now (a long stall widens it: check_later)
    cdef public double check_base   # ... and at the start of every operation
    cdef double stalled_since       # when this operation's stall began (0: none yet)
    cdef bint adaptive, yield_spin
    cdef double learned[SPIN_SLOTS]
    cdef long long waits[3]
    cdef readonly int token         # > 0: this stepper's steps claim shared descriptors per message
    cdef int clean[3]
    cdef int held[2]
    cdef object source              # the parked message a FD_MEM row reads (bytes-like), or None
    cdef const char* mem
    cdef Py_ssize_t mem_len
    cdef object sink                # another group's payload being read by the row (drain_into), or None
    cdef char* drain_ptr
    cdef Py_ssize_t drain_len

    def __init__(self, state, Py_ssize_t chunk, int wake_fd, Py_ssize_t ring_ptr, Py_ssize_t ring_len,
                 double spin_s, double check_s, bint adaptive=False, bint yield_spin=False, bint shared=False):
        """adaptive: spin_s is the most a step spins, learned per peer; else it is fixed.
        yield_spin: each turn of the spin calls sched_yield() (ranks outnumber cores).
        shared: its descriptors are shared with other steppers (the collective channel's): each
        message claims its direction of a descriptor, and a new message checks for parked ones."""
        cdef int i
        global _next_token
        if shared:
            _next_token += 1
            self.token = _next_token
        else:
            self.token = 0
        self.clean[0] = self.clean[1] = self.clean[2] = -1
        self.held[0] = self.held[1] = -1
        self.source = None
        self.mem = NULL
        self.mem_len = 0
        self.sink = None
        self.drain_ptr = NULL
        self.drain_len = 0
        self.adaptive, self.yield_spin = adaptive, yield_spin
        for i in range(SPIN_SLOTS):
            self.learned[i] = 0.0  # a new peer is presumed prompt: spin the cap until it proves late
        self.waits[0] = self.waits[1] = self.waits[2] = 0
        self.state = state
        self._state = state
        self.rhdr = bytearray(56)
        self.rhdr_ptr = <char*>self.rhdr
        self.chunk, self.wake_fd = chunk, wake_fd
        self.ring_ptr, self.ring_len = ring_ptr, ring_len
        self.spin_s, self.check_s, self.check_base, self.stalled_since = spin_s, check_s, check_s, 0.0

    cdef inline void _bind(self, Step* s, double deadline) noexcept nogil:
        """The group's constants of a step: the one place they are set (raw steps and plan rows)."""
        s.ring_len = self.ring_len
        s.chunk = self.chunk
        s.wake_fd = self.wake_fd
        s.deadline = deadline
        s.spin_s = self.spin_s
        s.yield_spin = self.yield_spin
        s.check_s = self.check_s
        s.state = &self._state[0]
        s.learned = NULL
        s.waits = &self.waits[0]
        s.token = self.token
        s.clean = &self.clean[0]
        s.held = &self.held[0]
        s.mem = self.mem
        s.mem_len = self.mem_len
        s.draining = False
        s.lane_send = s.lane_recv = False
        s.once = False

    cdef inline void _learn_peer(self, Step* s) noexcept nogil:
        """Adaptive spin: the step's spin budget follows its peer's average wait."""
        cdef int fd = s.recv_fd if s.recv_fd >= 0 else s.send_fd
        if self.adaptive and fd >= 0:
            s.learned = &self.learned[fd % SPIN_SLOTS]

    cdef int _go(self, Step* s, double deadline, bint once_only=False) except? -1:
        """Fill in the group's constants and run the step with the GIL released: a small one-way
        one (a send or a receive of at most ONCE_MAX_BYTES on an unshared connection) first tries a
        pass with it held, which completes where the ring or socket takes or holds the message now (a send
        into room, a frame already there) and leaves the releasing and retaking to a step that
        waits. once_only: that pass alone; ST_AGAIN where the step would wait (or is not small),
        the caller resuming it (its bookkeeping for a wait done first)."""
        cdef int rc
        self._bind(s, deadline)
        self._learn_peer(s)
        # (an exchange, a collective's step, goes on as before: its receive waits for the peer's send)
        if (s.token == 0 and s.reduce_dst == NULL and s.send_len + s.recv_len <= ONCE_MAX_BYTES
                and (s.send_fd < 0 or s.recv_fd < 0 and s.recv_fd != FD_MEM_)):
            s.once = True
            rc = _run(s)
            if rc == ST_AGAIN and not s.yield_spin and HOT_SPIN_S > 0:
                # a prompt peer's answer (a ping-pong's, a server's) comes within microseconds: wait
                # that long with the GIL held, passes on the ring, rather than let it go and take it
                # back (where ranks outnumber cores the peer needs this core: not then)
                until = _now() + HOT_SPIN_S
                while rc == ST_AGAIN and _now() < until:
                    rc = _run(s)
            s.once = False
            if rc != ST_AGAIN or once_only:
                return rc
        elif once_only:
            return ST_AGAIN
        with nogil:
            rc = _run(s)
        return rc

    def take_parked(self, message):
        """A row whose receive descriptor is FD_MEM reads `message` (a parked header and payload,
        bytes-like and kept alive here) instead of its connection. Returns FD_MEM."""
        cdef const unsigned char[::1] view = message
        self.source = message
        self.mem = <const char*>&view[0] if view.shape[0] else NULL
        self.mem_len = view.shape[0]
        return FD_MEM

    def drain_into(self, payload):
        """The row that read another group's header (MISMATCH) resumes reading that message's payload
        into `payload` (a writable uint8 array, kept here) while its own send goes on; it returns
        DRAINED when the payload is in. None ends it (the row reads its own message again)."""
        cdef unsigned char[::1] view
        if payload is None:
            self.sink, self.drain_ptr, self.drain_len = None, NULL, 0
            return
        view = payload
        self.sink = payload
        self.drain_ptr = <char*>&view[0] if view.shape[0] else <char*>self.rhdr_ptr
        self.drain_len = view.shape[0]

    def drop_parked(self):
        self.source = None
        self.mem = NULL
        self.mem_len = 0

    def set_clean(self, int gen, int fd=-1, int fd_gen=-1):
        """Nothing is parked for this stepper's group at park generation `gen` (-1: something is),
        and nothing from descriptor fd at fd_gen: a new message there is read from the connection."""
        self.clean[0], self.clean[1], self.clean[2] = gen, fd, fd_gen

    def held_fds(self):
        """(send fd, receive fd) this stepper holds mid-message (-1: none)."""
        return self.held[0], self.held[1]

    def release(self, bint send=True, bint recv=True):
        """Let go of the descriptors held mid-message (after parking a message, or when the
        operation fails: other groups' steps may then use them)."""
        if send and self.held[0] >= 0:
            cl_unclaim(self.held[0], 1, self.token)
            self.held[0] = -1
        if recv and self.held[1] >= 0:
            cl_unclaim(self.held[1], 0, self.token)
            self.held[1] = -1

    def check_later(self, double now, double most_s):
        """A peer check (at monotonic time `now`) found nothing wrong: the next one comes a quarter
        of the stall so far later (the base interval at least, `most_s` at most), so ranks that
        wait long on one slow rank do not ask about it every second (10,000 ranks: 10,000 queries
        a second at the coordinator). Returns the new interval."""
        if self.stalled_since == 0.0:
            self.stalled_since = now - self.check_s  # the step loop saw no progress for check_s
        self.check_s = max(self.check_base, min(most_s, (now - self.stalled_since) / 4))
        return self.check_s

    def check_reset(self):
        """The operation is over: the next starts with the base interval."""
        self.check_s, self.stalled_since = self.check_base, 0.0

    def wait_counts(self):
        """(waits, sleeps, waits that slept) of this stepper's steps so far: a wait is a time a step
        found nothing to send or receive; it ends by spinning (no sleep) or after sleeping in poll(2)."""
        return self.waits[0], self.waits[1], self.waits[2]

    def learned_wait(self, int fd):
        """The average wait learned for the peer behind descriptor fd (seconds)."""
        return self.learned[fd % SPIN_SLOTS] if fd >= 0 else 0.0

    cdef inline void _restart(self, bint resume):
        if not resume:
            self._state[0] = self._state[1] = self._state[2] = self._state[3] = 0

    def raw(self, int send_fd, bytes hdr, Py_ssize_t send_ptr, Py_ssize_t send_len,
            int recv_fd, Py_ssize_t recv_ptr, Py_ssize_t recv_len, double deadline, bint resume,
            bytes expect=None, bint once_only=False):
        """Point-to-point step: send hdr (may be empty) + payload, and/or receive recv_len bytes.

        Without `expect` the receive side reads raw bytes and checks nothing
        (the caller parses them). With it, a header of that length comes
        first and must equal it (else MISMATCH, header in rhdr, no payload read).
        once_only: the first pass alone (AGAIN where the step would wait; resume it).
        """
        return self.raw_step(send_fd, hdr, send_ptr, send_len, recv_fd, recv_ptr, recv_len, deadline, resume, expect,
                             once_only)

    cdef int raw_step(self, int send_fd, bytes hdr, Py_ssize_t send_ptr, Py_ssize_t send_len,
                      int recv_fd, Py_ssize_t recv_ptr, Py_ssize_t recv_len, double deadline, bint resume,
                      bytes expect, bint once_only=False) except? -1:
        """raw(), called from C (the one-call path) without building its arguments as objects;
        once_only: as _go's."""
        cdef Step s
        self._restart(resume)
        s.send_fd = send_fd
        s.send_hdr = PyBytes_AS_STRING(hdr)
        s.send_hdr_len = PyBytes_GET_SIZE(hdr) if send_fd >= 0 else 0
        s.send_buf = _ptr(send_ptr)
        s.send_len = send_len
        s.recv_fd = recv_fd
        s.recv_hdr = NULL
        s.expect_hdr = NULL
        s.recv_hdr_len = 0
        if expect is not None and recv_fd >= 0:
            if PyBytes_GET_SIZE(expect) != len(self.rhdr):
                raise ValueError("expect must be one header long")
            s.recv_hdr = <char*>self.rhdr
            s.expect_hdr = PyBytes_AS_STRING(expect)
            s.recv_hdr_len = PyBytes_GET_SIZE(expect)
        s.recv_buf = _ptr(recv_ptr)
        s.recv_len = recv_len
        s.reduce_dst = NULL
        s.init_src = NULL
        s.dtype = 0
        s.op = 0
        s.swap = False
        s.item = 1
        s.relay = RELAY_NONE
        return self._go(&s, deadline, once_only)


# ------------------------------------------------------- shared-memory links (_shm.h)
# A connected Unix socket may carry a link: its bytes then go through rings in a memfd segment
# and the socket only rings the doorbell and reports the peer's end. The step loop above uses
# links through cl_readv / cl_sendmsg / cl_prepare_wait; these are the same for Python callers
# (the point-to-point connections of p2p.py and the handshake of shm.py).
def shm_segment_bytes(unsigned long long ring_bytes):
    """Size of the segment (header and both rings) for rings of ring_bytes each."""
    return cl_segment_bytes(ring_bytes)


def shm_single_copy_min(unsigned long long nbytes):
    """Pieces larger than nbytes (at least 64 KiB) are copied once, from the writer's memory."""
    global cl_cma_min
    cl_cma_min = nbytes if nbytes > (64 << 10) else (64 << 10)


def shm_prime(int memfd):
    """The connector, before offering memfd: note where this process's probe word lies."""
    cdef int rc = cl_prime(memfd)
    if rc != 0:
        raise OSError(rc, os.strerror(rc))


def shm_attach(int fd, int memfd, unsigned long long ring_bytes, bint creator, bint connector, bint cma=True):
    """Route socket fd's bytes through the segment in memfd (OSError when it cannot be mapped or
    is not a commlib segment of that ring size). creator: initialise it; connector: this side
    opened the connection (the two sides take opposite rings); cma: copy large pieces straight
    from the peer's memory where the kernel allows it."""
    cdef int rc = cl_attach(fd, memfd, ring_bytes, creator, connector, cma)
    if rc != 0:
        raise OSError(rc, os.strerror(rc))


def shm_detach(int fd):
    """Forget fd's link (call before closing the socket; a plain socket is left alone)."""
    cl_detach(fd)


def shm_release(int fd):
    """Forget fd's link and unmap its segment (call before closing the socket), where no other
    thread can be using the link; shm_detach where one might (its mapping then stays)."""
    cl_release(fd)


def shm_linked(int fd):
    """True when fd carries a shared-memory link."""
    return cl_get(fd) != NULL


def shm_single_copy(int fd):
    """(this side reads the peer's memory, the peer reads ours) for fd's link: large pieces are
    copied once in a direction where it is True."""
    cdef cl_link_view* link = <cl_link_view*>cl_get(fd)
    if link == NULL:
        return (False, False)
    return (link.seg.can_pull[link.side] != 0, link.seg.can_pull[1 - link.side] != 0)


def shm_prepare(int fd, bint want_in, bint want_out):
    """Before sleeping on a link: 1 when it can go on now (do not sleep), 0 when the caller should
    poll fd for POLLIN (the doorbell); -1 for a plain socket."""
    return cl_prepare_wait(fd, want_in, want_out)


def shm_pending(int fd):
    """A link has bytes, or the peer's end of stream, waiting to be read."""
    cdef void* link = cl_get(fd)
    return link != NULL and cl_link_pending(fd, link) != 0


def shm_queued(int fd, bint out):
    """Bytes in fd's link that the reader has not taken yet: those this side wrote (out) or those
    the peer wrote to this side; -1 for a plain socket."""
    cdef void* link = cl_get(fd)
    return -1 if link == NULL else <long long>cl_link_queued(link, out)


def link_recv_into(int fd, unsigned char[::1] view):
    """recv_into for a link: bytes read; 0 at the peer's end of stream; BlockingIOError when empty."""
    cdef iovec iov
    cdef ssize_t n
    if view.shape[0] == 0:
        return 0
    iov.iov_base = &view[0]
    iov.iov_len = view.shape[0]
    n = cl_readv(fd, &iov, 1)
    if n < 0:
        raise OSError(errno, os.strerror(errno)) if not cl_again(errno) else BlockingIOError(errno, "link empty")
    return n


def link_sendmsg(int fd, list parts):
    """sendmsg for a link: bytes written from the list of buffers (at most 16); BlockingIOError when
    the ring is full, BrokenPipeError when the peer is gone."""
    cdef iovec iov[16]
    cdef msghdr msg
    cdef const unsigned char[::1] view
    cdef int k = 0
    cdef ssize_t n
    keep = []
    for part in parts[:16]:
        view = part
        keep.append(view)
        if view.shape[0] == 0:
            continue
        iov[k].iov_base = <void*>&view[0]
        iov[k].iov_len = view.shape[0]
        k += 1
    if k == 0:
        return 0
    msg.msg_iov = iov
    msg.msg_iovlen = k
    n = cl_sendmsg(fd, &msg, 0)
    if n < 0:
        if cl_again(errno):
            raise BlockingIOError(errno, "link full")
        raise OSError(errno, os.strerror(errno))
    return n


include "_plan.pxi"
include "_fast.pxi"
include "_p2p_fast.pxi"
include "_seal.pxi"
