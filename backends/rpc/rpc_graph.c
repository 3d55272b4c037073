/* backends/rpc/rpc_graph.c — the client's graph serializer: a graph's nodes,
 * and every tensor they read, as tensor records (rpc_proto.h).
 *
 * Not the decoder (rpc_server/session_graph.c). Key design choice: only the
 * graph's nodes travel as ops; every other tensor a node reads (weights,
 * inputs, results of earlier graphs) travels as data — a type, shape,
 * strides and a place in a buffer, or a view of such a root — so the walk
 * never follows sources beyond the graph and the server rebuilds nothing it
 * was not asked to run. Records are emitted sources-first; a node that reads
 * a node the graph computes later is an error, not a guess.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/rpc/rpc_client.h"
#include "core/internal.h"

static size_t slot_of(const rpc_ser *s, const tsr_tensor *t)
{
    uintptr_t h = (uintptr_t)t;
    h ^= h >> 17;
    h *= 0x9e3779b97f4a7c15ull;
    size_t i = (size_t)(h >> 7) & (s->hcap - 1);
    while (s->keys[i] && s->keys[i] != t)
        i = (i + 1) & (s->hcap - 1);
    return i;
}

static tsr_status reserve(rpc_ser *s, size_t entries)
{
    size_t cap = 64;
    while (cap < 2 * entries)
        cap *= 2;
    if (cap > s->hcap) {
        free(s->keys);
        free(s->vals);
        s->keys = calloc(cap, sizeof(*s->keys));
        s->vals = malloc(cap * sizeof(*s->vals));
        if (!s->keys || !s->vals) {
            s->hcap = 0;
            return tsr__error(TSR_ENOMEM, "rpc: serializer table of %zu entries", cap);
        }
        s->hcap = cap;
    } else {
        memset(s->keys, 0, s->hcap * sizeof(*s->keys));
    }
    return TSR_OK;
}

typedef struct {
    rpc_ser *s;
    rpc_buf_lookup_fn own;
    void *ctx;
    const char *who;
    size_t limit; /* table entries allowed (half the table) */
    size_t used;
} walk;

static tsr_status put(walk *w, const tsr_tensor *t, int32_t v)
{
    if (w->used >= w->limit)
        return tsr__error(TSR_ERANGE, "%s: graph reads more than %zu tensors", w->who, w->limit);
    const size_t i = slot_of(w->s, t);
    if (!w->s->keys[i])
        w->used++;
    w->s->keys[i] = t;
    w->s->vals[i] = v;
    return TSR_OK;
}

/* Placement of a root tensor: its buffer's handle and the offset in it. */
static tsr_status placement(walk *w, const tsr_tensor *t, rpc_rec *r)
{
    if (!t->buffer)
        return TSR_OK;
    uint64_t h;
    uintptr_t base;
    if (!w->own(w->ctx, t->buffer, &h, &base))
        return tsr__error(TSR_EINVAL, "%s: '%s' lives in %s memory, which this server cannot read",
                          w->who, t->name, tsr_buft_name(tsr_buf_buft(t->buffer)));
    const uintptr_t d = (uintptr_t)t->data;
    if (d < base || d - base > tsr_buf_size(t->buffer))
        return tsr__error(TSR_EINTERNAL, "%s: '%s' has a data address outside its buffer", w->who,
                          t->name);
    r->buffer = h;
    r->offset = d - base;
    return TSR_OK;
}

static void fill_common(rpc_rec *r, const tsr_tensor *t)
{
    memset(r, 0, sizeof(*r));
    r->type = (uint32_t)t->type;
    for (int k = 0; k < TSR_MAX_DIMS; k++) {
        r->ne[k] = t->ne[k];
        r->nb[k] = t->nb[k];
    }
    for (int k = 0; k < TSR_MAX_SRC; k++)
        r->src[k] = -1;
    r->view_src = -1;
    memcpy(r->name, t->name, sizeof(r->name));
    r->name[TSR_MAX_NAME - 1] = '\0';
}

/* The root a view's memory belongs to, with the offset from it. */
static const tsr_tensor *root_of(const tsr_tensor *t, uint64_t *offs)
{
    *offs = t->view_offs;
    const tsr_tensor *r = t->view_src;
    for (int depth = 0; r && r->view_src && depth < 64; depth++) {
        *offs += r->view_offs;
        r = r->view_src;
    }
    return r;
}

static tsr_status ref(walk *w, const tsr_tensor *t, int32_t *out);

static tsr_status emit(walk *w, const tsr_tensor *t, const rpc_rec *r)
{
    tsr__rpc_rec_encode(&w->s->w, r);
    if (w->s->w.bad)
        return tsr__error(TSR_ENOMEM, "%s: serializing the graph", w->who);
    return put(w, t, (int32_t)w->s->n++);
}

