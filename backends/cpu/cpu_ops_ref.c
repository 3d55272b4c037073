/* backends/cpu/cpu_ops_ref.c — the reference kernels: one plain-C kernel per
 * op, for every type the op accepts. They are the oracle every other kernel
 * and device is tested against.
 *
 * Not fast: clarity first. Elements go through F32 (sums in double), every
 * source is addressed through its byte strides, and run-time data errors
 * (an index out of range) are reported, never followed. Threads split the
 * output rows; no kernel writes outside its node.
 *
 * Shape letters as in tensor.h: W: [K, N], X: [K, T], heads H, kv length S.
 */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_impl.h"

/* ---- element access ------------------------------------------------------------------- */

static inline float ld(tsr_type type, const void *p)
{
    switch (type) {
    case TSR_TYPE_F32:
        return *(const float *)p;
    case TSR_TYPE_F16:
        return tsr_fp16_to_f32(*(const tsr_fp16 *)p);
    case TSR_TYPE_BF16:
        return tsr_bf16_to_f32(*(const tsr_bf16 *)p);
    case TSR_TYPE_I32:
        return (float)*(const int32_t *)p;
    default:
        return NAN; /* block types are read row by row */
    }
}

static inline void st(tsr_type type, void *p, float v)
{
    switch (type) {
    case TSR_TYPE_F32:
        *(float *)p = v;
        break;
    case TSR_TYPE_F16:
        *(tsr_fp16 *)p = tsr_f32_to_fp16(v);
        break;
    case TSR_TYPE_BF16:
        *(tsr_bf16 *)p = tsr_f32_to_bf16(v);
        break;
    default:
        break;
    }
}

static inline const char *at(const tsr_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3)
{
    return (const char *)t->data + i0 * (int64_t)t->nb[0] + i1 * (int64_t)t->nb[1] +
           i2 * (int64_t)t->nb[2] + i3 * (int64_t)t->nb[3];
}

static inline char *at_w(tsr_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3)
{
    return (char *)at(t, i0, i1, i2, i3);
}

static inline int32_t ld_i32(const tsr_tensor *t, int64_t i0, int64_t i1, int64_t i2)
{
    return *(const int32_t *)at(t, i0, i1, i2, 0);
}

/* Splits row index r of a [*, ne1, ne2, ne3] tensor into (i1, i2, i3). */
static inline void row_coords(const tsr_tensor *t, int64_t r, int64_t *i1, int64_t *i2, int64_t *i3)
{
    *i1 = r % t->ne[1];
    *i2 = (r / t->ne[1]) % t->ne[2];
    *i3 = r / (t->ne[1] * t->ne[2]);
}

/* Per-thread slice of the scratch: `bytes` per thread, thread ith's part. */
static inline void *thread_work(const tsr__cpu_params *p, size_t bytes)
{
    return (char *)p->work + (size_t)p->ith * tsr__align_up(bytes, 64);
}

static size_t per_thread(size_t bytes, int nth) { return tsr__align_up(bytes, 64) * (size_t)nth; }

/* ---- copies ------------------------------------------------------------------------------ */

/* dst := src element by element in logical (row-major) order; shapes may
 * differ, counts are equal. Block types need equal shapes (constructor). */
