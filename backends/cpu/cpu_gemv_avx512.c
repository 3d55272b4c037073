/* backends/cpu/cpu_gemv_avx512.c — AVX-512 matrix-vector kernels for small T:
 * y[n, t] = Σ_k W[k, n] · x[k, t] with W: [K, N] (F32, F16, BF16 or Q8_0),
 * X: F32 [K, T], Y: F32 [N, T], T ≤ tsr__mm_gemv_max_t(type).
 *
 * This is the memory-bound path (decode): each weight row is read from memory
 * once, converted to F32 in registers and multiplied with every column of x,
 * so a small batch costs little more than a single token. It is not the GEMM
 * (cpu_mm_avx512.c) and does not decide when to run (cpu_mm.c).
 *
 * Design: no packing; the arithmetic stays in F32 (W converted exactly, x not
 * rounded), so results match a plain F32 dot product up to summation order.
 * Two kernels, both with 16 accumulators of 16 lanes:
 *   - one row at a time, 4 vectors of k per step, up to 4 columns: each
 *     thread reads W as a single sequential stream, which is what reaches the
 *     memory bandwidth (four rows at once measured up to 25 % slower at T=1);
 *   - four rows × up to 4 columns, for T ≥ 3 (T ≥ 4 for Q8_0): each x load
 *     serves four rows, which matters once the columns no longer fit in L1.
 * Both prefetch W in software (except F32 in the one-row kernel): on Zen 5
 * the hardware prefetchers alone leave 5–25 % of the bandwidth unused.
 * Tails of K use masked loads, which read nothing outside the row.
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16
 * -mavx512vnni -mfma -mf16c; only called when the CPU has those features.
 */
#include <immintrin.h>

#include "backends/cpu/cpu_mm_impl.h"

#define GV_INLINE static inline __attribute__((always_inline))

enum {
    GV_U = 4,  /* vectors of k per step in the one-row kernel */
    GV_R = 4,  /* rows per block in the four-row kernel (= GV_U: shared helpers) */
    GV_TB = 4, /* columns of x per pass over the rows */
    /* Prefetch distances in bytes ahead of the current position in a row.
     * The four-row kernel uses a shorter one: its rows are adjacent, so a
     * long distance lands in rows that are already being read. */
    GV_PF_ROW = 8192,
    GV_PF_ROWS = 1024,
};

/* The one-row kernel prefetches F16, BF16 and Q8_0 rows but not F32 ones:
 * with F32 the hardware prefetchers keep up and the extra requests cost
 * about 5 % at 75 GB/s; the converting types gain 5–25 %. */
GV_INLINE bool gv_row_prefetches(tsr_type ty) { return ty != TSR_TYPE_F32; }

/* R consecutive rows n .. n+R-1 of W and TB columns t0 .. of x and y. */
typedef struct gv_blk {
    const char *w[GV_R];
    const float *x[GV_TB];
    float *y[GV_TB]; /* y[t] points at y[n, t0 + t] */
} gv_blk;

static void gv_blk_init(gv_blk *b, const tsr__mm_args *a, int64_t n, int R, int64_t t0, int TB)
{
    for (int r = 0; r < R; r++)
        b->w[r] = (const char *)a->w + (size_t)(n + r) * a->w_nb1;
    for (int t = 0; t < TB; t++) {
        b->x[t] = (const float *)((const char *)a->x + (size_t)(t0 + t) * a->x_nb1);
        b->y[t] = (float *)((char *)a->y + (size_t)(t0 + t) * a->y_nb1) + n;
    }
}

/* Prefetches `bytes` of a row starting `pf` bytes ahead of p, one request per
 * cache line. Prefetches never fault, so running past the row is harmless. */
GV_INLINE void gv_prefetch(const char *p, int pf, int bytes)
{
    for (int o = 0; o < bytes; o += 64)
        _mm_prefetch(p + pf + o, _MM_HINT_T0);
}

/* Loads row elements k .. k+15 of a float-type row as F32; lanes outside m
 * are zero and their memory is not read. F16 converts with vcvtph2ps and BF16
 * by shifting into the high half, both exact. */
GV_INLINE __m512 gv_load(tsr_type ty, const char *row, int64_t k, __mmask16 m)
{
    switch (ty) {
    case TSR_TYPE_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k));
    case TSR_TYPE_BF16: {
        const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    default:
        return _mm512_maskz_loadu_ps(m, (const float *)row + k);
    }
}

