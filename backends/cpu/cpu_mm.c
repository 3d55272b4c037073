/* backends/cpu/cpu_mm.c — entry points of the CPU backend's fast matrix
 * products (cpu_mm.h): argument checks, scratch sizing, run-time choice of
 * kernel, and the portable kernel for CPUs without AVX-512.
 *
 * Shapes: W: [K, N] (F32, F16, BF16, Q8_0), X: F32 [K, T], Y = Wᵀ·X: F32 [N, T].
 *
 * This file is built for baseline x86-64 (or any other target); it holds no
 * intrinsics. The AVX-512 kernels live in cpu_gemv_avx512.c (T ≤
 * tsr__mm_gemv_max_t) and cpu_mm_avx512.c (GEMM), compiled with their own
 * flags where the build defines TSR_HAVE_AVX512, and are only called after
 * the CPU has been checked for every feature they were compiled for. Setting
 * TSR_CPU_NO_AVX512=1 in the environment forces the portable kernel (for
 * tests and debugging).
 *
 * The portable kernel favours correctness over speed: each thread converts
 * MM_PORT_R rows of W to F32 in its slice of the work buffer and computes
 * plain dot products whose loops the compiler can vectorize.
 */
#include <stdatomic.h>
#include <string.h>
#if defined(TSR_HAVE_AVX512)
#include <cpuid.h>
#endif

#include "backends/cpu/cpu_mm.h"
#include "backends/cpu/cpu_mm_impl.h"
#include "core/internal.h"

enum {
    MM_PORT_R = 4,      /* rows of W converted and multiplied together */
    MM_PORT_LANES = 16, /* independent partial sums per dot product */
};

/* ---- CPU dispatch ------------------------------------------------------- */

#if defined(TSR_HAVE_AVX512)

/* Every feature the AVX-512 files are compiled for. F16C is read from CPUID
 * directly because clang's __builtin_cpu_supports does not know it; the OS
 * support for the vector state comes with the avx512f check. */
static bool mm_cpu_has_avx512(void)
{
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & bit_F16C))
        return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("fma");
}

#endif /* TSR_HAVE_AVX512 */

/* True when the AVX-512 kernels of the CPU backend may run: decided once
 * (0 = not yet known, 1 = no, 2 = yes); concurrent first calls compute the
 * same answer. Shared with the vector primitives (cpu_vec.c). */
bool tsr__cpu_use_avx512(void)
{
#if !defined(TSR_HAVE_AVX512)
    return false;
#else
    static atomic_int state;
    int s = atomic_load_explicit(&state, memory_order_relaxed);
    if (s == 0) {
        s = mm_cpu_has_avx512() && tsr__env_long("TSR_CPU_NO_AVX512", 0) == 0 ? 2 : 1;
        atomic_store_explicit(&state, s, memory_order_relaxed);
    }
    return s == 2;
#endif
}

/* ---- portable kernel ---------------------------------------------------- */

/* Bytes of one thread's slice: MM_PORT_R rows of K floats, 64-byte multiple. */
static size_t mm_port_slice(int64_t K)
{
    return ((size_t)MM_PORT_R * (size_t)K * sizeof(float) + 63) / 64 * 64;
}

/* Converts row n of W (K elements of wtype) to F32: dst[k] = W[k, n]. */
static void mm_port_row_f32(const tsr__mm_args *a, int64_t n, float *dst)
{
    const char *row = (const char *)a->w + (size_t)n * a->w_nb1;
    tsr_status st = tsr_row_to_f32(a->wtype, row, dst, a->K);
    TSR_ASSERT(st == TSR_OK); /* type and K were checked by mm_args_ok */
}

/* out[r] = Σ_k w[r][k] · x[k] for R ≤ MM_PORT_R rows. The lanes array keeps
 * MM_PORT_LANES independent sums so the inner loop vectorizes without
 * reassociating floating-point additions. */
static void mm_port_dots(const float *const *w, int R, const float *x, int64_t K, float *out)
{
    for (int r = 0; r < R; r++) {
        float lanes[MM_PORT_LANES] = {0};
        int64_t k = 0;
        for (; k + MM_PORT_LANES <= K; k += MM_PORT_LANES) {
            for (int l = 0; l < MM_PORT_LANES; l++)
                lanes[l] += w[r][k + l] * x[k + l];
        }
        for (int l = 0; k < K; k++, l++)
            lanes[l] += w[r][k] * x[k];
        float s = 0.0f;
        for (int l = 0; l < MM_PORT_LANES; l++)
            s += lanes[l];
        out[r] = s;
    }
}