static void ref_copy(const tsr__cpu_params *p, const tsr_tensor *src, tsr_tensor *dst)
{
    const int64_t rows = tsr_nrows(src);
    int64_t r0, r1;
    tsr__cpu_range(rows, p->ith, p->nth, &r0, &r1);
    const bool blocks = tsr_type_block_size(src->type) != 1 || tsr_type_block_size(dst->type) != 1;
    if (blocks && src->type == dst->type) {
        const size_t row = tsr_row_size(src->type, src->ne[0]);
        for (int64_t r = r0; r < r1; r++) {
            int64_t i1, i2, i3;
            row_coords(src, r, &i1, &i2, &i3);
            memcpy(at_w(dst, 0, i1, i2, i3), at(src, 0, i1, i2, i3), row);
        }
        return;
    }
    if (blocks) {
        float *tmp = thread_work(p, (size_t)src->ne[0] * sizeof(float));
        for (int64_t r = r0; r < r1; r++) {
            int64_t i1, i2, i3;
            row_coords(src, r, &i1, &i2, &i3);
            tsr_row_to_f32(src->type, at(src, 0, i1, i2, i3), tmp, src->ne[0]);
            tsr_row_from_f32(dst->type, tmp, at_w(dst, 0, i1, i2, i3), dst->ne[0]);
        }
        return;
    }
    const size_t esize = tsr_type_size(src->type);
    const bool same = src->type == dst->type;
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        row_coords(src, r, &i1, &i2, &i3);
        int64_t lin = r * src->ne[0];
        for (int64_t i0 = 0; i0 < src->ne[0]; i0++, lin++) {
            const int64_t d0 = lin % dst->ne[0];
            const int64_t d1 = (lin / dst->ne[0]) % dst->ne[1];
            const int64_t d2 = (lin / (dst->ne[0] * dst->ne[1])) % dst->ne[2];
            const int64_t d3 = lin / (dst->ne[0] * dst->ne[1] * dst->ne[2]);
            const char *s = at(src, i0, i1, i2, i3);
            char *d = at_w(dst, d0, d1, d2, d3);
            if (same)
                memcpy(d, s, esize);
            else
                st(dst->type, d, ld(src->type, s));
        }
    }
}

static void ref_get_rows(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *a = n->src[0], *ids = n->src[1];
    const int64_t rows = tsr_nrows(n);
    int64_t r0, r1;
    tsr__cpu_range(rows, p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i, b2, b3;
        row_coords(n, r, &i, &b2, &b3);
        const int32_t row = ld_i32(ids, i, b2, b3);
        char *out = at_w(n, 0, i, b2, b3);
        if (row < 0 || row >= a->ne[1]) {
            memset(out, 0, tsr_row_size(n->type, n->ne[0]));
            tsr__cpu_fail(p, TSR_ERANGE, "get_rows '%s': index %d outside [0, %lld)", n->name, row,
                          (long long)a->ne[1]);
            continue;
        }
        const char *src = at(a, 0, row, b2, b3);
        if (a->type == TSR_TYPE_I32)
            memcpy(out, src, (size_t)a->ne[0] * sizeof(int32_t));
        else
            tsr_row_to_f32(a->type, src, (float *)out, a->ne[0]);
    }
}

static void ref_set_rows(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *src = n->src[0], *ids = n->src[1];
    const int64_t rows = tsr_nrows(src);
    int64_t r0, r1;
    tsr__cpu_range(rows, p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i, b2, b3;
        row_coords(src, r, &i, &b2, &b3);
        const int32_t row = ld_i32(ids, i, b2 % ids->ne[1], b3 % ids->ne[2]);
        if (row < 0 || row >= n->ne[1]) {
            tsr__cpu_fail(p, TSR_ERANGE, "set_rows '%s': index %d outside [0, %lld)", n->name, row,
                          (long long)n->ne[1]);
            continue;
        }
        tsr_row_from_f32(n->type, (const float *)at(src, 0, i, b2, b3), at_w(n, 0, row, b2, b3),
                         n->ne[0]);
    }
}

/* ---- matrix products ------------------------------------------------------------------------ */

/* y[:, t] = Wᵀ x[:, t] for one weight matrix (rows n in [n0, n1)). */
static void ref_matvec_rows(const tsr_tensor *w, int64_t w2, int64_t w3, const char *x_col0,
                            size_t x_nb1, int64_t T, char *y_col0, size_t y_nb1, int64_t n0,
                            int64_t n1, float *wrow)
{
    const int64_t K = w->ne[0];
    for (int64_t row = n0; row < n1; row++) {
        tsr_row_to_f32(w->type, at(w, 0, row, w2, w3), wrow, K);
        for (int64_t t = 0; t < T; t++) {
            const float *x = (const float *)(x_col0 + t * x_nb1);
            double sum = 0.0;
            for (int64_t k = 0; k < K; k++)
                sum += (double)wrow[k] * (double)x[k];
            ((float *)(y_col0 + t * y_nb1))[row] = (float)sum;
        }
    }
}

