/* bench/bench_util.c — see bench_util.h. */
#define _GNU_SOURCE
#include "bench_util.h"

#include <errno.h>
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double bu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bu_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bu_mem bu_mem_new(size_t bytes, int with_copy_target)
{
    bu_mem m = {0};
    m.n = bytes / sizeof(float) / 128 * 128;
    m.a = aligned_alloc(64, m.n * sizeof(float));
    for (size_t i = 0; m.a && i < m.n; i++)
        m.a[i] = (float)(i & 7);
    if (with_copy_target) {
        m.b = aligned_alloc(64, m.n * sizeof(float));
        if (m.b)
            memset(m.b, 0, m.n * sizeof(float));
    }
    return m;
}

void bu_mem_free(bu_mem *m)
{
    free(m->a);
    free(m->b);
    m->a = m->b = NULL;
}

__attribute__((target("avx512f"))) static double read_avx512(const float *p, size_t n)
{
    __m512 a[8];
    for (int j = 0; j < 8; j++)
        a[j] = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        _mm_prefetch((const char *)(p + i + 2048), _MM_HINT_T0);
        _mm_prefetch((const char *)(p + i + 2048 + 64), _MM_HINT_T0);
        for (int j = 0; j < 8; j++)
            a[j] = _mm512_add_ps(a[j], _mm512_load_ps(p + i + 16 * j));
    }
    for (int j = 1; j < 8; j++)
        a[0] = _mm512_add_ps(a[0], a[j]);
    double s = _mm512_reduce_add_ps(a[0]);
    for (; i < n; i++)
        s += p[i];
    return s;
}

static double read_plain(const float *p, size_t n)
{
    float a[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++)
            a[j] += p[i + j];
    double s = 0;
    for (int j = 0; j < 16; j++)
        s += a[j];
    for (; i < n; i++)
        s += p[i];
    return s;
}

typedef struct {
    const float *src;
    float *dst;
    size_t n;
    volatile double sum;
} slice;

static void *read_worker(void *arg)
{
    slice *s = arg;
    s->sum =
        __builtin_cpu_supports("avx512f") ? read_avx512(s->src, s->n) : read_plain(s->src, s->n);
    return NULL;
}

static void *copy_worker(void *arg)
{
    slice *s = arg;
    memcpy(s->dst, s->src, s->n * sizeof(float));
    return NULL;
}

/* Runs fn over the array split among `threads` threads (the caller is one
 * of them); returns seconds. Each thread is pinned to its own core for the
 * pass: a thread just created may otherwise start on its creator's core and
 * stay there for most of a short pass, which halves a "2-thread" figure. */
static double run_split(void *(*fn)(void *), const bu_mem *m, int threads)
{
    pthread_t th[64];
    slice sl[64];
    if (threads < 1)
        threads = 1;
    if (threads > 64)
        threads = 64;
    const int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    const size_t per = (m->n / (size_t)threads) & ~(size_t)127;
    for (int i = 0; i < threads; i++)
        sl[i] = (slice){m->a + per * (size_t)i, m->b ? m->b + per * (size_t)i : NULL,
                        i == threads - 1 ? m->n - per * (size_t)i : per, 0};
    cpu_set_t saved, one;
    const bool pin =
        cores > 1 && pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved) == 0;
    if (pin) {
        CPU_ZERO(&one);
        CPU_SET(0, &one);
        pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
    }
    pthread_attr_t attr[64];
    for (int i = 1; i < threads; i++) {
        pthread_attr_init(&attr[i]);
        if (pin) {
            CPU_ZERO(&one);
            CPU_SET(i % cores, &one);
            pthread_attr_setaffinity_np(&attr[i], sizeof(one), &one);
        }
    }
    const double t0 = bu_now();
    for (int i = 1; i < threads; i++)
        pthread_create(&th[i], &attr[i], fn, &sl[i]);
    fn(&sl[0]);
    for (int i = 1; i < threads; i++)
        pthread_join(th[i], NULL);
    const double t = bu_now() - t0;
    for (int i = 1; i < threads; i++)
        pthread_attr_destroy(&attr[i]);
    if (pin)
        pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
    return t;
}

double bu_read_gbs(const bu_mem *m, int threads)
{
    return (double)(m->n * sizeof(float)) / run_split(read_worker, m, threads) * 1e-9;
}

double bu_copy_gbs(const bu_mem *m, int threads)
{
    return (double)(m->n * sizeof(float)) / run_split(copy_worker, m, threads) * 1e-9;
}

bool bu_open_outputs(const char *prog, const char *out_dir, const char *stem, FILE **jsonl,
                     FILE **md, FILE **dat)
{
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "%s: cannot create %s: %s\n", prog, out_dir, strerror(errno));
        return false;
    }
    const char *ext[3] = {"jsonl", "md", "dat"};
    FILE **f[3] = {jsonl, md, dat};
    for (int i = 0; i < 3; i++) {
        if (!f[i])
            continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s.%s", out_dir, stem, ext[i]);
        *f[i] = fopen(path, "w");
        if (!*f[i]) {
            fprintf(stderr, "%s: cannot write %s: %s\n", prog, path, strerror(errno));
            for (int k = 0; k < i; k++)
                if (f[k])
                    fclose(*f[k]);
            return false;
        }
    }
    return true;
}
