/* backends/cpu/cpu_vec.h — small vector primitives of the CPU fast paths
 * (dot products, scaled accumulation, element-wise add) with a plain C and an
 * AVX-512 implementation, chosen once at run time.
 *
 * Not the matrix kernels (cpu_mm.h). Every primitive works for any n ≥ 0
 * and reads and writes exactly n elements.
 */
#ifndef TESSERA_CPU_VEC_H
#define TESSERA_CPU_VEC_H

#include <stdint.h>

#include "tessera/tensor.h"

typedef struct tsr__vec_ops {
    /* Σ x[i]·y[i] with y in F32 / F16. */
    float (*dot_f32)(const float *x, const float *y, int64_t n);
    float (*dot_f16)(const float *x, const tsr_fp16 *y, int64_t n);
    /* acc[i] = acc[i]·s + w·v[i] with v in F32 / F16. */
    void (*scale_axpy_f32)(float *acc, float s, float w, const float *v, int64_t n);
    void (*scale_axpy_f16)(float *acc, float s, float w, const tsr_fp16 *v, int64_t n);
    /* y[i] = a[i] + b[i] in F32 arithmetic, rounded once to the type (round to
     * nearest even, as tsr_f32_to_fp16 / tsr_f32_to_bf16). y may alias a or b. */
    void (*add_f32)(float *y, const float *a, const float *b, int64_t n);
    void (*add_f16)(tsr_fp16 *y, const tsr_fp16 *a, const tsr_fp16 *b, int64_t n);
    void (*add_bf16)(tsr_bf16 *y, const tsr_bf16 *a, const tsr_bf16 *b, int64_t n);
} tsr__vec_ops;

/* The best implementation for this CPU (never NULL). */
const tsr__vec_ops *tsr__vec(void);

/* The portable and the AVX-512 tables (the latter only when the CPU has it). */
extern const tsr__vec_ops tsr__vec_generic;
extern const tsr__vec_ops tsr__vec_avx512;

#endif /* TESSERA_CPU_VEC_H */