static void ref_mul_mat(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *w = n->src[0], *x = n->src[1];
    float *wrow = thread_work(p, (size_t)w->ne[0] * sizeof(float));
    const int64_t r2 = x->ne[2] / w->ne[2], r3 = x->ne[3] / w->ne[3];
    const int64_t N = w->ne[1], batches = x->ne[2] * x->ne[3];
    /* Threads split (batch, row) pairs. */
    int64_t j0, j1;
    tsr__cpu_range(batches * N, p->ith, p->nth, &j0, &j1);
    for (int64_t j = j0; j < j1;) {
        const int64_t b = j / N, row0 = j % N;
        const int64_t row1 = TSR_MIN(N, row0 + (j1 - j));
        const int64_t c2 = b % x->ne[2], c3 = b / x->ne[2];
        ref_matvec_rows(w, c2 / r2, c3 / r3, at(x, 0, 0, c2, c3), x->nb[1], x->ne[1],
                        at_w(n, 0, 0, c2, c3), n->nb[1], row0, row1, wrow);
        j += row1 - row0;
    }
}

static void ref_mul_mat_id(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *w = n->src[0], *x = n->src[1], *ids = n->src[2];
    float *wrow = thread_work(p, (size_t)w->ne[0] * sizeof(float));
    const int64_t U = ids->ne[0], T = ids->ne[1], N = w->ne[1];
    int64_t j0, j1;
    tsr__cpu_range(U * T, p->ith, p->nth, &j0, &j1);
    for (int64_t j = j0; j < j1; j++) {
        const int64_t u = j % U, t = j / U;
        const int32_t e = ld_i32(ids, u, t, 0);
        char *y = at_w(n, 0, u, t, 0);
        if (e < 0 || e >= w->ne[2]) {
            memset(y, 0, (size_t)N * sizeof(float));
            tsr__cpu_fail(p, TSR_ERANGE, "mul_mat_id '%s': expert %d outside [0, %lld)", n->name, e,
                          (long long)w->ne[2]);
            continue;
        }
        const char *xc = at(x, 0, x->ne[1] == 1 ? 0 : u, t, 0);
        ref_matvec_rows(w, e, 0, xc, 0, 1, y, 0, 0, N, wrow);
    }
}

/* ---- element-wise -------------------------------------------------------------------------- */

static float binary_apply(tsr_op op, float a, float b)
{
    switch (op) {
    case TSR_OP_ADD:
        return a + b;
    case TSR_OP_SUB:
        return a - b;
    case TSR_OP_MUL:
        return a * b;
    case TSR_OP_DIV:
        return a / b;
    default:
        return NAN;
    }
}

static void ref_binary(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *a = n->src[0], *b = n->src[1];
    int64_t r0, r1;
    tsr__cpu_range(tsr_nrows(n), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        row_coords(n, r, &i1, &i2, &i3);
        for (int64_t i0 = 0; i0 < n->ne[0]; i0++) {
            const float va = ld(a->type, at(a, i0, i1, i2, i3));
            const float vb =
                ld(b->type, at(b, i0 % b->ne[0], i1 % b->ne[1], i2 % b->ne[2], i3 % b->ne[3]));
            st(n->type, at_w(n, i0, i1, i2, i3), binary_apply(n->op, va, vb));
        }
    }
}

