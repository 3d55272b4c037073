/* backends/rpc/rpc_proto.h — the tessera RPC wire protocol, version 1: frame
 * header, command numbers, payload layouts, handles, limits, and the
 * bounds-checked little-endian reader and writer both ends use.
 *
 * This header is the protocol's single definition in code; docs/rpc-protocol.md
 * is its prose. Not the transport (rpc_io.h) nor either end's logic. Key
 * design choice: every payload is read through rpc_rd, a cursor that can
 * never read past the bytes that arrived (an overrun sets `bad` and yields
 * zeros), so a decoder checks one flag at the end instead of every length.
 * Every multi-byte field is little-endian on the wire whatever the host.
 */
#ifndef TESSERA_RPC_PROTO_H
#define TESSERA_RPC_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tessera/status.h"
#include "tessera/tensor.h"

/* ---- framing ------------------------------------------------------------------------------ */

#define RPC_MAGIC 0x50525354u /* the bytes 'T' 'S' 'R' 'P' */
#define RPC_VERSION_MIN 1     /* oldest version this build speaks */
#define RPC_VERSION_MAX 2     /* newest version this build speaks */
#define RPC_HDR_SIZE 32

/* Every frame starts with this header (32 bytes, little-endian):
 *   0 u32 magic   4 u16 version   6 u16 command   8 u64 request id
 *  16 u32 flags  20 i32 status   24 u64 payload length              */
typedef struct rpc_hdr {
    uint32_t magic;
    uint16_t version; /* HELLO frames carry 1; later frames the negotiated version */
    uint16_t cmd;
    uint64_t id;     /* chosen by the client, echoed by the reply */
    uint32_t flags;  /* RPC_F_* */
    int32_t status;  /* a tsr_status in replies; 0 in requests */
    uint64_t length; /* payload bytes after the header */
} rpc_hdr;
_Static_assert(sizeof(rpc_hdr) == RPC_HDR_SIZE, "the frame header is 32 bytes on the wire");

enum {
    RPC_F_REPLY_WANTED = 1u << 0, /* request: answer it (else errors are deferred) */
    RPC_F_REPLY = 1u << 1,        /* this frame is a reply */
    RPC_F_KNOWN = RPC_F_REPLY_WANTED | RPC_F_REPLY,
};

/* X(name, number, largest request payload): the one list of commands.
 * Numbers are stable across versions; 0x70..0x7f are the server-to-server
 * commands of version 2 (a version-1 connection refuses them). */
#define RPC_CMD_LIST(X)                                              \
    X(HELLO, 0x01, 48)                                               \
    X(AUTH, 0x02, 32)                                                \
    X(PING, 0x03, 4096)                                              \
    X(DEV_LIST, 0x10, 0)                                             \
    X(DEV_DESC, 0x11, 4)                                             \
    X(DEV_MEMORY, 0x12, 4)                                           \
    X(DEV_CAPS, 0x13, 4)                                             \
    X(SUPPORTS_OP, 0x14, 8 + (TSR_MAX_SRC + 1) * RPC_REC_MAX)        \
    X(BUF_ALLOC, 0x20, 16)                                           \
    X(BUF_FREE, 0x21, 8)                                             \
    X(BUF_BASE, 0x22, 8)                                             \
    X(BUF_CLEAR, 0x23, 16)                                           \
    X(TENSOR_SET, 0x30, 32)    /* + the data, checked separately */  \
    X(TENSOR_SET_2D, 0x31, 48) /* + the rows, checked separately */  \
    X(TENSOR_GET, 0x32, 32)                                          \
    X(TENSOR_GET_2D, 0x33, 48)                                       \
    X(TENSOR_MEMSET, 0x34, 40)                                       \
    X(TENSOR_COPY, 0x35, 56)                                         \
    X(STREAM_OPEN, 0x40, 8)                                          \
    X(STREAM_CLOSE, 0x41, 8)                                         \
    X(GRAPH_COMPUTE, 0x42, RPC_GRAPH_MAX_BYTES)                      \
    X(GRAPH_RECOMPUTE, 0x43, 16)                                     \
    X(SYNCHRONIZE, 0x44, 8)                                          \
    X(EVENT_NEW, 0x50, 8)                                            \
    X(EVENT_FREE, 0x51, 8)                                           \
    X(EVENT_RECORD, 0x52, 16)                                        \
    X(EVENT_WAIT, 0x53, 16)                                          \
    X(EVENT_SYNC, 0x54, 8)                                           \
    X(MESH_JOIN, 0x70, 40 + RPC_MESH_MAX * (2 + RPC_URL_MAX))        \
    X(PEER_ATTACH, 0x71, 40)                                         \
    X(PEER_DATA, 0x72, 0) /* only on a peer link, never a session */ \
    X(PEER_SEND, 0x73, 56)                                           \
    X(PEER_RECV, 0x74, 56)                                           \
    X(ALLREDUCE, 0x75, 32 + 4 * RPC_MESH_MAX + 24 * RPC_AR_MAX_LOCAL)

