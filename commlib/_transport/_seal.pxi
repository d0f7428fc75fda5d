# Sealed TCP connections (COMMLIB_ENCRYPT): AES-256-GCM records, pumped between a TCP socket and
# the local end of a socketpair that the data path uses as if it were the connection.
#
# The cipher is OpenSSL's libcrypto, the one Python's ssl module loads; its functions are found at
# run time (`seal.py` passes their addresses to `seal_bind`), so commlib builds without OpenSSL's
# headers and runs without it as long as encryption is off.
#
# A record on the wire: length (4 bytes, little-endian, the plaintext's; authenticated as the
# GCM's additional data) + ciphertext + tag (16). Each direction of a connection has its own key
# and counts its records; record k is sealed with IV = 4 zero bytes + k (8 bytes, little-endian).
# A changed byte, a record replayed or moved to another place, or one from another connection
# (other keys) fails the tag: the pump stops and says which record.

from libc.stdlib cimport malloc, free
from libc.string cimport memset
from libc.errno cimport ECONNRESET
from libc.stdint cimport uint32_t, uint64_t

cdef extern from "<unistd.h>" nogil:
    ssize_t c_read "read"(int fd, void* buf, size_t n)
    int c_close "close"(int fd)

cdef extern from "<sys/socket.h>" nogil:
    ssize_t c_send "send"(int fd, const void* buf, size_t n, int flags)
    int c_shutdown "shutdown"(int fd, int how)
    enum:
        SHUT_WR

cdef extern from "<poll.h>" nogil:
    enum:
        POLLHUP
        POLLERR

ctypedef void* (*evp_ctx_new_t)() noexcept nogil
ctypedef void (*evp_ctx_free_t)(void* ctx) noexcept nogil
ctypedef const void* (*evp_cipher_t)() noexcept nogil
ctypedef int (*evp_init_t)(void* ctx, const void* cipher, void* engine, const unsigned char* key,
                           const unsigned char* iv) noexcept nogil
ctypedef int (*evp_update_t)(void* ctx, unsigned char* out, int* outl, const unsigned char* inp,
                             int inl) noexcept nogil
ctypedef int (*evp_final_t)(void* ctx, unsigned char* out, int* outl) noexcept nogil
ctypedef int (*evp_ctrl_t)(void* ctx, int type, int arg, void* ptr) noexcept nogil

cdef struct Evp:
    evp_ctx_new_t ctx_new
    evp_ctx_free_t ctx_free
    evp_cipher_t aes_256_gcm
    evp_init_t enc_init, dec_init
    evp_update_t enc_update, dec_update
    evp_final_t enc_final, dec_final
    evp_ctrl_t ctrl

cdef Evp _evp
cdef bint _evp_bound = False

cdef enum:
    SEAL_KEY = 32
    SEAL_TAG = 16
    SEAL_HDR = 4
    SEAL_MAX = 256 << 10       # plaintext bytes per record at most
    GCM_GET_TAG = 0x10
    GCM_SET_TAG = 0x11

# pump results
cdef enum:
    SEAL_CLOSED = 0       # the local end closed (and everything was sent), or the stop pipe fired
    SEAL_PEER_EOF = 1     # the peer closed the TCP connection (at a record boundary)
    SEAL_IO_ERROR = 2     # errno in the second value (-1: libcrypto failed)
    SEAL_FORGED = 3       # a record failed its check; its index in the second value
    SEAL_BAD_LENGTH = 4   # a record's length field is out of range: its index in the second value
    SEAL_CUT = 5          # the peer closed in the middle of a record: its index in the second value

PUMP_CLOSED, PUMP_PEER_EOF, PUMP_IO_ERROR = SEAL_CLOSED, SEAL_PEER_EOF, SEAL_IO_ERROR
PUMP_FORGED, PUMP_BAD_LENGTH, PUMP_CUT = SEAL_FORGED, SEAL_BAD_LENGTH, SEAL_CUT
SEAL_RECORD_MAX, SEAL_OVERHEAD = SEAL_MAX, SEAL_HDR + SEAL_TAG


