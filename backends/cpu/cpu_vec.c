/* backends/cpu/cpu_vec.c — the portable vector primitives and the run-time
 * choice between them and the AVX-512 ones (cpu_vec_avx512.c).
 */
#include "backends/cpu/cpu_vec.h"

#include <stdbool.h>

#include "backends/cpu/cpu_mm.h"

static float g_dot_f32(const float *x, const float *y, int64_t n)
{
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += x[i + j] * y[i + j];
    float sum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < n; i++)
        sum += x[i] * y[i];
    return sum;
}

static float g_dot_f16(const float *x, const tsr_fp16 *y, int64_t n)
{
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++)
        sum += x[i] * tsr_fp16_to_f32(y[i]);
    return sum;
}

static void g_scale_axpy_f32(float *acc, float s, float w, const float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        acc[i] = acc[i] * s + w * v[i];
}

static void g_scale_axpy_f16(float *acc, float s, float w, const tsr_fp16 *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        acc[i] = acc[i] * s + w * tsr_fp16_to_f32(v[i]);
}

static void g_add_f32(float *y, const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}

static void g_add_f16(tsr_fp16 *y, const tsr_fp16 *a, const tsr_fp16 *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = tsr_f32_to_fp16(tsr_fp16_to_f32(a[i]) + tsr_fp16_to_f32(b[i]));
}

static void g_add_bf16(tsr_bf16 *y, const tsr_bf16 *a, const tsr_bf16 *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = tsr_f32_to_bf16(tsr_bf16_to_f32(a[i]) + tsr_bf16_to_f32(b[i]));
}

const tsr__vec_ops tsr__vec_generic = {
    .dot_f32 = g_dot_f32,
    .dot_f16 = g_dot_f16,
    .scale_axpy_f32 = g_scale_axpy_f32,
    .scale_axpy_f16 = g_scale_axpy_f16,
    .add_f32 = g_add_f32,
    .add_f16 = g_add_f16,
    .add_bf16 = g_add_bf16,
};

const tsr__vec_ops *tsr__vec(void)
{
#if defined(TSR_HAVE_AVX512)
    if (tsr__cpu_use_avx512())
        return &tsr__vec_avx512;
#endif
    return &tsr__vec_generic;
}
