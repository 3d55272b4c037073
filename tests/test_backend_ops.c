/* tests/test_backend_ops.c — the backend-ops harness: every op × several
 * shapes (odd sizes included) × every type it accepts, on every available
 * device, against the CPU reference kernels.
 *
 * Each case builds its op in a fresh context on the device under test and on
 * the reference stream, with the same seeded inputs. The output is placed
 * between guard bytes (any write outside it fails the case) and starts as
 * 0xFF bytes (NaN), so an element a kernel forgets to write shows up. The
 * comparison checks NMSE, an element-wise bound scaled by the output's RMS,
 * and that finite reference values are finite on the device. CPU devices run
 * with 1 and 3 threads (3 > cores, uneven splits).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define GUARD 256
#define MAX_DEVS 32

typedef struct tcase tcase;
typedef tsr_tensor *(*build_fn)(tsr_ctx *ctx, const tcase *c);

struct tcase {
    char desc[160];
    build_fn build;
    tsr_type t[4];
    int64_t ne[4][4];
    int ip[4];
    float fp[4];
    double nmse; /* NMSE bound */
    double elem; /* element-wise bound, relative to RMS(ref) + |ref| */
};

typedef struct {
    tcase *v;
    size_t n, cap;
} tcases;

static void add_case(tcases *cs, tcase c)
{
    if (cs->n == cs->cap) {
        cs->cap = cs->cap ? 2 * cs->cap : 64;
        cs->v = realloc(cs->v, cs->cap * sizeof(*cs->v));
        cr_assert_not_null(cs->v);
    }
    /* Tolerances follow what a device may legitimately lose: F32 results
     * only differ by summation order (float vs the reference's double);
     * F16/BF16 results by one rounding of the output (t[0] is the output
     * type for every op whose output is not F32). Cases that lose more by
     * design (x rounded to bf16 or q8 in a product) set their own. */
    if (c.nmse == 0.0) {
        c.nmse = c.t[0] == TSR_TYPE_BF16 ? 1e-4 : c.t[0] == TSR_TYPE_F16 ? 1e-5 : 1e-8;
        c.elem = c.t[0] == TSR_TYPE_BF16 ? 1e-2 : c.t[0] == TSR_TYPE_F16 ? 2e-3 : 1e-4;
    }
    cs->v[cs->n++] = c;
}

/* ---- input initialization by leaf name ------------------------------------------------------
 * "ids:R"   integers in [0, R)          "perm:R" distinct integers in [0, R)
 * "pos"     values in [0.5, 2)           "mask"   0 or -inf (about a quarter)
 * "int:L:H" integers in [L, H)           anything else: uniform [-1, 1) */

static tsr_status init_leaf(tsr_tensor *t, tu_rng *r)
{
    int lo, hi;
    if (sscanf(t->name, "ids:%d", &hi) == 1)
        return tu_fill_uniform(t, r, 0, (float)hi);
    if (sscanf(t->name, "int:%d:%d", &lo, &hi) == 2)
        return tu_fill_uniform(t, r, (float)lo, (float)hi);
    if (sscanf(t->name, "perm:%d", &hi) == 1) {
        /* A random permutation prefix of 0..hi-1 per column (ne[0] values). */
        const int64_t n = t->ne[0], cols = tsr_nrows(t);
        int32_t *all = malloc((size_t)hi * sizeof(int32_t));
        tsr_status st = TSR_OK;
        for (int64_t c = 0; c < cols && st == TSR_OK; c++) {
            for (int i = 0; i < hi; i++)
                all[i] = i;
            for (int i = hi - 1; i > 0; i--) {
                int j = (int)(tu_next(r) % (uint64_t)(i + 1));
                int32_t tmp = all[i];
                all[i] = all[j];
                all[j] = tmp;
            }
            st = tsr_tensor_set(t, all, (size_t)c * t->nb[1], (size_t)n * sizeof(int32_t));
        }
        free(all);
        return st;
    }
    if (strcmp(t->name, "pos") == 0)
        return tu_fill_uniform(t, r, 0.5f, 2.0f);
    if (strcmp(t->name, "mask") == 0) {
        const int64_t n = tsr_nelements(t);
        float *v = malloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++)
            v[i] = (tu_next(r) % 4 == 0) ? -INFINITY : tu_uniform(r, -0.5f, 0.5f);
        /* Leave the first column open so most rows keep a finite score. */
        for (int64_t row = 0; row < n / t->ne[0]; row++)
            v[row * t->ne[0]] = 0.0f;
        void *conv = malloc(tsr_row_size(t->type, n));
        tsr_status st = tsr_row_from_f32(t->type, v, conv, n);
        if (st == TSR_OK)
            st = tsr_tensor_set(t, conv, 0, tsr_nbytes(t));
        free(v);
        free(conv);
        return st;
    }
    return tu_fill_uniform(t, r, -1.0f, 1.0f);
}

/* ---- running one case on one stream ------------------------------------------------------- */

typedef struct {
    float *data;
    int64_t n;
    tsr_type type;
    char shape[96];
} result;

/* Builds, places, fills and runs case c on backend be; fills res. Returns
 * false with a message in err on any failure. */
