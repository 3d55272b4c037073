/* backends/cpu/cpu_avx512.h — inline AVX-512 helpers shared by the *_avx512.c
 * files: tail masks and conversions between F16 / BF16 and F32 that round
 * exactly like tsr_f32_to_fp16 / tsr_f32_to_bf16 (the reference kernels'
 * rounding), so a fast path and the oracle agree bit for bit.
 *
 * Include only from files compiled with the AVX-512 flags (CMakeLists.txt).
 */
#ifndef TESSERA_CPU_AVX512_H
#define TESSERA_CPU_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#include "tessera/tensor.h"

/* The first `left` lanes of 16 (left < 16). */
static inline __mmask16 tsr__avx512_tail(int64_t left) { return (__mmask16)((1u << left) - 1u); }

/* 16 lanes, or fewer at the end of [i, n). */
static inline __mmask16 tsr__avx512_mask(int64_t i, int64_t n)
{
    return n - i >= 16 ? (__mmask16)0xffff : tsr__avx512_tail(n - i);
}

static inline __m512 tsr__avx512_load_f16(const tsr_fp16 *p, __mmask16 m)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

static inline void tsr__avx512_store_f16(tsr_fp16 *p, __mmask16 m, __m512 v)
{
    _mm256_mask_storeu_epi16(p, m,
                             _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

static inline __m512 tsr__avx512_load_bf16(const tsr_bf16 *p, __mmask16 m)
{
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

/* Round to nearest even as tsr_f32_to_bf16 does (NaN kept and made quiet,
 * subnormals kept — VCVTNEPS2BF16 flushes those). */
static inline void tsr__avx512_store_bf16(tsr_bf16 *p, __mmask16 m, __m512 v)
{
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(r));
}

#endif /* TESSERA_CPU_AVX512_H */
