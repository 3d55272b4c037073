/* tests/testutil.h — helpers shared by the Criterion suites: a seeded random
 * generator, filling and reading tensors through the public API, error
 * metrics, and the list of devices under test.
 */
#ifndef TESSERA_TESTUTIL_H
#define TESSERA_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/tessera.h"

/* splitmix64: small, fast, and the same sequence everywhere. */
typedef struct {
    uint64_t s;
} tu_rng;

static inline uint64_t tu_next(tu_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static inline float tu_uniform(tu_rng *r, float lo, float hi)
{
    return lo + (hi - lo) * (float)((tu_next(r) >> 40) * (1.0 / 16777216.0));
}

static inline size_t tu_align(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Fills t (any type, placed in any buffer) with uniform values in [lo, hi);
 * I32 tensors get integers in [lo, hi). */
tsr_status tu_fill_uniform(tsr_tensor *t, tu_rng *r, float lo, float hi);

/* Reads t (contiguous or not) as F32 values in logical order into out
 * (tsr_nelements(t) floats). I32 converts to float. */
tsr_status tu_read_f32(const tsr_tensor *t, float *out);

/* Normalized mean squared error Σ(a-b)² / Σb² (0 when both are zero). */
double tu_nmse(const float *got, const float *want, int64_t n);

/* The devices under test: every device of every registry, plus a meta
 * device over the first two CPU devices when there are two. */
size_t tu_devices(tsr_dev **out, size_t max);

/* A CPU stream running the reference kernels (the oracle). */
tsr_backend *tu_reference_backend(void);

/* Writes "[a, b, c, d]" of t into a static per-thread buffer. */
const char *tu_shape(const tsr_tensor *t);

#endif /* TESSERA_TESTUTIL_H */
