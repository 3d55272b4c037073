/* bench/bench_util.h — what every benchmark shares: a clock, medians, and
 * the memory baselines (a streaming read and memcpy with a given number of
 * threads) that memory-bound figures are compared with in the same run.
 */
#ifndef TESSERA_BENCH_UTIL_H
#define TESSERA_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Monotonic seconds. */
double bu_now(void);

/* Median of v[0..n) (sorts v). */
double bu_median(double *v, int n);

/* A float array for the baselines: n floats, 64-byte aligned, touched. */
typedef struct {
    float *a, *b; /* b: memcpy destination, NULL when not needed */
    size_t n;
} bu_mem;

bu_mem bu_mem_new(size_t bytes, int with_copy_target);
void bu_mem_free(bu_mem *m);

/* One pass, split over `threads` threads: GB/s read (every byte read once,
 * 8 accumulators and a software prefetch: the fastest plain read we know
 * here) and GB/s copied (memcpy; bytes copied, each read and written). */
double bu_read_gbs(const bu_mem *m, int threads);
double bu_copy_gbs(const bu_mem *m, int threads);

/* Creates out_dir if needed and opens <out_dir>/<stem>.jsonl, .md and (when
 * dat is not NULL) .dat for writing; on failure prints why, prefixed with
 * `prog`, closes what it opened and returns false. */
bool bu_open_outputs(const char *prog, const char *out_dir, const char *stem, FILE **jsonl,
                     FILE **md, FILE **dat);

#endif /* TESSERA_BENCH_UTIL_H */
