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
 *
 * Direct mode: when every device can read every other's memory
 * (tsr_dev_supports_buft: CPU devices, GPUs with peer access), a butterfly
 * pull runs on the receiver's stream as a local copy, ordered by an event
 * recorded on the sender at the start of the round rather than by the copy
 * contract — which would also order it after the sender's own pull of the
 * same round and chain the round's pulls one after another. And the ring
 * needs no steps: device j sums chunk j of every W in place and copies the
 * sum into everyone's chunk j, with two synchronization points in all (the
 * "two-shot" all-reduce; same 2(n-1)/n of the data per device).
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

/* Places node on the memory of `like` (an alias), so that it writes there. */
static tsr_status ar_place_on(tsr_tensor *node, const tsr_tensor *like)
{
    const size_t off = (size_t)((char *)like->data - (char *)tsr_buf_base(like->buffer));
    return tsr_buf_place_tensor(like->buffer, node, off);
}

/* The next one-node-or-more graph of the slot, emptied. */
static tsr_status ar_graph(ar_call *c, tsr_graph **out)
{
    ar_slot *s = c->slot;
    if (s->used_graphs >= s->n_graphs)
        return tsr__error(TSR_EINTERNAL, "allreduce: %zu graphs per call exceeded", s->n_graphs);
    *out = s->graphs[s->used_graphs++];
    tsr_graph_reset(*out);
    return TSR_OK;
}

/* Enqueues dst += src on device j's stream: one ADD node placed at dst's
 * own memory. */
