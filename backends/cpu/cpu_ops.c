/* backends/cpu/cpu_ops.c — per-node dispatch of the CPU backend: the fast
 * path where one exists, the reference kernel otherwise.
 *
 * Not the kernels themselves. A fast path must give the reference result
 * within the test tolerances for every shape it accepts; it declines (and
 * the reference runs) for anything else. A stream in reference mode always
 * runs the reference kernels.
 */
#include <string.h>

#include "backends/cpu/cpu_impl.h"
#include "backends/cpu/cpu_mm.h"
#include "backends/cpu/cpu_vec.h"

static void barrier_cb(void *ctx) { tsr__cpu_barrier((const tsr__cpu_params *)ctx); }

/* Y[:, :, c2, c3] = W[:, :, c2/r2, c3/r3]ᵀ · X[:, :, c2, c3], one batch at a
 * time; the scratch is reused per batch, hence the barrier between them. */
static bool fast_mul_mat(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *w = n->src[0], *x = n->src[1];
    const int64_t r2 = x->ne[2] / w->ne[2], r3 = x->ne[3] / w->ne[3];
    if (w->ne[0] == 0)
        return false;
    for (int64_t c3 = 0; c3 < x->ne[3]; c3++) {
        for (int64_t c2 = 0; c2 < x->ne[2]; c2++) {
            const tsr__mm_args a = {
                .wtype = w->type,
                .w = (const char *)w->data + (c2 / r2) * w->nb[2] + (c3 / r3) * w->nb[3],
                .w_nb1 = w->nb[1],
                .x = (const float *)((const char *)x->data + c2 * x->nb[2] + c3 * x->nb[3]),
                .x_nb1 = x->nb[1],
                .y = (float *)((char *)n->data + c2 * n->nb[2] + c3 * n->nb[3]),
                .y_nb1 = n->nb[1],
                .K = w->ne[0],
                .N = w->ne[1],
                .T = x->ne[1],
            };
            if (c2 || c3)
                tsr__cpu_barrier(p);
            if (!tsr__mm_compute(&a, p->ith, p->nth, p->work, p->work_size, barrier_cb, (void *)p))
                return false; /* declined on the first batch, before any write */
        }
    }
    return true;
}

/* ---- mul_mat_id: group the slots by expert, one product per expert ---------------- */

/* Scratch layout of the grouped product, in one shared block:
 *   flag (int32), count[E], first[E+1], slot[S] (u + U·t, grouped by
 *   expert), xg [K, S] gathered columns, yg [N, S] results, mm scratch;
 *   S = U·T slots. */
typedef struct {
    int32_t *flag, *count, *first, *slot;
    float *xg, *yg;
    void *mm;
    size_t mm_size;
} mmid_layout;

static size_t mmid_layout_of(const tsr_tensor *n, int nth, void *base, mmid_layout *l)
{
    const tsr_tensor *w = n->src[0], *ids = n->src[2];
    const int64_t K = w->ne[0], N = w->ne[1], E = w->ne[2], S = ids->ne[0] * ids->ne[1];
    size_t off = 0;
    const size_t ints = tsr__align_up((size_t)(1 + E + E + 1 + S) * sizeof(int32_t), 64);
    const size_t xg = tsr__align_up((size_t)(K * S) * sizeof(float), 64);
    const size_t yg = tsr__align_up((size_t)(N * S) * sizeof(float), 64);
    const size_t mm = tsr__mm_work_size(w->type, K, N, S, nth);
    if (l) {
        char *b = base;
        l->flag = (int32_t *)b;
        l->count = l->flag + 1;
        l->first = l->count + E;
        l->slot = l->first + E + 1;
        l->xg = (float *)(b + ints);
        l->yg = (float *)(b + ints + xg);
        l->mm = b + ints + xg + yg;
        l->mm_size = mm;
    }
    off = ints + xg + yg + mm;
    return off;
}

