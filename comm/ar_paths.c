/* comm/ar_paths.c — the generic all-reduce paths, built only from the public
 * backend API: async copies between streams, events, and one-node ADD graphs
 * whose result is placed on the destination's own memory (an in-place add).
 *
 * Not the engine (allreduce.c: checks, temporaries, path choice, slots).
 *
 * Both paths *pull*: device j copies a partner's data into its own receive
 * buffer on its own stream, then adds it on its own stream. The copy
 * contract (backend.h) orders a copy after the work already queued on both
 * streams, but NOT the source stream's later work after the copy, so a
 * device must not modify data that a partner's copy may still be reading:
 * events recorded after those copies, waited on before the modification,
 * enforce it. Every tensor touched is a 1-D *alias*: a fresh leaf tensor
 * placed (tsr_buf_place_tensor) at an aligned offset of the right buffer, so
 * graphs never reach the caller's tensors' own sources.
 *
 * Butterfly (recursive doubling), n devices, P = largest power of two <= n:
 *   fold      j in [0, n-P):  W_j += W_{j+P}
 *   round r   j in [0, P):    W_j += W_{j ^ 2^r}      (log2 P rounds)
 *   unfold    j in [0, n-P):  W_{j+P} = W_j
 * Ring, n chunks C_k: reduce-scatter, step s in [0, n-1): j adds chunk
 * (j-1-s) mod n of its left neighbour into its own; after it, j holds the
 * full sum of chunk (j+1) mod n. All-gather, step t in [0, n-1): j copies
 * chunk (j-t) mod n from its left neighbour. 2(n-1)/n of the data per device.
 *
 * Direct mode: when every device can read every other's memory
 * (tsr_dev_supports_buft: CPU devices, GPUs with peer access), a pull runs
 * on the receiver's stream as a local copy and is ordered by an event
 * recorded on the sender at the start of the round, not by the copy
 * contract — which would also order it after the sender's own pull of the
 * same round and chain the round's pulls one after another. The ring's
 * reduce-scatter then also adds the neighbour's chunk straight from its
 * memory, one pass over the data less.
 */
#include <string.h>

#include "comm/ar_impl.h"

/* ---- building blocks -------------------------------------------------------------- */

/* A 1-D leaf of ne elements placed at buf + off (off is aligned). */
static tsr_status ar_alias(ar_call *c, tsr_buf *buf, size_t off, int64_t ne, tsr_tensor **out)
{
    tsr_tensor *t = tsr_new_tensor_1d(c->slot->ctx, c->type, ne);
    if (!t)
        return tsr__error(TSR_EINTERNAL, "allreduce: alias context full (%s)",
                          tsr_ctx_error(c->slot->ctx));
    tsr_status st = tsr_buf_place_tensor(buf, t, off);
    if (st != TSR_OK)
        return st;
    *out = t;
    return TSR_OK;
}

/* W_j[first, first + ne) and receive buffer k of device j. */
static tsr_status ar_work(ar_call *c, int j, int64_t first, int64_t ne, tsr_tensor **out)
{
    return ar_alias(c, c->wbuf[j], c->woff[j] + (size_t)first * c->es, ne, out);
}

static tsr_status ar_recv(ar_call *c, int j, int k, int64_t ne, tsr_tensor **out)
{
    return ar_alias(c, c->ar->tmp[j], c->roff[j][k], ne, out);
}

/* Enqueues dst += src on device j's stream: one ADD node placed at dst's
 * own memory. */
static tsr_status ar_add(ar_call *c, int j, tsr_tensor *dst, tsr_tensor *src)
{
    ar_slot *s = c->slot;
    if (s->used_graphs >= s->n_graphs)
        return tsr__error(TSR_EINTERNAL, "allreduce: %zu ADD graphs per call exceeded",
                          s->n_graphs);
    tsr_tensor *sum = tsr_add(s->ctx, dst, src);
    if (!sum)
        return tsr__error(TSR_EINTERNAL, "allreduce: ADD node: %s", tsr_ctx_error(s->ctx));
    const size_t off = (size_t)((char *)dst->data - (char *)tsr_buf_base(dst->buffer));
    tsr_status st = tsr_buf_place_tensor(dst->buffer, sum, off);
    if (st != TSR_OK)
        return st;
    tsr_graph *g = s->graphs[s->used_graphs++];
    tsr_graph_reset(g);
    if ((st = tsr_graph_build(g, sum)) != TSR_OK)
        return st;
    return tsr_backend_graph_compute_async(c->ar->b[j], g);
}

/* Device `to` pulls `src` (data of device `from`) into `dst` on its stream.
 * Direct: `to` reads `from`'s memory itself, ordered by an event the caller
 * made it wait on; naming `to` as the source stream too keeps the copy from
 * also waiting for everything queued on `from` since (its own pull of the
 * same round, which would chain every pull of a round one after another). */
static tsr_status ar_pull(ar_call *c, int from, int to, tsr_tensor *src, tsr_tensor *dst)
{
    tsr_backend *b = c->ar->b[to];
    return tsr_backend_copy_async(c->direct ? b : c->ar->b[from], b, src, dst);
}

