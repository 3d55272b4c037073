/* backends/cpu/cpu_vec_avx512.c — AVX-512 versions of the vector primitives
 * of cpu_vec.h. Compiled with AVX-512 flags; called only after the run-time
 * check in tsr__vec(). Tails use masked loads, so no element past n is read.
 */
#include <immintrin.h>

#include "backends/cpu/cpu_avx512.h"
#include "backends/cpu/cpu_vec.h"

static inline __mmask16 tail_mask(int64_t left) { return (__mmask16)((1u << left) - 1u); }

static inline __m512 load_f16(const tsr_fp16 *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

static inline __m512 load_f16_mask(const tsr_fp16 *p, __mmask16 m)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

static float v_dot_f32(const float *x, const float *y, int64_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xffff : tail_mask(n - i);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

static float v_dot_f16(const float *x, const tsr_fp16 *y, int64_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), load_f16(y + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), load_f16(y + i + 16), a1);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xffff : tail_mask(n - i);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), load_f16_mask(y + i, m), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

static void v_scale_axpy_f32(float *acc, float s, float w, const float *v, int64_t n)
{
    const __m512 vs = _mm512_set1_ps(s), vw = _mm512_set1_ps(w);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xffff : tail_mask(n - i);
        const __m512 a = _mm512_maskz_loadu_ps(m, acc + i);
        const __m512 r = _mm512_fmadd_ps(vw, _mm512_maskz_loadu_ps(m, v + i), _mm512_mul_ps(a, vs));
        _mm512_mask_storeu_ps(acc + i, m, r);
    }
}

static void v_scale_axpy_f16(float *acc, float s, float w, const tsr_fp16 *v, int64_t n)
{
    const __m512 vs = _mm512_set1_ps(s), vw = _mm512_set1_ps(w);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xffff : tail_mask(n - i);
        const __m512 a = _mm512_maskz_loadu_ps(m, acc + i);
        const __m512 r = _mm512_fmadd_ps(vw, load_f16_mask(v + i, m), _mm512_mul_ps(a, vs));
        _mm512_mask_storeu_ps(acc + i, m, r);
    }
}

static void v_add_f32(float *y, const float *a, const float *b, int64_t n)
{
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int k = 0; k < 64; k += 16)
            _mm512_storeu_ps(y + i + k,
                             _mm512_add_ps(_mm512_loadu_ps(a + i + k), _mm512_loadu_ps(b + i + k)));
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xffff : tail_mask(n - i);
        _mm512_mask_storeu_ps(
            y + i, m,
            _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
    }
}

static void v_add_f16(tsr_fp16 *y, const tsr_fp16 *a, const tsr_fp16 *b, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tsr__avx512_mask(i, n);
        tsr__avx512_store_f16(
            y + i, m,
            _mm512_add_ps(tsr__avx512_load_f16(a + i, m), tsr__avx512_load_f16(b + i, m)));
    }
}

static void v_add_bf16(tsr_bf16 *y, const tsr_bf16 *a, const tsr_bf16 *b, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tsr__avx512_mask(i, n);
        tsr__avx512_store_bf16(
            y + i, m,
            _mm512_add_ps(tsr__avx512_load_bf16(a + i, m), tsr__avx512_load_bf16(b + i, m)));
    }
}

const tsr__vec_ops tsr__vec_avx512 = {
    .dot_f32 = v_dot_f32,
    .dot_f16 = v_dot_f16,
    .scale_axpy_f32 = v_scale_axpy_f32,
    .scale_axpy_f16 = v_scale_axpy_f16,
    .add_f32 = v_add_f32,
    .add_f16 = v_add_f16,
    .add_bf16 = v_add_bf16,
};