typedef enum rpc_cmd {
#define RPC__CMD_ENUM(name, num, max) RPC_CMD_##name = (num),
    RPC_CMD_LIST(RPC__CMD_ENUM)
#undef RPC__CMD_ENUM
} rpc_cmd;

/* ---- limits ------------------------------------------------------------------------------- */

#define RPC_NONCE_SIZE 32
#define RPC_MAC_SIZE 32
#define RPC_NAME_MAX 32    /* device names in DEV_LIST, NUL-padded */
#define RPC_DESC_MAX 256   /* device descriptions */
#define RPC_REASON_MAX 512 /* the text of an error reply */
#define RPC_REC_FIXED 192  /* fixed part of a tensor record */
#define RPC_REC_MAX (RPC_REC_FIXED + 64)
#define RPC_GRAPH_MAX_RECORDS (1u << 20)
#define RPC_GRAPH_MAX_BYTES (64ull << 20)
#define RPC_DISCARD_MAX (16ull << 20)  /* a refused payload up to this is skipped, else we close */
#define RPC_MAX_DIM (1ll << 40)        /* largest ne[i] and element count of a tensor */
#define RPC_MAX_STRIDE (1ull << 48)    /* largest nb[i] */
#define RPC_MESH_MAX 64                /* servers in one mesh */
#define RPC_URL_MAX 255                /* bytes of an endpoint URL in MESH_JOIN */
#define RPC_AR_MAX_LOCAL 32            /* tensors one server contributes to one ALLREDUCE */
#define RPC_PEER_DATA_MAX (1ull << 32) /* bytes of one PEER_DATA frame */
#define RPC_TICKET_SIZE 32             /* a mesh's random name */
#define RPC_FIRST_V2_CMD 0x70          /* commands from here on need version 2 */
#define RPC_GRAPH_SLOTS 256            /* graphs a version-2 server caches per stream */

/* Capability bits (HELLO). */
enum {
    RPC_CAP_GRAPH_CACHE = 1u << 0, /* GRAPH_RECOMPUTE re-runs the stream's cached graph */
    RPC_CAP_EVENTS = 1u << 1,      /* EVENT_* commands */
    RPC_CAP_2D = 1u << 2,          /* TENSOR_SET_2D / TENSOR_GET_2D */
    /* Version 2: server-to-server work. */
    RPC_CAP_PEER_COPY = 1u << 8,  /* MESH_JOIN, PEER_SEND / PEER_RECV */
    RPC_CAP_COLLECTIVE = 1u << 9, /* ALLREDUCE */
};
#define RPC_CAPS_V1 (RPC_CAP_GRAPH_CACHE | RPC_CAP_EVENTS | RPC_CAP_2D)
#define RPC_CAPS_V2 (RPC_CAPS_V1 | RPC_CAP_PEER_COPY | RPC_CAP_COLLECTIVE)

