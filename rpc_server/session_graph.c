/* rpc_server/session_graph.c — GRAPH_COMPUTE, GRAPH_RECOMPUTE and
 * SUPPORTS_OP: turning tensor records from the wire into a graph the local
 * device runs, and the per-device op masks of DEV_CAPS.
 *
 * Not the kernels, nor data movement. Key design choice: nothing the client
 * declares about an op is trusted. Each computed tensor is rebuilt by the
 * library's own op constructor from its (already validated) sources and op
 * parameters, which checks every shape and type rule the kernels rely on;
 * the rebuilt tensor must then equal the declared one field by field (type,
 * shape, strides, op_params, sources, view). Layout-only tensors (leaves
 * and views) are checked generically: a shape and strides whose extent,
 * computed with overflow-checked arithmetic, lies inside the owning buffer
 * or the viewed tensor. References are indices to earlier records, so the
 * decoder is one forward pass with no recursion.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "rpc_server/server.h"

/* ---- the decoder ------------------------------------------------------------------------------
 */

typedef struct {
    srv_session *s;
    srv_graph *g;
    bool place; /* records may name buffers (GRAPH_COMPUTE) or not (SUPPORTS_OP) */
} decoder;

/* Places a root tensor at [off, off + ext) of a buffer of this connection. */
static tsr_status place(decoder *d, tsr_tensor *t, const rpc_rec *r, uint64_t ext)
{
    if (!d->place)
        return tsr__error(TSR_EINVAL, "this command takes unplaced tensors only");
    srv_buf *b;
    tsr_status st = tsr__srv_buf_range(d->s, r->buffer, r->offset, ext, &b, "buffer");
    if (st != TSR_OK)
        return st;
    if (r->offset % tsr_buft_alignment(tsr_buf_buft(b->buf)) == 0)
        return tsr_buf_place_tensor(b->buf, t, (size_t)r->offset);
    if (!tsr_buf_is_host(b->buf))
        return tsr__error(TSR_EINVAL, "offset %llu is not %zu-aligned",
                          (unsigned long long)r->offset, tsr_buft_alignment(tsr_buf_buft(b->buf)));
    t->buffer = b->buf;
    t->data = (char *)tsr_buf_base(b->buf) + r->offset;
    return TSR_OK;
}

static bool is_permutation(const int32_t *p)
{
    int seen = 0;
    for (int i = 0; i < 4; i++) {
        if (p[i] < 0 || p[i] > 3 || (seen & (1 << p[i])))
            return false;
        seen |= 1 << p[i];
    }
    return true;
}

/* A leaf or a layout op (view, reshape, permute, transpose): memory only. */
static tsr_status build_data(decoder *d, const rpc_rec *r, uint64_t ext, tsr_tensor **out)
{
    for (int k = r->op == TSR_OP_NONE ? 0 : 1; k < TSR_MAX_SRC; k++)
        if (r->src[k] >= 0)
            return tsr__error(TSR_EINVAL, "a %s tensor has no source %d",
                              r->op == TSR_OP_NONE ? "leaf" : "layout", k);
    const bool perm = r->op == TSR_OP_PERMUTE || r->op == TSR_OP_TRANSPOSE;
    for (int k = perm ? 4 : 0; k < TSR_MAX_OP_PARAMS; k++)
        if (r->op_params[k] != 0)
            return tsr__error(TSR_EINVAL, "op_params[%d] = %d must be 0", k, r->op_params[k]);
    if (perm && !is_permutation(r->op_params))
        return tsr__error(TSR_EINVAL, "op_params (%d, %d, %d, %d) are not a permutation of 0..3",
                          r->op_params[0], r->op_params[1], r->op_params[2], r->op_params[3]);
    tsr_tensor *t =
        tsr_new_tensor_4d(d->g->ctx, (tsr_type)r->type, r->ne[0], r->ne[1], r->ne[2], r->ne[3]);
    if (!t)
        return tsr__error(tsr_ctx_status(d->g->ctx), "%s", tsr_ctx_error(d->g->ctx));
    for (int k = 0; k < TSR_MAX_DIMS; k++)
        t->nb[k] = (size_t)r->nb[k];
    t->op = (tsr_op)r->op;
    memcpy(t->op_params, r->op_params, sizeof(t->op_params));
    t->src[0] = r->src[0] >= 0 ? d->g->map[r->src[0]] : NULL;
    if (r->view_src < 0) {
        if (r->view_offs != 0)
            return tsr__error(TSR_EINVAL, "view_offs %llu without a viewed tensor",
                              (unsigned long long)r->view_offs);
        *out = t;
        return r->buffer ? place(d, t, r, ext) : TSR_OK;
    }
    tsr_tensor *root = d->g->map[r->view_src];
    if (root->view_src)
        return tsr__error(TSR_EINVAL,
                          "views must name the tensor that owns the memory, not a view");
    if (r->buffer || r->offset)
        return tsr__error(TSR_EINVAL, "a view is placed by the tensor it views");
    uint64_t end;
    if (__builtin_add_overflow(r->view_offs, ext, &end) || end > tsr_nbytes(root))
        return tsr__error(TSR_ERANGE,
                          "%llu bytes at offset %llu exceed the %zu bytes of the viewed "
                          "tensor",
                          (unsigned long long)ext, (unsigned long long)r->view_offs,
                          tsr_nbytes(root));
    t->view_src = root;
    t->view_offs = (size_t)r->view_offs;
    *out = t;
    return root->buffer ? tsr_view_init(t) : TSR_OK;
}

