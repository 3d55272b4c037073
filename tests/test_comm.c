/* tests/test_comm.c — the all-reduce engine (tessera/comm.h) and the CPU
 * native collective: every path (native, butterfly, ring) for 1..8 streams,
 * sizes from 1 element to 16M, F32 / F16 / BF16, against the sum computed on
 * the host; collectives enqueued back to back with work racing around them;
 * misaligned tensors; bad arguments.
 *
 * Streams go to distinct CPU devices when the registry has enough
 * (TSR_CPU_DEVICES=8 in the test_comm_8cpu variant), else several streams
 * share a device (the default run: all on cpu0). Inputs are small integers,
 * so every partial sum is exact in every type and any path must give the
 * host's sum bit for bit; one test uses random reals with a rounding bound.
 * A failure prints the case, the seed, and expected vs got.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MAXN 16
#define SEED 0x5eed2026ull
#define CM_COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const tsr_allreduce_path paths[] = {TSR_ALLREDUCE_NATIVE, TSR_ALLREDUCE_BUTTERFLY,
                                           TSR_ALLREDUCE_RING};
static const tsr_type types[] = {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_BF16};

/* ---- helpers -------------------------------------------------------------------------- */

/* Stream j's device: cpu j when the registry has that many, else shared. */
static tsr_dev *cm_dev(int j)
{
    tsr_reg *r = tsr_cpu_reg();
    return tsr_reg_dev_get(r, (size_t)j % tsr_reg_dev_count(r));
}

static void cm_streams(tsr_backend **b, int n)
{
    for (int j = 0; j < n; j++)
        cr_assert_eq(tsr_backend_new(cm_dev(j), &b[j]), TSR_OK, "%s", tsr_last_error());
}

static void cm_free_streams(tsr_backend **b, int n)
{
    for (int j = 0; j < n; j++)
        tsr_backend_free(b[j]);
}

static void cm_sync(tsr_backend **b, int n)
{
    for (int j = 0; j < n; j++)
        cr_assert_eq(tsr_backend_synchronize(b[j]), TSR_OK, "%s", tsr_last_error());
}

/* One tensor per stream, each in its own buffer on the stream's device. */
typedef struct {
    int n;
    tsr_ctx *ctx[MAXN];
    tsr_buf *buf[MAXN];
    tsr_tensor *t[MAXN];
} cm_tensors;

static void cm_alloc(cm_tensors *x, int n, tsr_type type, const int64_t ne[4])
{
    x->n = n;
    for (int j = 0; j < n; j++) {
        x->ctx[j] = tsr_ctx_new(4);
        x->t[j] = tsr_new_tensor_4d(x->ctx[j], type, ne[0], ne[1], ne[2], ne[3]);
        tsr_set_name(x->t[j], "x%d", j);
        cr_assert_eq(tsr_ctx_alloc_tensors(x->ctx[j], tsr_dev_buft(cm_dev(j)), &x->buf[j]), TSR_OK,
                     "%s", tsr_last_error());
    }
}

static void cm_release(cm_tensors *x)
{
    for (int j = 0; j < x->n; j++) {
        tsr_buf_free(x->buf[j]);
        tsr_ctx_free(x->ctx[j]);
    }
}

static uint64_t cm_mix(uint64_t a, uint64_t b)
{
    tu_rng r = {a * 0x9e3779b97f4a7c15ull ^ b};
    return tu_next(&r);
}

/* The integer input of device j, element i, round r: in [-15, 15], so sums
 * of up to 8 of them (|s| <= 120) are exact in F32, F16 and BF16. */
static float cm_value(uint64_t seed, int r, int j, int64_t i)
{
    return (
        float)((int)(cm_mix(seed + (uint64_t)r * 1000003u, (uint64_t)j << 40 ^ (uint64_t)i) % 31u) -
               15);
}

/* Host pattern of device j, round r, converted to the tensor's type. */
static void *cm_pattern(uint64_t seed, int r, int j, tsr_type type, int64_t ne, float *tmp)
{
    void *raw = malloc(tsr_row_size(type, ne) + 1);
    cr_assert_not_null(raw);
    for (int64_t i = 0; i < ne; i++)
        tmp[i] = cm_value(seed, r, j, i);
    cr_assert_eq(tsr_row_from_f32(type, tmp, raw, ne), TSR_OK);
    return raw;
}

static void cm_fill(cm_tensors *x, uint64_t seed, int r)
{
    const int64_t ne = tsr_nelements(x->t[0]);
    float *tmp = malloc((size_t)ne * sizeof(float) + 4);
    for (int j = 0; j < x->n; j++) {
        void *raw = cm_pattern(seed, r, j, x->t[j]->type, ne, tmp);
        cr_assert_eq(tsr_tensor_set(x->t[j], raw, 0, tsr_nbytes(x->t[j])), TSR_OK);
        free(raw);
    }
    free(tmp);
}

