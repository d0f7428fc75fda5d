/* Shared-memory links: a connection's bytes through lock-free rings instead of the socket.
 *
 * A link belongs to one connected Unix socket (its descriptor) between two ranks of one host.
 * Its segment (a memfd passed over that socket at the handshake, so nothing is ever named in
 * /dev/shm) holds two single-producer/single-consumer byte rings, one per direction. The bytes
 * are exactly what the socket would have carried (headers and payloads), so every layer above
 * reads and writes a link as it would the socket: cl_readv / cl_writev return what readv /
 * sendmsg would (a count, 0 at the peer's end of stream, -1 with EAGAIN or EPIPE).
 *
 * The socket stays: it is the doorbell and the failure detector. A side that is about to sleep
 * sets its "waiting" flag in the ring (reader: for data, writer: for room), re-checks the ring,
 * and polls the socket for POLLIN; the other side, after moving the ring's head or tail, reads
 * the flag and, if set, clears it and sends one byte. A peer that dies closes the socket: the
 * sleeper's poll returns, the drain reads end-of-stream, and once the ring is empty the link
 * reports it as the socket would (0 from a read, EPIPE from a write).
 *
 * Ordering: head and tail are published with release stores and read with acquire loads; the
 * flag protocol is a Dekker pair (store flag, full fence, load counter / store counter, full
 * fence, load flag), so a wake-up is never lost.
 *
 * Large pieces are copied once. Where the kernel lets one rank read another's memory (Linux
 * cross-memory attach, process_vm_readv: same user, no ptrace restriction; probed per link at
 * its handshake), a writer with a piece of more than cl_cma_min bytes does not copy it into the
 * ring: it offers a "region" (its address, the stream position where it starts, its length)
 * and moves head past it at once; the reader, reaching that position, copies the bytes straight
 * from the writer's memory into its destination and moves tail as it goes. The writer reports
 * the region's bytes as written only as the reader's tail passes them, so its buffer stays
 * untouched until they are copied, as a socket's caller expects of a blocking send. A region
 * holds no ring space; the writer offers one at a time and writes nothing else meanwhile.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>


#define CL_LINE 64
#define CL_MAX_FD 65536
#define CL_SHM_MAGIC 0x636c7368u /* "clsh" */
/* A read or write moves at most a ring's 1/CL_PIECES: a large message then flows as a pipeline,
 * the reader copying one piece out while the writer copies the next in, instead of both sides
 * taking turns on the whole ring (pingpong of 1 MiB at n = 2: 403 us whole-ring, see RESULTS.md). */
#define CL_PIECES 4
/* Regions are larger than this (shm.py sets it; never below 64 KiB: a send of up to EAGER_BYTES
 * must stay eager, completing without its receiver). */
static uint64_t cl_cma_min = 64 << 10;
#define CL_PROBE_WORD 0x636c70726f626521ull

static const volatile uint64_t cl_probe_word = CL_PROBE_WORD; /* read by a peer to test CMA */

typedef struct {
    volatile uint64_t head;                 /* bytes written, ever (the producer's) */
    char pad0[CL_LINE - 8];
    volatile uint64_t tail;                 /* bytes read, ever (the consumer's) */
    char pad1[CL_LINE - 8];
    volatile uint32_t reader_waiting;       /* the consumer sleeps on the doorbell for data */
    char pad2[CL_LINE - 4];
    volatile uint32_t writer_waiting;       /* the producer sleeps on the doorbell for room */
    char pad3[CL_LINE - 4];
    volatile uint64_t cma_len;              /* a region on offer (0: none): the reader copies it */
    volatile uint64_t cma_at;               /* from the writer's memory at cma_addr, for stream */
    volatile uint64_t cma_addr;             /* positions [cma_at, cma_at + cma_len) */
    char pad4[CL_LINE - 24];
} cl_ring;

typedef struct {
    uint32_t magic;
    uint32_t version;
    uint64_t ring_bytes;
    volatile uint64_t probe_addr[2];         /* [side]: where that side's probe word lies */
    volatile uint32_t can_pull[2];           /* [side]: that side can read the other's memory */
    char pad[CL_LINE - 40];
    cl_ring ring[2];                         /* [0]: connector -> acceptor, [1]: the other way */
} cl_segment;                                /* sides: 0 the connector, 1 the acceptor */                                /* followed by the two data areas, ring_bytes each */