static bool run_case(const tcase *c, tsr_backend *be, uint64_t seed, result *res, char *err,
                     size_t err_size)
{
    bool ok = false;
    tsr_dev *dev = tsr_backend_dev(be);
    tsr_buft *buft = tsr_dev_buft(dev);
    tsr_ctx *ctx = tsr_ctx_new(128);
    tsr_graph *g = tsr_graph_new(128);
    tsr_buf *gbuf = NULL, *rest = NULL;
    tsr_tensor *out = c->build(ctx, c);
    if (!out) {
        snprintf(err, err_size, "build failed: %s", tsr_ctx_error(ctx));
        goto done;
    }
    tsr_tensor *root = out->view_src ? out->view_src : out;
    if (!tsr_dev_supports_op(dev, out)) {
        snprintf(err, err_size, "SKIP");
        goto done;
    }
    /* The output between two guards. */
    const size_t align = tsr_buft_alignment(buft);
    const size_t guard = tu_align(GUARD, align);
    const size_t body = tu_align(tsr_buft_alloc_size(buft, root), align);
    tsr_tensor *g0 = tsr_new_tensor_1d(ctx, TSR_TYPE_I32, (int64_t)(guard / 4));
    tsr_tensor *g1 = tsr_new_tensor_1d(ctx, TSR_TYPE_I32, (int64_t)(guard / 4));
    tsr_status st = tsr_buft_alloc(buft, guard + body + guard, &gbuf);
    if (st == TSR_OK)
        st = tsr_buf_place_tensor(gbuf, g0, 0);
    if (st == TSR_OK)
        st = tsr_buf_place_tensor(gbuf, root, guard);
    if (st == TSR_OK)
        st = tsr_buf_place_tensor(gbuf, g1, guard + body);
    if (st == TSR_OK)
        st = tsr_ctx_alloc_tensors(ctx, buft, &rest);
    for (size_t i = 0; i < tsr_ctx_n_tensors(ctx) && st == TSR_OK; i++) {
        tsr_tensor *t = tsr_ctx_tensor(ctx, i);
        if (t->view_src && !t->buffer)
            st = tsr_view_init(t);
    }
    if (st != TSR_OK) {
        snprintf(err, err_size, "placement: %s", tsr_last_error());
        goto done;
    }
    /* Inputs: seeded per leaf index, identical on every device. */
    tsr_tensor_memset(g0, 0xA5, 0, guard);
    tsr_tensor_memset(g1, 0xA5, 0, guard);
    if (root->op != TSR_OP_NONE)
        tsr_tensor_memset(root, 0xFF, 0, tsr_nbytes(root));
    for (size_t i = 0; i < tsr_ctx_n_tensors(ctx); i++) {
        tsr_tensor *t = tsr_ctx_tensor(ctx, i);
        if (t->op != TSR_OP_NONE || t == g0 || t == g1)
            continue;
        tu_rng r = {seed * 1000003u + i};
        if ((st = init_leaf(t, &r)) != TSR_OK) {
            snprintf(err, err_size, "input '%s': %s", t->name, tsr_last_error());
            goto done;
        }
    }
    if ((st = tsr_graph_build(g, out)) != TSR_OK ||
        (st = tsr_backend_graph_compute(be, g)) != TSR_OK) {
        snprintf(err, err_size, "compute: %s (%s)", tsr_status_name(st), tsr_last_error());
        goto done;
    }
    /* Guards intact? */
    uint8_t gb[2][4096];
    tsr_tensor_get(g0, gb[0], 0, guard);
    tsr_tensor_get(g1, gb[1], 0, guard);
    for (size_t i = 0; i < guard; i++) {
        if (gb[0][i] != 0xA5 || gb[1][i] != 0xA5) {
            snprintf(err, err_size, "wrote outside its output (%s guard byte %zu)",
                     gb[0][i] != 0xA5 ? "leading" : "trailing", i);
            goto done;
        }
    }
    res->n = tsr_nelements(root);
    res->type = root->type;
    snprintf(res->shape, sizeof(res->shape), "%s", tu_shape(root));
    res->data = malloc((size_t)(res->n ? res->n : 1) * sizeof(float));
    if ((st = tu_read_f32(root, res->data)) != TSR_OK) {
        snprintf(err, err_size, "read back: %s", tsr_last_error());
        goto done;
    }
    ok = true;
done:
    tsr_graph_free(g);
    tsr_buf_free(gbuf);
    tsr_buf_free(rest);
    tsr_ctx_free(ctx);
    return ok;
}

/* Compares got with the reference; a message describes the first problem. */
static bool compare(const tcase *c, const result *want, const result *got, char *msg, size_t size)
{
    if (want->n != got->n) {
        snprintf(msg, size, "element count %lld vs %lld", (long long)got->n, (long long)want->n);
        return false;
    }
    double rms = 0.0;
    for (int64_t i = 0; i < want->n; i++)
        if (isfinite(want->data[i]))
            rms += (double)want->data[i] * want->data[i];
    rms = want->n ? sqrt(rms / (double)want->n) : 0.0;
    const bool exact = want->type == TSR_TYPE_I32;
    for (int64_t i = 0; i < want->n; i++) {
        const float w = want->data[i], g = got->data[i];
        if (isfinite(w) != isfinite(g) || (!isfinite(w) && !(isnan(w) && isnan(g)) && w != g)) {
            snprintf(msg, size, "element %lld: expected %g, got %g", (long long)i, (double)w,
                     (double)g);
            return false;
        }
        if (!isfinite(w))
            continue;
        const double bound = exact ? 0.0 : c->elem * (rms + fabs((double)w));
        if (fabs((double)g - (double)w) > bound) {
            snprintf(msg, size, "element %lld: expected %.7g, got %.7g (bound %.3g)", (long long)i,
                     (double)w, (double)g, bound);
            return false;
        }
    }
    if (!exact) {
        /* NMSE over finite elements. */
        double e = 0.0, r = 0.0;
        for (int64_t i = 0; i < want->n; i++) {
            if (!isfinite(want->data[i]))
                continue;
            const double d = (double)got->data[i] - want->data[i];
            e += d * d;
            r += (double)want->data[i] * want->data[i];
        }
        const double nmse = r > 0.0 ? e / r : e;
        if (nmse > c->nmse) {
            snprintf(msg, size, "NMSE %.3g > %.3g", nmse, c->nmse);
            return false;
        }
    }
    return true;
}