/* Checks every tensor holds Σ_j value(seed, r, j, i) exactly. */
static void cm_check(cm_tensors *x, uint64_t seed, int r, const char *what)
{
    const int64_t ne = tsr_nelements(x->t[0]);
    float *got = malloc((size_t)ne * sizeof(float) + 4);
    float *want = malloc((size_t)ne * sizeof(float) + 4);
    for (int64_t i = 0; i < ne; i++) {
        float s = 0;
        for (int j = 0; j < x->n; j++)
            s += cm_value(seed, r, j, i);
        want[i] = s;
    }
    for (int j = 0; j < x->n; j++) {
        cr_assert_eq(tu_read_f32(x->t[j], got), TSR_OK);
        for (int64_t i = 0; i < ne; i++)
            if (got[i] != want[i])
                cr_assert_fail(
                    "%s, seed %#llx round %d: device %d element %lld of %lld: expected %g, "
                    "got %g",
                    what, (unsigned long long)seed, r, j, (long long)i, (long long)ne,
                    (double)want[i], (double)got[i]);
    }
    free(got);
    free(want);
}

/* Runs one path on freshly filled tensors and checks the result. */
static void cm_case(tsr_allreduce *ar, tsr_backend **b, cm_tensors *x, tsr_allreduce_path path,
                    uint64_t seed)
{
    char what[160];
    snprintf(what, sizeof(what), "%s, %d streams, %s %s", tsr_allreduce_path_name(path), x->n,
             tsr_type_name(x->t[0]->type), tu_shape(x->t[0]));
    cm_fill(x, seed, 0);
    tsr_status st = tsr_allreduce_run_path(ar, x->t, path);
    cr_assert_eq(st, TSR_OK, "%s: %s (%s)", what, tsr_status_str(st), tsr_last_error());
    if (x->n > 1)
        cr_assert_eq(tsr_allreduce_last_path(ar), path, "%s: took %s", what,
                     tsr_allreduce_path_name(tsr_allreduce_last_path(ar)));
    cm_sync(b, x->n);
    cm_check(x, seed, 0, what);
}

/* ---- every path, stream count, size and type ---------------------------------------------- */

Test(allreduce, every_path_count_size_and_type_gives_the_host_sum, .timeout = 300)
{
    /* Odd sizes around the chunk units (16 F32 / 32 F16 elements per 64 bytes). */
    const int64_t sizes[] = {1, 3, 17, 47, 48, 49, 1000, 4097, 65536 + 7};
    for (int n = 1; n <= 8; n++) {
        tsr_backend *b[MAXN];
        cm_streams(b, n);
        tsr_allreduce *ar;
        cr_assert_eq(tsr_allreduce_new(b, n, &ar), TSR_OK, "%s", tsr_last_error());
        cr_expect_eq(tsr_allreduce_has_native(ar), n > 1, "%d distinct CPU streams", n);
        for (size_t s = 0; s < CM_COUNT(sizes); s++)
            for (size_t t = 0; t < CM_COUNT(types); t++) {
                cm_tensors x;
                cm_alloc(&x, n, types[t], (int64_t[4]){sizes[s], 1, 1, 1});
                for (size_t p = 0; p < CM_COUNT(paths); p++)
                    cm_case(ar, b, &x, paths[p], SEED + (uint64_t)(n * 100 + (int)s));
                cm_release(&x);
            }
        tsr_allreduce_free(ar);
        cm_free_streams(b, n);
    }
}

Test(allreduce, multi_dimensional_tensors_are_reduced_whole)
{
    const int n = 3;
    tsr_backend *b[MAXN];
    cm_streams(b, n);
    tsr_allreduce *ar;
    cr_assert_eq(tsr_allreduce_new(b, n, &ar), TSR_OK);
    cm_tensors x;
    cm_alloc(&x, n, TSR_TYPE_F16, (int64_t[4]){5, 7, 3, 2});
    for (size_t p = 0; p < CM_COUNT(paths); p++)
        cm_case(ar, b, &x, paths[p], SEED + 7);
    cm_release(&x);
    tsr_allreduce_free(ar);
    cm_free_streams(b, n);
}

Test(allreduce, large_tensors_up_to_16m_elements, .timeout = 300)
{
    struct {
        int n;
        int64_t ne;
        tsr_type type;
    } cases[] = {
        {2, 1 << 20, TSR_TYPE_F32}, {3, 1 << 20, TSR_TYPE_F32},  {4, (1 << 20) + 5, TSR_TYPE_BF16},
        {5, 1 << 20, TSR_TYPE_F16}, {2, 16 << 20, TSR_TYPE_F32},
    };
    for (size_t c = 0; c < CM_COUNT(cases); c++) {
        const int n = cases[c].n;
        tsr_backend *b[MAXN];
        cm_streams(b, n);
        tsr_allreduce *ar;
        cr_assert_eq(tsr_allreduce_new(b, n, &ar), TSR_OK);
        cm_tensors x;
        cm_alloc(&x, n, cases[c].type, (int64_t[4]){cases[c].ne, 1, 1, 1});
        for (size_t p = 0; p < CM_COUNT(paths); p++)
            cm_case(ar, b, &x, paths[p], SEED + 1000 + c);
        cm_release(&x);
        tsr_allreduce_free(ar);
        cm_free_streams(b, n);
    }
}