/* Makes stream j wait until stream k reaches its current end (event e[k]
 * recorded there now). */
static tsr_status ar_record(ar_call *c, tsr_event **e, int k)
{
    return tsr_event_record(e[k], c->ar->b[k]);
}

static tsr_status ar_wait(ar_call *c, tsr_event **e, int j, int k)
{
    return tsr_event_wait(c->ar->b[j], e[k]);
}

/* The stage copies: W_j = T_j before, T_j = W_j after (staged devices only,
 * both on stream j). */
static tsr_status ar_stage(ar_call *c, bool in)
{
    for (int j = 0; j < c->ar->n; j++) {
        if (!c->staged[j])
            continue;
        tsr_backend *b = c->ar->b[j];
        tsr_status st = in ? tsr_backend_copy_async(b, b, c->t[j], c->stage[j])
                           : tsr_backend_copy_async(b, b, c->stage[j], c->t[j]);
        if (st != TSR_OK)
            return st;
    }
    return TSR_OK;
}

/* ---- layout of the temporaries ------------------------------------------------------------ */

void tsr__ar_chunk(int64_t ne, int64_t unit, int n, int k, int64_t *first, int64_t *len)
{
    const int64_t units = (ne + unit - 1) / unit;
    const int64_t per = units / n, extra = units % n;
    const int64_t u0 = per * k + TSR_MIN(k, extra);
    const int64_t u1 = u0 + per + (k < extra ? 1 : 0);
    *first = TSR_MIN(ne, u0 * unit);
    *len = TSR_MIN(ne, u1 * unit) - *first;
}

static int ar_log2(int p)
{
    int r = 0;
    while ((1 << (r + 1)) <= p)
        r++;
    return r;
}

size_t tsr__ar_temp_layout(const ar_call *c, tsr_allreduce_path path, int j, bool staged,
                           size_t roff[2])
{
    const int n = c->ar->n;
    const size_t align = (size_t)c->unit * c->es;
    const size_t whole = tsr__align_up((size_t)c->ne * c->es, align);
    size_t recv;
    int n_recv;
    if (path == TSR_ALLREDUCE_RING) {
        int64_t first, len;
        tsr__ar_chunk(c->ne, c->unit, n, 0, &first, &len); /* chunk 0 is the largest */
        recv = tsr__align_up((size_t)len * c->es, align);
        n_recv = c->direct ? 0 : n > 2 ? 2 : 1;
    } else {
        const int p = 1 << ar_log2(n);
        const int uses = j >= p ? 0 : ar_log2(p) + (j < n - p ? 1 : 0); /* rounds + fold */
        recv = whole;
        n_recv = TSR_MIN(2, uses);
    }
    const size_t stage = staged ? whole : 0;
    roff[0] = stage;
    roff[1] = stage + recv;
    return stage + (size_t)n_recv * recv;
}

/* ---- butterfly ----------------------------------------------------------------------------- */

tsr_status tsr__ar_butterfly(ar_call *c)
{
    const int n = c->ar->n, P = 1 << ar_log2(n), extra = n - P;
    ar_slot *s = c->slot;
    tsr_tensor *w[AR_MAX], *r[AR_MAX][2];
    int use[AR_MAX] = {0}; /* receive buffer uses so far: alternate per round */
    tsr_status st;
    for (int j = 0; j < n; j++) {
        if ((st = ar_work(c, j, 0, c->ne, &w[j])) != TSR_OK)
            return st;
        r[j][0] = r[j][1] = NULL;
    }
    for (int j = 0; j < P; j++) {
        const int uses = ar_log2(P) + (j < extra ? 1 : 0);
        for (int k = 0; k < TSR_MIN(2, uses); k++)
            if ((st = ar_recv(c, j, k, c->ne, &r[j][k])) != TSR_OK)
                return st;
    }
    if ((st = ar_stage(c, true)) != TSR_OK)
        return st;

    /* Fold: j += j + P. W_{j+P} is not written again before the unfold,
     * which runs after stream j's work, so only the read needs ordering. */
    for (int j = 0; j < extra; j++)
        if (c->direct && (st = ar_record(c, s->ev_step, j + P)) != TSR_OK)
            return st;
    for (int j = 0; j < extra; j++) {
        tsr_tensor *rx = r[j][use[j]++ % 2];
        if ((c->direct && (st = ar_wait(c, s->ev_step, j, j + P)) != TSR_OK) ||
            (st = ar_pull(c, j + P, j, w[j + P], rx)) != TSR_OK ||
            (st = ar_add(c, j, w[j], rx)) != TSR_OK)
            return st;
    }
    /* Rounds: j pulls its partner's W, then — once the partner's pull of W_j
     * is done (ev_step recorded behind it) — adds in place. */
    for (int bit = 1; bit < P; bit <<= 1) {
        tsr_tensor *rx[AR_MAX];
        for (int j = 0; j < P && c->direct; j++)
            if ((st = ar_record(c, s->ev_step, j)) != TSR_OK)
                return st;
        for (int j = 0; j < P; j++) {
            rx[j] = r[j][use[j]++ % 2];
            if ((c->direct && (st = ar_wait(c, s->ev_step, j, j ^ bit)) != TSR_OK) ||
                (st = ar_pull(c, j ^ bit, j, w[j ^ bit], rx[j])) != TSR_OK)
                return st;
        }
        for (int j = 0; j < P; j++)
            if ((st = ar_record(c, s->ev_step, j)) != TSR_OK)
                return st;
        for (int j = 0; j < P; j++)
            if ((st = ar_wait(c, s->ev_step, j, j ^ bit)) != TSR_OK ||
                (st = ar_add(c, j, w[j], rx[j])) != TSR_OK)
                return st;
    }
    /* Unfold: j + P takes the result; j waits for that copy before its later
     * work may overwrite W_j. */
    for (int j = 0; j < extra && c->direct; j++)
        if ((st = ar_record(c, s->ev_step, j)) != TSR_OK)
            return st;
    for (int j = 0; j < extra; j++) {
        if ((c->direct && (st = ar_wait(c, s->ev_step, j + P, j)) != TSR_OK) ||
            (st = ar_pull(c, j, j + P, w[j], w[j + P])) != TSR_OK ||
            (st = ar_record(c, s->ev_end, j + P)) != TSR_OK ||
            (st = ar_wait(c, s->ev_end, j, j + P)) != TSR_OK)
            return st;
    }
    return ar_stage(c, false);
}