static void run_all(const char *op, tcases *cs)
{
    tsr_dev *devs[MAX_DEVS];
    const size_t n_devs = tu_devices(devs, MAX_DEVS);
    tsr_backend *ref = tu_reference_backend();
    cr_assert_not_null(ref, "no reference CPU stream");
    size_t checked = 0, skipped = 0;
    for (size_t ci = 0; ci < cs->n; ci++) {
        const tcase *c = &cs->v[ci];
        const uint64_t seed = 1234 + ci;
        result want = {0};
        char err[512];
        const bool ref_ok = run_case(c, ref, seed, &want, err, sizeof(err));
        cr_expect(ref_ok, "%s %s: reference failed: %s", op, c->desc, err);
        if (!ref_ok)
            continue;
        for (size_t d = 0; d < n_devs; d++) {
            const bool cpu = tsr_dev_reg(devs[d]) == tsr_cpu_reg();
            const int threads[] = {1, 3};
            for (int ti = 0; ti < (cpu ? 2 : 1); ti++) {
                tsr_backend *be = NULL;
                cr_assert_eq(tsr_backend_new(devs[d], &be), TSR_OK, "%s", tsr_last_error());
                if (cpu)
                    tsr_cpu_set_n_threads(be, threads[ti]);
                result got = {0};
                const bool ok = run_case(c, be, seed, &got, err, sizeof(err));
                if (!ok && strcmp(err, "SKIP") == 0) {
                    cr_log_info("%s %s: not supported on %s, skipped", op, c->desc,
                                tsr_dev_name(devs[d]));
                    skipped++;
                } else {
                    char msg[512] = "";
                    cr_expect(ok, "%s %s on %s (%d threads): %s", op, c->desc,
                              tsr_dev_name(devs[d]), cpu ? threads[ti] : 0, err);
                    if (ok)
                        cr_expect(compare(c, &want, &got, msg, sizeof(msg)),
                                  "%s %s on %s (%d threads), output %s: %s (seed %llu)", op,
                                  c->desc, tsr_dev_name(devs[d]), cpu ? threads[ti] : 0, want.shape,
                                  msg, (unsigned long long)seed);
                    checked++;
                }
                free(got.data);
                tsr_backend_free(be);
            }
        }
        free(want.data);
    }
    if (skipped)
        cr_log_info("%s: %zu device runs skipped (op not supported there)", op, skipped);
    cr_expect_gt(checked, 0, "%s: no case ran on any device", op);
    tsr_backend_free(ref);
    free(cs->v);
}

/* ---- builders --------------------------------------------------------------------------- */

static tsr_tensor *leaf(tsr_ctx *ctx, tsr_type type, const int64_t ne[4], const char *name)
{
    tsr_tensor *t = tsr_new_tensor_4d(ctx, type, ne[0], ne[1], ne[2], ne[3]);
    return tsr_set_name(t, "%s", name);
}

#define NE(a, b, c, d) \
    {                  \
        a, b, c, d     \
    }

static tsr_tensor *build_binary(tsr_ctx *ctx, const tcase *c)
{
    tsr_tensor *a = leaf(ctx, c->t[0], c->ne[0], "a");
    tsr_tensor *b = leaf(ctx, c->t[1], c->ne[1], c->ip[0] == TSR_OP_DIV ? "pos" : "b");
    switch (c->ip[0]) {
    case TSR_OP_ADD:
        return tsr_add(ctx, a, b);
    case TSR_OP_SUB:
        return tsr_sub(ctx, a, b);
    case TSR_OP_MUL:
        return tsr_mul(ctx, a, b);
    default:
        return tsr_div(ctx, a, b);
    }
}

Test(backend_ops, binary_ops_match_reference, .timeout = 300)
{
    tcases cs = {0};
    const tsr_op ops[] = {TSR_OP_ADD, TSR_OP_SUB, TSR_OP_MUL, TSR_OP_DIV};
    const tsr_type ta[] = {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_F16, TSR_TYPE_BF16, TSR_TYPE_BF16};
    const tsr_type tb[] = {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_F32, TSR_TYPE_BF16, TSR_TYPE_F32};
    const int64_t bs[][4] = {{7, 5, 3, 2}, {7, 1, 1, 1}, {1, 5, 1, 2}, {7, 5, 1, 1}, {1, 1, 1, 1}};
    for (size_t o = 0; o < 4; o++)
        for (size_t t = 0; t < 5; t++)
            for (size_t s = 0; s < 5; s++) {
                tcase c = {.build = build_binary,
                           .t = {ta[t], tb[t]},
                           .ne = {NE(7, 5, 3, 2), NE(bs[s][0], bs[s][1], bs[s][2], bs[s][3])},
                           .ip = {(int)ops[o]}};
                snprintf(c.desc, sizeof(c.desc), "%s %s a[7,5,3,2] b[%lld,%lld,%lld,%lld] %s",
                         tsr_op_name(ops[o]), tsr_type_name(ta[t]), (long long)bs[s][0],
                         (long long)bs[s][1], (long long)bs[s][2], (long long)bs[s][3],
                         tsr_type_name(tb[t]));
                add_case(&cs, c);
            }
    /* A large row count to exercise thread splits. */
    add_case(&cs, (tcase){.desc = "ADD f32 a[1031,67] b[1031]",
                          .build = build_binary,
                          .t = {TSR_TYPE_F32, TSR_TYPE_F32},
                          .ne = {NE(1031, 67, 1, 1), NE(1031, 1, 1, 1)},
                          .ip = {TSR_OP_ADD}});
    run_all("binary", &cs);
}

static tsr_tensor *build_unary(tsr_ctx *ctx, const tcase *c)
{
    tsr_tensor *a = leaf(ctx, c->t[0], c->ne[0], "a");
    switch (c->ip[0]) {
    case TSR_OP_SCALE:
        return tsr_scale_bias(ctx, a, c->fp[0], c->fp[1]);
    case TSR_OP_FILL:
        return tsr_fill(ctx, a, c->fp[0]);
    case TSR_OP_SILU:
        return tsr_silu(ctx, a);
    default:
        return tsr_gelu(ctx, a);
    }
}