/* ---- rounding of real inputs ------------------------------------------------------------------
 */

Test(allreduce, real_inputs_round_within_the_type_and_agree_across_devices)
{
    const int n = 5;
    const int64_t ne = 3001;
    tsr_backend *b[MAXN];
    cm_streams(b, n);
    tsr_allreduce *ar;
    cr_assert_eq(tsr_allreduce_new(b, n, &ar), TSR_OK);
    /* Relative precision of each type; a path may round once per add. */
    const double eps[] = {0x1p-24, 0x1p-11, 0x1p-8};
    float *in = malloc((size_t)(n * ne) * sizeof(float)), *got = malloc(ne * sizeof(float)),
          *first = malloc(ne * sizeof(float));
    for (size_t t = 0; t < CM_COUNT(types); t++)
        for (size_t p = 0; p < CM_COUNT(paths); p++) {
            cm_tensors x;
            cm_alloc(&x, n, types[t], (int64_t[4]){ne, 1, 1, 1});
            tu_rng rng = {SEED + t * 10 + p};
            for (int j = 0; j < n; j++) {
                cr_assert_eq(tu_fill_uniform(x.t[j], &rng, -4.0f, 4.0f), TSR_OK);
                cr_assert_eq(tu_read_f32(x.t[j], in + (int64_t)j * ne), TSR_OK);
            }
            cr_assert_eq(tsr_allreduce_run_path(ar, x.t, paths[p]), TSR_OK, "%s", tsr_last_error());
            cm_sync(b, n);
            for (int j = 0; j < n; j++) {
                cr_assert_eq(tu_read_f32(x.t[j], got), TSR_OK);
                for (int64_t i = 0; i < ne; i++) {
                    double want = 0, mag = 0;
                    for (int k = 0; k < n; k++) {
                        want += in[(int64_t)k * ne + i];
                        mag += fabs(in[(int64_t)k * ne + i]);
                    }
                    const double tol = n * eps[t] * mag + 1e-30;
                    if (fabs(got[i] - want) > tol)
                        cr_assert_fail("%s %s, seed %#llx: device %d element %lld: expected %.9g "
                                       "(+-%.3g), got %.9g",
                                       tsr_allreduce_path_name(paths[p]), tsr_type_name(types[t]),
                                       (unsigned long long)(SEED + t * 10 + p), j, (long long)i,
                                       want, tol, (double)got[i]);
                    if (j == 0)
                        first[i] = got[i];
                    else if (memcmp(&first[i], &got[i], sizeof(float)) != 0)
                        cr_assert_fail(
                            "%s %s: device %d element %lld is %.9g but device 0 has %.9g",
                            tsr_allreduce_path_name(paths[p]), tsr_type_name(types[t]), j,
                            (long long)i, (double)got[i], (double)first[i]);
                }
            }
            cm_release(&x);
        }
    free(in);
    free(got);
    free(first);
    tsr_allreduce_free(ar);
    cm_free_streams(b, n);
}

/* ---- ordering and pipelining ------------------------------------------------------------------
 */

/* A graph of a few hundred microseconds, to make one stream late. */
typedef struct {
    tsr_ctx *ctx;
    tsr_buf *buf;
    tsr_graph *g;
} cm_delay;

static void cm_delay_new(cm_delay *d, tsr_dev *dev)
{
    d->ctx = tsr_ctx_new(8);
    tsr_tensor *w = tsr_new_tensor_2d(d->ctx, TSR_TYPE_F32, 192, 192);
    tsr_tensor *xx = tsr_new_tensor_2d(d->ctx, TSR_TYPE_F32, 192, 192);
    tsr_tensor *y = tsr_mul_mat(d->ctx, w, xx);
    cr_assert_eq(tsr_ctx_alloc_tensors(d->ctx, tsr_dev_buft(dev), &d->buf), TSR_OK);
    tsr_buf_clear(d->buf, 0);
    d->g = tsr_graph_new(8);
    cr_assert_eq(tsr_graph_build(d->g, y), TSR_OK);
}

static void cm_delay_free(cm_delay *d)
{
    tsr_graph_free(d->g);
    tsr_buf_free(d->buf);
    tsr_ctx_free(d->ctx);
}

/* R collectives enqueued back to back without synchronizing: before each,
 * every stream writes its new input (set_async) and one stream is made
 * late; right after each, every stream reads the result (get_async) and
 * then overwrites its tensor with the next input. A partner that read a
 * tensor after its owner overwrote it, or a result read before the sum
 * was complete, shows up as a wrong sum. R exceeds the in-flight capacity
 * of every path (64 native, 4 generic), so enqueues also wait for slots. */