/* A computed tensor: rebuilt by its constructor, then compared. */
static tsr_status build_op(decoder *d, const rpc_rec *r, uint64_t ext, tsr_tensor **out)
{
    tsr_tensor *s[TSR_MAX_SRC];
    for (int k = 0; k < TSR_MAX_SRC; k++)
        s[k] = r->src[k] >= 0 ? d->g->map[r->src[k]] : NULL;
    tsr_tensor *t = tsr__op_rebuild(d->g->ctx, (tsr_op)r->op, r->op_params, s, r->ne);
    if (!t)
        return tsr__error(tsr_ctx_status(d->g->ctx) ? tsr_ctx_status(d->g->ctx) : TSR_EINVAL, "%s",
                          tsr_ctx_error(d->g->ctx));
    char a[64], b[64];
    tsr_tensor declared = {.type = (tsr_type)r->type};
    memcpy(declared.ne, r->ne, sizeof(declared.ne));
    if (t->type != declared.type || !tsr_same_shape(t, &declared))
        return tsr__error(TSR_EINVAL, "declared %s %s but its sources give %s %s",
                          tsr_type_name(declared.type), tsr_shape_str(&declared, a, sizeof(a)),
                          tsr_type_name(t->type), tsr_shape_str(t, b, sizeof(b)));
    for (int k = 0; k < TSR_MAX_DIMS; k++)
        if (t->nb[k] != r->nb[k])
            return tsr__error(TSR_EINVAL, "declared nb[%d] = %llu, the op gives %zu", k,
                              (unsigned long long)r->nb[k], t->nb[k]);
    for (int k = 0; k < TSR_MAX_OP_PARAMS; k++)
        if (t->op_params[k] != r->op_params[k])
            return tsr__error(TSR_EINVAL, "op_params[%d] = %d, the op's constructor stores %d", k,
                              r->op_params[k], t->op_params[k]);
    for (int k = 0; k < TSR_MAX_SRC; k++)
        if (t->src[k] != s[k])
            return tsr__error(TSR_EINVAL, "source %d is not one the op takes there", k);
    const tsr_tensor *vs = r->view_src >= 0 ? d->g->map[r->view_src] : NULL;
    if (t->view_src != vs || (vs && t->view_offs != r->view_offs) || (!vs && r->view_offs))
        return tsr__error(TSR_EINVAL,
                          "declared view (record %d, offset %llu) differs from the op's",
                          r->view_src, (unsigned long long)r->view_offs);
    *out = t;
    if (vs) {
        if (r->buffer || r->offset)
            return tsr__error(TSR_EINVAL, "a view is placed by the tensor it views");
        return vs->buffer ? tsr_view_init(t) : TSR_OK;
    }
    return r->buffer ? place(d, t, r, ext) : TSR_OK;
}