static void ref_add_id(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *a = n->src[0], *b = n->src[1], *ids = n->src[2];
    int64_t r0, r1;
    tsr__cpu_range(tsr_nrows(n), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t u, t, i3;
        row_coords(n, r, &u, &t, &i3);
        const int32_t e = ld_i32(ids, u, t, 0);
        float *y = (float *)at_w(n, 0, u, t, 0);
        const float *x = (const float *)at(a, 0, u, t, 0);
        if (e < 0 || e >= b->ne[1]) {
            memcpy(y, x, (size_t)n->ne[0] * sizeof(float));
            tsr__cpu_fail(p, TSR_ERANGE, "add_id '%s': expert %d outside [0, %lld)", n->name, e,
                          (long long)b->ne[1]);
            continue;
        }
        const float *bias = (const float *)at(b, 0, e, 0, 0);
        for (int64_t i = 0; i < n->ne[0]; i++)
            y[i] = x[i] + bias[i];
    }
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

static float gelu(float x)
{
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

static void ref_unary(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *a = n->src[0];
    const float s = tsr_get_op_param_f32(n, 0), bias = tsr_get_op_param_f32(n, 1);
    int64_t r0, r1;
    tsr__cpu_range(tsr_nrows(n), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        row_coords(n, r, &i1, &i2, &i3);
        for (int64_t i0 = 0; i0 < n->ne[0]; i0++) {
            char *out = at_w(n, i0, i1, i2, i3);
            if (n->op == TSR_OP_FILL) {
                if (n->type == TSR_TYPE_I32)
                    *(int32_t *)out = (int32_t)s;
                else
                    st(n->type, out, s);
                continue;
            }
            const float x = ld(a->type, at(a, i0, i1, i2, i3));
            float y = x;
            if (n->op == TSR_OP_SCALE)
                y = s * x + bias;
            else if (n->op == TSR_OP_SILU)
                y = silu(x);
            else if (n->op == TSR_OP_GELU)
                y = gelu(x);
            st(n->type, out, y);
        }
    }
}

static void ref_glu(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *a = n->src[0], *b = n->src[1];
    const tsr_glu_kind kind = (tsr_glu_kind)n->op_params[0];
    const bool swapped = n->op_params[1] != 0;
    const int64_t F = n->ne[0];
    int64_t r0, r1;
    tsr__cpu_range(tsr_nrows(n), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        row_coords(n, r, &i1, &i2, &i3);
        for (int64_t i = 0; i < F; i++) {
            float g, u;
            if (b) {
                g = ld(a->type, at(a, i, i1, i2, i3));
                u = ld(b->type, at(b, i, i1, i2, i3));
            } else {
                g = ld(a->type, at(a, swapped ? i + F : i, i1, i2, i3));
                u = ld(a->type, at(a, swapped ? i : i + F, i1, i2, i3));
            }
            if (swapped && b) {
                const float tmp = g;
                g = u;
                u = tmp;
            }
            const float act = kind == TSR_GLU_GEGLU ? gelu(g) : silu(g);
            st(n->type, at_w(n, i, i1, i2, i3), act * u);
        }
    }
}

/* ---- rows --------------------------------------------------------------------------------------
 */

static void ref_rms_norm(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *a = n->src[0];
    const double eps = tsr_get_op_param_f32(n, 0);
    int64_t r0, r1;
    tsr__cpu_range(tsr_nrows(n), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        row_coords(n, r, &i1, &i2, &i3);
        const float *x = (const float *)at(a, 0, i1, i2, i3);
        float *y = (float *)at_w(n, 0, i1, i2, i3);
        double sum = 0.0;
        for (int64_t i = 0; i < n->ne[0]; i++)
            sum += (double)x[i] * x[i];
        const double scale = n->ne[0] ? 1.0 / sqrt(sum / (double)n->ne[0] + eps) : 0.0;
        for (int64_t i = 0; i < n->ne[0]; i++)
            y[i] = (float)(x[i] * scale);
    }
}

static void ref_rope(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *a = n->src[0], *pos = n->src[1];
    const int n_dims = n->op_params[0];
    const bool neox = n->op_params[1] == TSR_ROPE_NEOX;
    const double base = tsr_get_op_param_f32(n, 2), fscale = tsr_get_op_param_f32(n, 3);
    int64_t r0, r1;
    tsr__cpu_range(tsr_nrows(n), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t h, t, b;
        row_coords(n, r, &h, &t, &b);
        const double position = (double)ld_i32(pos, t, 0, 0);
        for (int64_t i = 0; i < n->ne[0]; i++) /* dims past n_dims pass through */
            if (i >= n_dims)
                st(n->type, at_w(n, i, h, t, b), ld(a->type, at(a, i, h, t, b)));
        for (int i = 0; i < n_dims / 2; i++) {
            const double theta = position * fscale * pow(base, -2.0 * i / n_dims);
            const double c = cos(theta), s = sin(theta);
            const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + n_dims / 2 : 2 * i + 1;
            const double x0 = ld(a->type, at(a, i0, h, t, b));
            const double x1 = ld(a->type, at(a, i1, h, t, b));
            st(n->type, at_w(n, i0, h, t, b), (float)(x0 * c - x1 * s));
            st(n->type, at_w(n, i1, h, t, b), (float)(x0 * s + x1 * c));
        }
    }
}

static void ref_soft_max(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *a = n->src[0], *mask = n->src[1];
    const float scale = tsr_get_op_param_f32(n, 0);
    const int64_t C = n->ne[0];
    int64_t r0, r1;
    tsr__cpu_range(tsr_nrows(n), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        row_coords(n, r, &i1, &i2, &i3);
        const float *x = (const float *)at(a, 0, i1, i2, i3);
        float *y = (float *)at_w(n, 0, i1, i2, i3);
        double mx = -INFINITY;
        for (int64_t i = 0; i < C; i++) {
            double v = (double)x[i] * scale;
            if (mask)
                v += ld(mask->type, at(mask, i, i1, i2 % mask->ne[2], i3 % mask->ne[3]));
            y[i] = (float)v;
            if (v > mx)
                mx = v;
        }
        if (mx == -INFINITY) { /* every input masked: defined as zeros */
            memset(y, 0, (size_t)C * sizeof(float));
            continue;
        }
        double sum = 0.0;
        for (int64_t i = 0; i < C; i++)
            sum += exp((double)y[i] - mx);
        for (int64_t i = 0; i < C; i++)
            y[i] = (float)(exp((double)y[i] - mx) / sum);
    }
}

/* out[:, h, t, b] = Σ_s softmax_s(score(h, t, s)) · v[:, s, hk, b] with
 * score = softcap(scale · q[:, t, h, b] · k[:, s, hk, b]) + mask[s, t],
 * hk = h / (H / Hk). A fully masked row gives zeros. */
static void ref_flash_attn(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2], *mask = n->src[3];
    const float scale = tsr_get_op_param_f32(n, 0), softcap = tsr_get_op_param_f32(n, 1);
    const int64_t D = q->ne[0], Dv = v->ne[0], S = k->ne[1], H = q->ne[2], T = q->ne[1];
    const int64_t group = H / k->ne[2];
    double *scores = thread_work(p, (size_t)(S + Dv) * sizeof(double));
    double *acc = scores + S;
    int64_t j0, j1;
    tsr__cpu_range(H * T * q->ne[3], p->ith, p->nth, &j0, &j1);
    for (int64_t j = j0; j < j1; j++) {
        const int64_t h = j % H, t = (j / H) % T, b = j / (H * T);
        const int64_t hk = h / group;
        double mx = -INFINITY;
        for (int64_t s = 0; s < S; s++) {
            double dot = 0.0;
            for (int64_t d = 0; d < D; d++)
                dot += (double)ld(q->type, at(q, d, t, h, b)) * ld(k->type, at(k, d, s, hk, b));
            double sc = dot * scale;
            if (softcap > 0.0f)
                sc = softcap * tanh(sc / softcap);
            if (mask)
                sc += ld(mask->type, at(mask, s, t, h % mask->ne[2], b % mask->ne[3]));
            scores[s] = sc;
            if (sc > mx)
                mx = sc;
        }
        float *out = (float *)at_w(n, 0, h, t, b);
        if (mx == -INFINITY) {
            memset(out, 0, (size_t)Dv * sizeof(float));
            continue;
        }
        double sum = 0.0;
        for (int64_t d = 0; d < Dv; d++)
            acc[d] = 0.0;
        for (int64_t s = 0; s < S; s++) {
            const double w = exp(scores[s] - mx);
            sum += w;
            for (int64_t d = 0; d < Dv; d++)
                acc[d] += w * ld(v->type, at(v, d, s, hk, b));
        }
        for (int64_t d = 0; d < Dv; d++)
            out[d] = (float)(acc[d] / sum);
    }
}

static void ref_concat(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *a = n->src[0], *b = n->src[1];
    const int dim = n->op_params[0];
    const size_t esize = tsr_type_size(n->type);
    int64_t r0, r1;
    tsr__cpu_range(tsr_nrows(n), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i[4];
        row_coords(n, r, &i[1], &i[2], &i[3]);
        for (i[0] = 0; i[0] < n->ne[0]; i[0]++) {
            int64_t s[4] = {i[0], i[1], i[2], i[3]};
            const tsr_tensor *src = a;
            if (s[dim] >= a->ne[dim]) {
                s[dim] -= a->ne[dim];
                src = b;
            }
            memcpy(at_w(n, i[0], i[1], i[2], i[3]), at(src, s[0], s[1], s[2], s[3]), esize);
        }
    }
}

static void ref_sum_rows(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *a = n->src[0];
    int64_t r0, r1;
    tsr__cpu_range(tsr_nrows(a), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        row_coords(a, r, &i1, &i2, &i3);
        const float *x = (const float *)at(a, 0, i1, i2, i3);
        double sum = 0.0;
        for (int64_t i = 0; i < a->ne[0]; i++)
            sum += x[i];
        *(float *)at_w(n, 0, i1, i2, i3) = (float)sum;
    }
}

/* Total order used by argmax/argsort/top_k: NaN is larger than any number. */
static inline bool val_less(float x, float y)
{
    if (isnan(y))
        return !isnan(x);
    return !isnan(x) && x < y;
}

static void ref_argmax(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *a = n->src[0];
    int64_t r0, r1;
    tsr__cpu_range(tsr_nrows(a), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        row_coords(a, r, &i1, &i2, &i3);
        const float *x = (const float *)at(a, 0, i1, i2, i3);
        int32_t best = 0;
        for (int64_t i = 1; i < a->ne[0]; i++)
            if (val_less(x[best], x[i]))
                best = (int32_t)i;
        *(int32_t *)at_w(n, i1, i2, i3, 0) = best;
    }
}

/* Stable merge sort of idx[0..len) by x[idx] (ascending or descending). */
static void sort_indices(int32_t *idx, int32_t *tmp, int64_t len, const float *x, bool desc)
{
    for (int64_t width = 1; width < len; width *= 2) {
        for (int64_t lo = 0; lo < len; lo += 2 * width) {
            const int64_t mid = TSR_MIN(lo + width, len), hi = TSR_MIN(lo + 2 * width, len);
            int64_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) {
                /* Take from the right only when strictly before the left. */
                const bool right =
                    desc ? val_less(x[idx[i]], x[idx[j]]) : val_less(x[idx[j]], x[idx[i]]);
                tmp[o++] = right ? idx[j++] : idx[i++];
            }
            while (i < mid)
                tmp[o++] = idx[i++];
            while (j < hi)
                tmp[o++] = idx[j++];
        }
        memcpy(idx, tmp, (size_t)len * sizeof(int32_t));
    }
}

