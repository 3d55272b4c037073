/* tests/test_graph.c — graph building (order, leaves, capacity, depth) and
 * the graph allocator (liveness-based reuse without overlap of live tensors,
 * one buffer kept across evaluations, results equal to unshared memory).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static int index_of(tsr_graph *g, const tsr_tensor *t)
{
    for (size_t i = 0; i < tsr_graph_n_nodes(g); i++)
        if (tsr_graph_node(g, i) == t)
            return (int)i;
    return -1;
}

Test(graph, nodes_come_after_their_sources_and_once_each)
{
    tsr_ctx *ctx = tsr_ctx_new(32);
    tsr_tensor *x = tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 8);
    tsr_tensor *w = tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 8);
    tsr_tensor *a = tsr_mul(ctx, x, w);
    tsr_tensor *b = tsr_silu(ctx, a);
    tsr_tensor *c = tsr_add(ctx, a, b); /* a is shared */
    tsr_tensor *d = tsr_scale(ctx, c, 2.0f);
    tsr_graph *g = tsr_graph_new(16);
    cr_assert_eq(tsr_graph_build(g, d), TSR_OK);
    cr_expect_eq(tsr_graph_n_nodes(g), 4);
    cr_expect_eq(tsr_graph_n_leafs(g), 2);
    cr_expect_lt(index_of(g, a), index_of(g, b));
    cr_expect_lt(index_of(g, b), index_of(g, c));
    cr_expect_lt(index_of(g, c), index_of(g, d));
    cr_expect_eq(tsr_graph_last(g), d);
    cr_expect(d->flags & TSR_TENSOR_FLAG_OUTPUT);
    cr_expect(a->flags & TSR_TENSOR_FLAG_COMPUTE);
    /* Building again adds nothing. */
    cr_expect_eq(tsr_graph_build(g, d), TSR_OK);
    cr_expect_eq(tsr_graph_n_nodes(g), 4);
    tsr_graph_free(g);
    tsr_ctx_free(ctx);
}

Test(graph, a_full_graph_is_an_error_and_stays_unchanged)
{
    tsr_ctx *ctx = tsr_ctx_new(32);
    tsr_tensor *x = tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 8);
    tsr_tensor *y = x;
    for (int i = 0; i < 5; i++)
        y = tsr_silu(ctx, y);
    tsr_graph *g = tsr_graph_new(3);
    cr_expect_eq(tsr_graph_build(g, y), TSR_ERANGE);
    cr_expect_eq(tsr_graph_n_nodes(g), 0);
    cr_expect_eq(tsr_graph_n_leafs(g), 0);
    /* The same graph still accepts what fits. */
    cr_expect_eq(tsr_graph_build(g, tsr_silu(ctx, x)), TSR_OK);
    cr_expect_eq(tsr_graph_n_nodes(g), 1);
    tsr_graph_free(g);
    tsr_ctx_free(ctx);
}

Test(graph, very_deep_chains_do_not_use_the_c_stack)
{
    const int n = 200000;
    tsr_ctx *ctx = tsr_ctx_new((size_t)n + 4);
    tsr_tensor *y = tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 4);
    for (int i = 0; i < n; i++)
        y = tsr_scale(ctx, y, 1.0f);
    tsr_graph *g = tsr_graph_new((size_t)n + 1);
    cr_assert_eq(tsr_graph_build(g, y), TSR_OK);
    cr_expect_eq(tsr_graph_n_nodes(g), (size_t)n);
    tsr_graph_free(g);
    tsr_ctx_free(ctx);
}

Test(graph, slices_share_the_tensors)
{
    tsr_ctx *ctx = tsr_ctx_new(32);
    tsr_tensor *y = tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 4);
    for (int i = 0; i < 6; i++)
        y = tsr_scale(ctx, y, 2.0f);
    tsr_graph *g = tsr_graph_new(16);
    cr_assert_eq(tsr_graph_build(g, y), TSR_OK);
    tsr_graph *s = tsr_graph_slice(g, 2, 3);
    cr_assert_not_null(s);
    cr_expect_eq(tsr_graph_n_nodes(s), 3);
    cr_expect_eq(tsr_graph_node(s, 0), tsr_graph_node(g, 2));
    cr_expect_null(tsr_graph_slice(g, 5, 2), "slice past the end");
    tsr_graph_free(s);
    tsr_graph_free(g);
    tsr_ctx_free(ctx);
}

/* ---- allocator ---------------------------------------------------------------------------- */

typedef struct {
    const char *lo, *hi;
} range;

static range range_of(const tsr_tensor *t)
{
    const char *p = t->data;
    return (range){p, p + tsr_nbytes(t)};
}

/* Checks that no two tensors whose lifetimes overlap share memory: a node
 * lives from its index to the last node that reads it (or views it), outputs
 * and leaves live to the end. */