static tsr_status build(decoder *d, uint32_t i, const rpc_rec *r, tsr_tensor **out)
{
    if (!tsr_type_valid((int)r->type))
        return tsr__error(TSR_ETYPE, "type %u", r->type);
    if (r->op >= TSR_OP_COUNT)
        return tsr__error(TSR_EINVAL, "op %u (there are %d)", r->op, TSR_OP_COUNT);
    if (r->flags & ~(RPC_REC_TENSOR_FLAGS | RPC_REC_NODE))
        return tsr__error(TSR_EINVAL, "flags 0x%x", r->flags);
    for (int k = 0; k < TSR_MAX_SRC; k++)
        if (r->src[k] < -1 || r->src[k] >= (int64_t)i)
            return tsr__error(TSR_EINVAL, "source %d names record %d (earlier records only)", k,
                              r->src[k]);
    if (r->view_src < -1 || r->view_src >= (int64_t)i)
        return tsr__error(TSR_EINVAL, "view_src names record %d (earlier records only)",
                          r->view_src);
    uint64_t ext;
    if (!tsr__rpc_extent(r->type, r->ne, r->nb, &ext))
        return tsr__error(TSR_ERANGE,
                          "shape [%lld, %lld, %lld, %lld] strides [%llu, %llu, %llu, %llu] out of "
                          "range",
                          (long long)r->ne[0], (long long)r->ne[1], (long long)r->ne[2],
                          (long long)r->ne[3], (unsigned long long)r->nb[0],
                          (unsigned long long)r->nb[1], (unsigned long long)r->nb[2],
                          (unsigned long long)r->nb[3]);
    if (tsr_type_block_size((tsr_type)r->type) != 1 && r->nb[0] != tsr_type_size((tsr_type)r->type))
        return tsr__error(TSR_EINVAL, "a %s tensor keeps its blocks dense (nb[0] = %zu)",
                          tsr_type_name((tsr_type)r->type), tsr_type_size((tsr_type)r->type));
    /* Kernels load whole elements: every stride and the data address must
     * keep them aligned (a Q8_0 block needs 2 bytes, its fp16 scale). */
    const size_t ea = r->type == TSR_TYPE_Q8_0 ? 2 : tsr_type_size((tsr_type)r->type);
    for (int k = 0; k < TSR_MAX_DIMS; k++)
        if (r->nb[k] % ea != 0)
            return tsr__error(TSR_EINVAL, "nb[%d] = %llu is not a multiple of %zu", k,
                              (unsigned long long)r->nb[k], ea);
    const bool layout = r->op == TSR_OP_NONE || tsr_op_is_view((tsr_op)r->op);
    tsr_status st = layout ? build_data(d, r, ext, out) : build_op(d, r, ext, out);
    if (st == TSR_OK && (*out)->data && (uintptr_t)(*out)->data % ea != 0)
        st = tsr__error(TSR_EINVAL, "data at an address not aligned to its %zu-byte elements", ea);
    if (st == TSR_OK) {
        memcpy((*out)->name, r->name, sizeof(r->name));
        (*out)->flags = (int32_t)(r->flags & RPC_REC_TENSOR_FLAGS);
    }
    return st;
}

/* Makes a slot ready for n records: its last run finished, memory reused. */
static tsr_status slot_prepare(srv_graph *g, tsr_dev *dev, uint32_t n)
{
    if (g->pending) {
        tsr_event_synchronize(g->done);
        g->pending = false;
    }
    g->valid = false;
    const size_t need = n ? n : 1;
    if (!g->ctx || g->ctx_cap < need) {
        tsr_ctx_free(g->ctx);
        g->ctx_cap = TSR_MAX(need, 2 * g->ctx_cap);
        if (!(g->ctx = tsr_ctx_new(g->ctx_cap))) {
            g->ctx_cap = 0;
            return tsr__error(TSR_ENOMEM, "a context of %zu tensors", need);
        }
    } else {
        tsr_ctx_reset(g->ctx);
    }
    if (!g->g || g->g_cap < need) {
        tsr_graph_free(g->g);
        g->g_cap = TSR_MAX(need, 2 * g->g_cap);
        if (!(g->g = tsr_graph_new(g->g_cap))) {
            g->g_cap = 0;
            return tsr__error(TSR_ENOMEM, "a graph of %zu nodes", need);
        }
    } else {
        tsr_graph_reset(g->g);
    }
    if (g->map_cap < need) {
        tsr_tensor **m = realloc(g->map, need * sizeof(*m));
        if (!m)
            return tsr__error(TSR_ENOMEM, "a map of %zu records", need);
        g->map = m;
        g->map_cap = need;
    }
    if (!g->done && dev)
        return tsr_event_new(dev, &g->done);
    return TSR_OK;
}

static tsr_status decode(decoder *d, rpc_rd *p, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        rpc_rec r;
        if (!tsr__rpc_rec_decode(p, &r))
            return tsr__error(TSR_EPROTO, "record %u of %u is truncated or malformed", i, n);
        tsr_tensor *t = NULL;
        tsr_status st = build(d, i, &r, &t);
        if (st == TSR_OK && (r.flags & RPC_REC_NODE)) {
            const int32_t flags = t->flags;
            st = tsr_graph_add_node(d->g->g, t);
            t->flags = flags; /* a node the client left out keeps its flag cleared */
        }
        if (st != TSR_OK) {
            char msg[RPC_REASON_MAX];
            snprintf(msg, sizeof(msg), "%s", tsr_last_error());
            return tsr__error(st, "record %u ('%s', %s): %s", i, r.name, tsr_op_name((tsr_op)r.op),
                              msg);
        }
        d->g->map[i] = t;
    }
    if (rpc_rd_left(p) != 0)
        return tsr__error(TSR_EPROTO, "%zu bytes after the last record", rpc_rd_left(p));
    return TSR_OK;
}

