/* rpc_server/session_collective.c — ALLREDUCE (protocol version 2): the
 * in-place sum of tensors spread over this server's devices and the other
 * servers of the client's mesh, run by the servers among themselves.
 *
 * Not the links (session_peer.c). The client sends one ALLREDUCE per
 * server, pipelined; each server waits for the streams that own its
 * tensors, sums its own tensors in order (tensor 0 + tensor 1 + ...) into
 * an F32 accumulator, then combines with the other servers over the mesh's
 * links: recursive doubling for small tensors (log2 P rounds of whole
 * tensors; with a non-power-of-two P the extra ranks first fold into the
 * lower ones and get the result back at the end) and a ring for large ones
 * (reduce-scatter then all-gather in P chunks, so each server sends and
 * adds about one tensor's worth whatever P is; each step starts its send,
 * receives, then waits for the send). Every server ends with
 * bit-identical sums: pairs add the same two values (IEEE addition is
 * commutative) and ring chunks are summed at one server and copied. F16
 * and BF16 are summed and exchanged in F32 and rounded once at the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "rpc_server/server.h"

#define RING_MIN_BYTES (256u << 10) /* F32 bytes from which the ring runs */
#define TAG_FINAL 255u              /* the result sent back to a folded rank */

typedef struct ar_local {
    srv_stream *st;
    srv_buf *b;
    uint64_t off;
} ar_local;

/* ---- element conversion ------------------------------------------------------------------- */

static void load_f32(uint32_t type, const void *src, float *dst, size_t n, bool add)
{
    if (type == TSR_TYPE_F32) {
        const float *x = src;
        if (add)
            for (size_t i = 0; i < n; i++)
                dst[i] += x[i];
        else
            memcpy(dst, x, n * sizeof(float));
        return;
    }
    const uint16_t *h = src;
    const bool f16 = type == TSR_TYPE_F16;
    for (size_t i = 0; i < n; i++) {
        const float v = f16 ? tsr_fp16_to_f32(h[i]) : tsr_bf16_to_f32(h[i]);
        dst[i] = add ? dst[i] + v : v;
    }
}

