# The wire layer's header encoder, for the C callers of the data path (`_transport/_io.pyx`).
cdef enum:
    HEADER_LEN = 56
    WIRE_VERSION = 1
    WIRE_KIND_COLL = 1
    WIRE_KIND_P2P = 2

cdef void pack_header(unsigned char* h, int kind, int coll, int dtype, int op, int flags, unsigned int group,
                      int root, unsigned int shape, unsigned long long seq, long long tag, unsigned long long count,
                      unsigned long long nbytes) noexcept nogil
