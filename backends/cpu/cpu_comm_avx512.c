/* backends/cpu/cpu_comm_avx512.c — the AVX-512 summation kernels of the CPU
 * native all-reduce (cpu_comm.h): read element i of every tensor, sum in
 * F32 in device order, write the sum back to every tensor.
 *
 * Not the rendezvous (cpu_comm.c). Compiled with the AVX-512 flags and
 * called only when tsr__cpu_use_avx512() says so. Key choice: the sum is
 * written back over lines that were just read, so each line costs one read
 * and one write-back and no read-for-ownership; four vectors per step keep
 * enough loads in flight to run at memory speed.
 */
#include "backends/cpu/cpu_avx512.h"
#include "backends/cpu/cpu_comm.h"

void tsr__cpu_comm_sum_f32_avx512(void *const *p, int m, int64_t ne)
{
    float *const *x = (float *const *)p;
    int64_t i = 0;
    for (; i + 64 <= ne; i += 64) {
        __m512 a0 = _mm512_loadu_ps(x[0] + i), a1 = _mm512_loadu_ps(x[0] + i + 16);
        __m512 a2 = _mm512_loadu_ps(x[0] + i + 32), a3 = _mm512_loadu_ps(x[0] + i + 48);
        for (int j = 1; j < m; j++) {
            a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x[j] + i));
            a1 = _mm512_add_ps(a1, _mm512_loadu_ps(x[j] + i + 16));
            a2 = _mm512_add_ps(a2, _mm512_loadu_ps(x[j] + i + 32));
            a3 = _mm512_add_ps(a3, _mm512_loadu_ps(x[j] + i + 48));
        }
        for (int j = 0; j < m; j++) {
            _mm512_storeu_ps(x[j] + i, a0);
            _mm512_storeu_ps(x[j] + i + 16, a1);
            _mm512_storeu_ps(x[j] + i + 32, a2);
            _mm512_storeu_ps(x[j] + i + 48, a3);
        }
    }
    for (; i < ne; i += 16) {
        const __mmask16 k = tsr__avx512_mask(i, ne);
        __m512 a = _mm512_maskz_loadu_ps(k, x[0] + i);
        for (int j = 1; j < m; j++)
            a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(k, x[j] + i));
        for (int j = 0; j < m; j++)
            _mm512_mask_storeu_ps(x[j] + i, k, a);
    }
}

void tsr__cpu_comm_sum_f16_avx512(void *const *p, int m, int64_t ne)
{
    tsr_fp16 *const *x = (tsr_fp16 *const *)p;
    int64_t i = 0;
    for (; i + 32 <= ne; i += 32) {
        __m512 a0 = tsr__avx512_load_f16(x[0] + i, 0xffff);
        __m512 a1 = tsr__avx512_load_f16(x[0] + i + 16, 0xffff);
        for (int j = 1; j < m; j++) {
            a0 = _mm512_add_ps(a0, tsr__avx512_load_f16(x[j] + i, 0xffff));
            a1 = _mm512_add_ps(a1, tsr__avx512_load_f16(x[j] + i + 16, 0xffff));
        }
        for (int j = 0; j < m; j++) {
            tsr__avx512_store_f16(x[j] + i, 0xffff, a0);
            tsr__avx512_store_f16(x[j] + i + 16, 0xffff, a1);
        }
    }
    for (; i < ne; i += 16) {
        const __mmask16 k = tsr__avx512_mask(i, ne);
        __m512 a = tsr__avx512_load_f16(x[0] + i, k);
        for (int j = 1; j < m; j++)
            a = _mm512_add_ps(a, tsr__avx512_load_f16(x[j] + i, k));
        for (int j = 0; j < m; j++)
            tsr__avx512_store_f16(x[j] + i, k, a);
    }
}

void tsr__cpu_comm_sum_bf16_avx512(void *const *p, int m, int64_t ne)
{
    tsr_bf16 *const *x = (tsr_bf16 *const *)p;
    int64_t i = 0;
    for (; i + 32 <= ne; i += 32) {
        __m512 a0 = tsr__avx512_load_bf16(x[0] + i, 0xffff);
        __m512 a1 = tsr__avx512_load_bf16(x[0] + i + 16, 0xffff);
        for (int j = 1; j < m; j++) {
            a0 = _mm512_add_ps(a0, tsr__avx512_load_bf16(x[j] + i, 0xffff));
            a1 = _mm512_add_ps(a1, tsr__avx512_load_bf16(x[j] + i + 16, 0xffff));
        }
        for (int j = 0; j < m; j++) {
            tsr__avx512_store_bf16(x[j] + i, 0xffff, a0);
            tsr__avx512_store_bf16(x[j] + i + 16, 0xffff, a1);
        }
    }
    for (; i < ne; i += 16) {
        const __mmask16 k = tsr__avx512_mask(i, ne);
        __m512 a = tsr__avx512_load_bf16(x[0] + i, k);
        for (int j = 1; j < m; j++)
            a = _mm512_add_ps(a, tsr__avx512_load_bf16(x[j] + i, k));
        for (int j = 0; j < m; j++)
            tsr__avx512_store_bf16(x[j] + i, k, a);
    }
}
