/* backends/cpu/cpu_mm.h — fast matrix products for the CPU backend.
 *
 * Shapes (ggml convention): W: [K, N] weights, X: [K, T] activations (F32),
 * Y = Wᵀ·X: [N, T] (F32). y[n, t] = Σ_k W[k, n] · x[k, t].
 *
 * This is the fast path only; the reference kernel (plain C, the test oracle)
 * lives in cpu_ops_ref.c. The entry point picks matrix-vector (small T) or a
 * packed, cache-blocked GEMM (larger T), and an AVX-512 implementation when
 * the CPU has it (checked at run time; the library is built for baseline
 * x86-64).
 */
#ifndef TESSERA_CPU_MM_H
#define TESSERA_CPU_MM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/tensor.h"

typedef struct tsr__mm_args {
    tsr_type wtype; /* F32, F16, BF16 or Q8_0 */
    const void *w;  /* row n (K elements, contiguous) at (char *)w + n * w_nb1 */
    size_t w_nb1;
    const float *x; /* column t (K contiguous floats) at (char *)x + t * x_nb1 */
    size_t x_nb1;
    float *y; /* column t (N contiguous floats) at (char *)y + t * y_nb1 */
    size_t y_nb1;
    int64_t K, N, T;
} tsr__mm_args;

/* Synchronizes all nth threads of the calling pool (every thread calls it). */
typedef void (*tsr__barrier_fn)(void *ctx);

/* Bytes of shared scratch that tsr__mm_compute needs for these sizes with nth
 * threads (0 is possible). Pure function of its arguments. */
size_t tsr__mm_work_size(tsr_type wtype, int64_t K, int64_t N, int64_t T, int nth);

/* Called by every thread ith in [0, nth) of a pool with identical arguments.
 * `work` is shared by all threads and holds at least tsr__mm_work_size bytes.
 * Returns false (on every thread, before touching y) when it does not handle
 * this case; the caller then runs the reference kernel. */
bool tsr__mm_compute(const tsr__mm_args *a, int ith, int nth, void *work, size_t work_size,
                     tsr__barrier_fn barrier, void *barrier_ctx);

/* True when this build has the AVX-512 kernels and the CPU can run them
 * (and TSR_CPU_NO_AVX512 is not set): the one switch for every AVX-512 path
 * of the CPU backend. */
bool tsr__cpu_use_avx512(void);

#endif /* TESSERA_CPU_MM_H */