/* A tensor the graph only reads: its memory, nothing about how it was made. */
static tsr_status emit_data(walk *w, const tsr_tensor *t, int32_t *out)
{
    rpc_rec r;
    fill_common(&r, t);
    r.op = TSR_OP_NONE;
    r.flags = (uint32_t)t->flags & RPC_REC_TENSOR_FLAGS & ~(uint32_t)TSR_TENSOR_FLAG_COMPUTE;
    uint64_t offs;
    const tsr_tensor *root = root_of(t, &offs);
    tsr_status st = TSR_OK;
    if (root) {
        st = ref(w, root, &r.view_src);
        r.view_offs = offs;
    } else {
        st = placement(w, t, &r);
    }
    if (st == TSR_OK)
        st = emit(w, t, &r);
    *out = (int32_t)w->s->n - 1;
    return st;
}

static tsr_status ref(walk *w, const tsr_tensor *t, int32_t *out)
{
    const size_t i = slot_of(w->s, t);
    if (w->s->keys[i]) {
        if (w->s->vals[i] >= 0) {
            *out = w->s->vals[i];
            return TSR_OK;
        }
        return tsr__error(TSR_EINVAL, "%s: a node reads '%s', which the graph computes later",
                          w->who, t->name);
    }
    return emit_data(w, t, out);
}

static tsr_status emit_node(walk *w, const tsr_tensor *t)
{
    rpc_rec r;
    fill_common(&r, t);
    const bool layout = t->op == TSR_OP_NONE || tsr_op_is_view(t->op);
    r.op = (uint32_t)t->op;
    memcpy(r.op_params, t->op_params, sizeof(r.op_params));
    r.flags = ((uint32_t)t->flags & RPC_REC_TENSOR_FLAGS) | RPC_REC_NODE;
    tsr_status st = TSR_OK;
    for (int k = 0; k < TSR_MAX_SRC && st == TSR_OK; k++)
        if (t->src[k] && (!layout || k == 0) && t->op != TSR_OP_NONE)
            st = ref(w, t->src[k], &r.src[k]);
    uint64_t offs;
    const tsr_tensor *root = root_of(t, &offs);
    if (st == TSR_OK && root) {
        st = ref(w, root, &r.view_src);
        r.view_offs = offs;
    } else if (st == TSR_OK) {
        st = placement(w, t, &r);
    }
    return st == TSR_OK ? emit(w, t, &r) : st;
}

tsr_status tsr__rpc_serialize(rpc_ser *s, tsr_graph *g, rpc_buf_lookup_fn own, void *ctx,
                              const char *who)
{
    const size_t n = tsr_graph_n_nodes(g);
    const size_t max = (n + 1) * (TSR_MAX_SRC + 2);
    tsr_status st = reserve(s, max);
    if (st != TSR_OK)
        return st;
    s->w.len = 0;
    s->w.bad = false;
    s->n = 0;
    walk w = {.s = s, .own = own, .ctx = ctx, .who = who, .limit = s->hcap / 2};
    /* Nodes are known before anything is emitted, so a read of a node that
     * comes later is caught. */
    for (size_t i = 0; i < n && st == TSR_OK; i++)
        st = put(&w, tsr_graph_node(g, i), -2);
    for (size_t i = 0; i < n && st == TSR_OK; i++) {
        const tsr_tensor *t = tsr_graph_node(g, i);
        const size_t k = slot_of(s, t);
        if (s->vals[k] >= 0)
            continue; /* the same tensor listed twice */
        st = emit_node(&w, t);
    }
    if (st == TSR_OK && s->n > RPC_GRAPH_MAX_RECORDS)
        st = tsr__error(TSR_ERANGE, "%s: a graph of %u tensors (at most %u)", who, s->n,
                        RPC_GRAPH_MAX_RECORDS);
    return st;
}

void tsr__rpc_ser_free(rpc_ser *s)
{
    free(s->w.p);
    free(s->keys);
    free(s->vals);
    *s = (rpc_ser){0};
}

/* ---- the graph cache --------------------------------------------------------------------------
 */

static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

uint64_t tsr__rpc_cache_find(rpc_graph_cache *c, int n_slots, const rpc_wr *w, uint64_t epoch)
{
    const uint64_t h = hash_bytes(w->p, w->len);
    for (int i = 0; i < n_slots; i++) {
        rpc_cached *e = &c->e[i];
        if (e->valid && e->hash == h && e->epoch == epoch && e->bytes.len == w->len &&
            memcmp(e->bytes.p, w->p, w->len) == 0) {
            e->used = ++c->tick;
            return e->id;
        }
    }
    return 0;
}

uint32_t tsr__rpc_cache_put(rpc_graph_cache *c, int n_slots, const rpc_wr *w, uint64_t id,
                            uint64_t epoch)
{
    int k = 0;
    for (int i = 0; i < n_slots; i++) {
        if (!c->e[i].valid) {
            k = i;
            break;
        }
        if (c->e[i].used < c->e[k].used)
            k = i;
    }
    rpc_cached *e = &c->e[k];
    e->bytes.len = 0;
    e->bytes.bad = false;
    rpc_wr_bytes(&e->bytes, w->p, w->len);
    e->valid = !e->bytes.bad; /* out of memory: sent again next time */
    e->hash = hash_bytes(w->p, w->len);
    e->id = id;
    e->epoch = epoch;
    e->used = ++c->tick;
    return (uint32_t)k;
}

void tsr__rpc_cache_free(rpc_graph_cache *c)
{
    for (int i = 0; i < RPC_GRAPH_SLOTS; i++)
        free(c->e[i].bytes.p);
}
