/* backends/cpu/cpu_ops_rows.c — fast CPU kernels for the per-row ops of a
 * transformer layer on F32 rows: RMS_NORM, MUL by a broadcast row, the
 * SwiGLU GLU, ROPE, SET_ROWS (the KV-cache writes) and GET_ROWS (the
 * embedding lookup).
 *
 * Not the reference kernels (cpu_ops_ref.c, the oracle these are tested
 * against) nor the matrix products. Key design choice: the math is the
 * reference's, operation for operation (same double accumulators, same
 * rounding points), so results match the oracle bit for bit or within its
 * summation order; the speed comes from plain pointer loops the compiler
 * vectorizes instead of per-element type dispatch, and from ROPE computing
 * each token's cos/sin once for all its heads instead of once per head. Each
 * kernel declines (returns false) on layouts it does not handle: then the
 * reference runs.
 */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_impl.h"

/* Rows of a tensor whose rows are contiguous F32: row r's address. */
static inline float *row_f32(const tsr_tensor *t, int64_t r)
{
    const int64_t i1 = r % t->ne[1], i2 = (r / t->ne[1]) % t->ne[2], i3 = r / (t->ne[1] * t->ne[2]);
    return (float *)((char *)t->data + i1 * (int64_t)t->nb[1] + i2 * (int64_t)t->nb[2] +
                     i3 * (int64_t)t->nb[3]);
}

static bool rows_f32(const tsr_tensor *t)
{
    return t->type == TSR_TYPE_F32 && t->nb[0] == sizeof(float);
}

/* y = x / sqrt(mean(x²) + eps), per row. */
static bool fast_rms_norm(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *a = n->src[0];
    if (!rows_f32(a) || !rows_f32(n))
        return false;
    const double eps = tsr_get_op_param_f32(n, 0);
    const int64_t C = n->ne[0];
    int64_t r0, r1;
    tsr__cpu_range(tsr_nrows(n), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const float *x = row_f32(a, r);
        float *y = row_f32(n, r);
        double sum = 0.0;
        for (int64_t i = 0; i < C; i++)
            sum += (double)x[i] * x[i];
        const double scale = C ? 1.0 / sqrt(sum / (double)C + eps) : 0.0;
        for (int64_t i = 0; i < C; i++)
            y[i] = (float)(x[i] * scale);
    }
    return true;
}

/* y = a · b with b one row broadcast over a's rows (or the same shape). */
static bool fast_mul(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *a = n->src[0], *b = n->src[1];
    if (!rows_f32(a) || !rows_f32(b) || !rows_f32(n) || b->ne[0] != n->ne[0])
        return false;
    const bool bcast = tsr_nrows(b) == 1;
    if (!bcast && !tsr_same_shape(b, n))
        return false;
    const int64_t C = n->ne[0];
    int64_t r0, r1;
    tsr__cpu_range(tsr_nrows(n), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const float *x = row_f32(a, r), *w = bcast ? (const float *)b->data : row_f32(b, r);
        float *y = row_f32(n, r);
        for (int64_t i = 0; i < C; i++)
            y[i] = x[i] * w[i];
    }
    return true;
}

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

/* SwiGLU with separate gate and up tensors: y = silu(g) · u. */
static bool fast_swiglu(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *g = n->src[0], *u = n->src[1];
    if (!u || (tsr_glu_kind)n->op_params[0] != TSR_GLU_SWIGLU || n->op_params[1] != 0 ||
        !rows_f32(g) || !rows_f32(u) || !rows_f32(n))
        return false;
    const int64_t C = n->ne[0];
    int64_t r0, r1;
    tsr__cpu_range(tsr_nrows(n), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const float *x = row_f32(g, r), *v = row_f32(u, r);
        float *y = row_f32(n, r);
        for (int64_t i = 0; i < C; i++)
            y[i] = silu(x[i]) * v[i];
    }
    return true;
}

/* ROPE on [D, H, T, B] F32: the cos/sin of token t's position are computed
 * once (n_dims / 2 pairs, in double as the reference does) and applied to
 * all H heads. Threads split the tokens. */