def seal_bind(dict addresses):
    """Take libcrypto's function addresses (name -> int), found by seal.py through ctypes."""
    global _evp_bound
    _evp.ctx_new = <evp_ctx_new_t><size_t>addresses["EVP_CIPHER_CTX_new"]
    _evp.ctx_free = <evp_ctx_free_t><size_t>addresses["EVP_CIPHER_CTX_free"]
    _evp.aes_256_gcm = <evp_cipher_t><size_t>addresses["EVP_aes_256_gcm"]
    _evp.enc_init = <evp_init_t><size_t>addresses["EVP_EncryptInit_ex"]
    _evp.dec_init = <evp_init_t><size_t>addresses["EVP_DecryptInit_ex"]
    _evp.enc_update = <evp_update_t><size_t>addresses["EVP_EncryptUpdate"]
    _evp.dec_update = <evp_update_t><size_t>addresses["EVP_DecryptUpdate"]
    _evp.enc_final = <evp_final_t><size_t>addresses["EVP_EncryptFinal_ex"]
    _evp.dec_final = <evp_final_t><size_t>addresses["EVP_DecryptFinal_ex"]
    _evp.ctrl = <evp_ctrl_t><size_t>addresses["EVP_CIPHER_CTX_ctrl"]
    _evp_bound = True


cdef inline void _iv(unsigned char* iv, uint64_t k) noexcept nogil:
    cdef int i
    for i in range(4):
        iv[i] = 0
    for i in range(8):
        iv[4 + i] = (k >> (8 * i)) & 0xFF


cdef inline void _put32(unsigned char* p, uint32_t v) noexcept nogil:
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF
    p[2] = (v >> 16) & 0xFF
    p[3] = (v >> 24) & 0xFF


cdef inline uint32_t _get32(const unsigned char* p) noexcept nogil:
    return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef int _seal(void* ctx, uint64_t k, const unsigned char* plain, int n, unsigned char* rec) noexcept nogil:
    """Record k of n plaintext bytes into rec (SEAL_HDR + n + SEAL_TAG bytes); 0, or -1."""
    cdef unsigned char iv[12]
    cdef int outl = 0, fin = 0
    _iv(iv, k)
    _put32(rec, <uint32_t>n)
    if _evp.enc_init(ctx, NULL, NULL, NULL, iv) != 1:
        return -1
    if _evp.enc_update(ctx, NULL, &outl, rec, SEAL_HDR) != 1:
        return -1
    if n > 0 and _evp.enc_update(ctx, rec + SEAL_HDR, &outl, plain, n) != 1:
        return -1
    if _evp.enc_final(ctx, rec + SEAL_HDR + outl, &fin) != 1:
        return -1
    return 0 if _evp.ctrl(ctx, GCM_GET_TAG, SEAL_TAG, rec + SEAL_HDR + n) == 1 else -1


cdef int _open(void* ctx, uint64_t k, const unsigned char* rec, int n, unsigned char* plain) noexcept nogil:
    """Check and decrypt record k (n plaintext bytes) into plain; 0, or -1 when it fails its tag."""
    cdef unsigned char iv[12]
    cdef unsigned char tag[SEAL_TAG]
    cdef int outl = 0, fin = 0
    _iv(iv, k)
    memcpy(tag, rec + SEAL_HDR + n, SEAL_TAG)
    if _evp.dec_init(ctx, NULL, NULL, NULL, iv) != 1:
        return -1
    if _evp.dec_update(ctx, NULL, &outl, rec, SEAL_HDR) != 1:
        return -1
    if n > 0 and _evp.dec_update(ctx, plain, &outl, rec + SEAL_HDR, n) != 1:
        return -1
    if _evp.ctrl(ctx, GCM_SET_TAG, SEAL_TAG, tag) != 1:
        return -1
    return 0 if _evp.dec_final(ctx, plain + outl, &fin) == 1 else -1


cdef void* _context(const unsigned char* key, bint encrypt) noexcept nogil:
    cdef void* ctx = _evp.ctx_new()
    if ctx == NULL:
        return NULL
    cdef int ok = (_evp.enc_init if encrypt else _evp.dec_init)(ctx, _evp.aes_256_gcm(), NULL, key, NULL)
    if ok != 1:
        _evp.ctx_free(ctx)
        return NULL
    return ctx


cdef void* _py_context(bytes key, bint encrypt) except NULL:
    if not _evp_bound:
        raise RuntimeError("seal_bind() was not called")
    if len(key) != SEAL_KEY:
        raise ValueError(f"a key is {SEAL_KEY} bytes, not {len(key)}")
    cdef void* ctx = _context(<const unsigned char*><char*>key, encrypt)
    if ctx == NULL:
        raise MemoryError("libcrypto could not make an AES-256-GCM context")
    return ctx


