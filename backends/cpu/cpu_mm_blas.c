/* backends/cpu/cpu_mm_blas.c — F32 GEMM through OpenBLAS, for CPUs where the
 * AVX-512 kernels cannot run (there our own kernel is 1.4–1.7× faster than
 * OpenBLAS, see the README).
 *
 * Shapes: W: F32 [K, N], X: F32 [K, T], Y = Wᵀ·X: [N, T]; in column-major
 * BLAS terms Y (N×T, ld = y_nb1/4) = Wᵀ (W is K×N, ld = w_nb1/4) · X (K×T).
 * Each thread of the stream multiplies its own slice of rows of Y, so OpenBLAS
 * is set to one thread (once, process-wide): the stream's threads are the
 * parallelism, and a CPU device's thread share is respected.
 */
#include <cblas.h>
#include <pthread.h>

#include "backends/cpu/cpu_mm.h"
#include "backends/cpu/cpu_mm_impl.h"

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_single_thread(void) { openblas_set_num_threads(1); }

bool tsr__mm_blas_f32(const tsr__mm_args *a, int ith, int nth)
{
    if (a->wtype != TSR_TYPE_F32 || a->w_nb1 % sizeof(float) || a->x_nb1 % sizeof(float) ||
        a->y_nb1 % sizeof(float) || a->K > INT32_MAX || a->N > INT32_MAX || a->T > INT32_MAX)
        return false;
    pthread_once(&blas_once, blas_single_thread);
    int64_t lo, hi;
    tsr__mm_split(a->N, 16, ith, nth, &lo, &hi);
    if (lo >= hi)
        return true;
    cblas_sgemm(CblasColMajor, CblasTrans, CblasNoTrans, (int)(hi - lo), (int)a->T, (int)a->K, 1.0f,
                (const float *)((const char *)a->w + (size_t)lo * a->w_nb1),
                (int)(a->w_nb1 / sizeof(float)), a->x, (int)(a->x_nb1 / sizeof(float)), 0.0f,
                a->y + lo, (int)(a->y_nb1 / sizeof(float)));
    return true;
}