static void store_f32(uint32_t type, const float *src, void *dst, size_t n)
{
    if (type == TSR_TYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    uint16_t *h = dst;
    const bool f16 = type == TSR_TYPE_F16;
    for (size_t i = 0; i < n; i++)
        h[i] = f16 ? tsr_f32_to_fp16(src[i]) : tsr_f32_to_bf16(src[i]);
}

/* ---- exchanges ------------------------------------------------------------------------------- */

static tsr_status send_f32(srv_mesh *m, uint32_t to, uint64_t tag, const float *p, size_t n)
{
    return tsr__srv_peer_send(m, to, tag, p, n * sizeof(float));
}

/* A received message of n floats from `from`: checked, added to (or copied
 * over) acc, and given back. */
static tsr_status apply(srv_mesh *m, uint32_t from, uint64_t tag, srv_msg *msg, float *acc,
                        size_t n, bool add)
{
    tsr_status st = TSR_OK;
    if (msg->len != n * sizeof(float))
        st = tsr__error(TSR_EINVAL, "ALLREDUCE: rank %u sent %zu bytes for step %u; %zu expected",
                        from, msg->len, (unsigned)(tag & 0xff), n * sizeof(float));
    else
        load_f32(TSR_TYPE_F32, msg->data, acc, n, add);
    tsr__srv_peer_done(m, from, msg);
    return st;
}

/* Takes the n floats tagged `tag` from `from` into acc. */
static tsr_status recv_f32(srv_mesh *m, uint32_t from, uint64_t tag, float *acc, size_t n, bool add)
{
    srv_msg *msg;
    const tsr_status st = tsr__srv_peer_take(m, from, tag, &msg);
    return st == TSR_OK ? apply(m, from, tag, msg, acc, n, add) : st;
}

/* One step of an exchange: sends n_s floats to `to` while receiving n_r
 * from `from` into acc_r (added or copied). The send is started first and
 * waited for after the receive, so two servers exchanging never both wait
 * on a send; the received bytes are applied after the send finished, so
 * acc_r may be what was sent. */
static tsr_status exchange(srv_mesh *m, uint32_t to, const float *src, size_t n_s, uint32_t from,
                           float *acc_r, size_t n_r, uint64_t tag, bool add)
{
    srv_msg *msg = NULL;
    tsr_status st = tsr__srv_peer_send_start(m, to, tag, src, n_s * sizeof(float));
    if (st == TSR_OK)
        st = tsr__srv_peer_take(m, from, tag, &msg);
    const tsr_status ws = tsr__srv_peer_send_wait(m, to);
    if (st != TSR_OK) {
        tsr__srv_peer_done(m, from, msg);
        return st;
    }
    st = apply(m, from, tag, msg, acc_r, n_r, add);
    return ws != TSR_OK ? ws : st;
}

/* Recursive doubling over the P ranks g[] (this server is g[p]). */
static tsr_status doubling(srv_mesh *m, const uint32_t *g, uint32_t P, uint32_t p, uint64_t tag,
                           float *acc, size_t n)
{
    uint32_t p2 = 1;
    while (p2 * 2 <= P)
        p2 *= 2;
    tsr_status st;
    if (p >= p2) {
        if ((st = send_f32(m, g[p - p2], tag, acc, n)) != TSR_OK)
            return st;
        return recv_f32(m, g[p - p2], tag + TAG_FINAL, acc, n, false);
    }
    if (p + p2 < P && (st = recv_f32(m, g[p + p2], tag, acc, n, true)) != TSR_OK)
        return st;
    uint64_t step = 1;
    for (uint32_t mask = 1; mask < p2; mask <<= 1, step++) {
        const uint32_t partner = g[p ^ mask];
        if ((st = exchange(m, partner, acc, n, partner, acc, n, tag + step, true)) != TSR_OK)
            return st;
    }
    if (p + p2 < P)
        return send_f32(m, g[p + p2], tag + TAG_FINAL, acc, n);
    return TSR_OK;
}

/* Ring: reduce-scatter, then all-gather, in P chunks. */
static tsr_status ring(srv_mesh *m, const uint32_t *g, uint32_t P, uint32_t p, uint64_t tag,
                       float *acc, size_t n)
{
#define LO(c) ((size_t)(c)*n / P)
#define LEN(c) (LO((c) + 1) - LO(c))
    const uint32_t right = g[(p + 1) % P], left = g[(p + P - 1) % P];
    tsr_status st;
    for (uint32_t s = 0; s + 1 < P; s++) {
        const uint32_t sc = (p + P - s) % P, rc = (p + 2 * P - s - 1) % P;
        if ((st = exchange(m, right, acc + LO(sc), LEN(sc), left, acc + LO(rc), LEN(rc),
                           tag + 1 + s, true)) != TSR_OK)
            return st;
    }
    for (uint32_t s = 0; s + 1 < P; s++) {
        const uint32_t sc = (p + 1 + P - s) % P, rc = (p + P - s) % P;
        if ((st = exchange(m, right, acc + LO(sc), LEN(sc), left, acc + LO(rc), LEN(rc),
                           tag + P + s, false)) != TSR_OK)
            return st;
    }
    return TSR_OK;
#undef LO
#undef LEN
}

/* ---- the command ----------------------------------------------------------------------------- */

/* Reads and checks the request: the group's ranks and the local tensors. */
static tsr_status parse(srv_session *s, srv_req *q, uint64_t *tag, uint32_t *type, uint64_t *n,
                        uint32_t *g, uint32_t *P, uint32_t *p, ar_local *loc, uint32_t *n_loc)
{
    *tag = rpc_rd_u64(&q->p);
    *type = rpc_rd_u32(&q->p);
    *n_loc = rpc_rd_u32(&q->p);
    *n = rpc_rd_u64(&q->p);
    *P = rpc_rd_u32(&q->p);
    const uint32_t zero = rpc_rd_u32(&q->p);
    if (q->p.bad || zero != 0)
        return tsr__error(TSR_EINVAL, "a 32-byte header with a zero reserved field");
    if (*type != TSR_TYPE_F32 && *type != TSR_TYPE_F16 && *type != TSR_TYPE_BF16)
        return tsr__error(TSR_ETYPE, "type %u (F32, F16 or BF16)", *type);
    if (*n_loc < 1 || *n_loc > RPC_AR_MAX_LOCAL)
        return tsr__error(TSR_EINVAL, "%u local tensors (1..%d)", *n_loc, RPC_AR_MAX_LOCAL);
    const uint32_t size = s->mesh ? tsr__srv_mesh_size(s->mesh) : 1;
    const uint32_t me = s->mesh ? tsr__srv_mesh_rank(s->mesh) : 0;
    if (*P < 1 || *P > size)
        return tsr__error(TSR_EINVAL, "a group of %u servers in a mesh of %u%s", *P, size,
                          s->mesh ? "" : " (no MESH_JOIN yet)");
    if (*n > (uint64_t)RPC_MAX_DIM)
        return tsr__error(TSR_ERANGE, "%llu elements", (unsigned long long)*n);
    *p = UINT32_MAX;
    for (uint32_t i = 0; i < *P; i++) {
        g[i] = rpc_rd_u32(&q->p);
        if (q->p.bad || g[i] >= size)
            return tsr__error(TSR_EINVAL, "group member %u: rank %u of %u", i, g[i], size);
        for (uint32_t j = 0; j < i; j++)
            if (g[j] == g[i])
                return tsr__error(TSR_EINVAL, "rank %u appears twice in the group", g[i]);
        if (g[i] == me)
            *p = i;
    }
    if (*p == UINT32_MAX)
        return tsr__error(TSR_EINVAL, "this server (rank %u) is not in the group", me);
    const uint64_t es = (uint64_t)tsr_type_size(*type), bytes = *n * es;
    for (uint32_t i = 0; i < *n_loc; i++) {
        const uint64_t sh = rpc_rd_u64(&q->p), bh = rpc_rd_u64(&q->p);
        loc[i].off = rpc_rd_u64(&q->p);
        if (q->p.bad)
            return tsr__error(TSR_EINVAL, "%u local tensors announced, fewer sent", *n_loc);
        tsr_status st = tsr__srv_stream_get(s, sh, false, &loc[i].st, "stream");
        if (st == TSR_OK)
            st = tsr__srv_buf_range(s, bh, loc[i].off, bytes, &loc[i].b, "ALLREDUCE");
        if (st != TSR_OK)
            return st;
        if (loc[i].off % es)
            return tsr__error(TSR_EINVAL, "tensor %u at offset %llu: not on a %llu-byte element", i,
                              (unsigned long long)loc[i].off, (unsigned long long)es);
        for (uint32_t j = 0; j < i; j++)
            if (loc[j].b == loc[i].b && loc[j].off < loc[i].off + bytes &&
                loc[i].off < loc[j].off + bytes && bytes > 0)
                return tsr__error(TSR_EINVAL, "tensors %u and %u share memory", j, i);
    }
    if (rpc_rd_left(&q->p) != 0)
        return tsr__error(TSR_EINVAL, "%zu bytes after the last tensor", rpc_rd_left(&q->p));
    return TSR_OK;
}

/* Adds (or copies) local tensor i into acc. */
static tsr_status load_local(srv_session *s, const ar_local *l, uint32_t type, float *acc, size_t n,
                             bool add)
{
    const size_t bytes = n * tsr_type_size(type);
    const uint8_t *src = l->b->host ? l->b->host + l->off : tsr__srv_staging(s, bytes);
    if (!src)
        return tsr__error(TSR_ENOMEM, "staging of %zu bytes", bytes);
    if (!l->b->host) {
        const tsr_status st = tsr_tensor_get(&l->b->span, (void *)src, (size_t)l->off, bytes);
        if (st != TSR_OK)
            return st;
    }
    load_f32(type, src, acc, n, add);
    return TSR_OK;
}

static tsr_status store_local(srv_session *s, const ar_local *l, uint32_t type, const float *acc,
                              size_t n)
{
    const size_t bytes = n * tsr_type_size(type);
    if (l->b->host) {
        if ((const void *)(l->b->host + l->off) != (const void *)acc)
            store_f32(type, acc, l->b->host + l->off, n);
        return TSR_OK;
    }
    uint8_t *tmp = tsr__srv_staging(s, bytes);
    if (!tmp)
        return tsr__error(TSR_ENOMEM, "staging of %zu bytes", bytes);
    store_f32(type, acc, tmp, n);
    return tsr_tensor_set(&l->b->span, tmp, (size_t)l->off, bytes);
}

tsr_status tsr__srv_allreduce(srv_session *s, srv_req *q)
{
    uint64_t tag, n64;
    uint32_t type = 0, P = 0, p = 0, n_loc = 0, g[RPC_MESH_MAX];
    ar_local loc[RPC_AR_MAX_LOCAL];
    tsr_status st = parse(s, q, &tag, &type, &n64, g, &P, &p, loc, &n_loc);
    if (st != TSR_OK)
        return st;
    s->cur_stream = loc[0].st;
    for (uint32_t i = 0; i < n_loc; i++)
        tsr__srv_stream_quiesce(loc[i].st);
    const size_t n = (size_t)n64;
    if (n == 0)
        return TSR_OK;
    /* F32 in host memory is summed in place in tensor 0. */
    float *acc;
    if (type == TSR_TYPE_F32 && loc[0].b->host) {
        acc = (float *)(void *)(loc[0].b->host + loc[0].off);
    } else {
        if (n > s->acc_cap) {
            float *a = realloc(s->acc, n * sizeof(float));
            if (!a)
                return tsr__error(TSR_ENOMEM, "an accumulator of %zu floats", n);
            s->acc = a;
            s->acc_cap = n;
        }
        acc = s->acc;
        if ((st = load_local(s, &loc[0], type, acc, n, false)) != TSR_OK)
            return st;
    }
    for (uint32_t i = 1; i < n_loc && st == TSR_OK; i++)
        st = load_local(s, &loc[i], type, acc, n, true);
    if (st == TSR_OK && P > 1)
        st = n * sizeof(float) >= RING_MIN_BYTES && n >= P
                 ? ring(s->mesh, g, P, p, tag, acc, n)
                 : doubling(s->mesh, g, P, p, tag, acc, n);
    for (uint32_t i = 0; i < n_loc && st == TSR_OK; i++)
        st = store_local(s, &loc[i], type, acc, n);
    if (st != TSR_OK)
        for (uint32_t i = 1; i < n_loc; i++)
            if (loc[i].st->err == TSR_OK) {
                loc[i].st->err = st;
                snprintf(loc[i].st->err_msg, sizeof(loc[i].st->err_msg), "ALLREDUCE: %s",
                         tsr_last_error());
            }
    return st;
}