static void cm_pipeline(int n, tsr_allreduce_path path, tsr_type type, int64_t ne)
{
    enum { R = 70 };
    tsr_backend *b[MAXN];
    cm_streams(b, n);
    tsr_allreduce *ar;
    cr_assert_eq(tsr_allreduce_new(b, n, &ar), TSR_OK);
    cm_tensors x;
    cm_alloc(&x, n, type, (int64_t[4]){ne, 1, 1, 1});
    cm_delay delay[MAXN];
    for (int j = 0; j < n; j++)
        cm_delay_new(&delay[j], cm_dev(j));
    const size_t nb = tsr_nbytes(x.t[0]);
    const uint64_t seed = SEED + (uint64_t)n * 31 + (uint64_t)path;
    float *tmp = malloc((size_t)ne * sizeof(float));
    void *in[R][MAXN], *out[R][MAXN];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < n; j++) {
            in[r][j] = cm_pattern(seed, r, j, type, ne, tmp);
            out[r][j] = malloc(nb);
        }
    for (int r = 0; r < R; r++) {
        for (int j = 0; j < n; j++) {
            cr_assert_eq(tsr_backend_set_async(b[j], x.t[j], in[r][j], 0, nb), TSR_OK);
            if (j == r % n && r % 3 == 0)
                cr_assert_eq(tsr_backend_graph_compute_async(b[j], delay[j].g), TSR_OK);
        }
        cr_assert_eq(tsr_allreduce_run_path(ar, x.t, path), TSR_OK, "%s", tsr_last_error());
        for (int j = 0; j < n; j++)
            cr_assert_eq(tsr_backend_get_async(b[j], x.t[j], out[r][j], 0, nb), TSR_OK);
    }
    cm_sync(b, n);
    float *got = malloc((size_t)ne * sizeof(float));
    for (int r = 0; r < R; r++)
        for (int j = 0; j < n; j++) {
            cr_assert_eq(tsr_row_to_f32(type, out[r][j], got, ne), TSR_OK);
            for (int64_t i = 0; i < ne; i++) {
                float want = 0;
                for (int k = 0; k < n; k++)
                    want += cm_value(seed, r, k, i);
                if (got[i] != want) {
                    cr_assert_fail("%s, %d streams, %s, seed %#llx: collective %d of %d, device %d "
                                   "element %lld: expected %g, got %g",
                                   tsr_allreduce_path_name(path), n, tsr_type_name(type),
                                   (unsigned long long)seed, r, R, j, (long long)i, (double)want,
                                   (double)got[i]);
                    break;
                }
            }
        }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < n; j++) {
            free(in[r][j]);
            free(out[r][j]);
        }
    free(got);
    free(tmp);
    for (int j = 0; j < n; j++)
        cm_delay_free(&delay[j]);
    cm_release(&x);
    tsr_allreduce_free(ar);
    cm_free_streams(b, n);
}

Test(allreduce, back_to_back_collectives_with_writes_around_them, .timeout = 300)
{
    const int counts[] = {2, 3, 5, 8};
    for (size_t c = 0; c < CM_COUNT(counts); c++)
        for (size_t p = 0; p < CM_COUNT(paths); p++)
            cm_pipeline(counts[c], paths[p], counts[c] == 3 ? TSR_TYPE_BF16 : TSR_TYPE_F32, 4097);
    /* Above the native path's one-worker size (64 KiB): every worker sums a share. */
    cm_pipeline(2, TSR_ALLREDUCE_NATIVE, TSR_TYPE_F32, 20000);
    cm_pipeline(4, TSR_ALLREDUCE_NATIVE, TSR_TYPE_F16, 40000);
    cm_pipeline(4, TSR_ALLREDUCE_RING, TSR_TYPE_F32, 20000);
}

Test(allreduce, copy_based_generic_paths_without_direct_reads, .timeout = 300)
{
    /* Devices that cannot read each other's memory (GPUs without peer
     * access) take the copy-only variant; force it on CPU streams. */
    setenv("TSR_ALLREDUCE_DIRECT", "0", 1);
    const int64_t sizes[] = {1, 49, 4097};
    for (int n = 2; n <= 6; n++) {
        tsr_backend *b[MAXN];
        cm_streams(b, n);
        tsr_allreduce *ar;
        cr_assert_eq(tsr_allreduce_new(b, n, &ar), TSR_OK);
        for (size_t s = 0; s < CM_COUNT(sizes); s++) {
            cm_tensors x;
            cm_alloc(&x, n, TSR_TYPE_F16, (int64_t[4]){sizes[s], 1, 1, 1});
            cm_case(ar, b, &x, TSR_ALLREDUCE_BUTTERFLY, SEED + 77 + s);
            cm_case(ar, b, &x, TSR_ALLREDUCE_RING, SEED + 78 + s);
            cm_release(&x);
        }
        tsr_allreduce_free(ar);
        cm_free_streams(b, n);
    }
    cm_pipeline(3, TSR_ALLREDUCE_RING, TSR_TYPE_F32, 1000);
    cm_pipeline(5, TSR_ALLREDUCE_BUTTERFLY, TSR_TYPE_F32, 1000);
}