def seal_record(bytes key, unsigned long long k, const unsigned char[::1] plain):
    """Record k of `plain` under `key` (the wire format above), as bytes."""
    cdef Py_ssize_t n = plain.shape[0]
    if n > SEAL_MAX:
        raise ValueError(f"a record holds at most {SEAL_MAX} bytes, not {n}")
    out = bytearray(SEAL_HDR + n + SEAL_TAG)
    cdef unsigned char[::1] o = out
    cdef void* ctx = _py_context(key, True)
    cdef int rc = _seal(ctx, k, &plain[0] if n else NULL, <int>n, &o[0])
    _evp.ctx_free(ctx)
    if rc != 0:
        raise RuntimeError("libcrypto failed to seal a record")
    return bytes(out)


def open_record(bytes key, unsigned long long k, const unsigned char[::1] rec):
    """The plaintext of record k (one whole record), or None when it fails its check."""
    cdef Py_ssize_t size = rec.shape[0]
    if size < SEAL_HDR + SEAL_TAG:
        return None
    cdef uint32_t n = _get32(&rec[0])
    if n > SEAL_MAX or SEAL_HDR + n + SEAL_TAG != size:
        return None
    out = bytearray(n)
    cdef unsigned char[::1] o = out
    cdef unsigned char scratch[1]
    cdef void* ctx = _py_context(key, False)
    cdef int rc = _open(ctx, k, &rec[0], <int>n, &o[0] if n else scratch)
    _evp.ctx_free(ctx)
    return bytes(out) if rc == 0 else None


cdef struct Pump:
    int tcp, local, stop
    void* enc
    void* dec
    uint64_t sent_k, recv_k
    unsigned char* plain      # read from local (at out + SEAL_HDR), sealed in place as one record
    unsigned char* out        # the sealed record being written to tcp
    Py_ssize_t out_pos, out_len
    unsigned char* inrec      # the record being read from tcp
    Py_ssize_t in_len, in_want
    unsigned char* opened     # plaintext being written to local (inrec + SEAL_HDR, opened in place)
    Py_ssize_t open_pos, open_len
    bint local_eof, local_hup, tcp_eof


