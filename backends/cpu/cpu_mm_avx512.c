/* backends/cpu/cpu_mm_avx512.c — AVX-512 packed GEMM: y[n, t] = Σ_k W[k, n] ·
 * x[k, t] with W: [K, N] (F32, F16, BF16 or Q8_0), X: F32 [K, T],
 * Y: F32 [N, T], for T above the matrix-vector threshold.
 *
 * This file is the compute-bound path (prefill). It is not the matrix-vector
 * path (cpu_gemv_avx512.c) and does not pick the path (cpu_mm.c).
 *
 * Design: GotoBLAS/BLIS blocking. X is packed once per chunk of Tc columns
 * into the shared work buffer (threads split the packing, then a barrier);
 * threads then split N (or T, when N is too small to share). Each thread
 * packs a block of Mc rows × Kc k of W into its own part of the work buffer,
 * converting to the micro-kernel's format, and runs a micro-kernel over
 * 32 n × 12 t tiles with 24 zmm accumulators:
 *   - F32, F16, Q8_0: W becomes F32 (exact) and the kernel uses F32 FMA, so
 *     results equal a plain F32 dot product up to summation order;
 *   - BF16: W stays bf16 and X is rounded to bf16 (as llama.cpp does); both
 *     are packed as pairs of consecutive k for vdpbf16ps, which doubles the
 *     arithmetic rate. Odd K gets a zero partner.
 * Edge tiles use masked loads and stores, so nothing outside the rows and
 * columns given is read or written and no temporary tile is needed. Padded
 * lanes hold zeros; whatever they compute is never stored.
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16
 * -mavx512vnni -mfma -mf16c; only called when the CPU has those features.
 */
#include <immintrin.h>
#include <stdbool.h>

#include "backends/cpu/cpu_mm_impl.h"

#define MM_INLINE static inline __attribute__((always_inline))

enum {
    MM_MR = TSR__MM_MR,
    MM_NR = TSR__MM_NR,
    MM_MC = TSR__MM_MC,
    MM_ALIGN = TSR__MM_ALIGN,
    /* Packing reads 16 rows side by side in short runs, a pattern the
     * hardware prefetchers follow poorly; prefetching each row this many
     * bytes ahead doubled small-T GEMM speed on Zen 5. */
    MM_PF_PACK = 256,
};

typedef tsr__mm_plan mm_plan;

/* ---- packing X ---------------------------------------------------------- */

static const float *mm_xcol(const tsr__mm_args *a, int64_t t)
{
    return (const float *)((const char *)a->x + (size_t)t * a->x_nb1);
}

/* Packs columns t .. t+nt-1 (nt ≤ 12) of X as one F32 panel:
 * dst[k][c] = x[k, t + c], dst: [K][12], zero for c ≥ nt. */
static void mm_pack_x_f32(const tsr__mm_args *a, int64_t t, int nt, float *dst)
{
    for (int c = 0; c < MM_NR; c++) {
        if (c >= nt) {
            for (int64_t k = 0; k < a->K; k++)
                dst[k * MM_NR + c] = 0.0f;
            continue;
        }
        const float *x = mm_xcol(a, t + c);
        for (int64_t k = 0; k < a->K; k++)
            dst[k * MM_NR + c] = x[k];
    }
}