Test(backend_ops, unary_ops_match_reference, .timeout = 300)
{
    tcases cs = {0};
    const tsr_op ops[] = {TSR_OP_SCALE, TSR_OP_FILL, TSR_OP_SILU, TSR_OP_GELU};
    const tsr_type types[] = {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_BF16};
    for (size_t o = 0; o < 4; o++)
        for (size_t t = 0; t < 3; t++) {
            tcase c = {.build = build_unary,
                       .t = {types[t]},
                       .ne = {NE(33, 7, 3, 1)},
                       .ip = {(int)ops[o]},
                       .fp = {0.7f, 0.1f}};
            snprintf(c.desc, sizeof(c.desc), "%s %s [33,7,3]", tsr_op_name(ops[o]),
                     tsr_type_name(types[t]));
            add_case(&cs, c);
        }
    add_case(&cs, (tcase){.desc = "FILL i32 [5,3]",
                          .build = build_unary,
                          .t = {TSR_TYPE_I32},
                          .ne = {NE(5, 3, 1, 1)},
                          .ip = {TSR_OP_FILL},
                          .fp = {42.0f}});
    run_all("unary", &cs);
}

static tsr_tensor *build_glu(tsr_ctx *ctx, const tcase *c)
{
    tsr_tensor *a = leaf(ctx, c->t[0], c->ne[0], "a");
    tsr_tensor *b = c->ip[2] ? leaf(ctx, c->t[0], c->ne[0], "b") : NULL;
    return tsr_glu(ctx, a, b, (tsr_glu_kind)c->ip[0], c->ip[1] != 0);
}

Test(backend_ops, glu_matches_reference, .timeout = 300)
{
    tcases cs = {0};
    const tsr_type types[] = {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_BF16};
    for (int kind = 0; kind < 2; kind++)
        for (int swapped = 0; swapped < 2; swapped++)
            for (int split = 0; split < 2; split++)
                for (size_t t = 0; t < 3; t++) {
                    tcase c = {.build = build_glu,
                               .t = {types[t]},
                               .ne = {NE(34, 5, 2, 1)},
                               .ip = {kind, swapped, split}};
                    snprintf(c.desc, sizeof(c.desc), "%s %s%s %s [34,5,2]",
                             kind ? "geglu" : "swiglu", split ? "split" : "fused",
                             swapped ? " swapped" : "", tsr_type_name(types[t]));
                    add_case(&cs, c);
                }
    run_all("glu", &cs);
}

static tsr_tensor *build_rows_op(tsr_ctx *ctx, const tcase *c)
{
    tsr_tensor *a = leaf(ctx, c->t[0], c->ne[0], "a");
    switch (c->ip[0]) {
    case TSR_OP_RMS_NORM:
        return tsr_rms_norm(ctx, a, c->fp[0]);
    case TSR_OP_SUM_ROWS:
        return tsr_sum_rows(ctx, a);
    case TSR_OP_ARGMAX:
        return tsr_argmax(ctx, a);
    case TSR_OP_ARGSORT:
        return tsr_argsort(ctx, a, (tsr_sort_order)c->ip[1]);
    default:
        return tsr_top_k(ctx, a, c->ip[1]);
    }
}

/* TOP_K of rows longer than a workgroup sorts at once (a vocabulary):
 * uniform values, and integers in [-50, 50) for many ties, whose order
 * must stay the reference's (by index). */
static tsr_tensor *build_top_k(tsr_ctx *ctx, const tcase *c)
{
    tsr_tensor *a = leaf(ctx, c->t[0], c->ne[0], c->ip[2] ? "int:-50:50" : "a");
    return tsr_top_k(ctx, a, c->ip[1]);
}

Test(backend_ops, row_ops_match_reference, .timeout = 300)
{
    tcases cs = {0};
    const int64_t shapes[][4] = {{67, 5, 3, 1}, {1, 4, 1, 1}, {4096, 3, 1, 1}, {33, 7, 2, 2}};
    for (size_t s = 0; s < 4; s++) {
        const int64_t *ne = shapes[s];
        char sh[64];
        snprintf(sh, sizeof(sh), "[%lld,%lld,%lld,%lld]", (long long)ne[0], (long long)ne[1],
                 (long long)ne[2], (long long)ne[3]);
        tcase base = {
            .build = build_rows_op, .t = {TSR_TYPE_F32}, .ne = {NE(ne[0], ne[1], ne[2], ne[3])}};
        tcase c = base;
        c.ip[0] = TSR_OP_RMS_NORM;
        c.fp[0] = 1e-6f;
        snprintf(c.desc, sizeof(c.desc), "RMS_NORM %s", sh);
        add_case(&cs, c);
        c = base;
        c.ip[0] = TSR_OP_SUM_ROWS;
        snprintf(c.desc, sizeof(c.desc), "SUM_ROWS %s", sh);
        add_case(&cs, c);
        c = base;
        c.ip[0] = TSR_OP_ARGMAX;
        snprintf(c.desc, sizeof(c.desc), "ARGMAX %s", sh);
        add_case(&cs, c);
        for (int order = 0; order < 2; order++) {
            c = base;
            c.ip[0] = TSR_OP_ARGSORT;
            c.ip[1] = order;
            snprintf(c.desc, sizeof(c.desc), "ARGSORT %s %s", order ? "desc" : "asc", sh);
            add_case(&cs, c);
        }
        c = base;
        c.ip[0] = TSR_OP_TOP_K;
        c.ip[1] = ne[0] < 5 ? (int)ne[0] : 5;
        snprintf(c.desc, sizeof(c.desc), "TOP_K k=%d %s", c.ip[1], sh);
        add_case(&cs, c);
    }
    const int64_t longs[][3] = {{32000, 2, 40}, {9000, 3, 3000}, {4097, 1, 1}, {20000, 2, 700}};
    for (size_t s = 0; s < sizeof(longs) / sizeof(longs[0]); s++)
        for (int ties = 0; ties < 2; ties++) {
            tcase c = {.build = build_top_k,
                       .t = {TSR_TYPE_F32},
                       .ne = {NE(longs[s][0], longs[s][1], 1, 1)},
                       .ip = {0, (int)longs[s][2], ties}};
            snprintf(c.desc, sizeof(c.desc), "TOP_K k=%d [%lld,%lld]%s", c.ip[1],
                     (long long)longs[s][0], (long long)longs[s][1], ties ? " ties" : "");
            add_case(&cs, c);
        }
    run_all("rows", &cs);
}