/* ---- ring ------------------------------------------------------------------------------------ */

tsr_status tsr__ar_ring(ar_call *c)
{
    const int n = c->ar->n;
    ar_slot *s = c->slot;
    int64_t first[AR_MAX], len[AR_MAX];
    for (int k = 0; k < n; k++)
        tsr__ar_chunk(c->ne, c->unit, n, k, &first[k], &len[k]);
    tsr_status st = ar_stage(c, true);
    if (st != TSR_OK)
        return st;

    /* Reduce-scatter. The chunk j adds at step s is read by its right
     * neighbour only at step s + 1, after the add: by copy ordering, or —
     * reading directly — after waiting for an event recorded behind the add. */
    for (int step = 0; step < n - 1; step++) {
        tsr_tensor *dst[AR_MAX], *src[AR_MAX];
        for (int j = 0; j < n; j++) {
            const int left = (j + n - 1) % n, k = ((j - 1 - step) % n + n) % n;
            dst[j] = src[j] = NULL;
            if (len[k] == 0)
                continue;
            tsr_tensor *far = NULL;
            if ((st = ar_work(c, left, first[k], len[k], &far)) != TSR_OK ||
                (st = ar_work(c, j, first[k], len[k], &dst[j])) != TSR_OK)
                return st;
            if (c->direct) {
                src[j] = far;
            } else if ((st = ar_recv(c, j, step % 2, len[k], &src[j])) != TSR_OK ||
                       (st = ar_pull(c, left, j, far, src[j])) != TSR_OK) {
                return st;
            }
        }
        if (c->direct)
            for (int j = 0; j < n; j++)
                if ((st = ar_record(c, s->ev_step, j)) != TSR_OK)
                    return st;
        for (int j = 0; j < n; j++) {
            if (!dst[j])
                continue;
            if (c->direct && (st = ar_wait(c, s->ev_step, j, (j + n - 1) % n)) != TSR_OK)
                return st;
            if ((st = ar_add(c, j, dst[j], src[j])) != TSR_OK)
                return st;
        }
    }
    /* All-gather overwrites chunk (j - t) of W_j at step t, which the right
     * neighbour read at reduce-scatter step t: wait for its reduce-scatter. */
    for (int j = 0; j < n; j++)
        if ((st = ar_record(c, s->ev_end, j)) != TSR_OK)
            return st;
    for (int j = 0; j < n; j++)
        if ((st = ar_wait(c, s->ev_end, j, (j + 1) % n)) != TSR_OK)
            return st;
    for (int step = 0; step < n - 1; step++) {
        for (int j = 0; j < n && c->direct; j++)
            if ((st = ar_record(c, s->ev_step, j)) != TSR_OK)
                return st;
        for (int j = 0; j < n; j++) {
            const int left = (j + n - 1) % n, k = ((j - step) % n + n) % n;
            if (len[k] == 0)
                continue;
            tsr_tensor *src = NULL, *dst = NULL;
            if ((st = ar_work(c, left, first[k], len[k], &src)) != TSR_OK ||
                (st = ar_work(c, j, first[k], len[k], &dst)) != TSR_OK ||
                (c->direct && (st = ar_wait(c, s->ev_step, j, left)) != TSR_OK) ||
                (st = ar_pull(c, left, j, src, dst)) != TSR_OK)
                return st;
        }
    }
    /* The right neighbour's all-gather reads W_j: the caller's later work on
     * stream j may overwrite it only after that. */
    for (int j = 0; j < n; j++)
        if ((st = ar_record(c, s->ev_step, j)) != TSR_OK)
            return st;
    for (int j = 0; j < n; j++)
        if ((st = ar_wait(c, s->ev_step, j, (j + 1) % n)) != TSR_OK)
            return st;
    return ar_stage(c, false);
}