GV_INLINE __mmask16 gv_tail_mask(int64_t left)
{
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

GV_INLINE void gv_zero(__m512 acc[4][GV_TB])
{
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
#pragma GCC unroll 4
        for (int t = 0; t < GV_TB; t++)
            acc[i][t] = _mm512_setzero_ps();
    }
}

/* ---- one row ------------------------------------------------------------ */

/* acc[u][t] += w[k + 16u .. +15] · x_t[k + 16u .. +15] lane by lane, for
 * u < U (U = GV_U in the main loop, 1 with mask m for the tail). */
GV_INLINE void gv_row_step(tsr_type ty, int U, int TB, const gv_blk *b, int64_t k, __mmask16 m,
                           __m512 acc[GV_U][GV_TB])
{
#pragma GCC unroll 4
    for (int u = 0; u < U; u++) {
        const __m512 w = gv_load(ty, b->w[0], k + 16 * u, m);
#pragma GCC unroll 4
        for (int t = 0; t < TB; t++) {
            const __m512 x = _mm512_maskz_loadu_ps(m, b->x[t] + k + 16 * u);
            acc[u][t] = _mm512_fmadd_ps(w, x, acc[u][t]);
        }
    }
}

/* Sums the GV_U partial vectors of each column into y[n, t0 + t]. */
GV_INLINE void gv_row_store(int TB, const gv_blk *b, __m512 acc[GV_U][GV_TB])
{
#pragma GCC unroll 4
    for (int t = 0; t < TB; t++) {
        const __m512 s =
            _mm512_add_ps(_mm512_add_ps(acc[0][t], acc[1][t]), _mm512_add_ps(acc[2][t], acc[3][t]));
        *b->y[t] = _mm512_reduce_add_ps(s);
    }
}

/* y[n, t0 .. t0+TB-1] = Σ_k W[k, n] · x[k, t] for a float weight type. */
GV_INLINE void gv_float_row(tsr_type ty, int TB, const tsr__mm_args *a, int64_t n, int64_t t0)
{
    gv_blk b;
    gv_blk_init(&b, a, n, 1, t0, TB);
    const int es = ty == TSR_TYPE_F32 ? 4 : 2;
    __m512 acc[GV_U][GV_TB];
    gv_zero(acc);
    int64_t k = 0;
    for (; k + 16 * GV_U <= a->K; k += 16 * GV_U) {
        if (gv_row_prefetches(ty))
            gv_prefetch(b.w[0] + k * es, GV_PF_ROW, 16 * GV_U * es);
        gv_row_step(ty, GV_U, TB, &b, k, 0xffff, acc);
    }
    for (; k < a->K; k += 16)
        gv_row_step(ty, 1, TB, &b, k, gv_tail_mask(a->K - k), acc);
    gv_row_store(TB, &b, acc);
}

/* Dequantizes half h (16 values) of a Q8_0 block to F32 without its scale. */
GV_INLINE __m512 gv_q8_half(const tsr_block_q8_0 *blk, int h)
{
    const __m128i q = _mm_loadu_si128((const __m128i *)(blk->qs + 16 * h));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
}

/* The block scale d broadcast to 16 lanes as F32. */
GV_INLINE __m512 gv_q8_scale(const tsr_block_q8_0 *blk)
{
    return _mm512_cvtph_ps(_mm256_set1_epi16((short)blk->d));
}

/* Adds block blk (32 k) of a row into acc[t]. With one column the scale is
 * applied to the block's partial dot product (one multiply fewer); with more,
 * the block is dequantized once and reused for every column. */
GV_INLINE void gv_q8_step(int TB, const gv_blk *b, int r, int64_t blk, __m512 acc[GV_TB])
{
    const tsr_block_q8_0 *q = (const tsr_block_q8_0 *)b->w[r] + blk;
    const __m512 d = gv_q8_scale(q);
    const __m512 q0 = gv_q8_half(q, 0), q1 = gv_q8_half(q, 1);
    if (TB == 1) {
        const float *x = b->x[0] + blk * TSR_QK8_0;
        __m512 s = _mm512_mul_ps(q0, _mm512_loadu_ps(x));
        s = _mm512_fmadd_ps(q1, _mm512_loadu_ps(x + 16), s);
        acc[0] = _mm512_fmadd_ps(d, s, acc[0]);
        return;
    }
    const __m512 w0 = _mm512_mul_ps(q0, d), w1 = _mm512_mul_ps(q1, d);
#pragma GCC unroll 4
    for (int t = 0; t < TB; t++) {
        const float *x = b->x[t] + blk * TSR_QK8_0;
        acc[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x), acc[t]);
        acc[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + 16), acc[t]);
    }
}