static tsr_tensor *build_rope(tsr_ctx *ctx, const tcase *c)
{
    tsr_tensor *a = leaf(ctx, c->t[0], c->ne[0], "a");
    tsr_tensor *pos = tsr_new_tensor_1d(ctx, TSR_TYPE_I32, c->ne[0][2]);
    tsr_set_name(pos, "int:0:4096");
    return tsr_rope(ctx, a, pos, c->ip[0], (tsr_rope_mode)c->ip[1], c->fp[0], c->fp[1]);
}

Test(backend_ops, rope_matches_reference, .timeout = 300)
{
    tcases cs = {0};
    const tsr_type types[] = {TSR_TYPE_F32, TSR_TYPE_F16};
    const int64_t heads[][4] = {{64, 5, 7, 1}, {128, 3, 1, 1}, {32, 2, 9, 2}};
    for (int mode = 0; mode <= 2; mode += 2)
        for (size_t t = 0; t < 2; t++)
            for (size_t h = 0; h < 3; h++)
                for (int partial = 0; partial < 2; partial++) {
                    const int64_t *ne = heads[h];
                    const int n_dims = partial ? (int)ne[0] / 2 : (int)ne[0];
                    tcase c = {.build = build_rope,
                               .t = {types[t]},
                               .ne = {NE(ne[0], ne[1], ne[2], ne[3])},
                               .ip = {n_dims, mode},
                               .fp = {10000.0f, partial ? 0.5f : 1.0f}};
                    snprintf(c.desc, sizeof(c.desc), "%s %s [%lld,%lld,%lld,%lld] n_dims %d",
                             mode ? "neox" : "normal", tsr_type_name(types[t]), (long long)ne[0],
                             (long long)ne[1], (long long)ne[2], (long long)ne[3], n_dims);
                    add_case(&cs, c);
                }
    run_all("rope", &cs);
}

static tsr_tensor *build_soft_max(tsr_ctx *ctx, const tcase *c)
{
    tsr_tensor *a = leaf(ctx, TSR_TYPE_F32, c->ne[0], "a");
    tsr_tensor *mask = c->ip[0] ? leaf(ctx, c->t[1], c->ne[1], "mask") : NULL;
    return tsr_soft_max(ctx, a, mask, c->fp[0]);
}

Test(backend_ops, soft_max_matches_reference, .timeout = 300)
{
    tcases cs = {0};
    add_case(&cs, (tcase){.desc = "no mask [37,9,3]",
                          .build = build_soft_max,
                          .t = {TSR_TYPE_F32},
                          .ne = {NE(37, 9, 3, 1)},
                          .fp = {0.3f}});
    add_case(&cs, (tcase){.desc = "f32 mask [37,11] on [37,9,3]",
                          .build = build_soft_max,
                          .t = {TSR_TYPE_F32, TSR_TYPE_F32},
                          .ne = {NE(37, 9, 3, 1), NE(37, 11, 1, 1)},
                          .ip = {1},
                          .fp = {0.3f}});
    add_case(&cs, (tcase){.desc = "f16 mask [256,4,2] on [256,4,4,1]",
                          .build = build_soft_max,
                          .t = {TSR_TYPE_F32, TSR_TYPE_F16},
                          .ne = {NE(256, 4, 4, 1), NE(256, 4, 2, 1)},
                          .ip = {1},
                          .fp = {1.0f}});
    add_case(&cs, (tcase){.desc = "vocab row [32000,2]",
                          .build = build_soft_max,
                          .t = {TSR_TYPE_F32},
                          .ne = {NE(32000, 2, 1, 1)},
                          .fp = {1.0f}});
    run_all("soft_max", &cs);
}

static tsr_tensor *build_flash_attn(tsr_ctx *ctx, const tcase *c)
{
    tsr_tensor *q = leaf(ctx, TSR_TYPE_F32, c->ne[0], "q");
    tsr_tensor *k = leaf(ctx, c->t[1], c->ne[1], "k");
    tsr_tensor *v = leaf(ctx, c->t[1], c->ne[2], "v");
    tsr_tensor *mask = c->ip[0] ? leaf(ctx, c->t[3], c->ne[3], "mask") : NULL;
    return tsr_flash_attn_ext(ctx, q, k, v, mask, c->fp[0], c->fp[1]);
}

Test(backend_ops, flash_attn_matches_reference, .timeout = 300)
{
    tcases cs = {0};
    const tsr_type kv[] = {TSR_TYPE_F32, TSR_TYPE_F16};
    /* {D, T, H, Hk, S, B} */
    const int64_t shapes[][6] = {
        {64, 5, 8, 2, 37, 1}, {64, 1, 8, 8, 129, 1}, {128, 7, 4, 1, 64, 1}, {40, 3, 6, 3, 19, 2}};
    for (size_t t = 0; t < 2; t++)
        for (size_t s = 0; s < 4; s++)
            for (int masked = 0; masked < 2; masked++)
                for (int cap = 0; cap < 2; cap++) {
                    const int64_t *x = shapes[s];
                    tcase c = {.build = build_flash_attn,
                               .t = {TSR_TYPE_F32, kv[t], kv[t], TSR_TYPE_F16},
                               .ne = {NE(x[0], x[1], x[2], x[5]), NE(x[0], x[4], x[3], x[5]),
                                      NE(x[0], x[4], x[3], x[5]), NE(x[4], x[1] + 3, 1, 1)},
                               .ip = {masked},
                               .fp = {1.0f / sqrtf((float)x[0]), cap ? 20.0f : 0.0f}};
                    snprintf(c.desc, sizeof(c.desc),
                             "%s kv D=%lld T=%lld H=%lld Hk=%lld S=%lld B=%lld%s%s",
                             tsr_type_name(kv[t]), (long long)x[0], (long long)x[1],
                             (long long)x[2], (long long)x[3], (long long)x[4], (long long)x[5],
                             masked ? " masked" : "", cap ? " softcap" : "");
                    add_case(&cs, c);
                }
    run_all("flash_attn_ext", &cs);
}