typedef struct {
    cl_ring* out;
    char* out_data;
    cl_ring* in;
    char* in_data;
    uint64_t size;
    int closed;                              /* the doorbell socket reached end of stream */
    void* base;
    size_t maplen;
    cl_segment* seg;
    int side;
    pid_t peer;                              /* the peer's pid as this process sees it */
    int cma_active;                          /* (writer) a region of ours is on offer */
    uint64_t cma_at, cma_end, cma_reported;  /* (writer) its stream range, bytes reported written */
} cl_link;

static cl_link* volatile* cl_links = NULL;   /* fd -> link (NULL: a plain socket) */
static long cl_linked = 0;                    /* links attached now: 0 skips the table */

static size_t cl_segment_bytes(uint64_t ring_bytes) {
    return sizeof(cl_segment) + 2 * (size_t)ring_bytes;
}

static inline cl_link* cl_get(int fd) {
    if (cl_linked == 0 || fd < 0 || fd >= CL_MAX_FD)
        return NULL;
    return cl_links[fd];
}

/* The connector, before offering a segment: note where its probe word lies. 0 or an errno. */
static int cl_prime(int memfd) {
    cl_segment* seg = (cl_segment*)mmap(NULL, sizeof(cl_segment), PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (seg == MAP_FAILED)
        return errno;
    seg->probe_addr[0] = (uint64_t)(uintptr_t)&cl_probe_word;
    munmap(seg, sizeof(cl_segment));
    return 0;
}

/* Can this process read the memory of pid (the peer's probe word at addr)? */
static int cl_probe(pid_t pid, uint64_t addr) {
    uint64_t v = 0;
    struct iovec local = {&v, sizeof v};
    struct iovec remote = {(void*)(uintptr_t)addr, sizeof v};
    if (pid <= 0 || addr == 0)
        return 0;
    return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof v && v == CL_PROBE_WORD;
}

/* Map the segment behind memfd for the socket fd; creator: this side made it (and initialises it).
 * cma: this side may read the peer's memory if the kernel allows it. 0 on success, else an errno
 * value. The memfd may be closed afterwards. */
static int cl_attach(int fd, int memfd, uint64_t ring_bytes, int creator, int connector, int cma) {
    if (fd < 0 || fd >= CL_MAX_FD || ring_bytes < 4096 || (ring_bytes & (ring_bytes - 1)) != 0)
        return EINVAL;
    if (__atomic_load_n(&cl_links, __ATOMIC_ACQUIRE) == NULL) {
        /* handshakes run on several threads: one table, whoever makes it first */
        cl_link* volatile* fresh = (cl_link* volatile*)calloc(CL_MAX_FD, sizeof(cl_link*));
        cl_link* volatile* expected = NULL;
        if (fresh == NULL)
            return ENOMEM;
        if (!__atomic_compare_exchange_n(&cl_links, &expected, fresh, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            free((void*)fresh);
    }
    if (cl_links[fd] != NULL)
        return EEXIST;
    size_t len = cl_segment_bytes(ring_bytes);
    void* base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (base == MAP_FAILED)
        return errno;
    cl_segment* seg = (cl_segment*)base;
    if (creator) {  /* a new memfd is zeroes but for the connector's probe address (cl_prime) */
        seg->ring_bytes = ring_bytes;
        seg->version = 1;
        __atomic_store_n(&seg->magic, CL_SHM_MAGIC, __ATOMIC_RELEASE);
    } else if (__atomic_load_n(&seg->magic, __ATOMIC_ACQUIRE) != CL_SHM_MAGIC || seg->ring_bytes != ring_bytes) {
        munmap(base, len);
        return EPROTO;
    }
    cl_link* L = (cl_link*)calloc(1, sizeof(cl_link));
    if (L == NULL) {
        munmap(base, len);
        return ENOMEM;
    }
    char* data = (char*)base + sizeof(cl_segment);
    int o = connector ? 0 : 1;
    L->out = &seg->ring[o];
    L->out_data = data + (size_t)o * ring_bytes;
    L->in = &seg->ring[1 - o];
    L->in_data = data + (size_t)(1 - o) * ring_bytes;
    L->size = ring_bytes;
    L->base = base;
    L->maplen = len;
    L->seg = seg;
    L->side = connector ? 0 : 1;
    struct ucred cred;
    socklen_t clen = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0)
        L->peer = cred.pid;
    seg->probe_addr[L->side] = (uint64_t)(uintptr_t)&cl_probe_word;
    if (cma && cl_probe(L->peer, seg->probe_addr[1 - L->side]))
        __atomic_store_n(&seg->can_pull[L->side], 1, __ATOMIC_RELEASE);
    cl_links[fd] = L;
    __atomic_add_fetch(&cl_linked, 1, __ATOMIC_SEQ_CST);
    return 0;
}

/* Forget the link of fd (before the socket is closed: descriptor numbers are reused). The
 * mapping is kept until the process ends: a thread still inside a read or write of the link
 * (a step being woken up by the failure) must not touch unmapped memory. */
static void cl_detach(int fd) {
    if (cl_links == NULL || fd < 0 || fd >= CL_MAX_FD || cl_links[fd] == NULL)
        return;
    cl_links[fd] = NULL;
    __atomic_sub_fetch(&cl_linked, 1, __ATOMIC_SEQ_CST);
}

/* Forget the link of fd and unmap its segment, for a caller that knows no other thread is in a
 * read, write or wait of it (point-to-point links: all their use is under the engine's lock). */
static void cl_release(int fd) {
    if (cl_links == NULL || fd < 0 || fd >= CL_MAX_FD)
        return;
    cl_link* L = cl_links[fd];
    if (L == NULL)
        return;
    cl_links[fd] = NULL;
    __atomic_sub_fetch(&cl_linked, 1, __ATOMIC_SEQ_CST);
    munmap(L->base, L->maplen);
    free(L);
}

static inline void cl_ring_bell(int fd) {
    char b = 0;
    (void)send(fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* Read whatever doorbell bytes wait on the socket; note the peer's end of stream. */
static void cl_drain(int fd, cl_link* L) {
    char buf[64];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0)
            continue;
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            L->closed = 1;
        if (n < 0 && errno == EINTR)
            continue;
        return;
    }
}

static inline void cl_moved_tail(int fd, cl_ring* r, uint64_t tail) {
    __atomic_store_n(&r->tail, tail, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (r->writer_waiting && __atomic_exchange_n(&r->writer_waiting, 0, __ATOMIC_SEQ_CST))
        cl_ring_bell(fd);
}

static ssize_t cl_link_readv(int fd, cl_link* L, const struct iovec* iov, int niov) {
    cl_ring* r = L->in;
    uint64_t tail = r->tail;
    uint64_t head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
    uint64_t avail = head - tail;
    if (avail == 0) {           /* no system call here: a spinning reader polls this; the end of */
        if (L->closed)          /* stream is learned by cl_prepare_wait before the reader sleeps */
            return 0;
        errno = EAGAIN;
        return -1;
    }
    /* a region: len is published last by the writer (release), so at and addr read after it match */
    uint64_t clen = __atomic_load_n(&r->cma_len, __ATOMIC_ACQUIRE);
    if (clen) {
        uint64_t cat = __atomic_load_n(&r->cma_at, __ATOMIC_ACQUIRE);
        if (tail >= cat && tail < cat + clen && head >= cat + clen) {
            uint64_t left = cat + clen - tail;
            struct iovec remote;
            remote.iov_base = (void*)(uintptr_t)(__atomic_load_n(&r->cma_addr, __ATOMIC_ACQUIRE) + (tail - cat));
            remote.iov_len = left;
            ssize_t n = process_vm_readv(L->peer, iov, (unsigned long)niov, &remote, 1, 0);
            if (n < 0) {
                if (errno == ESRCH)  /* the writer is gone: its stream ends here, as a socket's would */
                    return 0;
                return -1;
            }
            if (n == 0) {
                errno = EFAULT;
                return -1;
            }
            cl_moved_tail(fd, r, tail + (uint64_t)n);
            return n;
        }
        if (tail < cat && cat - tail < avail)  /* ring bytes up to the region */
            avail = cat - tail;
    }
    if (avail > L->size / CL_PIECES)    /* a piece at a time: the writer refills behind us */
        avail = L->size / CL_PIECES;
    uint64_t mask = L->size - 1, done = 0;
    for (int i = 0; i < niov && done < avail; i++) {
        uint64_t want = iov[i].iov_len;
        if (want > avail - done)
            want = avail - done;
        char* dst = (char*)iov[i].iov_base;
        uint64_t pos = (tail + done) & mask;
        uint64_t first = L->size - pos < want ? L->size - pos : want;
        memcpy(dst, L->in_data + pos, first);
        if (want > first)
            memcpy(dst + first, L->in_data, want - first);
        done += want;
    }
    cl_moved_tail(fd, r, tail + done);
    return (ssize_t)done;
}

/* (reader) The ring bytes readable now in one contiguous span: *at and their count, up to the
 * ring's wrap, a piece, and the start of a region (only cl_readv reads a region). 0: none here now
 * (the ring is empty, or a region is next). Until cl_link_consume moves tail past them the bytes
 * are the reader's alone: it may reduce from them, or into them, in place. */
static inline uint64_t cl_link_peek(cl_link* L, char** at) {
    cl_ring* r = L->in;
    uint64_t tail = r->tail;
    uint64_t avail = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE) - tail;
    if (avail == 0)
        return 0;
    uint64_t clen = __atomic_load_n(&r->cma_len, __ATOMIC_ACQUIRE);
    if (clen) {
        uint64_t cat = __atomic_load_n(&r->cma_at, __ATOMIC_ACQUIRE);
        if (tail >= cat && tail < cat + clen)
            return 0;
        if (tail < cat && cat - tail < avail)
            avail = cat - tail;
    }
    uint64_t pos = tail & (L->size - 1);
    if (avail > L->size - pos)
        avail = L->size - pos;
    if (avail > L->size / CL_PIECES)
        avail = L->size / CL_PIECES;
    *at = L->in_data + pos;
    return avail;
}

/* (reader) The n bytes cl_link_peek showed are done with: the writer may reuse their room. */
static inline void cl_link_consume(int fd, cl_link* L, uint64_t n) {
    cl_moved_tail(fd, L->in, L->in->tail + n);
}

/* (writer) Bytes of our region the reader has copied and we have not reported yet. */
static inline uint64_t cl_region_fresh(cl_link* L) {
    uint64_t tail = __atomic_load_n(&L->out->tail, __ATOMIC_ACQUIRE);
    uint64_t upto = tail < L->cma_end ? tail : L->cma_end;
    return upto > L->cma_at ? upto - L->cma_at - L->cma_reported : 0;
}

static ssize_t cl_link_writev(int fd, cl_link* L, const struct iovec* iov, int niov) {
    cl_ring* r = L->out;
    if (L->closed) {
        errno = EPIPE;
        return -1;
    }
    if (L->cma_active) {  /* our region: report what the reader has copied of it */
        uint64_t fresh = cl_region_fresh(L);
        if (fresh == 0) {
            errno = EAGAIN;
            return -1;
        }
        L->cma_reported += fresh;
        if (L->cma_at + L->cma_reported == L->cma_end) {
            L->cma_active = 0;
            __atomic_store_n(&r->cma_len, 0, __ATOMIC_RELEASE);
        }
        return (ssize_t)fresh;
    }
    uint64_t head = r->head;
    uint64_t tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
    uint64_t room = L->size - (head - tail);
    if (room > L->size / CL_PIECES)     /* a piece at a time: the reader copies out meanwhile */
        room = L->size / CL_PIECES;
    int pull = __atomic_load_n(&L->seg->can_pull[1 - L->side], __ATOMIC_ACQUIRE);
    uint64_t mask = L->size - 1, done = 0;
    for (int i = 0; i < niov; i++) {
        uint64_t want = iov[i].iov_len;
        if (pull && want > cl_cma_min) {  /* offer it as a region, behind the bytes copied so far */
            uint64_t at = head + done;
            L->cma_active = 1;
            L->cma_at = at;
            L->cma_end = at + want;
            L->cma_reported = 0;
            __atomic_store_n(&r->cma_at, at, __ATOMIC_RELEASE);
            __atomic_store_n(&r->cma_addr, (uint64_t)(uintptr_t)iov[i].iov_base, __ATOMIC_RELEASE);
            __atomic_store_n(&r->cma_len, want, __ATOMIC_RELEASE);
            __atomic_store_n(&r->head, at + want, __ATOMIC_RELEASE);
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            if (r->reader_waiting && __atomic_exchange_n(&r->reader_waiting, 0, __ATOMIC_SEQ_CST))
                cl_ring_bell(fd);
            if (done == 0) {
                errno = EAGAIN;
                return -1;
            }
            return (ssize_t)done;
        }
        if (done >= room)
            break;
        if (want > room - done)
            want = room - done;
        const char* src = (const char*)iov[i].iov_base;
        uint64_t pos = (head + done) & mask;
        uint64_t first = L->size - pos < want ? L->size - pos : want;
        memcpy(L->out_data + pos, src, first);
        if (want > first)
            memcpy(L->out_data, src + first, want - first);
        done += want;
        if (want < iov[i].iov_len)
            break;  /* this piece did not fit whole: nothing after it goes in this call */
    }
    if (done == 0) {
        errno = EAGAIN;
        return -1;
    }
    __atomic_store_n(&r->head, head + done, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (r->reader_waiting && __atomic_exchange_n(&r->reader_waiting, 0, __ATOMIC_SEQ_CST))
        cl_ring_bell(fd);
    return (ssize_t)done;
}

/* readv / sendmsg for a descriptor that may carry a link. */
static inline ssize_t cl_readv(int fd, const struct iovec* iov, int niov) {
    cl_link* L = cl_get(fd);
    return L ? cl_link_readv(fd, L, iov, niov) : readv(fd, iov, niov);
}

static inline ssize_t cl_sendmsg(int fd, const struct msghdr* msg, int flags) {
    cl_link* L = cl_get(fd);
    return L ? cl_link_writev(fd, L, msg->msg_iov, (int)msg->msg_iovlen) : sendmsg(fd, msg, flags);
}

/* Before sleeping on fd: -1 when fd is a plain socket (poll it for what is wanted); 1 when the
 * link can go on now (data, room, or the peer's end: do not sleep); 0 when the caller should
 * poll fd for POLLIN (the doorbell), its waiting flags being set. */
static int cl_prepare_wait(int fd, int want_in, int want_out) {
    cl_link* L = cl_get(fd);
    if (L == NULL)
        return -1;
    if (want_in)
        __atomic_store_n(&L->in->reader_waiting, 1, __ATOMIC_SEQ_CST);
    if (want_out)
        __atomic_store_n(&L->out->writer_waiting, 1, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    cl_drain(fd, L);
    int ready = L->closed;
    if (want_in && __atomic_load_n(&L->in->head, __ATOMIC_ACQUIRE) != L->in->tail)
        ready = 1;
    if (want_out && (L->cma_active ? cl_region_fresh(L) > 0
                     : L->size - (L->out->head - __atomic_load_n(&L->out->tail, __ATOMIC_ACQUIRE)) > 0))
        ready = 1;
    if (ready) {
        if (want_in)
            __atomic_store_n(&L->in->reader_waiting, 0, __ATOMIC_RELAXED);
        if (want_out)
            __atomic_store_n(&L->out->writer_waiting, 0, __ATOMIC_RELAXED);
    }
    return ready;
}

/* Bytes in a link's rings: (out) written by this side and not yet read by the peer (a region on
 * offer included); (in) written by the peer and not yet read here. */
static uint64_t cl_link_queued(cl_link* L, int out) {
    cl_ring* r = out ? L->out : L->in;
    return __atomic_load_n(&r->head, __ATOMIC_ACQUIRE) - __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
}

/* Bytes (or the end of stream) wait to be read on a link. */
static int cl_link_pending(int fd, cl_link* L) {
    if (__atomic_load_n(&L->in->head, __ATOMIC_ACQUIRE) != L->in->tail)
        return 1;
    cl_drain(fd, L);
    return L->closed || __atomic_load_n(&L->in->head, __ATOMIC_ACQUIRE) != L->in->tail;
}