static void expect_no_live_overlap(tsr_graph *g, tsr_buf *compute)
{
    const size_t n = tsr_graph_n_nodes(g);
    int *last = calloc(n, sizeof(int));
    for (size_t i = 0; i < n; i++)
        last[i] = (int)i;
    for (size_t i = 0; i < n; i++) {
        tsr_tensor *node = tsr_graph_node(g, i);
        for (int s = 0; s < TSR_MAX_SRC; s++) {
            int j = node->src[s] ? index_of(g, node->src[s]) : -1;
            if (j >= 0 && last[j] < (int)i)
                last[j] = (int)i;
            /* Reading a view keeps its source alive too. */
            if (j >= 0 && node->src[s]->view_src) {
                int k = index_of(g, node->src[s]->view_src);
                if (k >= 0 && last[k] < (int)i)
                    last[k] = (int)i;
            }
        }
        if (node->flags & TSR_TENSOR_FLAG_OUTPUT)
            last[i] = (int)n;
    }
    for (size_t i = 0; i < n; i++) {
        tsr_tensor *a = tsr_graph_node(g, i);
        if (a->view_src || a->buffer != compute)
            continue;
        for (size_t j = i + 1; j < n; j++) {
            tsr_tensor *b = tsr_graph_node(g, j);
            if (b->view_src || b->buffer != compute || (int)j > last[i])
                continue;
            range ra = range_of(a), rb = range_of(b);
            cr_expect(ra.hi <= rb.lo || rb.hi <= ra.lo,
                      "node %zu '%s' (alive to %d) overlaps node %zu '%s'", i, a->name, last[i], j,
                      b->name);
        }
    }
    free(last);
}

/* A residual MLP-like graph of `layers` layers over x [E, T]. */
static tsr_tensor *build_net(tsr_ctx *ctx, tsr_tensor *x, tsr_tensor **w, int layers)
{
    tsr_tensor *h = x;
    for (int l = 0; l < layers; l++) {
        tsr_tensor *n = tsr_rms_norm(ctx, h, 1e-5f);
        tsr_tensor *u = tsr_mul_mat(ctx, w[l], n);
        tsr_tensor *a = tsr_silu(ctx, u);
        tsr_tensor *v = tsr_view_2d(ctx, a, a->ne[0], a->ne[1], a->nb[1], 0);
        h = tsr_add(ctx, h, tsr_scale(ctx, v, 0.5f));
        tsr_set_name(h, "h%d", l);
    }
    return h;
}

Test(gallocr, reuses_memory_without_overlapping_live_tensors)
{
    const int layers = 12, E = 64, T = 5;
    tsr_ctx *wctx = tsr_ctx_new(64);
    tsr_tensor *w[12];
    for (int l = 0; l < layers; l++)
        w[l] = tsr_new_tensor_2d(wctx, TSR_TYPE_F32, E, E);
    tsr_tensor *x = tsr_new_tensor_2d(wctx, TSR_TYPE_F32, E, T);
    tsr_buf *wbuf;
    tsr_buft *buft = tsr_dev_buft(tsr_reg_dev_get(tsr_cpu_reg(), 0));
    cr_assert_eq(tsr_ctx_alloc_tensors(wctx, buft, &wbuf), TSR_OK);

    tsr_ctx *ctx = tsr_ctx_new(256);
    tsr_tensor *out = build_net(ctx, x, w, layers);
    tsr_graph *g = tsr_graph_new(256);
    cr_assert_eq(tsr_graph_build(g, out), TSR_OK);
    tsr_gallocr *ga = tsr_gallocr_new(buft);
    cr_assert_eq(tsr_gallocr_alloc_graph(ga, g), TSR_OK, "%s", tsr_last_error());
    const size_t act = (size_t)E * T * sizeof(float);
    const size_t nodes_bytes = tsr_graph_n_nodes(g) * act;
    cr_expect_lt(tsr_gallocr_buffer_size(ga), nodes_bytes / 3,
                 "compute buffer %zu bytes for %zu nodes of %zu bytes: little reuse",
                 tsr_gallocr_buffer_size(ga), tsr_graph_n_nodes(g), act);
    for (size_t i = 0; i < tsr_graph_n_nodes(g); i++)
        cr_expect_not_null(tsr_graph_node(g, i)->data, "node %zu placed", i);
    expect_no_live_overlap(g, tsr_gallocr_buffer(ga));
    tsr_gallocr_free(ga);
    tsr_graph_free(g);
    tsr_ctx_free(ctx);
    tsr_buf_free(wbuf);
    tsr_ctx_free(wctx);
}