Test(allreduce, freeing_the_engine_waits_for_its_queued_collectives)
{
    const int n = 4;
    for (size_t p = 0; p < CM_COUNT(paths); p++) {
        tsr_backend *b[MAXN];
        cm_streams(b, n);
        tsr_allreduce *ar;
        cr_assert_eq(tsr_allreduce_new(b, n, &ar), TSR_OK);
        cm_tensors x;
        cm_alloc(&x, n, TSR_TYPE_F32, (int64_t[4]){100000, 1, 1, 1});
        cm_fill(&x, SEED, 0);
        cr_assert_eq(tsr_allreduce_run_path(ar, x.t, paths[p]), TSR_OK);
        tsr_allreduce_free(ar); /* its temporaries and graphs go away here */
        cm_sync(b, n);
        cm_check(&x, SEED, 0, tsr_allreduce_path_name(paths[p]));
        cm_release(&x);
        cm_free_streams(b, n);
    }
}

/* ---- stream sets ------------------------------------------------------------------------------
 */

Test(allreduce, one_stream_twice_has_no_native_path_and_auto_goes_by_size)
{
    tsr_backend *s;
    cr_assert_eq(tsr_backend_new(cm_dev(0), &s), TSR_OK);
    tsr_backend *b[3] = {s, s, NULL};
    cr_assert_eq(tsr_backend_new(cm_dev(1), &b[2]), TSR_OK);
    tsr_allreduce *ar;
    cr_assert_eq(tsr_allreduce_new(b, 3, &ar), TSR_OK);
    cr_expect_not(tsr_allreduce_has_native(ar), "a worker cannot meet itself");
    const int64_t sizes[] = {33, 1 << 20};
    const tsr_allreduce_path want[] = {TSR_ALLREDUCE_BUTTERFLY, TSR_ALLREDUCE_RING};
    for (int k = 0; k < 2; k++) {
        cm_tensors x;
        cm_alloc(&x, 3, TSR_TYPE_F32, (int64_t[4]){sizes[k], 1, 1, 1});
        cm_fill(&x, SEED, 0);
        cr_assert_eq(tsr_allreduce_run(ar, x.t), TSR_OK, "%s", tsr_last_error());
        cr_expect_eq(tsr_allreduce_last_path(ar), want[k], "%lld elements took %s",
                     (long long)sizes[k], tsr_allreduce_path_name(tsr_allreduce_last_path(ar)));
        tsr_backend_synchronize(s);
        tsr_backend_synchronize(b[2]);
        cm_check(&x, SEED, 0, "auto, one stream twice");
        cr_expect_eq(tsr_allreduce_run_path(ar, x.t, TSR_ALLREDUCE_NATIVE), TSR_EUNSUPPORTED);
        cm_release(&x);
    }
    tsr_allreduce_free(ar);
    tsr_backend_free(s);
    tsr_backend_free(b[2]);
}

Test(allreduce, auto_takes_the_native_path_and_one_stream_needs_nothing)
{
    tsr_backend *b[MAXN];
    cm_streams(b, 3);
    tsr_allreduce *ar;
    cr_assert_eq(tsr_allreduce_new(b, 3, &ar), TSR_OK);
    cm_tensors x;
    cm_alloc(&x, 3, TSR_TYPE_F32, (int64_t[4]){1000, 1, 1, 1});
    cm_fill(&x, SEED, 0);
    cr_assert_eq(tsr_allreduce_run(ar, x.t), TSR_OK);
    cr_expect_eq(tsr_allreduce_last_path(ar), TSR_ALLREDUCE_NATIVE);
    cm_sync(b, 3);
    cm_check(&x, SEED, 0, "auto");
    tsr_allreduce_free(ar);

    cr_assert_eq(tsr_allreduce_new(b, 1, &ar), TSR_OK);
    cr_expect_not(tsr_allreduce_has_native(ar));
    cr_expect_eq(tsr_allreduce_run_path(ar, x.t, TSR_ALLREDUCE_RING), TSR_OK);
    cr_expect_eq(tsr_allreduce_last_path(ar), TSR_ALLREDUCE_AUTO, "nothing ran");
    tsr_allreduce_free(ar);
    cm_release(&x);
    cm_free_streams(b, 3);
}

Test(allreduce, the_environment_forces_a_path)
{
    const char *names[] = {"butterfly", "ring", "native", "RING", "bogus"};
    const tsr_allreduce_path want[] = {TSR_ALLREDUCE_BUTTERFLY, TSR_ALLREDUCE_RING,
                                       TSR_ALLREDUCE_NATIVE, TSR_ALLREDUCE_RING,
                                       TSR_ALLREDUCE_NATIVE};
    tsr_backend *b[MAXN];
    cm_streams(b, 2);
    cm_tensors x;
    cm_alloc(&x, 2, TSR_TYPE_F32, (int64_t[4]){4 << 20, 1, 1, 1});
    for (size_t k = 0; k < CM_COUNT(names); k++) {
        setenv("TSR_ALLREDUCE", names[k], 1);
        tsr_allreduce *ar;
        cr_assert_eq(tsr_allreduce_new(b, 2, &ar), TSR_OK);
        cm_fill(&x, SEED, 0);
        cr_assert_eq(tsr_allreduce_run(ar, x.t), TSR_OK);
        cr_expect_eq(tsr_allreduce_last_path(ar), want[k], "TSR_ALLREDUCE=%s took %s", names[k],
                     tsr_allreduce_path_name(tsr_allreduce_last_path(ar)));
        cm_sync(b, 2);
        cm_check(&x, SEED, 0, names[k]);
        tsr_allreduce_free(ar);
    }
    unsetenv("TSR_ALLREDUCE");
    cm_release(&x);
    cm_free_streams(b, 2);
}