enum { RPC_AUTH_NONE = 0, RPC_AUTH_HMAC_SHA256 = 1 };

/* Device capability bits (DEV_CAPS). */
enum { RPC_DEV_ASYNC = 1u << 0, RPC_DEV_EVENTS = 1u << 1 };

/* ---- handles -------------------------------------------------------------------------------
 * Opaque 64-bit names the server issues per connection: kind in bits 56..63,
 * a generation in bits 32..55 (so a freed handle never names a later object),
 * a slot in bits 0..31. 0 is never a handle. Kinds 0x80..0xff are reserved
 * for handles that name objects of a peer server (server-to-server work). */
enum { RPC_H_BUFFER = 1, RPC_H_STREAM = 2, RPC_H_EVENT = 3 };

static inline unsigned rpc_handle_kind(uint64_t h) { return (unsigned)(h >> 56); }

/* ---- tensor records (GRAPH_COMPUTE, SUPPORTS_OP) --------------------------------------------
 * One record per tensor, in an order where every reference points back:
 *   0 u32 type  4 u32 op  8 i64 ne[4]  40 u64 nb[4]  72 i32 op_params[16]
 * 136 i32 src[6] (record index or -1)  160 i32 view_src (index or -1)
 * 164 u32 flags (tensor flags | RPC_REC_NODE)  168 u64 view_offs
 * 176 u64 buffer handle (0: not placed)  184 u64 offset in that buffer
 * 192 u8 name length (< 64), the name bytes, zeros up to a multiple of 8. */
typedef struct rpc_rec {
    uint32_t type, op;
    int64_t ne[TSR_MAX_DIMS];
    uint64_t nb[TSR_MAX_DIMS];
    int32_t op_params[TSR_MAX_OP_PARAMS];
    int32_t src[TSR_MAX_SRC];
    int32_t view_src;
    uint32_t flags;
    uint64_t view_offs, buffer, offset;
    char name[TSR_MAX_NAME];
} rpc_rec;

#define RPC_REC_NODE (1u << 31) /* the record is a node of the graph, in graph order */
#define RPC_REC_TENSOR_FLAGS                                                  \
    (TSR_TENSOR_FLAG_INPUT | TSR_TENSOR_FLAG_OUTPUT | TSR_TENSOR_FLAG_PARAM | \
     TSR_TENSOR_FLAG_COMPUTE)

/* ---- the cursor ---------------------------------------------------------------------------- */

static inline uint16_t rpc_le16(uint16_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap16(v);
#else
    return v;
#endif
}
static inline uint32_t rpc_le32(uint32_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap32(v);
#else
    return v;
#endif
}
static inline uint64_t rpc_le64(uint64_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap64(v);
#else
    return v;
#endif
}

/* Reads from p[0..n); `bad` turns true on the first overrun and stays. */
typedef struct rpc_rd {
    const uint8_t *p;
    size_t n, off;
    bool bad;
} rpc_rd;

static inline rpc_rd rpc_rd_init(const void *p, size_t n) { return (rpc_rd){p, n, 0, false}; }
static inline size_t rpc_rd_left(const rpc_rd *r) { return r->bad ? 0 : r->n - r->off; }

/* The next n bytes, or NULL (and bad) when fewer are left. */
static inline const uint8_t *rpc_rd_bytes(rpc_rd *r, size_t n)
{
    if (r->bad || r->n - r->off < n) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *q = r->p + r->off;
    r->off += n;
    return q;
}

#define RPC__RD(bits)                                      \
    static inline uint##bits##_t rpc_rd_u##bits(rpc_rd *r) \
    {                                                      \
        const uint8_t *q = rpc_rd_bytes(r, bits / 8);      \
        uint##bits##_t v = 0;                              \
        if (q)                                             \
            memcpy(&v, q, sizeof(v));                      \
        return rpc_le##bits(v);                            \
    }
RPC__RD(16)
RPC__RD(32)
RPC__RD(64)
#undef RPC__RD