Test(gallocr, keeps_its_buffer_across_evaluations_and_grows_when_needed)
{
    tsr_buft *buft = tsr_dev_buft(tsr_reg_dev_get(tsr_cpu_reg(), 0));
    tsr_gallocr *ga = tsr_gallocr_new(buft);
    tsr_ctx *ctx = tsr_ctx_new(64);
    tsr_graph *g = tsr_graph_new(64);
    tsr_buf *first = NULL;
    size_t first_size = 0;
    for (int step = 0; step < 5; step++) {
        tsr_ctx_reset(ctx);
        tsr_graph_reset(g);
        tsr_tensor *x = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 256, 4);
        tsr_tensor *y = tsr_silu(ctx, tsr_scale(ctx, x, 2.0f));
        cr_assert_eq(tsr_graph_build(g, y), TSR_OK);
        cr_assert_eq(tsr_gallocr_alloc_graph(ga, g), TSR_OK);
        if (step == 0) {
            first = tsr_gallocr_buffer(ga);
            first_size = tsr_gallocr_buffer_size(ga);
        }
        cr_expect_eq(tsr_gallocr_buffer(ga), first, "step %d reallocated", step);
        cr_expect_eq(tsr_gallocr_buffer_size(ga), first_size);
    }
    /* A bigger graph grows the buffer once. */
    tsr_ctx_reset(ctx);
    tsr_graph_reset(g);
    tsr_tensor *x = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 256, 64);
    cr_assert_eq(tsr_graph_build(g, tsr_silu(ctx, x)), TSR_OK);
    cr_assert_eq(tsr_gallocr_alloc_graph(ga, g), TSR_OK);
    cr_expect_gt(tsr_gallocr_buffer_size(ga), first_size);
    tsr_graph_free(g);
    tsr_ctx_free(ctx);
    tsr_gallocr_free(ga);
}

Test(gallocr, reserve_sizes_the_buffer_for_later_graphs)
{
    tsr_buft *buft = tsr_dev_buft(tsr_reg_dev_get(tsr_cpu_reg(), 0));
    tsr_gallocr *ga = tsr_gallocr_new(buft);
    tsr_ctx *ctx = tsr_ctx_new(16);
    tsr_graph *g = tsr_graph_new(16);
    tsr_tensor *big = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 1024, 16);
    cr_assert_eq(tsr_graph_build(g, tsr_silu(ctx, big)), TSR_OK);
    cr_assert_eq(tsr_gallocr_reserve(ga, g), TSR_OK);
    cr_expect_null(big->data, "reserve does not place tensors");
    tsr_buf *buf = tsr_gallocr_buffer(ga);
    tsr_ctx_reset(ctx);
    tsr_graph_reset(g);
    tsr_tensor *small = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 1024, 2);
    cr_assert_eq(tsr_graph_build(g, tsr_silu(ctx, small)), TSR_OK);
    cr_assert_eq(tsr_gallocr_alloc_graph(ga, g), TSR_OK);
    cr_expect_eq(tsr_gallocr_buffer(ga), buf);
    tsr_graph_free(g);
    tsr_ctx_free(ctx);
    tsr_gallocr_free(ga);
}

Test(gallocr, shared_memory_gives_the_same_results_as_private_memory)
{
    const int layers = 6, E = 48, T = 3;
    tsr_dev *dev = tsr_reg_dev_get(tsr_cpu_reg(), 0);
    tsr_buft *buft = tsr_dev_buft(dev);
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(dev, &be), TSR_OK);
    tsr_ctx *wctx = tsr_ctx_new(32);
    tsr_tensor *w[6];
    for (int l = 0; l < layers; l++)
        w[l] = tsr_new_tensor_2d(wctx, TSR_TYPE_F16, E, E);
    tsr_tensor *x = tsr_new_tensor_2d(wctx, TSR_TYPE_F32, E, T);
    tsr_buf *wbuf;
    cr_assert_eq(tsr_ctx_alloc_tensors(wctx, buft, &wbuf), TSR_OK);
    tu_rng r = {11};
    for (int l = 0; l < layers; l++)
        tu_fill_uniform(w[l], &r, -0.3f, 0.3f);
    tu_fill_uniform(x, &r, -1.0f, 1.0f);

    float got[2][48 * 3];
    for (int mode = 0; mode < 2; mode++) {
        tsr_ctx *ctx = tsr_ctx_new(128);
        tsr_tensor *out = build_net(ctx, x, w, layers);
        tsr_graph *g = tsr_graph_new(128);
        cr_assert_eq(tsr_graph_build(g, out), TSR_OK);
        tsr_gallocr *ga = NULL;
        tsr_buf *priv = NULL;
        if (mode == 0) {
            ga = tsr_gallocr_new(buft);
            cr_assert_eq(tsr_gallocr_alloc_graph(ga, g), TSR_OK);
        } else {
            cr_assert_eq(tsr_ctx_alloc_tensors(ctx, buft, &priv), TSR_OK);
        }
        cr_assert_eq(tsr_backend_graph_compute(be, g), TSR_OK, "%s", tsr_last_error());
        cr_assert_eq(tu_read_f32(out, got[mode]), TSR_OK);
        tsr_gallocr_free(ga);
        tsr_buf_free(priv);
        tsr_graph_free(g);
        tsr_ctx_free(ctx);
    }
    cr_expect_arr_eq(got[0], got[1], sizeof(got[0]), "allocator changed the result");
    tsr_buf_free(wbuf);
    tsr_ctx_free(wctx);
    tsr_backend_free(be);
}
