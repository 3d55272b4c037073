/* backends/cpu/cpu_mm_impl.h — private interface between the matrix-product
 * dispatcher (cpu_mm.c) and its AVX-512 kernels (cpu_gemv_avx512.c,
 * cpu_mm_avx512.c).
 *
 * This header is not part of the backend's interface: only those three files
 * include it. The functions declared here are compiled with AVX-512 flags, so
 * calling one on a CPU without AVX-512 (F, BW, VL, DQ, BF16, VNNI) crashes;
 * cpu_mm.c checks the CPU first. Shapes follow cpu_mm.h: W: [K, N],
 * X: [K, T], Y = Wᵀ·X: [N, T].
 */
#ifndef TESSERA_CPU_MM_IMPL_H
#define TESSERA_CPU_MM_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/cpu/cpu_mm.h"

/* The largest T for which the matrix-vector kernels run; above it the packed
 * GEMM. Measured on Zen 5 (2 threads, K = 4096, N = 14336), the GEMM, which
 * packs every W block before using it, overtakes at about T = 20 for F32 and
 * Q8_0, 40 for F16 (half the bytes per weight favours the matrix-vector
 * kernels) and 12 for BF16 (whose GEMM kernel does twice the work per
 * instruction). BF16 weights therefore see x exactly up to T = 8 and rounded
 * to bf16 above it. */
static inline int64_t tsr__mm_gemv_max_t(tsr_type wtype)
{
    switch (wtype) {
    case TSR_TYPE_F16:
        return 32;
    case TSR_TYPE_BF16:
        return 8;
    default:
        return 16;
    }
}

/* Splits [0, n) into nth parts whose bounds are multiples of `align` (except
 * n itself) and returns part ith as [*lo, *hi); a part may be empty. */
static inline void tsr__mm_split(int64_t n, int64_t align, int ith, int nth, int64_t *lo,
                                 int64_t *hi)
{
    const int64_t units = (n + align - 1) / align;
    const int64_t a = units * ith / nth * align;
    const int64_t b = units * (ith + 1) / nth * align;
    *lo = a < n ? a : n;
    *hi = b < n ? b : n;
}

/* F32 GEMM through OpenBLAS (cpu_mm_blas.c), the fast path on CPUs without
 * AVX-512: thread ith computes its slice of the rows of y. False (on every
 * thread alike) when a stride or size does not fit BLAS's int arguments. */
bool tsr__mm_blas_f32(const tsr__mm_args *a, int ith, int nth);

/* Matrix-vector product for small T (any T works): thread ith of nth writes
 * its share of the rows of every column of y. Needs no scratch, no barrier. */
void tsr__gemv_avx512(const tsr__mm_args *a, int ith, int nth);

/* GEMM blocking. MR × NR is the micro-tile (n × t); a thread packs W blocks of
 * MC rows × KC k (KC_BF16 for the bf16-pair kernel) into its own buffer. */
enum {
    TSR__MM_MR = 32,
    TSR__MM_NR = 12,
    TSR__MM_KC = 256,      /* a multiple of 32 (Q8_0 blocks) */
    TSR__MM_KC_BF16 = 512, /* even (bf16 pairs) */
    TSR__MM_MC = 256,      /* a multiple of TSR__MM_MR */
    TSR__MM_ALIGN = 64,
};

/* Packed X for one chunk of columns stays under this many bytes; larger T is
 * processed in chunks, each packing X again. */
#define TSR__MM_XPACK_BUDGET ((size_t)16 << 20)

/* GEMM sizes that follow from the arguments alone. Plain C in this header so
 * that tsr__mm_work_size (baseline code) and the kernels agree. */
typedef struct tsr__mm_plan {
    bool pairs;   /* BF16 weights: bf16-pair format and kernel */
    int64_t kc;   /* k per W block */
    int64_t kp;   /* rows of a packed X panel: K, or ceil(K / 2) pairs */
    int64_t tc;   /* columns per chunk, a multiple of TSR__MM_NR */
    size_t xpack; /* bytes of packed X (shared) */
    size_t wpack; /* bytes of one thread's packed W block */
} tsr__mm_plan;

static inline size_t tsr__mm_align(size_t x)
{
    return (x + TSR__MM_ALIGN - 1) / TSR__MM_ALIGN * TSR__MM_ALIGN;
}

static inline tsr__mm_plan tsr__mm_plan_make(tsr_type wtype, int64_t K, int64_t T)
{
    tsr__mm_plan p;
    p.pairs = wtype == TSR_TYPE_BF16;
    p.kc = p.pairs ? TSR__MM_KC_BF16 : TSR__MM_KC;
    p.kp = p.pairs ? (K + 1) / 2 : K;
    /* Both formats use 4-byte elements: a float or a pair of bf16. */
    const size_t panel = (size_t)p.kp * TSR__MM_NR * 4;
    int64_t panels = (int64_t)(TSR__MM_XPACK_BUDGET / panel);
    const int64_t need = (T + TSR__MM_NR - 1) / TSR__MM_NR;
    panels = panels < 1 ? 1 : panels > need ? need : panels;
    p.tc = panels * TSR__MM_NR;
    p.xpack = tsr__mm_align((size_t)panels * panel);
    const int64_t kcw = p.pairs ? p.kc / 2 : p.kc;
    p.wpack = tsr__mm_align((size_t)TSR__MM_MC * (size_t)kcw * 4);
    return p;
}

/* Bytes of shared scratch tsr__gemm_avx512 needs (a pure function). */
static inline size_t tsr__mm_gemm_work_size(tsr_type wtype, int64_t K, int64_t T, int nth)
{
    const tsr__mm_plan p = tsr__mm_plan_make(wtype, K, T);
    return TSR__MM_ALIGN + p.xpack + (size_t)nth * p.wpack;
}

/* Packed, cache-blocked GEMM for any T (meant for T > tsr__mm_gemv_max_t).
 * Every thread calls it; it calls `barrier` 2·ceil(T / Tc) − 1 times. */
void tsr__gemm_avx512(const tsr__mm_args *a, int ith, int nth, void *work, tsr__barrier_fn barrier,
                      void *barrier_ctx);

#endif /* TESSERA_CPU_MM_IMPL_H */