/* y[:, u, t] = W[:, :, ids[u, t]]ᵀ · x[:, u or 0, t]: the slots of each expert
 * become the columns of one matrix product. y is written only at the end, so
 * declining at any point leaves it for the reference kernel. */
static bool fast_mul_mat_id(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *w = n->src[0], *x = n->src[1], *ids = n->src[2];
    const int64_t K = w->ne[0], N = w->ne[1], E = w->ne[2], U = ids->ne[0], T = ids->ne[1];
    const int64_t S = U * T;
    if (K == 0 || S == 0)
        return false;
    mmid_layout l;
    mmid_layout_of(n, p->nth, p->work, &l);
    if (p->ith == 0) {
        /* Count, check, and bucket the slots by expert. */
        int32_t ok = 1;
        for (int64_t e = 0; e < E; e++)
            l.count[e] = 0;
        for (int64_t s = 0; s < S && ok; s++) {
            const int32_t e = *(const int32_t *)((const char *)ids->data + (s % U) * ids->nb[0] +
                                                 (s / U) * ids->nb[1]);
            if (e < 0 || e >= E)
                ok = 0;
            else
                l.count[e]++;
        }
        if (ok) {
            l.first[0] = 0;
            for (int64_t e = 0; e < E; e++)
                l.first[e + 1] = l.first[e] + l.count[e];
            for (int64_t e = 0; e < E; e++)
                l.count[e] = 0;
            for (int64_t s = 0; s < S; s++) {
                const int32_t e = *(const int32_t *)((const char *)ids->data +
                                                     (s % U) * ids->nb[0] + (s / U) * ids->nb[1]);
                l.slot[l.first[e] + l.count[e]++] = (int32_t)s;
            }
        }
        *l.flag = ok;
    }
    tsr__cpu_barrier(p);
    if (!*l.flag)
        return false; /* the reference kernel reports the bad id */

    int64_t s0, s1;
    tsr__cpu_range(S, p->ith, p->nth, &s0, &s1);
    for (int64_t i = s0; i < s1; i++) {
        const int64_t s = l.slot[i], u = s % U, t = s / U;
        const char *xc = (const char *)x->data + (x->ne[1] == 1 ? 0 : u) * x->nb[1] + t * x->nb[2];
        memcpy(l.xg + i * K, xc, (size_t)K * sizeof(float));
    }
    for (int64_t e = 0; e < E; e++) {
        if (l.count[e] == 0)
            continue;
        tsr__cpu_barrier(p); /* gathered columns ready / scratch free again */
        const tsr__mm_args a = {
            .wtype = w->type,
            .w = (const char *)w->data + e * w->nb[2],
            .w_nb1 = w->nb[1],
            .x = l.xg + (int64_t)l.first[e] * K,
            .x_nb1 = (size_t)K * sizeof(float),
            .y = l.yg + (int64_t)l.first[e] * N,
            .y_nb1 = (size_t)N * sizeof(float),
            .K = K,
            .N = N,
            .T = l.count[e],
        };
        if (!tsr__mm_compute(&a, p->ith, p->nth, l.mm, l.mm_size, barrier_cb, (void *)p))
            return false;
    }
    tsr__cpu_barrier(p);
    for (int64_t i = s0; i < s1; i++) {
        const int64_t s = l.slot[i], u = s % U, t = s / U;
        memcpy((char *)n->data + u * n->nb[1] + t * n->nb[2], l.yg + i * N,
               (size_t)N * sizeof(float));
    }
    return true;
}

/* ---- add: the same-shape, same-type case ------------------------------------------- */

/* y = a + b with a, b, y contiguous, of one shape and one type (F32, F16,
 * BF16): the in-place ADDs of the all-reduce (comm/). Threads split the
 * elements in 64-byte-aligned ranges. Broadcasts and mixed types decline. */