static void ref_sort(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *a = n->src[0];
    const int64_t C = a->ne[0];
    const bool top_k = n->op == TSR_OP_TOP_K;
    const bool desc = top_k || n->op_params[0] == TSR_SORT_DESC;
    int32_t *idx = thread_work(p, 2 * (size_t)C * sizeof(int32_t));
    int32_t *tmp = idx + C;
    int64_t r0, r1;
    tsr__cpu_range(tsr_nrows(a), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        row_coords(a, r, &i1, &i2, &i3);
        for (int64_t i = 0; i < C; i++)
            idx[i] = (int32_t)i;
        sort_indices(idx, tmp, C, (const float *)at(a, 0, i1, i2, i3), desc);
        memcpy(at_w(n, 0, i1, i2, i3), idx, (size_t)n->ne[0] * sizeof(int32_t));
    }
}

/* ---- dispatch ------------------------------------------------------------------------------- */

size_t tsr__cpu_ref_work_size(const tsr_tensor *n, int nth)
{
    switch (n->op) {
    case TSR_OP_CONT:
    case TSR_OP_CPY:
        return per_thread((size_t)n->src[0]->ne[0] * sizeof(float), nth);
    case TSR_OP_MUL_MAT:
    case TSR_OP_MUL_MAT_ID:
        return per_thread((size_t)n->src[0]->ne[0] * sizeof(float), nth);
    case TSR_OP_FLASH_ATTN_EXT:
        return per_thread((size_t)(n->src[1]->ne[1] + n->src[2]->ne[0]) * sizeof(double), nth);
    case TSR_OP_ARGSORT:
    case TSR_OP_TOP_K:
        return per_thread(2 * (size_t)n->src[0]->ne[0] * sizeof(int32_t), nth);
    default:
        return 0;
    }
}