static bool fast_rope(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *a = n->src[0], *pos = n->src[1];
    const int n_dims = n->op_params[0];
    if (!rows_f32(a) || !rows_f32(n) || n_dims > 1024 || pos->type != TSR_TYPE_I32 ||
        pos->nb[0] != sizeof(int32_t))
        return false;
    const bool neox = n->op_params[1] == TSR_ROPE_NEOX;
    const double base = tsr_get_op_param_f32(n, 2), fscale = tsr_get_op_param_f32(n, 3);
    double cs[512], sn[512], inv[512];
    const int half = n_dims / 2;
    for (int i = 0; i < half; i++)
        inv[i] = pow(base, -2.0 * i / n_dims);
    const int64_t D = n->ne[0], H = n->ne[1], T = n->ne[2] * n->ne[3];
    int64_t t0, t1;
    tsr__cpu_range(T, p->ith, p->nth, &t0, &t1);
    for (int64_t tb = t0; tb < t1; tb++) {
        const int64_t t = tb % n->ne[2];
        const double position = (double)((const int32_t *)pos->data)[t];
        for (int i = 0; i < half; i++) {
            const double theta = position * fscale * inv[i];
            cs[i] = cos(theta);
            sn[i] = sin(theta);
        }
        for (int64_t h = 0; h < H; h++) {
            const float *x = row_f32(a, tb * H + h);
            float *y = row_f32(n, tb * H + h);
            for (int64_t i = n_dims; i < D; i++) /* dims past n_dims pass through */
                y[i] = x[i];
            for (int i = 0; i < half; i++) {
                const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
                const double x0 = x[i0], x1 = x[i1];
                y[i0] = (float)(x0 * cs[i] - x1 * sn[i]);
                y[i1] = (float)(x0 * sn[i] + x1 * cs[i]);
            }
        }
    }
    return true;
}

/* dst rows ids[i] = src row i (F32 into F32/F16/BF16/Q8_0), 2-D only. */
static bool fast_set_rows(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *src = n->src[0], *ids = n->src[1];
    if (!rows_f32(src) || src->ne[2] != 1 || src->ne[3] != 1 || n->ne[2] != 1 || n->ne[3] != 1 ||
        ids->type != TSR_TYPE_I32 || ids->nb[0] != sizeof(int32_t) || ids->ne[0] != src->ne[1])
        return false;
    int64_t r0, r1;
    tsr__cpu_range(src->ne[1], p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int32_t row = ((const int32_t *)ids->data)[r];
        if (row < 0 || row >= n->ne[1]) {
            tsr__cpu_fail(p, TSR_ERANGE, "set_rows '%s': index %d outside [0, %lld)", n->name, row,
                          (long long)n->ne[1]);
            continue;
        }
        tsr_row_from_f32(n->type, row_f32(src, r), (char *)n->data + (size_t)row * n->nb[1],
                         n->ne[0]);
    }
    return true;
}

/* out row i = table row ids[i], converted to F32; 2-D only. */
static bool fast_get_rows(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *a = n->src[0], *ids = n->src[1];
    if (!rows_f32(n) || a->type == TSR_TYPE_I32 || a->ne[2] != 1 || a->ne[3] != 1 ||
        n->ne[2] != 1 || n->ne[3] != 1 || ids->type != TSR_TYPE_I32 ||
        ids->nb[0] != sizeof(int32_t))
        return false;
    int64_t r0, r1;
    tsr__cpu_range(n->ne[1], p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int32_t row = ((const int32_t *)ids->data)[r];
        float *out = row_f32(n, r);
        if (row < 0 || row >= a->ne[1]) {
            memset(out, 0, (size_t)n->ne[0] * sizeof(float));
            tsr__cpu_fail(p, TSR_ERANGE, "get_rows '%s': index %d outside [0, %lld)", n->name, row,
                          (long long)a->ne[1]);
            continue;
        }
        tsr_row_to_f32(a->type, (const char *)a->data + (size_t)row * a->nb[1], out, a->ne[0]);
    }
    return true;
}

bool tsr__cpu_rows_compute(const tsr__cpu_params *p, tsr_tensor *n)
{
    switch (n->op) {
    case TSR_OP_RMS_NORM:
        return fast_rms_norm(p, n);
    case TSR_OP_MUL:
        return fast_mul(p, n);
    case TSR_OP_GLU:
        return fast_swiglu(p, n);
    case TSR_OP_ROPE:
        return fast_rope(p, n);
    case TSR_OP_SET_ROWS:
        return fast_set_rows(p, n);
    case TSR_OP_GET_ROWS:
        return fast_get_rows(p, n);
    default:
        return false;
    }
}