Test(allreduce, path_names)
{
    cr_expect_str_eq(tsr_allreduce_path_name(TSR_ALLREDUCE_AUTO), "auto");
    cr_expect_str_eq(tsr_allreduce_path_name(TSR_ALLREDUCE_NATIVE), "native");
    cr_expect_str_eq(tsr_allreduce_path_name(TSR_ALLREDUCE_BUTTERFLY), "butterfly");
    cr_expect_str_eq(tsr_allreduce_path_name(TSR_ALLREDUCE_RING), "ring");
    cr_expect_str_eq(tsr_allreduce_path_name((tsr_allreduce_path)42), "?");
}

/* ---- memory layouts -------------------------------------------------------------------------- */

/* Tensors that are views 4 bytes into their buffers (W_j is staged through
 * the temporaries); the bytes around them must be left alone. */
Test(allreduce, misaligned_tensors_are_summed_and_their_neighbours_untouched)
{
    const int n = 3;
    const int64_t ne = 1001;
    tsr_backend *b[MAXN];
    cm_streams(b, n);
    tsr_allreduce *ar;
    cr_assert_eq(tsr_allreduce_new(b, n, &ar), TSR_OK);
    tsr_ctx *ctx[MAXN];
    tsr_buf *buf[MAXN];
    tsr_tensor *big[MAXN], *v[MAXN];
    for (int j = 0; j < n; j++) {
        ctx[j] = tsr_ctx_new(4);
        big[j] = tsr_new_tensor_1d(ctx[j], TSR_TYPE_F32, ne + 2);
        v[j] = tsr_view_1d(ctx[j], big[j], ne, sizeof(float));
        cr_assert_eq(tsr_ctx_alloc_tensors(ctx[j], tsr_dev_buft(cm_dev(j)), &buf[j]), TSR_OK);
    }
    float *h = malloc((size_t)(ne + 2) * sizeof(float));
    for (size_t p = 0; p < CM_COUNT(paths); p++) {
        for (int j = 0; j < n; j++) {
            h[0] = h[ne + 1] = 1234.5f;
            for (int64_t i = 0; i < ne; i++)
                h[i + 1] = cm_value(SEED, 0, j, i);
            cr_assert_eq(tsr_tensor_set(big[j], h, 0, (size_t)(ne + 2) * sizeof(float)), TSR_OK);
        }
        cr_assert_eq(tsr_allreduce_run_path(ar, v, paths[p]), TSR_OK, "%s", tsr_last_error());
        cm_sync(b, n);
        for (int j = 0; j < n; j++) {
            cr_assert_eq(tsr_tensor_get(big[j], h, 0, (size_t)(ne + 2) * sizeof(float)), TSR_OK);
            cr_expect_eq(h[0], 1234.5f, "%s: the float before the view changed",
                         tsr_allreduce_path_name(paths[p]));
            cr_expect_eq(h[ne + 1], 1234.5f, "%s: the float after the view changed",
                         tsr_allreduce_path_name(paths[p]));
            for (int64_t i = 0; i < ne; i++) {
                float want = 0;
                for (int k = 0; k < n; k++)
                    want += cm_value(SEED, 0, k, i);
                if (h[i + 1] != want) {
                    cr_assert_fail("%s, misaligned: device %d element %lld: expected %g, got %g",
                                   tsr_allreduce_path_name(paths[p]), j, (long long)i, (double)want,
                                   (double)h[i + 1]);
                    break;
                }
            }
        }
    }
    free(h);
    for (int j = 0; j < n; j++) {
        tsr_buf_free(buf[j]);
        tsr_ctx_free(ctx[j]);
    }
    tsr_allreduce_free(ar);
    cm_free_streams(b, n);
}

/* ---- errors ------------------------------------------------------------------------------------
 */