static bool fast_add(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *a = n->src[0], *b = n->src[1];
    if (a->type != n->type || b->type != n->type || !tsr_same_shape(a, n) ||
        !tsr_same_shape(b, n) || !tsr_is_contiguous(a) || !tsr_is_contiguous(b) ||
        !tsr_is_contiguous(n))
        return false;
    const size_t es = tsr_type_size(n->type);
    const int64_t unit = 64 / (int64_t)es, units = (tsr_nelements(n) + unit - 1) / unit;
    int64_t u0, u1;
    tsr__cpu_range(units, p->ith, p->nth, &u0, &u1);
    const int64_t i0 = TSR_MIN(u0 * unit, tsr_nelements(n));
    const int64_t i1 = TSR_MIN(u1 * unit, tsr_nelements(n));
    const tsr__vec_ops *v = tsr__vec();
    switch (n->type) {
    case TSR_TYPE_F32:
        v->add_f32((float *)n->data + i0, (const float *)a->data + i0, (const float *)b->data + i0,
                   i1 - i0);
        return true;
    case TSR_TYPE_F16:
        v->add_f16((tsr_fp16 *)n->data + i0, (const tsr_fp16 *)a->data + i0,
                   (const tsr_fp16 *)b->data + i0, i1 - i0);
        return true;
    case TSR_TYPE_BF16:
        v->add_bf16((tsr_bf16 *)n->data + i0, (const tsr_bf16 *)a->data + i0,
                    (const tsr_bf16 *)b->data + i0, i1 - i0);
        return true;
    default:
        return false;
    }
}

/* dst = src of one type, both contiguous: a memcpy, threads splitting the
 * bytes in 64-byte-aligned ranges (the all-reduce's all-gather copies). */
static bool fast_cpy(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *a = n->src[0];
    if (a->type != n->type || tsr_nelements(a) != tsr_nelements(n) || !tsr_is_contiguous(a) ||
        !tsr_is_contiguous(n))
        return false;
    const size_t bytes = tsr_nbytes(n), lines = (bytes + 63) / 64;
    int64_t l0, l1;
    tsr__cpu_range((int64_t)lines, p->ith, p->nth, &l0, &l1);
    const size_t b0 = TSR_MIN(bytes, (size_t)l0 * 64), b1 = TSR_MIN(bytes, (size_t)l1 * 64);
    if (b1 > b0 && n->data != a->data)
        memcpy((char *)n->data + b0, (const char *)a->data + b0, b1 - b0);
    return true;
}

size_t tsr__cpu_work_size(const tsr_tensor *n, int nth, bool reference)
{
    size_t ref = tsr__cpu_ref_work_size(n, nth);
    if (reference)
        return ref;
    if (n->op == TSR_OP_MUL_MAT) {
        const tsr_tensor *w = n->src[0], *x = n->src[1];
        return TSR_MAX(ref, tsr__mm_work_size(w->type, w->ne[0], w->ne[1], x->ne[1], nth));
    }
    if (n->op == TSR_OP_MUL_MAT_ID)
        return TSR_MAX(ref, mmid_layout_of(n, nth, NULL, NULL));
    if (n->op == TSR_OP_FLASH_ATTN_EXT)
        return TSR_MAX(ref, tsr__cpu_fa_work_size(n, nth));
    return ref;
}

void tsr__cpu_compute_node(const tsr__cpu_params *p, tsr_tensor *n, bool reference)
{
    if (!reference) {
        switch (n->op) {
        case TSR_OP_MUL_MAT:
            if (tsr_nelements(n) == 0 || fast_mul_mat(p, n))
                return;
            break;
        case TSR_OP_MUL_MAT_ID:
            if (tsr_nelements(n) == 0 || fast_mul_mat_id(p, n))
                return;
            break;
        case TSR_OP_FLASH_ATTN_EXT:
            if (tsr__cpu_flash_attn(p, n))
                return;
            break;
        case TSR_OP_ADD:
            if (fast_add(p, n))
                return;
            break;
        case TSR_OP_CPY:
            if (fast_cpy(p, n))
                return;
            break;
        default:
            if (tsr__cpu_rows_compute(p, n))
                return;
            break;
        }
    }
    tsr__cpu_ref_compute(p, n);
}