/* ---- commands ---------------------------------------------------------------------------------
 */

static tsr_status run_slot(srv_stream *sp, srv_graph *g)
{
    if (g->n_compute == 0)
        return TSR_OK; /* nothing runs: no job for the device stream */
    tsr_status st = tsr_backend_graph_compute_async(sp->be, g->g);
    if (st != TSR_OK)
        return st;
    sp->busy = true;
    if ((st = tsr_event_record(g->done, sp->be)) == TSR_OK)
        g->pending = true;
    return st;
}

tsr_status tsr__srv_graph_compute(srv_session *s, srv_req *q)
{
    const uint64_t sh = rpc_rd_u64(&q->p), id = rpc_rd_u64(&q->p);
    const uint32_t n = rpc_rd_u32(&q->p), flags = rpc_rd_u32(&q->p);
    srv_stream *sp;
    tsr_status st = tsr__srv_stream_get(s, sh, false, &sp, "stream");
    if (st != TSR_OK)
        return st;
    s->cur_stream = sp;
    /* Version 2: the u32 after the record count is the slot to keep the
     * graph in; version 1: zero, and the server alternates two slots. */
    if (q->p.bad || (s->version < 2 && flags != 0))
        return tsr__error(TSR_EPROTO, "a 24-byte header with zero flags comes first");
    if (flags >= RPC_GRAPH_SLOTS)
        return tsr__error(TSR_EINVAL, "graph slot %u (0..%d)", flags, RPC_GRAPH_SLOTS - 1);
    if (n > RPC_GRAPH_MAX_RECORDS || n > rpc_rd_left(&q->p) / RPC_REC_FIXED)
        return tsr__error(TSR_EPROTO, "%u records cannot fit in %zu bytes (at most %u records)", n,
                          rpc_rd_left(&q->p), RPC_GRAPH_MAX_RECORDS);
    const int k = s->version >= 2 ? (int)flags : 1 - sp->cur;
    srv_graph *g = &sp->slot[k];
    if ((st = slot_prepare(g, s->cfg->devs[sp->dev], n)) != TSR_OK)
        return st;
    decoder d = {.s = s, .g = g, .place = true};
    if ((st = decode(&d, &q->p, n)) != TSR_OK)
        return st;
    g->n_compute = 0;
    for (size_t i = 0; i < tsr_graph_n_nodes(g->g); i++)
        g->n_compute += (tsr_graph_node(g->g, i)->flags & TSR_TENSOR_FLAG_COMPUTE) != 0;
    if ((st = run_slot(sp, g)) != TSR_OK)
        return st;
    g->valid = true;
    g->id = id;
    sp->cur = k;
    return TSR_OK;
}

tsr_status tsr__srv_graph_recompute(srv_session *s, srv_req *q)
{
    const uint64_t sh = rpc_rd_u64(&q->p), id = rpc_rd_u64(&q->p);
    srv_stream *sp;
    tsr_status st = tsr__srv_stream_get(s, sh, false, &sp, "stream");
    if (st != TSR_OK)
        return st;
    s->cur_stream = sp;
    if (q->p.bad || rpc_rd_left(&q->p) != 0)
        return tsr__error(TSR_EPROTO, "a GRAPH_RECOMPUTE payload is 16 bytes");
    for (int k = 0; k < RPC_GRAPH_SLOTS; k++)
        if (sp->slot[k].valid && sp->slot[k].id == id)
            return run_slot(sp, &sp->slot[k]);
    return tsr__error(TSR_EINVAL,
                      "graph %llu is not cached on this stream (it failed, a buffer was freed, or "
                      "its slot was reused)",
                      (unsigned long long)id);
}