/* Products may round x to bf16 (BF16 weights) or quantize it to 8 bits
 * (Q8_0 weights) on a device, as llama.cpp does; F32 and F16 weights are
 * exact up to summation order. */
static void mm_tolerance(tcase *c)
{
    if (c->t[0] == TSR_TYPE_BF16) {
        c->nmse = 1e-4;
        c->elem = 3e-2;
    } else if (c->t[0] == TSR_TYPE_Q8_0) {
        c->nmse = 5e-4;
        c->elem = 5e-2;
    } else {
        c->nmse = 1e-8;
        c->elem = 1e-4;
    }
}

static tsr_tensor *build_mul_mat(tsr_ctx *ctx, const tcase *c)
{
    tsr_tensor *w = leaf(ctx, c->t[0], c->ne[0], "w");
    tsr_tensor *x;
    if (c->ip[0]) {
        /* x as a strided view: every other column of a wider tensor. */
        int64_t big[4] = {c->ne[1][0], 2 * c->ne[1][1], c->ne[1][2], c->ne[1][3]};
        tsr_tensor *xb = leaf(ctx, TSR_TYPE_F32, big, "x");
        x = tsr_view_4d(ctx, xb, c->ne[1][0], c->ne[1][1], c->ne[1][2], c->ne[1][3], 2 * xb->nb[1],
                        xb->nb[2], xb->nb[3], 0);
    } else {
        x = leaf(ctx, TSR_TYPE_F32, c->ne[1], "x");
    }
    return tsr_mul_mat(ctx, w, x);
}

Test(backend_ops, mul_mat_matches_reference, .timeout = 600)
{
    tcases cs = {0};
    const tsr_type types[] = {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_BF16, TSR_TYPE_Q8_0};
    const int64_t Ks[] = {32, 96, 33, 512};
    const int64_t Ns[] = {1, 7, 33, 64};
    const int64_t Ts[] = {1, 3, 13, 40};
    for (size_t t = 0; t < 4; t++)
        for (size_t k = 0; k < 4; k++)
            for (size_t n = 0; n < 4; n++)
                for (size_t tt = 0; tt < 4; tt++) {
                    if (types[t] == TSR_TYPE_Q8_0 && Ks[k] % 32)
                        continue;
                    if ((n + tt + k) % 2) /* half the grid keeps the run short */
                        continue;
                    tcase c = {.build = build_mul_mat,
                               .t = {types[t], TSR_TYPE_F32},
                               .ne = {NE(Ks[k], Ns[n], 1, 1), NE(Ks[k], Ts[tt], 1, 1)}};
                    snprintf(c.desc, sizeof(c.desc), "%s K=%lld N=%lld T=%lld",
                             tsr_type_name(types[t]), (long long)Ks[k], (long long)Ns[n],
                             (long long)Ts[tt]);
                    mm_tolerance(&c);
                    add_case(&cs, c);
                }
    /* Around the kernels' switch points: matrix-vector up to T = 8..32 by
     * type, GEMM above; GEMM blocks of 256 rows and 256 k; 12-column tiles;
     * K = 100 leaves an odd number of texels for the texel GEMM. */
    const int64_t edge[][3] = {{520, 270, 17}, {96, 33, 33}, {64, 40, 9},  {288, 257, 25},
                               {33, 100, 16},  {128, 31, 8}, {64, 12, 48}, {100, 37, 21}};
    for (size_t t = 0; t < 4; t++)
        for (size_t e = 0; e < sizeof(edge) / sizeof(edge[0]); e++) {
            const int64_t K = types[t] == TSR_TYPE_Q8_0 ? (edge[e][0] + 31) / 32 * 32 : edge[e][0];
            tcase c = {.build = build_mul_mat,
                       .t = {types[t], TSR_TYPE_F32},
                       .ne = {NE(K, edge[e][1], 1, 1), NE(K, edge[e][2], 1, 1)}};
            snprintf(c.desc, sizeof(c.desc), "%s K=%lld N=%lld T=%lld", tsr_type_name(types[t]),
                     (long long)K, (long long)edge[e][1], (long long)edge[e][2]);
            mm_tolerance(&c);
            add_case(&cs, c);
        }
    for (size_t t = 0; t < 4; t++) {
        /* Broadcast over batches, strided x, and a decode-sized row. */
        tcase c = {.build = build_mul_mat,
                   .t = {types[t], TSR_TYPE_F32},
                   .ne = {NE(64, 17, 2, 1), NE(64, 5, 4, 3)}};
        snprintf(c.desc, sizeof(c.desc), "%s broadcast w[64,17,2,1] x[64,5,4,3]",
                 tsr_type_name(types[t]));
        mm_tolerance(&c);
        add_case(&cs, c);
        c = (tcase){.build = build_mul_mat,
                    .t = {types[t], TSR_TYPE_F32},
                    .ne = {NE(128, 19, 1, 1), NE(128, 6, 1, 1)},
                    .ip = {1}};
        snprintf(c.desc, sizeof(c.desc), "%s strided x w[128,19] x[128,6]",
                 tsr_type_name(types[t]));
        mm_tolerance(&c);
        add_case(&cs, c);
        c = (tcase){.build = build_mul_mat,
                    .t = {types[t], TSR_TYPE_F32},
                    .ne = {NE(4096, 67, 1, 1), NE(4096, 2, 1, 1)}};
        snprintf(c.desc, sizeof(c.desc), "%s long rows w[4096,67] x[4096,2]",
                 tsr_type_name(types[t]));
        mm_tolerance(&c);
        add_case(&cs, c);
        c = (tcase){.build = build_mul_mat,
                    .t = {types[t], TSR_TYPE_F32},
                    .ne = {NE(256, 300, 1, 1), NE(256, 77, 1, 1)}};
        snprintf(c.desc, sizeof(c.desc), "%s gemm w[256,300] x[256,77]", tsr_type_name(types[t]));
        mm_tolerance(&c);
        add_case(&cs, c);
    }
    run_all("mul_mat", &cs);
}