Test(allreduce, bad_arguments_are_refused_with_a_message_and_nothing_runs)
{
    const int n = 2;
    tsr_backend *b[MAXN];
    cm_streams(b, n);
    tsr_allreduce *ar;
    cr_expect_eq(tsr_allreduce_new(b, 0, &ar), TSR_EINVAL);
    cr_expect_eq(tsr_allreduce_new(b, 17, &ar), TSR_EINVAL);
    cr_expect_eq(tsr_allreduce_new(NULL, 2, &ar), TSR_EINVAL);
    cr_expect_eq(tsr_allreduce_new(b, 2, NULL), TSR_EINVAL);
    cr_assert_eq(tsr_allreduce_new(b, n, &ar), TSR_OK);

    tsr_ctx *ctx = tsr_ctx_new(32);
    tsr_tensor *a = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 12, 1);
    tsr_tensor *shp = tsr_set_name(tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 4, 3), "shp");
    tsr_tensor *f16 = tsr_new_tensor_2d(ctx, TSR_TYPE_F16, 12, 1);
    tsr_tensor *i32 = tsr_new_tensor_2d(ctx, TSR_TYPE_I32, 12, 1);
    tsr_tensor *q8 = tsr_new_tensor_1d(ctx, TSR_TYPE_Q8_0, 64);
    tsr_tensor *q8b = tsr_new_tensor_1d(ctx, TSR_TYPE_Q8_0, 64);
    tsr_tensor *m = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 4, 3);
    tsr_tensor *tr = tsr_transpose(ctx, tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 3, 4)); /* [4, 3] */
    tsr_tensor *a2 = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 12, 1);
    tsr_tensor *alias = tsr_view_2d(ctx, a2, 12, 1, 12 * sizeof(float), 0); /* a2's memory */
    tsr_buf *buf;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(cm_dev(0)), &buf), TSR_OK);
    tsr_ctx *ctx2 = tsr_ctx_new(2);
    tsr_tensor *lone = tsr_new_tensor_2d(ctx2, TSR_TYPE_F32, 12, 1);
    tsr_buf *buf2;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx2, tsr_dev_buft(cm_dev(1)), &buf2), TSR_OK);
    tsr_ctx *ctx3 = tsr_ctx_new(2);
    tsr_tensor *unplaced = tsr_new_tensor_2d(ctx3, TSR_TYPE_F32, 12, 1);
    float ones[12];
    for (int i = 0; i < 12; i++)
        ones[i] = 1.0f;
    tsr_tensor_set(a, ones, 0, sizeof(ones));
    tsr_tensor_set(lone, ones, 0, sizeof(ones));

    struct {
        tsr_tensor *t0, *t1;
        tsr_status want;
        const char *needle;
    } bad[] = {
        {a, shp, TSR_ESHAPE, "[4, 3, 1, 1]"},  {a, f16, TSR_ETYPE, "f16"},
        {i32, i32, TSR_ETYPE, "i32"},          {q8, q8b, TSR_ETYPE, "q8_0"},
        {a, NULL, TSR_EINVAL, "NULL"},         {a, unplaced, TSR_EINVAL, "not allocated"},
        {m, tr, TSR_EINVAL, "not contiguous"}, {a2, alias, TSR_EINVAL, "share memory"},
        {a, a, TSR_EINVAL, "share memory"},
    };
    for (size_t k = 0; k < CM_COUNT(bad); k++) {
        tsr_tensor *ts[2] = {bad[k].t0, bad[k].t1};
        for (size_t p = 0; p < CM_COUNT(paths); p++) {
            tsr_status st = tsr_allreduce_run_path(ar, ts, paths[p]);
            cr_expect_eq(st, bad[k].want, "case %zu (%s): got %s: %s", k, bad[k].needle,
                         tsr_status_name(st), tsr_last_error());
            cr_expect(strstr(tsr_last_error(), bad[k].needle) != NULL,
                      "case %zu: message '%s' lacks '%s'", k, tsr_last_error(), bad[k].needle);
        }
    }
    /* The shape message names the device and both shapes. */
    tsr_tensor *ts[2] = {a, shp};
    tsr_allreduce_run(ar, ts);
    cr_expect(strstr(tsr_last_error(), "shp") && strstr(tsr_last_error(), "[12, 1, 1, 1]") &&
                  strstr(tsr_last_error(), tsr_dev_name(cm_dev(1))),
              "message: %s", tsr_last_error());
    cr_expect_eq(tsr_allreduce_run(ar, NULL), TSR_EINVAL);
    cr_expect_eq(tsr_allreduce_run(NULL, ts), TSR_EINVAL);
    tsr_tensor *good[2] = {a, lone};
    cr_expect_eq(tsr_allreduce_run_path(ar, good, (tsr_allreduce_path)9), TSR_EINVAL);
    cm_sync(b, n);
    float back[12];
    tsr_tensor_get(a, back, 0, sizeof(back));
    cr_expect_arr_eq(back, ones, sizeof(ones), "a refused call changed the data");
    /* And a good call still works after all that. */
    cr_expect_eq(tsr_allreduce_run(ar, good), TSR_OK);
    cm_sync(b, n);
    tsr_tensor_get(lone, back, 0, sizeof(back));
    cr_expect_eq(back[11], 2.0f);
    tsr_buf_free(buf);
    tsr_buf_free(buf2);
    tsr_ctx_free(ctx);
    tsr_ctx_free(ctx2);
    tsr_ctx_free(ctx3);
    tsr_allreduce_free(ar);
    cm_free_streams(b, n);
}