/* Rows [lo, hi) of y for every column, MM_PORT_R rows at a time. F32 rows are
 * used in place; other types are converted into `buf` (MM_PORT_R × K floats). */
static void mm_port_rows(const tsr__mm_args *a, int64_t lo, int64_t hi, float *buf)
{
    for (int64_t n = lo; n < hi; n += MM_PORT_R) {
        const int R = (int)(hi - n < MM_PORT_R ? hi - n : MM_PORT_R);
        const float *w[MM_PORT_R];
        for (int r = 0; r < R; r++) {
            if (a->wtype == TSR_TYPE_F32) {
                w[r] = (const float *)((const char *)a->w + (size_t)(n + r) * a->w_nb1);
            } else {
                mm_port_row_f32(a, n + r, buf + (size_t)r * (size_t)a->K);
                w[r] = buf + (size_t)r * (size_t)a->K;
            }
        }
        for (int64_t t = 0; t < a->T; t++) {
            const float *x = (const float *)((const char *)a->x + (size_t)t * a->x_nb1);
            float *y = (float *)((char *)a->y + (size_t)t * a->y_nb1);
            mm_port_dots(w, R, x, a->K, y + n);
        }
    }
}

static void mm_port_compute(const tsr__mm_args *a, int ith, int nth, void *work)
{
    int64_t lo, hi;
    tsr__mm_split(a->N, MM_PORT_R, ith, nth, &lo, &hi);
    char *base = (char *)work + (64 - (uintptr_t)work % 64) % 64;
    mm_port_rows(a, lo, hi, (float *)(base + (size_t)ith * mm_port_slice(a->K)));
}

/* ---- entry points ------------------------------------------------------- */

static bool mm_type_ok(tsr_type t)
{
    return t == TSR_TYPE_F32 || t == TSR_TYPE_F16 || t == TSR_TYPE_BF16 || t == TSR_TYPE_Q8_0;
}

static bool mm_args_ok(const tsr__mm_args *a, int ith, int nth)
{
    return mm_type_ok(a->wtype) && a->K >= 1 && a->N >= 1 && a->T >= 1 &&
           a->K % tsr_type_block_size(a->wtype) == 0 && nth >= 1 && ith >= 0 && ith < nth &&
           a->w != NULL && a->x != NULL && a->y != NULL;
}

size_t tsr__mm_work_size(tsr_type wtype, int64_t K, int64_t N, int64_t T, int nth)
{
    if (!mm_type_ok(wtype) || K < 1 || N < 1 || T < 1 || nth < 1)
        return 0;
    (void)N; /* no buffer scales with N */
    /* The larger of the two paths' needs, so the answer does not depend on
     * the CPU: the portable slices, and the AVX-512 GEMM's packing buffers. */
    const size_t port = 64 + (size_t)nth * mm_port_slice(K);
    const size_t gemm =
        T > tsr__mm_gemv_max_t(wtype) ? tsr__mm_gemm_work_size(wtype, K, T, nth) : 0;
    return port > gemm ? port : gemm;
}

bool tsr__mm_compute(const tsr__mm_args *a, int ith, int nth, void *work, size_t work_size,
                     tsr__barrier_fn barrier, void *barrier_ctx)
{
    if (!mm_args_ok(a, ith, nth))
        return false;
    const size_t need = tsr__mm_work_size(a->wtype, a->K, a->N, a->T, nth);
    if (work_size < need || (need > 0 && work == NULL))
        return false;
#if defined(TSR_HAVE_AVX512)
    if (tsr__cpu_use_avx512()) {
        if (a->T <= tsr__mm_gemv_max_t(a->wtype))
            tsr__gemv_avx512(a, ith, nth);
        else
            tsr__gemm_avx512(a, ith, nth, work, barrier, barrier_ctx);
        return true;
    }
#endif
    (void)barrier, (void)barrier_ctx; /* the portable kernels need no barrier */
    /* OpenBLAS for F32 products large enough to be GEMMs; it declines only
     * for a case every thread sees alike (strides, sizes). */
    if (a->wtype == TSR_TYPE_F32 && a->T > tsr__mm_gemv_max_t(a->wtype) &&
        tsr__mm_blas_f32(a, ith, nth))
        return true;
    mm_port_compute(a, ith, nth, work);
    return true;
}
