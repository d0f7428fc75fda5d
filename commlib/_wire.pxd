# The wire layer's header encoder, for the C callers of the data path (`_transport/_io.pyx`).
cdef enum:
    HEADER_LEN = 56
    WIRE_VERSION = 1
    WIRE_KIND_COLL = 1
    WIRE_KIND_P2P = 2

# Wire codes of the collectives the one-call path numbers itself (COLL_NAMES indices; _wire checks them).
cdef enum:
    COLL_ALL_REDUCE = 1
    COLL_ALL_GATHER = 2
    COLL_REDUCE_SCATTER = 3
    COLL_BROADCAST = 4
    COLL_BARRIER = 5
    COLL_REDUCE = 6
    COLL_BROADCAST_OBJ = 12
    COLL_ALL_GATHER_OBJ = 13

cdef void pack_header(unsigned char* h, int kind, int coll, int dtype, int op, int flags, unsigned int group,
                      int root, unsigned int shape, unsigned long long seq, long long tag, unsigned long long count,
                      unsigned long long nbytes) noexcept nogil