cdef int _pump(Pump* p, long long* detail) noexcept nogil:
    cdef pollfd fds[3]
    cdef int nfds, rc, i_local, i_tcp, i
    cdef ssize_t n
    cdef uint32_t length
    while True:
        nfds = 0
        i_local = i_tcp = -1
        fds[0].fd = p.stop
        fds[0].events = POLLIN
        fds[0].revents = 0
        nfds = 1
        # local: read plaintext when no record waits for the wire; write opened plaintext; after a
        # half close (shutdown SHUT_WR) only its hang-up (closed for good) is of interest
        fds[nfds].fd = p.local
        fds[nfds].events = (POLLIN if p.out_len == 0 and not p.local_eof else 0) | \
                           (POLLOUT if p.open_len > p.open_pos else 0)
        fds[nfds].revents = 0
        i_local = nfds
        nfds += 1
        fds[nfds].fd = p.tcp
        fds[nfds].events = (POLLOUT if p.out_len > p.out_pos else 0) | \
                           (POLLIN if p.open_len == 0 and not p.tcp_eof else 0)
        fds[nfds].revents = 0
        i_tcp = nfds
        nfds += 1
        if fds[i_local].events == 0 and p.local_eof and not p.local_hup:
            fds[i_local].events = POLLHUP  # (reported whether asked or not; asked, it keeps the fd in)
        for i in range(1, nfds):  # an end with nothing to do is left out: its HUP would spin the loop
            if fds[i].events == 0:
                fds[i].fd = -1
        rc = poll(fds, nfds, -1)
        if rc < 0:
            if errno == EINTR:
                continue
            detail[0] = errno
            return SEAL_IO_ERROR
        if fds[0].revents:
            return SEAL_CLOSED
        if p.local_eof and fds[i_local].revents & POLLHUP:
            p.local_hup = True
        # ---- local -> tcp
        if p.out_len > p.out_pos and fds[i_tcp].revents & (POLLOUT | POLLERR | POLLHUP):
            n = c_send(p.tcp, p.out + p.out_pos, p.out_len - p.out_pos, MSG_NOSIGNAL)
            if n < 0 and not (errno == EINTR or cl_again(errno)):
                detail[0] = errno
                return SEAL_IO_ERROR
            if n > 0:
                p.out_pos += n
                if p.out_pos == p.out_len:
                    p.out_pos = p.out_len = 0
        if p.out_len == 0 and not p.local_eof and fds[i_local].revents & (POLLIN | POLLHUP | POLLERR):
            n = c_read(p.local, p.plain, SEAL_MAX)
            if n < 0 and not (errno == EINTR or cl_again(errno)):
                if errno != ECONNRESET:
                    detail[0] = errno
                    return SEAL_IO_ERROR
                n = 0
            if n == 0:
                p.local_eof = True
                p.local_hup = (fds[i_local].revents & POLLHUP) != 0  # closed, not only shut for writing
                c_shutdown(p.tcp, SHUT_WR)
            elif n > 0:
                if _seal(p.enc, p.sent_k, p.plain, <int>n, p.out) != 0:
                    detail[0] = -1
                    return SEAL_IO_ERROR
                p.sent_k += 1
                p.out_pos, p.out_len = 0, SEAL_HDR + n + SEAL_TAG
        # ---- tcp -> local
        if p.open_len > p.open_pos and fds[i_local].revents & (POLLOUT | POLLERR | POLLHUP):
            n = c_send(p.local, p.opened + p.open_pos, p.open_len - p.open_pos, MSG_NOSIGNAL)
            if n < 0 and not (errno == EINTR or cl_again(errno)):
                return SEAL_CLOSED  # the data path closed its end: nobody reads what comes
            if n > 0:
                p.open_pos += n
                if p.open_pos == p.open_len:
                    p.open_pos = p.open_len = 0
        if p.open_len == 0 and not p.tcp_eof and fds[i_tcp].revents & (POLLIN | POLLHUP | POLLERR):
            n = c_read(p.tcp, p.inrec + p.in_len, p.in_want - p.in_len)
            if n < 0 and not (errno == EINTR or cl_again(errno)):
                detail[0] = errno
                return SEAL_IO_ERROR
            if n == 0:
                p.tcp_eof = True
                if p.in_len:
                    detail[0] = <long long>p.recv_k
                    return SEAL_CUT
            elif n > 0:
                p.in_len += n
                if p.in_len == SEAL_HDR and p.in_want == SEAL_HDR:
                    length = _get32(p.inrec)
                    if length > SEAL_MAX:
                        detail[0] = <long long>p.recv_k
                        return SEAL_BAD_LENGTH
                    p.in_want = SEAL_HDR + length + SEAL_TAG
                if p.in_len == p.in_want and p.in_want > SEAL_HDR:
                    length = <uint32_t>(p.in_want - SEAL_HDR - SEAL_TAG)
                    if _open(p.dec, p.recv_k, p.inrec, <int>length, p.opened) != 0:
                        detail[0] = <long long>p.recv_k
                        return SEAL_FORGED
                    p.recv_k += 1
                    p.open_pos, p.open_len = 0, length
                    p.in_len, p.in_want = 0, SEAL_HDR
        # ---- ends
        if p.local_eof and p.local_hup and p.out_len == 0:
            return SEAL_CLOSED      # everything the data path wrote is on the wire, and it reads no more
        if p.tcp_eof and p.open_len == 0:
            c_shutdown(p.local, SHUT_WR)
            return SEAL_PEER_EOF


def seal_pump(int tcp_fd, int local_fd, int stop_fd, bytes send_key, bytes recv_key):
    """Move bytes between the data path's end of a socketpair (local_fd, plaintext) and a TCP
    connection (records), both non-blocking, until one end closes, stop_fd is readable, or a
    record fails its check. Returns (SEAL_* code, detail). Runs without the GIL; closes nothing."""
    cdef Pump p
    cdef long long detail = 0
    cdef int rc
    memset(&p, 0, sizeof(Pump))
    p.tcp, p.local, p.stop = tcp_fd, local_fd, stop_fd
    p.in_want = SEAL_HDR
    # sealed and opened in place (GCM allows it): one buffer a direction stays in cache
    p.out = <unsigned char*>malloc(SEAL_HDR + SEAL_MAX + SEAL_TAG)
    p.inrec = <unsigned char*>malloc(SEAL_HDR + SEAL_MAX + SEAL_TAG)
    try:
        p.enc = _py_context(send_key, True)  # (a key of the wrong length: ValueError, as for records)
        p.dec = _py_context(recv_key, False)
        if p.out == NULL or p.inrec == NULL:
            raise MemoryError("no memory for a sealed connection's buffers")
        p.plain, p.opened = p.out + SEAL_HDR, p.inrec + SEAL_HDR
        with nogil:
            rc = _pump(&p, &detail)
        return rc, detail
    finally:
        if p.enc != NULL:
            _evp.ctx_free(p.enc)
        if p.dec != NULL:
            _evp.ctx_free(p.dec)
        free(p.out)
        free(p.inrec)