/* ---- the CPU protocol entries and the in-place ADD ----------------------------------------------
 */

Test(cpu_comm, the_registry_exports_the_protocol_and_declines_what_it_cannot_do)
{
    tsr_reg *reg = tsr_cpu_reg();
    tsr_comm_init_fn init = (tsr_comm_init_fn)tsr_reg_get_proc(reg, "tsr_comm_init");
    tsr_comm_allreduce_fn run = (tsr_comm_allreduce_fn)tsr_reg_get_proc(reg, "tsr_comm_allreduce");
    tsr_comm_free_fn fr = (tsr_comm_free_fn)tsr_reg_get_proc(reg, "tsr_comm_free");
    cr_assert(init && run && fr);
    tsr_backend *b[MAXN];
    cm_streams(b, 2);
    tsr_backend *twice[2] = {b[0], b[0]};
    cr_expect_null(init(twice, 2), "the same stream twice");
    cr_expect_null(init(b, 0));
    tsr_comm *c = init(b, 2);
    cr_assert_not_null(c);
    cm_tensors x;
    cm_alloc(&x, 2, TSR_TYPE_I32, (int64_t[4]){8, 1, 1, 1});
    cr_expect_eq(run(c, x.t), TSR_ENOTHANDLED, "I32");
    cm_release(&x);
    cm_alloc(&x, 2, TSR_TYPE_BF16, (int64_t[4]){77, 1, 1, 1});
    cm_fill(&x, SEED, 3);
    cr_expect_eq(run(c, x.t), TSR_OK);
    fr(c); /* waits for the queued collective */
    cm_check(&x, SEED, 3, "cpu comm protocol");
    cm_release(&x);
    cm_free_streams(b, 2);
}

/* The generic paths' in-place ADD runs the CPU fast path (same shape and
 * type): it must round exactly like the reference kernel, specials included. */
Test(cpu_comm, the_in_place_add_matches_the_reference_bit_for_bit)
{
    tsr_backend *fast, *ref = tu_reference_backend();
    cr_assert_eq(tsr_backend_new(cm_dev(0), &fast), TSR_OK);
    tsr_cpu_set_n_threads(fast, 3);
    const int64_t ne = 1000 + 13;
    for (size_t t = 0; t < CM_COUNT(types); t++) {
        tsr_ctx *ctx = tsr_ctx_new(8);
        tsr_tensor *a = tsr_new_tensor_1d(ctx, types[t], ne);
        tsr_tensor *bb = tsr_new_tensor_1d(ctx, types[t], ne);
        tsr_tensor *y = tsr_add(ctx, a, bb);
        tsr_buf *buf;
        cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(cm_dev(0)), &buf), TSR_OK);
        float *fa = malloc(ne * sizeof(float)), *fb = malloc(ne * sizeof(float));
        tu_rng r = {SEED + t};
        for (int64_t i = 0; i < ne; i++) {
            fa[i] = tu_uniform(&r, -70000.0f, 70000.0f) * (i % 5 == 0 ? 1e-40f : 1.0f);
            fb[i] = tu_uniform(&r, -70000.0f, 70000.0f);
        }
        fa[3] = NAN, fa[4] = INFINITY, fb[5] = -INFINITY, fa[6] = 65504.0f, fb[6] = 16.0f;
        fa[7] = 1e-42f, fb[7] = 1e-42f;
        void *ra = malloc(ne * 4), *rb = malloc(ne * 4), *g1 = malloc(ne * 4), *g2 = malloc(ne * 4);
        tsr_row_from_f32(types[t], fa, ra, ne);
        tsr_row_from_f32(types[t], fb, rb, ne);
        tsr_graph *g = tsr_graph_new(8);
        cr_assert_eq(tsr_graph_build(g, y), TSR_OK);
        tsr_backend *bk[2] = {fast, ref};
        void *out[2] = {g1, g2};
        for (int k = 0; k < 2; k++) {
            tsr_tensor_set(a, ra, 0, tsr_nbytes(a));
            tsr_tensor_set(bb, rb, 0, tsr_nbytes(bb));
            cr_assert_eq(tsr_backend_graph_compute(bk[k], g), TSR_OK);
            tsr_tensor_get(y, out[k], 0, tsr_nbytes(y));
        }
        const size_t es = tsr_type_size(types[t]);
        for (int64_t i = 0; i < ne; i++)
            if (memcmp((char *)g1 + i * es, (char *)g2 + i * es, es) != 0) {
                cr_assert_fail("%s add, element %lld (%g + %g): fast and reference differ",
                               tsr_type_name(types[t]), (long long)i, (double)fa[i], (double)fb[i]);
                break;
            }
        free(fa), free(fb), free(ra), free(rb), free(g1), free(g2);
        tsr_graph_free(g);
        tsr_buf_free(buf);
        tsr_ctx_free(ctx);
    }
    tsr_backend_free(fast);
    tsr_backend_free(ref);
}