/* y[n, t0 .. t0+TB-1] for Q8_0 weights (K is a multiple of 32); GV_U blocks
 * per step, each into its own accumulators. */
GV_INLINE void gv_q8_row(int TB, const tsr__mm_args *a, int64_t n, int64_t t0)
{
    gv_blk b;
    gv_blk_init(&b, a, n, 1, t0, TB);
    __m512 acc[GV_U][GV_TB];
    gv_zero(acc);
    const int64_t nblk = a->K / TSR_QK8_0;
    const int bs = (int)sizeof(tsr_block_q8_0);
    int64_t blk = 0;
    for (; blk + GV_U <= nblk; blk += GV_U) {
        gv_prefetch(b.w[0] + blk * bs, GV_PF_ROW, GV_U * bs);
#pragma GCC unroll 4
        for (int u = 0; u < GV_U; u++)
            gv_q8_step(TB, &b, 0, blk + u, acc[u]);
    }
    for (; blk < nblk; blk++)
        gv_q8_step(TB, &b, 0, blk, acc[0]);
    gv_row_store(TB, &b, acc);
}

/* ---- four rows ---------------------------------------------------------- */

/* acc[r][t] += w_r[k .. k+15] · x_t[k .. k+15] lane by lane: each x load
 * serves four rows, each row load TB columns. */
GV_INLINE void gv_rows_step(tsr_type ty, int TB, const gv_blk *b, int64_t k, __mmask16 m,
                            __m512 acc[GV_R][GV_TB])
{
    __m512 w[GV_R];
#pragma GCC unroll 4
    for (int r = 0; r < GV_R; r++)
        w[r] = gv_load(ty, b->w[r], k, m);
#pragma GCC unroll 4
    for (int t = 0; t < TB; t++) {
        const __m512 x = _mm512_maskz_loadu_ps(m, b->x[t] + k);
#pragma GCC unroll 4
        for (int r = 0; r < GV_R; r++)
            acc[r][t] = _mm512_fmadd_ps(w[r], x, acc[r][t]);
    }
}

/* Reduces acc[r][t] into y[n + r, t0 + t]. */
GV_INLINE void gv_rows_store(int TB, const gv_blk *b, __m512 acc[GV_R][GV_TB])
{
#pragma GCC unroll 4
    for (int t = 0; t < TB; t++) {
#pragma GCC unroll 4
        for (int r = 0; r < GV_R; r++)
            b->y[t][r] = _mm512_reduce_add_ps(acc[r][t]);
    }
}

/* y[n .. n+3, t0 .. t0+TB-1] for a float weight type. */
GV_INLINE void gv_float_rows(tsr_type ty, int TB, const tsr__mm_args *a, int64_t n, int64_t t0)
{
    gv_blk b;
    gv_blk_init(&b, a, n, GV_R, t0, TB);
    const int es = ty == TSR_TYPE_F32 ? 4 : 2;
    __m512 acc[GV_R][GV_TB];
    gv_zero(acc);
    int64_t k = 0;
    for (; k + 16 <= a->K; k += 16) {
#pragma GCC unroll 4
        for (int r = 0; r < GV_R; r++)
            gv_prefetch(b.w[r] + k * es, GV_PF_ROWS, 16 * es);
        gv_rows_step(ty, TB, &b, k, 0xffff, acc);
    }
    if (k < a->K)
        gv_rows_step(ty, TB, &b, k, gv_tail_mask(a->K - k), acc);
    gv_rows_store(TB, &b, acc);
}