void tsr__cpu_ref_compute(const tsr__cpu_params *p, tsr_tensor *n)
{
    switch (n->op) {
    case TSR_OP_CONT:
        ref_copy(p, n->src[0], n);
        break;
    case TSR_OP_CPY:
        ref_copy(p, n->src[0], n);
        break;
    case TSR_OP_GET_ROWS:
        ref_get_rows(p, n);
        break;
    case TSR_OP_SET_ROWS:
        ref_set_rows(p, n);
        break;
    case TSR_OP_MUL_MAT:
        ref_mul_mat(p, n);
        break;
    case TSR_OP_MUL_MAT_ID:
        ref_mul_mat_id(p, n);
        break;
    case TSR_OP_ADD:
    case TSR_OP_SUB:
    case TSR_OP_MUL:
    case TSR_OP_DIV:
        ref_binary(p, n);
        break;
    case TSR_OP_ADD_ID:
        ref_add_id(p, n);
        break;
    case TSR_OP_SCALE:
    case TSR_OP_FILL:
    case TSR_OP_SILU:
    case TSR_OP_GELU:
        ref_unary(p, n);
        break;
    case TSR_OP_GLU:
        ref_glu(p, n);
        break;
    case TSR_OP_RMS_NORM:
        ref_rms_norm(p, n);
        break;
    case TSR_OP_ROPE:
        ref_rope(p, n);
        break;
    case TSR_OP_SOFT_MAX:
        ref_soft_max(p, n);
        break;
    case TSR_OP_FLASH_ATTN_EXT:
        ref_flash_attn(p, n);
        break;
    case TSR_OP_CONCAT:
        ref_concat(p, n);
        break;
    case TSR_OP_SUM_ROWS:
        ref_sum_rows(p, n);
        break;
    case TSR_OP_ARGMAX:
        ref_argmax(p, n);
        break;
    case TSR_OP_ARGSORT:
    case TSR_OP_TOP_K:
        ref_sort(p, n);
        break;
    default:
        if (p->ith == 0)
            tsr__cpu_fail(p, TSR_EUNSUPPORTED, "no CPU kernel for %s ('%s')", tsr_op_name(n->op),
                          n->name);
        break;
    }
}