static inline uint8_t rpc_rd_u8(rpc_rd *r)
{
    const uint8_t *q = rpc_rd_bytes(r, 1);
    return q ? *q : 0;
}

/* Writes into a caller-owned growable buffer; `bad` on allocation failure. */
typedef struct rpc_wr {
    uint8_t *p;
    size_t len, cap;
    bool bad;
} rpc_wr;

/* Makes room for n more bytes (grows geometrically); false when out of memory. */
bool tsr__rpc_wr_reserve(rpc_wr *w, size_t n);

static inline void rpc_wr_bytes(rpc_wr *w, const void *p, size_t n)
{
    if (!tsr__rpc_wr_reserve(w, n))
        return;
    if (n)
        memcpy(w->p + w->len, p, n);
    w->len += n;
}

#define RPC__WR(bits)                                              \
    static inline void rpc_wr_u##bits(rpc_wr *w, uint##bits##_t v) \
    {                                                              \
        v = rpc_le##bits(v);                                       \
        rpc_wr_bytes(w, &v, sizeof(v));                            \
    }
RPC__WR(16)
RPC__WR(32)
RPC__WR(64)
#undef RPC__WR

static inline void rpc_wr_u8(rpc_wr *w, uint8_t v) { rpc_wr_bytes(w, &v, 1); }

/* n little-endian u64 fields into out (8n bytes): a request's fixed part. */
static inline void rpc_put_u64s(uint8_t *out, const uint64_t *v, int n)
{
    for (int i = 0; i < n; i++) {
        const uint64_t le = rpc_le64(v[i]);
        memcpy(out + 8 * i, &le, 8);
    }
}

/* ---- codecs (rpc_wire.c) ------------------------------------------------------------------- */

/* Header to its 32 wire bytes (inline: it runs once per frame). */
static inline void rpc_hdr_put(const rpc_hdr *h, uint8_t out[RPC_HDR_SIZE])
{
    const uint32_t magic = rpc_le32(h->magic), flags = rpc_le32(h->flags);
    const uint16_t version = rpc_le16(h->version), cmd = rpc_le16(h->cmd);
    const uint64_t id = rpc_le64(h->id), length = rpc_le64(h->length);
    const uint32_t status = rpc_le32((uint32_t)h->status);
    memcpy(out + 0, &magic, 4);
    memcpy(out + 4, &version, 2);
    memcpy(out + 6, &cmd, 2);
    memcpy(out + 8, &id, 8);
    memcpy(out + 16, &flags, 4);
    memcpy(out + 20, &status, 4);
    memcpy(out + 24, &length, 8);
}

/* Header to and from its 32 wire bytes. */
void tsr__rpc_hdr_encode(const rpc_hdr *h, uint8_t out[RPC_HDR_SIZE]);
void tsr__rpc_hdr_decode(const uint8_t in[RPC_HDR_SIZE], rpc_hdr *h);

/* A command's name ("TENSOR_SET") and largest request payload; false for a
 * number that is no command. */
bool tsr__rpc_cmd_info(uint16_t cmd, const char **name, uint64_t *max_len);
const char *tsr__rpc_cmd_name(uint16_t cmd);

/* Appends one tensor record. */
void tsr__rpc_rec_encode(rpc_wr *w, const rpc_rec *rec);
/* Reads one record; false (nothing consumed that matters) on a short or
 * malformed record: a name of 64 bytes or more, non-zero padding. */
bool tsr__rpc_rec_decode(rpc_rd *r, rpc_rec *rec);

/* Bytes a tensor of this type and shape spans with these strides, with
 * overflow-checked arithmetic (0 when a dim is 0). False when a value is
 * out of the protocol's limits or the arithmetic overflows. */
bool tsr__rpc_extent(uint32_t type, const int64_t ne[TSR_MAX_DIMS], const uint64_t nb[TSR_MAX_DIMS],
                     uint64_t *bytes);

#endif /* TESSERA_RPC_PROTO_H */