static tsr_tensor *build_mul_mat_id(tsr_ctx *ctx, const tcase *c)
{
    tsr_tensor *w = leaf(ctx, c->t[0], c->ne[0], "w");
    tsr_tensor *x = leaf(ctx, TSR_TYPE_F32, c->ne[1], "x");
    char name[32];
    snprintf(name, sizeof(name), "ids:%lld", (long long)c->ne[0][2]);
    tsr_tensor *ids = leaf(ctx, TSR_TYPE_I32, c->ne[2], name);
    return tsr_mul_mat_id(ctx, w, x, ids);
}

Test(backend_ops, mul_mat_id_matches_reference, .timeout = 300)
{
    tcases cs = {0};
    const tsr_type types[] = {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_BF16, TSR_TYPE_Q8_0};
    for (size_t t = 0; t < 4; t++)
        for (int shared_x = 0; shared_x < 2; shared_x++)
            for (int64_t T = 1; T <= 9; T += 8) {
                tcase c = {
                    .build = build_mul_mat_id,
                    .t = {types[t]},
                    .ne = {NE(64, 17, 5, 1), NE(64, shared_x ? 1 : 3, T, 1), NE(3, T, 1, 1)}};
                snprintf(c.desc, sizeof(c.desc), "%s w[64,17,5] x[64,%d,%lld] ids[3,%lld]",
                         tsr_type_name(types[t]), shared_x ? 1 : 3, (long long)T, (long long)T);
                mm_tolerance(&c);
                add_case(&cs, c);
            }
    run_all("mul_mat_id", &cs);
}

static tsr_tensor *build_add_id(tsr_ctx *ctx, const tcase *c)
{
    tsr_tensor *a = leaf(ctx, TSR_TYPE_F32, c->ne[0], "a");
    tsr_tensor *b = leaf(ctx, TSR_TYPE_F32, c->ne[1], "b");
    char name[32];
    snprintf(name, sizeof(name), "ids:%lld", (long long)c->ne[1][1]);
    tsr_tensor *ids = leaf(ctx, TSR_TYPE_I32, c->ne[2], name);
    return tsr_add_id(ctx, a, b, ids);
}

Test(backend_ops, add_id_matches_reference, .timeout = 120)
{
    tcases cs = {0};
    add_case(&cs, (tcase){.desc = "a[16,3,4] b[16,5]",
                          .build = build_add_id,
                          .ne = {NE(16, 3, 4, 1), NE(16, 5, 1, 1), NE(3, 4, 1, 1)}});
    add_case(&cs, (tcase){.desc = "a[33,2,1] b[33,8]",
                          .build = build_add_id,
                          .ne = {NE(33, 2, 1, 1), NE(33, 8, 1, 1), NE(2, 1, 1, 1)}});
    run_all("add_id", &cs);
}

static tsr_tensor *build_get_rows(tsr_ctx *ctx, const tcase *c)
{
    tsr_tensor *a = leaf(ctx, c->t[0], c->ne[0], "a");
    char name[32];
    snprintf(name, sizeof(name), "ids:%lld", (long long)c->ne[0][1]);
    tsr_tensor *ids = leaf(ctx, TSR_TYPE_I32, c->ne[1], name);
    return tsr_get_rows(ctx, a, ids);
}

static tsr_tensor *build_set_rows(tsr_ctx *ctx, const tcase *c)
{
    tsr_tensor *dst = leaf(ctx, c->t[0], c->ne[0], "dst");
    tsr_tensor *src = leaf(ctx, TSR_TYPE_F32, c->ne[1], "src");
    char name[32];
    snprintf(name, sizeof(name), "perm:%lld", (long long)c->ne[0][1]);
    tsr_tensor *ids = leaf(ctx, TSR_TYPE_I32, c->ne[2], name);
    return tsr_set_rows(ctx, dst, src, ids);
}

Test(backend_ops, get_rows_and_set_rows_match_reference, .timeout = 300)
{
    tcases cs = {0};
    const tsr_type types[] = {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_BF16, TSR_TYPE_Q8_0,
                              TSR_TYPE_I32};
    for (size_t t = 0; t < 5; t++) {
        const int64_t E = types[t] == TSR_TYPE_Q8_0 ? 64 : 17;
        tcase c = {
            .build = build_get_rows, .t = {types[t]}, .ne = {NE(E, 11, 1, 1), NE(5, 1, 1, 1)}};
        snprintf(c.desc, sizeof(c.desc), "get_rows %s a[%lld,11] ids[5]", tsr_type_name(types[t]),
                 (long long)E);
        add_case(&cs, c);
        c = (tcase){
            .build = build_get_rows, .t = {types[t]}, .ne = {NE(E, 11, 3, 1), NE(4, 3, 1, 1)}};
        snprintf(c.desc, sizeof(c.desc), "get_rows %s a[%lld,11,3] ids[4,3]",
                 tsr_type_name(types[t]), (long long)E);
        add_case(&cs, c);
        if (types[t] == TSR_TYPE_I32)
            continue;
        c = (tcase){.build = build_set_rows,
                    .t = {types[t]},
                    .ne = {NE(E, 13, 2, 1), NE(E, 4, 2, 1), NE(4, 1, 1, 1)}};
        snprintf(c.desc, sizeof(c.desc), "set_rows %s dst[%lld,13,2] src[%lld,4,2] ids[4]",
                 tsr_type_name(types[t]), (long long)E, (long long)E);
        add_case(&cs, c);
        c = (tcase){.build = build_set_rows,
                    .t = {types[t]},
                    .ne = {NE(E, 13, 2, 1), NE(E, 4, 2, 1), NE(4, 2, 1, 1)}};
        snprintf(c.desc, sizeof(c.desc), "set_rows %s per-batch ids[4,2]", tsr_type_name(types[t]));
        add_case(&cs, c);
    }
    run_all("rows_table", &cs);
}

