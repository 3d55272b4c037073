/* backends/rpc/rpc_wire.c — the codecs of the wire protocol (rpc_proto.h):
 * the frame header, command names and limits, tensor records, and the
 * overflow-checked extent of a tensor.
 *
 * Pure functions over bytes: no I/O, no handles, no policy. Both ends and
 * the fuzz target use them; what a decoded value may mean is decided by the
 * server's validation (rpc_server/), not here.
 */
#include <stdlib.h>

#include "backends/rpc/rpc_proto.h"
#include "core/internal.h"

bool tsr__rpc_wr_reserve(rpc_wr *w, size_t n)
{
    if (w->bad)
        return false;
    size_t need;
    if (!tsr__add_ok(w->len, n, &need)) {
        w->bad = true;
        return false;
    }
    if (need <= w->cap)
        return true;
    size_t cap = w->cap ? w->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : 2 * cap;
    uint8_t *p = realloc(w->p, cap);
    if (!p) {
        w->bad = true;
        return false;
    }
    w->p = p;
    w->cap = cap;
    return true;
}

void tsr__rpc_hdr_encode(const rpc_hdr *h, uint8_t out[RPC_HDR_SIZE]) { rpc_hdr_put(h, out); }

void tsr__rpc_hdr_decode(const uint8_t in[RPC_HDR_SIZE], rpc_hdr *h)
{
    rpc_rd r = rpc_rd_init(in, RPC_HDR_SIZE);
    h->magic = rpc_rd_u32(&r);
    h->version = rpc_rd_u16(&r);
    h->cmd = rpc_rd_u16(&r);
    h->id = rpc_rd_u64(&r);
    h->flags = rpc_rd_u32(&r);
    h->status = (int32_t)rpc_rd_u32(&r);
    h->length = rpc_rd_u64(&r);
}

bool tsr__rpc_cmd_info(uint16_t cmd, const char **name, uint64_t *max_len)
{
    switch (cmd) {
#define RPC__CMD_INFO(n, num, max) \
    case num:                      \
        *name = #n;                \
        *max_len = (max);          \
        return true;
        RPC_CMD_LIST(RPC__CMD_INFO)
#undef RPC__CMD_INFO
    }
    return false;
}

const char *tsr__rpc_cmd_name(uint16_t cmd)
{
    const char *name;
    uint64_t max;
    return tsr__rpc_cmd_info(cmd, &name, &max) ? name : "unknown command";
}

void tsr__rpc_rec_encode(rpc_wr *w, const rpc_rec *rec)
{
    rpc_wr_u32(w, rec->type);
    rpc_wr_u32(w, rec->op);
    for (int i = 0; i < TSR_MAX_DIMS; i++)
        rpc_wr_u64(w, (uint64_t)rec->ne[i]);
    for (int i = 0; i < TSR_MAX_DIMS; i++)
        rpc_wr_u64(w, rec->nb[i]);
    for (int i = 0; i < TSR_MAX_OP_PARAMS; i++)
        rpc_wr_u32(w, (uint32_t)rec->op_params[i]);
    for (int i = 0; i < TSR_MAX_SRC; i++)
        rpc_wr_u32(w, (uint32_t)rec->src[i]);
    rpc_wr_u32(w, (uint32_t)rec->view_src);
    rpc_wr_u32(w, rec->flags);
    rpc_wr_u64(w, rec->view_offs);
    rpc_wr_u64(w, rec->buffer);
    rpc_wr_u64(w, rec->offset);
    const size_t nl = strnlen(rec->name, TSR_MAX_NAME - 1);
    rpc_wr_u8(w, (uint8_t)nl);
    rpc_wr_bytes(w, rec->name, nl);
    static const uint8_t zeros[8];
    rpc_wr_bytes(w, zeros, (8 - (1 + nl) % 8) % 8);
}

bool tsr__rpc_rec_decode(rpc_rd *r, rpc_rec *rec)
{
    rec->type = rpc_rd_u32(r);
    rec->op = rpc_rd_u32(r);
    for (int i = 0; i < TSR_MAX_DIMS; i++)
        rec->ne[i] = (int64_t)rpc_rd_u64(r);
    for (int i = 0; i < TSR_MAX_DIMS; i++)
        rec->nb[i] = rpc_rd_u64(r);
    for (int i = 0; i < TSR_MAX_OP_PARAMS; i++)
        rec->op_params[i] = (int32_t)rpc_rd_u32(r);
    for (int i = 0; i < TSR_MAX_SRC; i++)
        rec->src[i] = (int32_t)rpc_rd_u32(r);
    rec->view_src = (int32_t)rpc_rd_u32(r);
    rec->flags = rpc_rd_u32(r);
    rec->view_offs = rpc_rd_u64(r);
    rec->buffer = rpc_rd_u64(r);
    rec->offset = rpc_rd_u64(r);
    const size_t nl = rpc_rd_u8(r);
    if (r->bad || nl >= TSR_MAX_NAME)
        return false;
    const uint8_t *name = rpc_rd_bytes(r, nl);
    const uint8_t *pad = rpc_rd_bytes(r, (8 - (1 + nl) % 8) % 8);
    if (r->bad)
        return false;
    for (size_t i = 0; i < (8 - (1 + nl) % 8) % 8; i++)
        if (pad[i] != 0)
            return false;
    /* Names only ever appear in messages: anything unprintable becomes '?'. */
    for (size_t i = 0; i < nl; i++)
        rec->name[i] = name[i] >= 0x20 && name[i] < 0x7f ? (char)name[i] : '?';
    rec->name[nl] = '\0';
    return true;
}

bool tsr__rpc_extent(uint32_t type, const int64_t ne[TSR_MAX_DIMS], const uint64_t nb[TSR_MAX_DIMS],
                     uint64_t *bytes)
{
    *bytes = 0;
    if (!tsr_type_valid((int)type))
        return false;
    uint64_t elems = 1;
    bool empty = false;
    for (int i = 0; i < TSR_MAX_DIMS; i++) {
        if (ne[i] < 0 || ne[i] > RPC_MAX_DIM || nb[i] > RPC_MAX_STRIDE)
            return false;
        if (ne[i] == 0)
            empty = true;
        else if (__builtin_mul_overflow(elems, (uint64_t)ne[i], &elems) ||
                 elems > (uint64_t)RPC_MAX_DIM)
            return false;
    }
    const int64_t blck = tsr_type_block_size((tsr_type)type);
    if (ne[0] % blck != 0)
        return false;
    if (empty)
        return true;
    /* The first element (or row of blocks), then the farthest offset each
     * stride reaches: tsr_nbytes's formula, checked. */
    uint64_t n, term;
    int first;
    if (blck == 1) {
        n = tsr_type_size((tsr_type)type);
        first = 0;
    } else {
        if (__builtin_mul_overflow((uint64_t)(ne[0] / blck), nb[0], &n))
            return false;
        first = 1;
    }
    for (int i = first; i < TSR_MAX_DIMS; i++)
        if (__builtin_mul_overflow((uint64_t)(ne[i] - 1), nb[i], &term) ||
            __builtin_add_overflow(n, term, &n))
            return false;
    if (n > (uint64_t)INT64_MAX)
        return false;
    *bytes = n;
    return true;
}