tsr_status tsr__srv_supports_op(srv_session *s, srv_req *q)
{
    const uint32_t dev = rpc_rd_u32(&q->p), n = rpc_rd_u32(&q->p);
    if (q->p.bad || dev >= (uint32_t)s->cfg->n_devs)
        return tsr__error(TSR_EINVAL, "device %u (this server has %d)", dev, s->cfg->n_devs);
    if (n == 0 || n > TSR_MAX_SRC + 1 || n > rpc_rd_left(&q->p) / RPC_REC_FIXED)
        return tsr__error(TSR_EPROTO, "%u records (1..%d: the sources, then the op)", n,
                          TSR_MAX_SRC + 1);
    srv_graph g = {0};
    tsr_status st = slot_prepare(&g, NULL, n);
    decoder d = {.s = s, .g = &g, .place = false};
    if (st == TSR_OK)
        st = decode(&d, &q->p, n);
    if (st == TSR_OK) {
        const bool ok = tsr_dev_supports_op(s->cfg->devs[dev], g.map[n - 1]);
        rpc_wr_u8(&s->reply, ok ? 1 : 0);
        rpc_wr_bytes(&s->reply, "\0\0\0\0\0\0\0", 7);
    }
    tsr_ctx_free(g.ctx);
    tsr_graph_free(g.g);
    free(g.map);
    return st;
}

/* ---- op masks ---------------------------------------------------------------------------------
 */

/* A small F32 instance of op, built by the constructors. */
static tsr_tensor *probe(tsr_ctx *c, tsr_op op)
{
    const tsr_type F = TSR_TYPE_F32, I = TSR_TYPE_I32;
    tsr_tensor *a = tsr_new_tensor_2d(c, F, 64, 4), *b = tsr_new_tensor_2d(c, F, 64, 4);
    tsr_tensor *ids = tsr_new_tensor_1d(c, I, 4);
    tsr_tensor *s[TSR_MAX_SRC] = {a, b, NULL};
    int32_t p[TSR_MAX_OP_PARAMS] = {0};
    const int64_t ne[4] = {64, 4, 1, 1};
    switch (op) {
    case TSR_OP_GET_ROWS:
        s[1] = ids;
        break;
    case TSR_OP_SET_ROWS:
        s[0] = b;
        s[1] = ids;
        s[2] = a;
        break;
    case TSR_OP_MUL_MAT_ID:
        s[0] = tsr_new_tensor_3d(c, F, 64, 8, 2);
        s[1] = tsr_new_tensor_3d(c, F, 64, 2, 3);
        s[2] = tsr_new_tensor_2d(c, I, 2, 3);
        break;
    case TSR_OP_ADD_ID:
        s[0] = tsr_new_tensor_3d(c, F, 64, 2, 3);
        s[1] = tsr_new_tensor_2d(c, F, 64, 2);
        s[2] = tsr_new_tensor_2d(c, I, 2, 3);
        break;
    case TSR_OP_SCALE:
    case TSR_OP_RMS_NORM:
    case TSR_OP_SOFT_MAX: {
        const float one = 1.0f;
        memcpy(&p[0], &one, sizeof(one));
        s[1] = NULL;
        break;
    }
    case TSR_OP_ROPE: {
        s[0] = tsr_new_tensor_3d(c, F, 64, 2, 4);
        s[1] = ids;
        const float base = 10000.0f, scale = 1.0f;
        p[0] = 64;
        memcpy(&p[2], &base, sizeof(base));
        memcpy(&p[3], &scale, sizeof(scale));
        break;
    }
    case TSR_OP_FLASH_ATTN_EXT:
        s[0] = tsr_new_tensor_4d(c, F, 64, 4, 2, 1);
        s[1] = tsr_new_tensor_4d(c, F, 64, 8, 2, 1);
        s[2] = tsr_new_tensor_4d(c, F, 64, 8, 2, 1);
        break;
    case TSR_OP_TOP_K:
        p[0] = 2;
        s[1] = NULL;
        break;
    case TSR_OP_GLU:
    case TSR_OP_CONCAT:
    case TSR_OP_MUL_MAT:
    case TSR_OP_CPY:
    case TSR_OP_ADD:
    case TSR_OP_SUB:
    case TSR_OP_MUL:
    case TSR_OP_DIV:
        break;
    default:
        s[1] = NULL;
        break;
    }
    return tsr__op_rebuild(c, op, p, s, ne);
}

void tsr__srv_config_probe(srv_config *cfg)
{
    tsr_ctx *c = tsr_ctx_new(64);
    for (int d = 0; d < cfg->n_devs; d++) {
        cfg->op_mask[d] = 0;
        for (int op = TSR_OP_NONE + 1; op < TSR_OP_COUNT && c; op++) {
            tsr_ctx_reset(c);
            if (tsr_op_is_view((tsr_op)op)) {
                cfg->op_mask[d] |= 1ull << op;
                continue;
            }
            tsr_tensor *t = probe(c, (tsr_op)op);
            if (t && tsr_dev_supports_op(cfg->devs[d], t))
                cfg->op_mask[d] |= 1ull << op;
        }
    }
    tsr_ctx_free(c);
}