static tsr_tensor *build_cpy(tsr_ctx *ctx, const tcase *c)
{
    tsr_tensor *a = leaf(ctx, c->t[0], c->ne[0], c->t[0] == TSR_TYPE_I32 ? "int:-100:100" : "a");
    if (c->ip[0] == 1)
        a = tsr_transpose(ctx, a);
    else if (c->ip[0] == 2)
        a = tsr_permute(ctx, a, 2, 0, 1, 3);
    if (c->ip[1]) /* cont */
        return c->ip[1] == 2
                   ? tsr_cont_4d(ctx, a, c->ne[1][0], c->ne[1][1], c->ne[1][2], c->ne[1][3])
                   : tsr_cont(ctx, a);
    tsr_tensor *b = leaf(ctx, c->t[1], c->ne[1], "dst");
    return tsr_cpy(ctx, a, b);
}

Test(backend_ops, cpy_and_cont_match_reference, .timeout = 300)
{
    tcases cs = {0};
    const tsr_type fl[] = {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_BF16};
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 3; b++) {
            tcase c = {
                .build = build_cpy, .t = {fl[a], fl[b]}, .ne = {NE(6, 4, 3, 1), NE(6, 4, 3, 1)}};
            snprintf(c.desc, sizeof(c.desc), "cpy %s->%s [6,4,3]", tsr_type_name(fl[a]),
                     tsr_type_name(fl[b]));
            add_case(&cs, c);
            c = (tcase){.build = build_cpy,
                        .t = {fl[a], fl[b]},
                        .ne = {NE(6, 4, 3, 1), NE(8, 9, 1, 1)},
                        .ip = {1}};
            snprintf(c.desc, sizeof(c.desc), "cpy transposed %s [6,4,3] -> %s [8,9]",
                     tsr_type_name(fl[a]), tsr_type_name(fl[b]));
            add_case(&cs, c);
        }
    add_case(&cs, (tcase){.desc = "cpy f32->q8_0 [64,3]",
                          .build = build_cpy,
                          .t = {TSR_TYPE_F32, TSR_TYPE_Q8_0},
                          .ne = {NE(64, 3, 1, 1), NE(64, 3, 1, 1)}});
    add_case(&cs, (tcase){.desc = "cpy q8_0->f32 [64,3]",
                          .build = build_cpy,
                          .t = {TSR_TYPE_Q8_0, TSR_TYPE_F32},
                          .ne = {NE(64, 3, 1, 1), NE(64, 3, 1, 1)}});
    add_case(&cs, (tcase){.desc = "cpy q8_0->f16 [96,2,2]",
                          .build = build_cpy,
                          .t = {TSR_TYPE_Q8_0, TSR_TYPE_F16},
                          .ne = {NE(96, 2, 2, 1), NE(96, 2, 2, 1)}});
    add_case(&cs, (tcase){.desc = "cpy q8_0->q8_0 [32,5]",
                          .build = build_cpy,
                          .t = {TSR_TYPE_Q8_0, TSR_TYPE_Q8_0},
                          .ne = {NE(32, 5, 1, 1), NE(32, 5, 1, 1)}});
    add_case(&cs, (tcase){.desc = "cpy i32->i32 [7,3]",
                          .build = build_cpy,
                          .t = {TSR_TYPE_I32, TSR_TYPE_I32},
                          .ne = {NE(7, 3, 1, 1), NE(7, 3, 1, 1)}});
    for (size_t a = 0; a < 3; a++) {
        tcase c = {.build = build_cpy, .t = {fl[a]}, .ne = {NE(5, 6, 7, 2)}, .ip = {2, 1}};
        snprintf(c.desc, sizeof(c.desc), "cont of permuted %s [5,6,7,2]", tsr_type_name(fl[a]));
        add_case(&cs, c);
        c = (tcase){.build = build_cpy,
                    .t = {fl[a]},
                    .ne = {NE(5, 6, 7, 2), NE(30, 14, 1, 1)},
                    .ip = {1, 2}};
        snprintf(c.desc, sizeof(c.desc), "cont_4d of transposed %s to [30,14]",
                 tsr_type_name(fl[a]));
        add_case(&cs, c);
    }
    run_all("cpy", &cs);
}

static tsr_tensor *build_concat(tsr_ctx *ctx, const tcase *c)
{
    tsr_tensor *a = leaf(ctx, c->t[0], c->ne[0], c->t[0] == TSR_TYPE_I32 ? "int:-9:9" : "a");
    tsr_tensor *b = leaf(ctx, c->t[0], c->ne[1], c->t[0] == TSR_TYPE_I32 ? "int:-9:9" : "b");
    return tsr_concat(ctx, a, b, c->ip[0]);
}

Test(backend_ops, concat_matches_reference, .timeout = 120)
{
    tcases cs = {0};
    const tsr_type types[] = {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_I32};
    for (size_t t = 0; t < 3; t++)
        for (int dim = 0; dim < 4; dim++) {
            int64_t a[4] = {5, 4, 3, 2}, b[4] = {5, 4, 3, 2};
            b[dim] = 3;
            tcase c = {.build = build_concat,
                       .t = {types[t]},
                       .ne = {NE(a[0], a[1], a[2], a[3]), NE(b[0], b[1], b[2], b[3])},
                       .ip = {dim}};
            snprintf(c.desc, sizeof(c.desc), "%s dim %d", tsr_type_name(types[t]), dim);
            add_case(&cs, c);
        }
    run_all("concat", &cs);
}