/* y[n .. n+3, t0 .. t0+TB-1] for Q8_0 weights (TB ≥ 2). */
GV_INLINE void gv_q8_rows(int TB, const tsr__mm_args *a, int64_t n, int64_t t0)
{
    gv_blk b;
    gv_blk_init(&b, a, n, GV_R, t0, TB);
    __m512 acc[GV_R][GV_TB];
    gv_zero(acc);
    const int64_t nblk = a->K / TSR_QK8_0;
    const int bs = (int)sizeof(tsr_block_q8_0);
    for (int64_t blk = 0; blk < nblk; blk++) {
#pragma GCC unroll 4
        for (int r = 0; r < GV_R; r++) {
            gv_prefetch(b.w[r] + blk * bs, GV_PF_ROWS, 1);
            gv_q8_step(TB, &b, r, blk, acc[r]);
        }
    }
    gv_rows_store(TB, &b, acc);
}

/* ---- drivers ------------------------------------------------------------ */

/* R (1 or GV_R) rows for weight type ty and TB columns, R and TB
 * compile-time constants so each combination gets its own unrolled loop. */
GV_INLINE void gv_blk_any(tsr_type ty, int R, int TB, const tsr__mm_args *a, int64_t n, int64_t t0)
{
    if (ty == TSR_TYPE_Q8_0 && R == 1)
        gv_q8_row(TB, a, n, t0);
    else if (ty == TSR_TYPE_Q8_0)
        gv_q8_rows(TB, a, n, t0);
    else if (R == 1)
        gv_float_row(ty, TB, a, n, t0);
    else
        gv_float_rows(ty, TB, a, n, t0);
}

GV_INLINE void gv_blk_tb(tsr_type ty, int R, int64_t TB, const tsr__mm_args *a, int64_t n,
                         int64_t t0)
{
    switch (TB) {
    case 1:
        gv_blk_any(ty, R, 1, a, n, t0);
        break;
    case 2:
        gv_blk_any(ty, R, 2, a, n, t0);
        break;
    case 3:
        gv_blk_any(ty, R, 3, a, n, t0);
        break;
    default:
        gv_blk_any(ty, R, 4, a, n, t0);
        break;
    }
}

/* Rows [lo, hi) of y for all T columns, in passes of GV_TB columns; later
 * passes find the rows in L1 or L2. The four-row kernel starts at T = 3
 * (T = 4 for Q8_0, whose dequantization makes the one-row kernel cheaper). */
GV_INLINE void gv_rows_all(tsr_type ty, const tsr__mm_args *a, int64_t lo, int64_t hi)
{
    const int64_t min_t = ty == TSR_TYPE_Q8_0 ? 4 : 3;
    for (int64_t n = lo; n < hi;) {
        const int R = a->T >= min_t && hi - n >= GV_R ? GV_R : 1;
        for (int64_t t0 = 0; t0 < a->T; t0 += GV_TB) {
            if (R == GV_R)
                gv_blk_tb(ty, GV_R, a->T - t0, a, n, t0);
            else
                gv_blk_tb(ty, 1, a->T - t0, a, n, t0);
        }
        n += R;
    }
}

static void gv_rows_f32(const tsr__mm_args *a, int64_t lo, int64_t hi)
{
    gv_rows_all(TSR_TYPE_F32, a, lo, hi);
}

static void gv_rows_f16(const tsr__mm_args *a, int64_t lo, int64_t hi)
{
    gv_rows_all(TSR_TYPE_F16, a, lo, hi);
}

static void gv_rows_bf16(const tsr__mm_args *a, int64_t lo, int64_t hi)
{
    gv_rows_all(TSR_TYPE_BF16, a, lo, hi);
}

static void gv_rows_q8_0(const tsr__mm_args *a, int64_t lo, int64_t hi)
{
    gv_rows_all(TSR_TYPE_Q8_0, a, lo, hi);
}

void tsr__gemv_avx512(const tsr__mm_args *a, int ith, int nth)
{
    int64_t lo, hi;
    tsr__mm_split(a->N, 1, ith, nth, &lo, &hi);
    switch (a->wtype) {
    case TSR_TYPE_F32:
        gv_rows_f32(a, lo, hi);
        break;
    case TSR_TYPE_F16:
        gv_rows_f16(a, lo, hi);
        break;
    case TSR_TYPE_BF16:
        gv_rows_bf16(a, lo, hi);
        break;
    case TSR_TYPE_Q8_0:
        gv_rows_q8_0(a, lo, hi);
        break;
    default:
        break; /* cpu_mm.c only sends the four types above */
    }
}
