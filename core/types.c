/* core/types.c — element type traits and conversions between types and F32.
 *
 * This is the scalar, portable definition of every conversion: the CPU
 * reference kernels and the file/wire readers use it. Vectorized conversions
 * belong in the backends. F16 and BF16 round to nearest even; NaN stays NaN.
 */
#include <math.h>
#include <string.h>

#include "core/internal.h"
#include "tessera/tensor.h"

typedef struct {
    const char *name;
    int64_t block;
    size_t size;
} type_traits;

static const type_traits types_table[TSR_TYPE_COUNT] = {
    [TSR_TYPE_F32] = {"f32", 1, sizeof(float)},
    [TSR_TYPE_F16] = {"f16", 1, sizeof(tsr_fp16)},
    [TSR_TYPE_BF16] = {"bf16", 1, sizeof(tsr_bf16)},
    [TSR_TYPE_Q8_0] = {"q8_0", TSR_QK8_0, sizeof(tsr_block_q8_0)},
    [TSR_TYPE_I32] = {"i32", 1, sizeof(int32_t)},
};

bool tsr_type_valid(int type) { return type >= 0 && type < TSR_TYPE_COUNT; }

const char *tsr_type_name(tsr_type type)
{
    return tsr_type_valid((int)type) ? types_table[type].name : "?";
}

int64_t tsr_type_block_size(tsr_type type)
{
    return tsr_type_valid((int)type) ? types_table[type].block : 1;
}

size_t tsr_type_size(tsr_type type)
{
    return tsr_type_valid((int)type) ? types_table[type].size : 0;
}

bool tsr_type_is_float(tsr_type type)
{
    return type == TSR_TYPE_F32 || type == TSR_TYPE_F16 || type == TSR_TYPE_BF16;
}

size_t tsr_row_size(tsr_type type, int64_t ne0)
{
    return tsr_type_size(type) * (size_t)(ne0 / tsr_type_block_size(type));
}

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

float tsr_fp16_to_f32(tsr_fp16 h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) /* inf or nan */
        return bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0)
            return bits_f32(sign);
        /* Subnormal: value = mant · 2^-24. */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

tsr_fp16 tsr_f32_to_fp16(float f)
{
    const uint32_t u = f32_bits(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) /* nan: keep it a quiet nan */
        return (tsr_fp16)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
    if (abs >= 0x477ff000u) /* rounds to >= 65520: inf */
        return (tsr_fp16)(sign | 0x7c00u);
    if (abs < 0x38800000u) {
        /* Result is subnormal or zero: round abs/2^-24 to nearest even. */
        const float v = bits_f32(abs) * 0x1p24f;
        return (tsr_fp16)(sign | (uint32_t)lrintf(v));
    }
    /* Normal: drop 13 mantissa bits with round-to-nearest-even; a carry into
     * the exponent is correct (it rounds up to the next binade or to inf). */
    const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
    return (tsr_fp16)(sign | ((rounded - (112u << 23)) >> 13));
}

float tsr_bf16_to_f32(tsr_bf16 h) { return bits_f32((uint32_t)h << 16); }

tsr_bf16 tsr_f32_to_bf16(float f)
{
    const uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (tsr_bf16)((u >> 16) | 0x40u); /* quiet nan */
    return (tsr_bf16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static void q8_0_from_f32(const float *src, tsr_block_q8_0 *dst, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++) {
        const float *x = src + b * TSR_QK8_0;
        float amax = 0.0f;
        for (int i = 0; i < TSR_QK8_0; i++)
            amax = fmaxf(amax, fabsf(x[i]));
        const float d = amax / 127.0f;
        const float id = d > 0.0f ? 1.0f / d : 0.0f;
        dst[b].d = tsr_f32_to_fp16(d);
        for (int i = 0; i < TSR_QK8_0; i++)
            dst[b].qs[i] = (int8_t)lrintf(x[i] * id);
    }
}

static void q8_0_to_f32(const tsr_block_q8_0 *src, float *dst, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++) {
        const float d = tsr_fp16_to_f32(src[b].d);
        for (int i = 0; i < TSR_QK8_0; i++)
            dst[b * TSR_QK8_0 + i] = d * (float)src[b].qs[i];
    }
}

static tsr_status check_row(tsr_type type, int64_t n, const char *what)
{
    if (!tsr_type_valid((int)type))
        return tsr__error(TSR_ETYPE, "%s: invalid type %d", what, (int)type);
    if (n < 0 || n % tsr_type_block_size(type) != 0)
        return tsr__error(TSR_EINVAL, "%s: %lld elements is not a multiple of the %s block (%lld)",
                          what, (long long)n, tsr_type_name(type),
                          (long long)tsr_type_block_size(type));
    return TSR_OK;
}

tsr_status tsr_row_to_f32(tsr_type type, const void *src, float *dst, int64_t n)
{
    tsr_status st = check_row(type, n, "row_to_f32");
    if (st != TSR_OK)
        return st;
    switch (type) {
    case TSR_TYPE_F32:
        memmove(dst, src, (size_t)n * sizeof(float));
        break;
    case TSR_TYPE_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = tsr_fp16_to_f32(((const tsr_fp16 *)src)[i]);
        break;
    case TSR_TYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = tsr_bf16_to_f32(((const tsr_bf16 *)src)[i]);
        break;
    case TSR_TYPE_Q8_0:
        q8_0_to_f32(src, dst, n / TSR_QK8_0);
        break;
    case TSR_TYPE_I32:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)((const int32_t *)src)[i];
        break;
    default:
        return tsr__error(TSR_ETYPE, "row_to_f32: type %d", (int)type);
    }
    return TSR_OK;
}

tsr_status tsr_row_from_f32(tsr_type type, const float *src, void *dst, int64_t n)
{
    tsr_status st = check_row(type, n, "row_from_f32");
    if (st != TSR_OK)
        return st;
    switch (type) {
    case TSR_TYPE_F32:
        memmove(dst, src, (size_t)n * sizeof(float));
        break;
    case TSR_TYPE_F16:
        for (int64_t i = 0; i < n; i++)
            ((tsr_fp16 *)dst)[i] = tsr_f32_to_fp16(src[i]);
        break;
    case TSR_TYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            ((tsr_bf16 *)dst)[i] = tsr_f32_to_bf16(src[i]);
        break;
    case TSR_TYPE_Q8_0:
        q8_0_from_f32(src, dst, n / TSR_QK8_0);
        break;
    case TSR_TYPE_I32:
        for (int64_t i = 0; i < n; i++) {
            /* Saturate instead of invoking undefined behaviour on overflow. */
            const float v = src[i];
            int32_t r = v != v                ? 0
                        : v >= 2147483647.0f  ? INT32_MAX
                        : v <= -2147483648.0f ? INT32_MIN
                                              : (int32_t)v;
            ((int32_t *)dst)[i] = r;
        }
        break;
    default:
        return tsr__error(TSR_ETYPE, "row_from_f32: type %d", (int)type);
    }
    return TSR_OK;
}