/* Mask of the first n lanes (none for n ≤ 0, all for n ≥ 16). */
MM_INLINE __mmask16 mm_mask16(int64_t n)
{
    return n <= 0 ? 0 : n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

/* Packs columns t .. t+nt-1 of X as one bf16-pair panel: dst[i][c] holds
 * bf16(x[2i, t+c]) in its low half and bf16(x[2i+1, t+c]) in its high half
 * (round to nearest even), dst: [ceil(K/2)][12], zero past K and for c ≥ nt. */
static void mm_pack_x_pairs(const tsr__mm_args *a, int64_t t, int nt, uint32_t *dst)
{
    const int64_t kp = (a->K + 1) / 2;
    for (int c = 0; c < MM_NR; c++) {
        if (c >= nt) {
            for (int64_t i = 0; i < kp; i++)
                dst[i * MM_NR + c] = 0;
            continue;
        }
        const float *x = mm_xcol(a, t + c);
        for (int64_t k = 0; k < a->K; k += 32) {
            const __m512 lo = _mm512_maskz_loadu_ps(mm_mask16(a->K - k), x + k);
            const __m512 hi = _mm512_maskz_loadu_ps(mm_mask16(a->K - k - 16), x + k + 16);
            uint32_t tmp[16];
            _mm512_storeu_si512(tmp, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
            const int64_t np = kp - k / 2 < 16 ? kp - k / 2 : 16;
            for (int64_t i = 0; i < np; i++)
                dst[(k / 2 + i) * MM_NR + c] = tmp[i];
        }
    }
}

/* ---- packing W ---------------------------------------------------------- */

/* Transposes a 16 × 16 block of 32-bit elements in registers: on return
 * v[j] lane i holds what v[i] lane j held. */
MM_INLINE void mm_transpose16(__m512 v[16])
{
    __m512 t[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
    }
    /* u[4g + c], 128-bit lane L: column 4L + c of rows 4g .. 4g+3. */
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        v[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        v[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
        v[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        v[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
    }
    /* A 4 × 4 transpose of 128-bit lanes for each c. */
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m512 s0 = _mm512_shuffle_f32x4(v[c], v[4 + c], 0x44);
        const __m512 s1 = _mm512_shuffle_f32x4(v[c], v[4 + c], 0xee);
        const __m512 s2 = _mm512_shuffle_f32x4(v[8 + c], v[12 + c], 0x44);
        const __m512 s3 = _mm512_shuffle_f32x4(v[8 + c], v[12 + c], 0xee);
        t[c] = _mm512_shuffle_f32x4(s0, s2, 0x88);
        t[4 + c] = _mm512_shuffle_f32x4(s0, s2, 0xdd);
        t[8 + c] = _mm512_shuffle_f32x4(s1, s3, 0x88);
        t[12 + c] = _mm512_shuffle_f32x4(s1, s3, 0xdd);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        v[i] = t[i];
}

/* Byte offset in a row of type ty of element k (for Q8_0: of its block). */
MM_INLINE size_t mm_row_offset(tsr_type ty, int64_t k)
{
    switch (ty) {
    case TSR_TYPE_F32:
        return (size_t)k * 4;
    case TSR_TYPE_Q8_0:
        return (size_t)(k / TSR_QK8_0) * sizeof(tsr_block_q8_0);
    default:
        return (size_t)k * 2;
    }
}

/* Loads W elements k .. k+15 of a row as F32 (lanes outside m are zero and
 * not read). For Q8_0, k is a multiple of 16 and m is full. */
MM_INLINE __m512 mm_wload_f32(tsr_type ty, const char *row, int64_t k, __mmask16 m)
{
    switch (ty) {
    case TSR_TYPE_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k));
    case TSR_TYPE_Q8_0: {
        const tsr_block_q8_0 *b = (const tsr_block_q8_0 *)row + k / TSR_QK8_0;
        const __m128i q = _mm_loadu_si128((const __m128i *)(b->qs + k % TSR_QK8_0));
        const __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16((short)b->d));
        return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
    }
    default:
        return _mm512_maskz_loadu_ps(m, (const float *)row + k);
    }
}

/* Packs a block of W for the F32 kernel: rows m0 .. m0+mrows-1, k p0 ..
 * p0+kc-1, as ceil(mrows / 32) panels of [kc][32] floats (panel i holds rows
 * m0+32i ..), dst[i][k][r] = W[p0 + k, m0 + 32i + r], zero past mrows. */
MM_INLINE void mm_pack_w_f32(tsr_type ty, const tsr__mm_args *a, int64_t m0, int64_t mrows,
                             int64_t p0, int64_t kc, float *dst)
{
    for (int64_t r0 = 0; r0 < mrows; r0 += 16) {
        const int64_t nr = mrows - r0 < 16 ? mrows - r0 : 16;
        float *out = dst + (r0 / MM_MR) * kc * MM_MR + r0 % MM_MR;
        const char *row0 = (const char *)a->w + (size_t)(m0 + r0) * a->w_nb1;
        for (int64_t k = 0; k < kc; k += 16) {
            const __mmask16 m = mm_mask16(kc - k);
            const size_t kb = mm_row_offset(ty, p0 + k) + MM_PF_PACK;
            __m512 v[16];
#pragma GCC unroll 16
            for (int r = 0; r < 16; r++) {
                const char *row = row0 + (size_t)r * a->w_nb1;
                if (r < nr)
                    _mm_prefetch(row + kb, _MM_HINT_T0);
                v[r] = r < nr ? mm_wload_f32(ty, row, p0 + k, m) : _mm512_setzero_ps();
            }
            mm_transpose16(v);
            const int64_t kl = kc - k < 16 ? kc - k : 16;
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                if (i < kl)
                    _mm512_store_ps(out + (k + i) * MM_MR, v[i]);
        }
    }
    /* A last panel of 1..16 rows still needs its upper half zeroed. */
    if (mrows % MM_MR != 0 && mrows % MM_MR <= 16) {
        float *out = dst + (mrows / MM_MR) * kc * MM_MR + 16;
        for (int64_t k = 0; k < kc; k++)
            _mm512_store_ps(out + k * MM_MR, _mm512_setzero_ps());
    }
}

/* Packs a block of BF16 W as pairs: rows m0 .. m0+mrows-1, k p0 .. p0+kc-1
 * (p0 even) as panels of [ceil(kc/2)][32] 32-bit words, word [i][r] =
 * (W[p0+2i, row], W[p0+2i+1, row]) as two bf16, zero past kc and mrows. */
static void mm_pack_w_pairs(const tsr__mm_args *a, int64_t m0, int64_t mrows, int64_t p0,
                            int64_t kc, uint32_t *dst)
{
    const int64_t kp = (kc + 1) / 2;
    for (int64_t r0 = 0; r0 < mrows; r0 += 16) {
        const int64_t nr = mrows - r0 < 16 ? mrows - r0 : 16;
        uint32_t *out = dst + (r0 / MM_MR) * kp * MM_MR + r0 % MM_MR;
        const char *row0 = (const char *)a->w + (size_t)(m0 + r0) * a->w_nb1;
        for (int64_t k = 0; k < kc; k += 32) {
            const int64_t kl = kc - k < 32 ? kc - k : 32;
            const __mmask32 m = kl == 32 ? ~(__mmask32)0 : (__mmask32)((1u << kl) - 1u);
            __m512 v[16];
#pragma GCC unroll 16
            for (int r = 0; r < 16; r++) {
                const uint16_t *row = (const uint16_t *)(row0 + (size_t)r * a->w_nb1);
                if (r < nr)
                    _mm_prefetch((const char *)(row + p0 + k) + MM_PF_PACK, _MM_HINT_T0);
                v[r] = r < nr ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(m, row + p0 + k))
                              : _mm512_setzero_ps();
            }
            mm_transpose16(v);
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                if (i < (kl + 1) / 2)
                    _mm512_store_ps((float *)(out + (k / 2 + i) * MM_MR), v[i]);
        }
    }
    if (mrows % MM_MR != 0 && mrows % MM_MR <= 16) {
        uint32_t *out = dst + (mrows / MM_MR) * kp * MM_MR + 16;
        for (int64_t i = 0; i < kp; i++)
            _mm512_store_ps((float *)(out + i * MM_MR), _mm512_setzero_ps());
    }
}

static void mm_pack_w_f32_from_f32(const tsr__mm_args *a, int64_t m0, int64_t mrows, int64_t p0,
                                   int64_t kc, float *dst)
{
    mm_pack_w_f32(TSR_TYPE_F32, a, m0, mrows, p0, kc, dst);
}

static void mm_pack_w_f32_from_f16(const tsr__mm_args *a, int64_t m0, int64_t mrows, int64_t p0,
                                   int64_t kc, float *dst)
{
    mm_pack_w_f32(TSR_TYPE_F16, a, m0, mrows, p0, kc, dst);
}

static void mm_pack_w_f32_from_q8_0(const tsr__mm_args *a, int64_t m0, int64_t mrows, int64_t p0,
                                    int64_t kc, float *dst)
{
    mm_pack_w_f32(TSR_TYPE_Q8_0, a, m0, mrows, p0, kc, dst);
}

/* ---- micro-kernels ------------------------------------------------------ */

/* Writes a 32 × NT accumulator tile to y[n .. n+nn-1, t .. t+nt-1] (y points
 * at y[n, t], columns y_nb1 bytes apart), adding to y when `add`. */
MM_INLINE void mm_store_tile(int NT, __m512 c[MM_NR][2], float *y, size_t y_nb1, int nn, int nt,
                             bool add)
{
    const __mmask16 m0 = mm_mask16(nn), m1 = mm_mask16(nn - 16);
#pragma GCC unroll 12
    for (int t = 0; t < NT; t++) {
        if (t >= nt)
            break;
        float *yt = (float *)((char *)y + (size_t)t * y_nb1);
        if (add) {
            c[t][0] = _mm512_add_ps(c[t][0], _mm512_maskz_loadu_ps(m0, yt));
            c[t][1] = _mm512_add_ps(c[t][1], _mm512_maskz_loadu_ps(m1, yt + 16));
        }
        _mm512_mask_storeu_ps(yt, m0, c[t][0]);
        _mm512_mask_storeu_ps(yt + 16, m1, c[t][1]);
    }
}

/* F32 micro-kernel: c[t][h] lane r = Σ_k w[k][16h + r] · x[k][t] over kc k
 * for t < NT (4, 8 or 12), w: [kc][32] packed W panel, x: [kc][12] packed X
 * panel (only the first NT columns read); then stored to y. */
MM_INLINE void mm_kernel_f32(int NT, int64_t kc, const float *restrict w, const float *restrict x,
                             float *y, size_t y_nb1, int nn, int nt, bool add)
{
    __m512 c[MM_NR][2];
#pragma GCC unroll 12
    for (int t = 0; t < NT; t++)
        c[t][0] = c[t][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        const __m512 a0 = _mm512_load_ps(w), a1 = _mm512_load_ps(w + 16);
#pragma GCC unroll 12
        for (int t = 0; t < NT; t++) {
            const __m512 b = _mm512_set1_ps(x[t]);
            c[t][0] = _mm512_fmadd_ps(a0, b, c[t][0]);
            c[t][1] = _mm512_fmadd_ps(a1, b, c[t][1]);
        }
        w += MM_MR;
        x += MM_NR;
    }
    mm_store_tile(NT, c, y, y_nb1, nn, nt, add);
}

/* bf16-pair micro-kernel: c[t][h] lane r = Σ_i Σ_{j=0,1} w[i][16h + r].j ·
 * x[i][t].j over kp pairs for t < NT (vdpbf16ps, F32 accumulation),
 * w: [kp][32] words, x: [kp][12] words; then stored to y. */
MM_INLINE void mm_kernel_pairs(int NT, int64_t kp, const uint32_t *restrict w,
                               const uint32_t *restrict x, float *y, size_t y_nb1, int nn, int nt,
                               bool add)
{
    __m512 c[MM_NR][2];
#pragma GCC unroll 12
    for (int t = 0; t < NT; t++)
        c[t][0] = c[t][1] = _mm512_setzero_ps();
    for (int64_t i = 0; i < kp; i++) {
        const __m512bh a0 = (__m512bh)_mm512_load_si512(w);
        const __m512bh a1 = (__m512bh)_mm512_load_si512(w + 16);
#pragma GCC unroll 12
        for (int t = 0; t < NT; t++) {
            const __m512bh b = (__m512bh)_mm512_set1_epi32((int)x[t]);
            c[t][0] = _mm512_dpbf16_ps(c[t][0], a0, b);
            c[t][1] = _mm512_dpbf16_ps(c[t][1], a1, b);
        }
        w += MM_MR;
        x += MM_NR;
    }
    mm_store_tile(NT, c, y, y_nb1, nn, nt, add);
}

/* The kernels above for NT = 12, 8 and 4 columns: a panel of nt columns
 * runs the narrowest that covers it, so T = 16 costs 12 + 4, not 24. */
typedef void (*mm_kernel_fn)(int64_t kw, const void *w, const void *x, float *y, size_t y_nb1,
                             int nn, int nt, bool add);

#define MM_KERNEL_VARIANT(name, kern, NT, type)                                                \
    static void name(int64_t kw, const void *w, const void *x, float *y, size_t y_nb1, int nn, \
                     int nt, bool add)                                                         \
    {                                                                                          \
        kern(NT, kw, (const type *)w, (const type *)x, y, y_nb1, nn, nt, add);                 \
    }
MM_KERNEL_VARIANT(mm_kernel_f32_12, mm_kernel_f32, 12, float)
MM_KERNEL_VARIANT(mm_kernel_f32_8, mm_kernel_f32, 8, float)
MM_KERNEL_VARIANT(mm_kernel_f32_4, mm_kernel_f32, 4, float)
MM_KERNEL_VARIANT(mm_kernel_pairs_12, mm_kernel_pairs, 12, uint32_t)
MM_KERNEL_VARIANT(mm_kernel_pairs_8, mm_kernel_pairs, 8, uint32_t)
MM_KERNEL_VARIANT(mm_kernel_pairs_4, mm_kernel_pairs, 4, uint32_t)
#undef MM_KERNEL_VARIANT

static mm_kernel_fn mm_kernel_pick(bool pairs, int nt)
{
    if (nt > 8)
        return pairs ? mm_kernel_pairs_12 : mm_kernel_f32_12;
    if (nt > 4)
        return pairs ? mm_kernel_pairs_8 : mm_kernel_f32_8;
    return pairs ? mm_kernel_pairs_4 : mm_kernel_f32_4;
}

/* ---- driver ------------------------------------------------------------- */

/* What one thread computes in one chunk of columns. */
typedef struct mm_job {
    const tsr__mm_args *a;
    const mm_plan *p;
    const void *xpack;  /* the chunk's packed X panels */
    void *wpack;        /* this thread's W block buffer */
    int64_t t0;         /* first column of the chunk */
    int64_t n_lo, n_hi; /* rows of y, n_lo a multiple of 32 */
    int64_t j_lo, j_hi; /* column panels of the chunk */
} mm_job;

/* Packs one W block into jb->wpack in the format of the plan's kernel. */
static void mm_pack_w(const mm_job *jb, int64_t m0, int64_t mrows, int64_t p0, int64_t kc)
{
    const tsr__mm_args *a = jb->a;
    switch (a->wtype) {
    case TSR_TYPE_F16:
        mm_pack_w_f32_from_f16(a, m0, mrows, p0, kc, jb->wpack);
        break;
    case TSR_TYPE_Q8_0:
        mm_pack_w_f32_from_q8_0(a, m0, mrows, p0, kc, jb->wpack);
        break;
    case TSR_TYPE_BF16:
        mm_pack_w_pairs(a, m0, mrows, p0, kc, jb->wpack);
        break;
    default:
        mm_pack_w_f32_from_f32(a, m0, mrows, p0, kc, jb->wpack);
        break;
    }
}

/* Multiplies the packed W block (rows m0 .., k p0 ..) with every column panel
 * of the job: y[m0 .., t ..] = (or +=, when p0 > 0) block · X panel. */
static void mm_block_times_x(const mm_job *jb, int64_t m0, int64_t mrows, int64_t p0, int64_t kc)
{
    const tsr__mm_args *a = jb->a;
    const bool pairs = jb->p->pairs;
    const int64_t kw = pairs ? (kc + 1) / 2 : kc; /* packed rows of this block */
    const int64_t pw = pairs ? p0 / 2 : p0;
    for (int64_t j = jb->j_lo; j < jb->j_hi; j++) {
        const int64_t t = jb->t0 + j * MM_NR;
        const int nt = (int)(a->T - t < MM_NR ? a->T - t : MM_NR);
        const uint32_t *xp = (const uint32_t *)jb->xpack + (j * jb->p->kp + pw) * MM_NR;
        float *yt = (float *)((char *)a->y + (size_t)t * a->y_nb1) + m0;
        const mm_kernel_fn kern = mm_kernel_pick(pairs, nt);
        for (int64_t i = 0; i < mrows; i += MM_MR) {
            const int nn = (int)(mrows - i < MM_MR ? mrows - i : MM_MR);
            const uint32_t *wp = (const uint32_t *)jb->wpack + i * kw;
            kern(kw, wp, xp, yt + i, a->y_nb1, nn, nt, p0 > 0);
        }
    }
}

/* The job's rows in blocks of Mc, each over all of K in blocks of Kc. */
static void mm_job_run(const mm_job *jb)
{
    const int64_t K = jb->a->K, kc = jb->p->kc;
    if (jb->j_lo >= jb->j_hi)
        return; /* no columns for this thread: skip packing W for nothing */
    for (int64_t m0 = jb->n_lo; m0 < jb->n_hi; m0 += MM_MC) {
        const int64_t mrows = jb->n_hi - m0 < MM_MC ? jb->n_hi - m0 : MM_MC;
        for (int64_t p0 = 0; p0 < K; p0 += kc) {
            const int64_t kcur = K - p0 < kc ? K - p0 : kc;
            mm_pack_w(jb, m0, mrows, p0, kcur);
            mm_block_times_x(jb, m0, mrows, p0, kcur);
        }
    }
}

/* Packs this thread's share of the chunk's column panels [0, npanels). */
static void mm_pack_x_chunk(const tsr__mm_args *a, const mm_plan *p, int64_t t0, int64_t npanels,
                            void *xpack, int ith, int nth)
{
    int64_t lo, hi;
    tsr__mm_split(npanels, 1, ith, nth, &lo, &hi);
    for (int64_t j = lo; j < hi; j++) {
        const int64_t t = t0 + j * MM_NR;
        const int nt = (int)(a->T - t < MM_NR ? a->T - t : MM_NR);
        uint32_t *dst = (uint32_t *)xpack + j * p->kp * MM_NR;
        if (p->pairs)
            mm_pack_x_pairs(a, t, nt, dst);
        else
            mm_pack_x_f32(a, t, nt, (float *)dst);
    }
}

/* Splits a chunk between threads: by rows when that balances at least as
 * well as splitting the column panels (no W block is then packed twice). */
static void mm_job_split(mm_job *jb, int64_t npanels, int ith, int nth)
{
    const int64_t N = jb->a->N;
    const int64_t rpanels = (N + MM_MR - 1) / MM_MR;
    const int64_t by_rows = (rpanels + nth - 1) / nth * npanels;
    const int64_t by_cols = (npanels + nth - 1) / nth * rpanels;
    if (by_rows <= by_cols) {
        tsr__mm_split(N, MM_MR, ith, nth, &jb->n_lo, &jb->n_hi);
        jb->j_lo = 0;
        jb->j_hi = npanels;
    } else {
        jb->n_lo = 0;
        jb->n_hi = N;
        tsr__mm_split(npanels, 1, ith, nth, &jb->j_lo, &jb->j_hi);
    }
}

void tsr__gemm_avx512(const tsr__mm_args *a, int ith, int nth, void *work, tsr__barrier_fn barrier,
                      void *barrier_ctx)
{
    const mm_plan p = tsr__mm_plan_make(a->wtype, a->K, a->T);
    char *base = (char *)work + (MM_ALIGN - (uintptr_t)work % MM_ALIGN) % MM_ALIGN;
    mm_job jb = {.a = a, .p = &p, .xpack = base, .wpack = base + p.xpack + (size_t)ith * p.wpack};
    for (int64_t t0 = 0; t0 < a->T; t0 += p.tc) {
        const int64_t tcur = a->T - t0 < p.tc ? a->T - t0 : p.tc;
        const int64_t npanels = (tcur + MM_NR - 1) / MM_NR;
        if (t0 > 0)
            barrier(barrier_ctx); /* everyone is done with the previous chunk */
        mm_pack_x_chunk(a, &p, t0, npanels, base, ith, nth);
        barrier(barrier_ctx);
        jb.t0 = t0;
        mm_job_split(&jb, npanels, ith, nth);
        mm_job_run(&jb);
    }
}