static tsr_status ar_add(ar_call *c, int j, tsr_tensor *dst, tsr_tensor *src)
{
    tsr_tensor *sum = tsr_add(c->slot->ctx, dst, src);
    if (!sum)
        return tsr__error(TSR_EINTERNAL, "allreduce: ADD node: %s", tsr_ctx_error(c->slot->ctx));
    tsr_graph *g = NULL;
    tsr_status st;
    if ((st = ar_place_on(sum, dst)) != TSR_OK || (st = ar_graph(c, &g)) != TSR_OK ||
        (st = tsr_graph_build(g, sum)) != TSR_OK)
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
        n_recv = c->direct ? 0 : n > 2 ? 2 : 1; /* direct: no copies at all */
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

/* Direct mode: the reduce-scatter and the all-gather of the ring without
 * its n-1 steps each. Device j owns chunk j: one graph on its stream sums
 * chunk j of every W in place into W_j (n-1 ADD nodes, reading the others'
 * memory), then copies the sum into chunk j of every other W (n-1 CPY
 * nodes): 2(n-1)/n of the data read and written per device, as the ring,
 * but two synchronization points instead of 2(n-1): every W ready before,
 * every graph done after (the others read and write W_j). Large chunks go
 * in up to AR_BLOCKS(n) blocks of ADDs then CPYs, so that the copies read
 * a sum still in cache rather than from memory. */
static tsr_status ar_ring_direct(ar_call *c, const int64_t *first, const int64_t *len)
{
    const int n = c->ar->n;
    ar_slot *s = c->slot;
    tsr_ctx *ctx = s->ctx;
    tsr_status st;
    for (int k = 0; k < n; k++)
        if ((st = ar_record(c, s->ev_step, k)) != TSR_OK)
            return st;
    for (int j = 0; j < n; j++) {
        for (int i = 1; i < n; i++)
            if ((st = ar_wait(c, s->ev_step, j, (j + i) % n)) != TSR_OK)
                return st;
        if (len[j] == 0)
            continue;
        tsr_graph *g = NULL;
        if ((st = ar_graph(c, &g)) != TSR_OK)
            return st;
        const int64_t units = (len[j] + c->unit - 1) / c->unit;
        const int64_t want =
            ((int64_t)len[j] * (int64_t)c->es + AR_BLOCK_BYTES - 1) / AR_BLOCK_BYTES;
        const int blocks = (int)TSR_MIN(TSR_MIN(want, (int64_t)AR_BLOCKS(n)), units);
        for (int bl = 0; bl < blocks; bl++) {
            int64_t b0, bn;
            tsr__ar_chunk(len[j], c->unit, blocks, bl, &b0, &bn);
            if (bn == 0)
                continue;
            tsr_tensor *w[AR_MAX], *sum;
            for (int k = 0; k < n; k++)
                if ((st = ar_work(c, k, first[j] + b0, bn, &w[k])) != TSR_OK)
                    return st;
            sum = w[j];
            for (int i = 1; i < n; i++) {
                tsr_tensor *next = tsr_add(ctx, sum, w[(j + i) % n]);
                if (!next)
                    return tsr__error(TSR_EINTERNAL, "allreduce: ADD node: %s", tsr_ctx_error(ctx));
                if ((st = ar_place_on(next, w[j])) != TSR_OK)
                    return st;
                sum = next;
            }
            for (int i = 1; i < n; i++) {
                tsr_tensor *cp = tsr_cpy(ctx, sum, w[(j + i) % n]);
                if (!cp)
                    return tsr__error(TSR_EINTERNAL, "allreduce: CPY node: %s", tsr_ctx_error(ctx));
                if ((st = tsr_view_init(cp)) != TSR_OK || (st = tsr_graph_build(g, cp)) != TSR_OK)
                    return st;
            }
        }
        if ((st = tsr_backend_graph_compute_async(c->ar->b[j], g)) != TSR_OK)
            return st;
    }
    for (int k = 0; k < n; k++)
        if ((st = ar_record(c, s->ev_end, k)) != TSR_OK)
            return st;
    for (int j = 0; j < n; j++)
        for (int i = 1; i < n; i++)
            if ((st = ar_wait(c, s->ev_end, j, (j + i) % n)) != TSR_OK)
                return st;
    return ar_stage(c, false);
}

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
    if (c->direct)
        return ar_ring_direct(c, first, len);

    /* Reduce-scatter. The chunk j adds at step s is read by its right
     * neighbour only at step s + 1, after the add (copy ordering). */
    for (int step = 0; step < n - 1; step++) {
        tsr_tensor *dst[AR_MAX], *rx[AR_MAX];
        for (int j = 0; j < n; j++) {
            const int left = (j + n - 1) % n, k = ((j - 1 - step) % n + n) % n;
            dst[j] = rx[j] = NULL;
            if (len[k] == 0)
                continue;
            tsr_tensor *src = NULL;
            if ((st = ar_work(c, left, first[k], len[k], &src)) != TSR_OK ||
                (st = ar_work(c, j, first[k], len[k], &dst[j])) != TSR_OK ||
                (st = ar_recv(c, j, step % 2, len[k], &rx[j])) != TSR_OK ||
                (st = ar_pull(c, left, j, src, rx[j])) != TSR_OK)
                return st;
        }
        for (int j = 0; j < n; j++)
            if (dst[j] && (st = ar_add(c, j, dst[j], rx[j])) != TSR_OK)
                return st;
    }
    /* All-gather overwrites chunk (j - t) of W_j at step t, which the right
     * neighbour read at reduce-scatter step t: wait for its reduce-scatter
     * (the ring's chain of copy orderings implies it too; explicit is safer). */
    for (int j = 0; j < n; j++)
        if ((st = ar_record(c, s->ev_end, j)) != TSR_OK)
            return st;
    for (int j = 0; j < n; j++)
        if ((st = ar_wait(c, s->ev_end, j, (j + 1) % n)) != TSR_OK)
            return st;
    for (int step = 0; step < n - 1; step++) {
        for (int j = 0; j < n; j++) {
            const int left = (j + n - 1) % n, k = ((j - step) % n + n) % n;
            if (len[k] == 0)
                continue;
            tsr_tensor *src = NULL, *dst = NULL;
            if ((st = ar_work(c, left, first[k], len[k], &src)) != TSR_OK ||
                (st = ar_work(c, j, first[k], len[k], &dst)) != TSR_OK ||
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
