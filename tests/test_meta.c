/* tests/test_meta.c — the meta device gives the single-device result.
 *
 * A small Llama-style layer (RMSNorm, GQA attention with RoPE, a KV cache
 * written with set_rows and read through views by flash attention, an output
 * projection, a SwiGLU or MoE FFN, a vocab-split output head) is built
 * identically on one CPU device and on meta(N CPU devices), with the same
 * seeded weights, for a prefill step and a decode step; the logits must
 * agree (F32: NMSE ≤ 1e-10). Configurations cover N = 1..6, uneven ratios,
 * more devices than KV heads (zero slices), fused QKV with two and three
 * segments, MoE with a stored-partial bias, and every weight type. Error
 * paths: nested meta, bad counts, ops without a rule, reading a partial.
 * Run with TSR_CPU_DEVICES=6 (ctest does).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

typedef struct {
    int n_dev;
    float ratios[TSR_META_MAX_DEVICES]; /* all zero: even */
    tsr_type wtype;
    int E, H, Hk, D, Dv, F, V, S; /* dims; D = K head size, Dv = V head size */
    bool fused_qkv;
    int n_exp, n_used; /* MoE when n_exp > 0 */
    bool moe_bias;
    bool parallel; /* h + attn(h) + ffn(h): two partial branches meet in one add */
    int layers;
} cfg;

/* ---- the split table of the test model ------------------------------------------------- */

typedef struct {
    const cfg *c;
} split_ud;

static int layer_of(const char *name)
{
    int l = 0;
    return sscanf(name, "blk.%d.", &l) == 1 ? l : 0;
}

static bool ends_with(const char *s, const char *suffix)
{
    const size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Attention splits are in whole KV heads (with their GQA groups of Q heads);
 * FFN splits in units of 32 (a q8_0 block); the device taking the rounding
 * remainder rotates per layer. */
static tsr_status test_split(const tsr_tensor *t, int n, tsr_split *out, void *ud)
{
    const cfg *c = ((split_ud *)ud)->c;
    const float *r = c->ratios;
    const int rot = layer_of(t->name);
    const int group = c->H / c->Hk;
    const char *nm = t->name;
    if (ends_with(nm, "attn_q.weight"))
        return tsr_split_simple(out, TSR_SPLIT_A1, n, t->ne[1], (int64_t)group * c->D, r, rot);
    if (ends_with(nm, "attn_k.weight") || ends_with(nm, "cache_k"))
        return tsr_split_simple(out, ends_with(nm, "cache_k") ? TSR_SPLIT_A0 : TSR_SPLIT_A1, n,
                                (int64_t)c->Hk * c->D, c->D, r, rot);
    if (ends_with(nm, "attn_v.weight") || ends_with(nm, "cache_v"))
        return tsr_split_simple(out, ends_with(nm, "cache_v") ? TSR_SPLIT_A0 : TSR_SPLIT_A1, n,
                                (int64_t)c->Hk * c->Dv, c->Dv, r, rot);
    if (ends_with(nm, "attn_qkv.weight")) {
        tsr_split_segment seg[3] = {{(int64_t)c->H * c->D, 1, (int64_t)group * c->D},
                                    {(int64_t)c->Hk * c->D, 2, c->D},
                                    {0, 1, 1}};
        if (c->D != c->Dv) { /* K and V heads differ: three segments */
            seg[1].repeat = 1;
            seg[2] = (tsr_split_segment){(int64_t)c->Hk * c->Dv, 1, c->Dv};
            return tsr_split_make(out, TSR_SPLIT_A1, n, seg, 3, r, rot);
        }
        return tsr_split_make(out, TSR_SPLIT_A1, n, seg, 2, r, rot);
    }
    if (ends_with(nm, "attn_output.weight"))
        return tsr_split_simple(out, TSR_SPLIT_A0, n, t->ne[0], (int64_t)group * c->Dv, r, rot);
    if (ends_with(nm, "ffn_gate.weight") || ends_with(nm, "ffn_up.weight") ||
        ends_with(nm, "ffn_gate_exps.weight") || ends_with(nm, "ffn_up_exps.weight"))
        return tsr_split_simple(out, TSR_SPLIT_A1, n, c->F, 32, r, rot);
    if (ends_with(nm, "ffn_down.weight") || ends_with(nm, "ffn_down_exps.weight"))
        return tsr_split_simple(out, TSR_SPLIT_A0, n, c->F, 32, r, rot);
    if (ends_with(nm, "ffn_down_exps.bias")) {
        tsr_split fs;
        tsr_status st = tsr_split_simple(&fs, TSR_SPLIT_A0, n, c->F, 32, r, rot);
        bool contrib[TSR_META_MAX_DEVICES];
        for (int j = 0; j < n; j++)
            contrib[j] = tsr_split_extent(&fs, j) != 0;
        *out = tsr_split_partial(n, contrib);
        return st;
    }
    if (strcmp(nm, "output.weight") == 0)
        return tsr_split_simple(out, TSR_SPLIT_A1, n, c->V, 1, r, 0);
    *out = tsr_split_mirrored(n);
    return TSR_OK;
}

/* ---- model ------------------------------------------------------------------------------- */

typedef struct {
    tsr_ctx *wctx;
    tsr_buf *wbuf;
    tsr_tensor *tok_x; /* [E, Tmax] input activations (mirrored) */
} model;

static tsr_tensor *weight(tsr_ctx *ctx, tsr_type type, int64_t ne0, int64_t ne1, int64_t ne2,
                          const char *fmt, int l)
{
    tsr_tensor *t = tsr_new_tensor_3d(ctx, type, ne0, ne1, ne2);
    char name[64];
    snprintf(name, sizeof(name), fmt, l);
    tsr_set_name(t, "%s", name);
    return t;
}

static void model_make(const cfg *c, tsr_buft *buft, model *m)
{
    m->wctx = tsr_ctx_new(256);
    tsr_ctx *w = m->wctx;
    const tsr_type wt = c->wtype;
    for (int l = 0; l < c->layers; l++) {
        weight(w, TSR_TYPE_F32, c->E, 1, 1, "blk.%d.attn_norm.weight", l);
        if (c->fused_qkv) {
            weight(w, wt, c->E, (int64_t)c->H * c->D + (int64_t)c->Hk * (c->D + c->Dv), 1,
                   "blk.%d.attn_qkv.weight", l);
        } else {
            weight(w, wt, c->E, (int64_t)c->H * c->D, 1, "blk.%d.attn_q.weight", l);
            weight(w, wt, c->E, (int64_t)c->Hk * c->D, 1, "blk.%d.attn_k.weight", l);
            weight(w, wt, c->E, (int64_t)c->Hk * c->Dv, 1, "blk.%d.attn_v.weight", l);
        }
        weight(w, wt, (int64_t)c->H * c->Dv, c->E, 1, "blk.%d.attn_output.weight", l);
        /* F32 weights get an F32 cache: an f16 cache rounds away the
         * last-bit differences of summation order unevenly. */
        const tsr_type kvt = wt == TSR_TYPE_F32 ? TSR_TYPE_F32 : TSR_TYPE_F16;
        weight(w, kvt, (int64_t)c->Hk * c->D, c->S, 1, "blk.%d.cache_k", l);
        weight(w, kvt, (int64_t)c->Hk * c->Dv, c->S, 1, "blk.%d.cache_v", l);
        weight(w, TSR_TYPE_F32, c->E, 1, 1, "blk.%d.ffn_norm.weight", l);
        if (c->n_exp) {
            weight(w, TSR_TYPE_F32, c->E, c->n_exp, 1, "blk.%d.ffn_gate_inp.weight", l);
            weight(w, wt, c->E, c->F, c->n_exp, "blk.%d.ffn_gate_exps.weight", l);
            weight(w, wt, c->E, c->F, c->n_exp, "blk.%d.ffn_up_exps.weight", l);
            weight(w, wt, c->F, c->E, c->n_exp, "blk.%d.ffn_down_exps.weight", l);
            if (c->moe_bias)
                weight(w, TSR_TYPE_F32, c->E, c->n_exp, 1, "blk.%d.ffn_down_exps.bias", l);
        } else {
            weight(w, wt, c->E, c->F, 1, "blk.%d.ffn_gate.weight", l);
            weight(w, wt, c->E, c->F, 1, "blk.%d.ffn_up.weight", l);
            weight(w, wt, c->F, c->E, 1, "blk.%d.ffn_down.weight", l);
        }
    }
    weight(w, TSR_TYPE_F32, c->E, 1, 1, "output_norm.weight", 0);
    weight(w, wt, c->E, c->V, 1, "output.weight", 0);
    cr_assert_eq(tsr_ctx_status(w), TSR_OK, "%s", tsr_ctx_error(w));
    cr_assert_eq(tsr_ctx_alloc_tensors(w, buft, &m->wbuf), TSR_OK, "weights: %s", tsr_last_error());
    /* Seeded values per tensor name, the same on every device. */
    for (size_t i = 0; i < tsr_ctx_n_tensors(w); i++) {
        tsr_tensor *t = tsr_ctx_tensor(w, i);
        uint64_t seed = 1469598103934665603ull;
        for (const char *p = t->name; *p; p++)
            seed = (seed ^ (uint64_t)(unsigned char)*p) * 1099511628211ull;
        tu_rng r = {seed};
        const bool norm = strstr(t->name, "norm") != NULL;
        if (strstr(t->name, "cache_"))
            cr_assert_eq(tsr_tensor_memset(t, 0, 0, tsr_nbytes(t)), TSR_OK);
        else
            cr_assert_eq(tu_fill_uniform(t, &r, norm ? 0.8f : -0.25f, norm ? 1.2f : 0.25f), TSR_OK,
                         "%s: %s", t->name, tsr_last_error());
    }
}

static tsr_tensor *W(model *m, const char *fmt, int l)
{
    char name[64];
    snprintf(name, sizeof(name), fmt, l);
    tsr_tensor *t = tsr_ctx_find(m->wctx, name);
    cr_assert_not_null(t, "no weight %s", name);
    return t;
}

/* The layer graph over T tokens at positions pos0.. (inputs x, pos, mask
 * are leaves of ctx, allocated by the graph allocator). */
static tsr_tensor *build(const cfg *c, model *m, tsr_ctx *ctx, int T, int pos0, tsr_tensor **x_out,
                         tsr_tensor **pos_out, tsr_tensor **mask_out)
{
    const int n_kv = pos0 + T;
    tsr_tensor *x = tsr_set_name(tsr_new_tensor_2d(ctx, TSR_TYPE_F32, c->E, T), "x");
    tsr_tensor *pos = tsr_set_name(tsr_new_tensor_1d(ctx, TSR_TYPE_I32, T), "pos");
    tsr_tensor *mask = tsr_set_name(tsr_new_tensor_2d(ctx, TSR_TYPE_F16, n_kv, T), "mask");
    x->flags |= TSR_TENSOR_FLAG_INPUT;
    pos->flags |= TSR_TENSOR_FLAG_INPUT;
    mask->flags |= TSR_TENSOR_FLAG_INPUT;
    *x_out = x;
    *pos_out = pos;
    *mask_out = mask;
    const float eps = 1e-5f, scale = 1.0f / sqrtf((float)c->D);
    tsr_tensor *h = x;
    for (int l = 0; l < c->layers; l++) {
        tsr_tensor *cur =
            tsr_mul(ctx, tsr_rms_norm(ctx, h, eps), W(m, "blk.%d.attn_norm.weight", l));
        tsr_tensor *q, *k, *v;
        if (c->fused_qkv) {
            tsr_tensor *qkv = tsr_mul_mat(ctx, W(m, "blk.%d.attn_qkv.weight", l), cur);
            q = tsr_view_3d(ctx, qkv, c->D, c->H, T, (size_t)c->D * 4, qkv->nb[1], 0);
            k = tsr_view_3d(ctx, qkv, c->D, c->Hk, T, (size_t)c->D * 4, qkv->nb[1],
                            (size_t)c->H * c->D * 4);
            v = tsr_view_2d(ctx, qkv, (int64_t)c->Hk * c->Dv, T, qkv->nb[1],
                            (size_t)(c->H * c->D + c->Hk * c->D) * 4);
        } else {
            q = tsr_reshape_3d(ctx, tsr_mul_mat(ctx, W(m, "blk.%d.attn_q.weight", l), cur), c->D,
                               c->H, T);
            k = tsr_reshape_3d(ctx, tsr_mul_mat(ctx, W(m, "blk.%d.attn_k.weight", l), cur), c->D,
                               c->Hk, T);
            v = tsr_mul_mat(ctx, W(m, "blk.%d.attn_v.weight", l), cur);
        }
        q = tsr_rope(ctx, q, pos, c->D, TSR_ROPE_NEOX, 10000.0f, 1.0f);
        k = tsr_rope(ctx, k, pos, c->D, TSR_ROPE_NEOX, 10000.0f, 1.0f);
        tsr_tensor *kc = W(m, "blk.%d.cache_k", l), *vc = W(m, "blk.%d.cache_v", l);
        tsr_tensor *kw =
            tsr_set_rows(ctx, kc, tsr_reshape_2d(ctx, k, (int64_t)c->Hk * c->D, T), pos);
        tsr_tensor *vw = tsr_set_rows(ctx, vc, v, pos);
        const size_t kes = tsr_type_size(kc->type);
        tsr_tensor *kk = tsr_view_3d(ctx, kw, c->D, c->Hk, n_kv, (size_t)c->D * kes, kc->nb[1], 0);
        tsr_tensor *vv =
            tsr_view_3d(ctx, vw, c->Dv, c->Hk, n_kv, (size_t)c->Dv * kes, vc->nb[1], 0);
        tsr_tensor *fa = tsr_flash_attn_ext(ctx, tsr_permute(ctx, q, 0, 2, 1, 3),
                                            tsr_permute(ctx, kk, 0, 2, 1, 3),
                                            tsr_permute(ctx, vv, 0, 2, 1, 3), mask, scale, 0.0f);
        tsr_tensor *attn = tsr_reshape_2d(ctx, fa, (int64_t)c->Dv * c->H, T);
        tsr_tensor *o = tsr_mul_mat(ctx, W(m, "blk.%d.attn_output.weight", l), attn);
        tsr_tensor *h_in = h;
        if (!c->parallel)
            h = tsr_set_name(tsr_add(ctx, h, o), "h_attn%d", l);
        cur = tsr_mul(ctx, tsr_rms_norm(ctx, h, eps), W(m, "blk.%d.ffn_norm.weight", l));
        tsr_tensor *ffn;
        if (c->n_exp) {
            tsr_tensor *probs = tsr_soft_max(
                ctx, tsr_mul_mat(ctx, W(m, "blk.%d.ffn_gate_inp.weight", l), cur), NULL, 1.0f);
            tsr_tensor *sel = tsr_top_k(ctx, probs, c->n_used);
            tsr_tensor *wts =
                tsr_get_rows(ctx, tsr_reshape_3d(ctx, probs, 1, c->n_exp, T), sel); /* [1, U, T] */
            tsr_tensor *x3 = tsr_reshape_3d(ctx, cur, c->E, 1, T);
            tsr_tensor *g = tsr_mul_mat_id(ctx, W(m, "blk.%d.ffn_gate_exps.weight", l), x3, sel);
            tsr_tensor *u = tsr_mul_mat_id(ctx, W(m, "blk.%d.ffn_up_exps.weight", l), x3, sel);
            tsr_tensor *d = tsr_mul_mat_id(ctx, W(m, "blk.%d.ffn_down_exps.weight", l),
                                           tsr_swiglu(ctx, g, u), sel);
            if (c->moe_bias)
                d = tsr_add_id(ctx, d, W(m, "blk.%d.ffn_down_exps.bias", l), sel);
            d = tsr_mul(ctx, d, wts);
            ffn = tsr_view_2d(ctx, d, c->E, T, d->nb[2], 0);
            for (int e = 1; e < c->n_used; e++)
                ffn =
                    tsr_add(ctx, ffn, tsr_view_2d(ctx, d, c->E, T, d->nb[2], (size_t)e * d->nb[1]));
        } else {
            tsr_tensor *g = tsr_mul_mat(ctx, W(m, "blk.%d.ffn_gate.weight", l), cur);
            tsr_tensor *u = tsr_mul_mat(ctx, W(m, "blk.%d.ffn_up.weight", l), cur);
            ffn = tsr_mul_mat(ctx, W(m, "blk.%d.ffn_down.weight", l), tsr_swiglu(ctx, g, u));
        }
        if (c->parallel)
            h = tsr_set_name(tsr_add(ctx, h_in, tsr_add(ctx, o, ffn)), "h_par%d", l);
        else
            h = tsr_set_name(tsr_add(ctx, h, ffn), "h_ffn%d", l);
    }
    h = tsr_mul(ctx, tsr_rms_norm(ctx, h, eps), W(m, "output_norm.weight", 0));
    return tsr_set_name(tsr_mul_mat(ctx, W(m, "output.weight", 0), h), "logits");
}

/* Runs prefill (T tokens) then one decode token on `dev`; logits of both
 * steps land in out (V*T + V floats). */
static void run_model(const cfg *c, tsr_dev *dev, int T, float *out, tsr_meta_stats *stats)
{
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(dev, &be), TSR_OK, "%s", tsr_last_error());
    model m;
    model_make(c, tsr_dev_buft(dev), &m);
    tsr_gallocr *ga = tsr_gallocr_new(tsr_dev_buft(dev));
    tsr_ctx *ctx = tsr_ctx_new(2048);
    tsr_graph *g = tsr_graph_new(2048);
    int pos0 = 0;
    for (int step = 0; step < 2; step++) {
        const int t = step == 0 ? T : 1;
        tsr_ctx_reset(ctx);
        tsr_graph_reset(g);
        tsr_tensor *x, *pos, *mask;
        tsr_tensor *logits = build(c, &m, ctx, t, pos0, &x, &pos, &mask);
        cr_assert_not_null(logits, "build: %s", tsr_ctx_error(ctx));
        cr_assert_eq(tsr_graph_build(g, logits), TSR_OK);
        if (tsr_dev_is_meta(dev))
            cr_assert_eq(tsr_meta_check_graph(dev, g), TSR_OK, "%s", tsr_last_error());
        cr_assert_eq(tsr_gallocr_alloc_graph(ga, g), TSR_OK, "alloc: %s", tsr_last_error());
        /* Inputs: seeded activations, positions, a causal mask. */
        float *xv = malloc((size_t)c->E * t * sizeof(float));
        tu_rng r = {777 + (uint64_t)step};
        for (int i = 0; i < c->E * t; i++)
            xv[i] = tu_uniform(&r, -1.0f, 1.0f);
        int32_t pv[64];
        for (int i = 0; i < t; i++)
            pv[i] = pos0 + i;
        const int n_kv = pos0 + t;
        uint16_t *mv = malloc((size_t)n_kv * t * sizeof(uint16_t));
        for (int i = 0; i < t; i++)
            for (int s = 0; s < n_kv; s++)
                mv[i * n_kv + s] =
                    s <= pos0 + i ? tsr_f32_to_fp16(0.0f) : tsr_f32_to_fp16(-INFINITY);
        cr_assert_eq(tsr_tensor_set(x, xv, 0, tsr_nbytes(x)), TSR_OK, "%s", tsr_last_error());
        cr_assert_eq(tsr_tensor_set(pos, pv, 0, tsr_nbytes(pos)), TSR_OK);
        cr_assert_eq(tsr_tensor_set(mask, mv, 0, tsr_nbytes(mask)), TSR_OK);
        free(xv);
        free(mv);
        cr_assert_eq(tsr_backend_graph_compute(be, g), TSR_OK, "compute on %s: %s",
                     tsr_dev_name(dev), tsr_last_error());
        cr_assert_eq(tsr_tensor_get(logits, out, 0, tsr_nbytes(logits)), TSR_OK, "logits: %s",
                     tsr_last_error());
        out += (size_t)c->V * t;
        if (stats && tsr_dev_is_meta(dev))
            tsr_meta_stats_get(be, stats);
        pos0 += t;
    }
    tsr_graph_free(g);
    tsr_ctx_free(ctx);
    tsr_gallocr_free(ga);
    tsr_buf_free(m.wbuf);
    tsr_ctx_free(m.wctx);
    tsr_backend_free(be);
}

/* meta(n CPU devices) against CPU device 0, same weights and inputs. */
static tsr_meta_stats expect_meta_matches(const cfg *c, double tol, const char *what)
{
    tsr_reg *cpu = tsr_cpu_reg();
    cr_assert_geq(tsr_reg_dev_count(cpu), (size_t)c->n_dev, "needs TSR_CPU_DEVICES >= %d",
                  c->n_dev);
    tsr_dev *devs[TSR_META_MAX_DEVICES];
    for (int j = 0; j < c->n_dev; j++)
        devs[j] = tsr_reg_dev_get(cpu, (size_t)j);
    split_ud ud = {c};
    tsr_dev *meta;
    cr_assert_eq(tsr_meta_device_new(devs, c->n_dev, test_split, &ud, &meta), TSR_OK, "%s",
                 tsr_last_error());
    const int T = 5;
    const size_t n_out = (size_t)c->V * (T + 1);
    float *want = malloc(n_out * sizeof(float)), *got = malloc(n_out * sizeof(float));
    run_model(c, devs[0], T, want, NULL);
    tsr_meta_stats stats = {0};
    run_model(c, meta, T, got, &stats);
    const double nmse = tu_nmse(got, want, (int64_t)n_out);
    int first_bad = -1;
    for (size_t i = 0; i < n_out && first_bad < 0; i++)
        if (!isfinite(got[i]) || fabs((double)got[i] - want[i]) > 1e-3 * (1.0 + fabs(want[i])))
            first_bad = (int)i;
    cr_expect(nmse <= tol && first_bad < 0,
              "%s: meta(%d) vs one device: NMSE %.3g (bound %.1g)%s; first mismatch at %d: "
              "expected %g, got %g",
              what, c->n_dev, nmse, tol, "", first_bad, first_bad >= 0 ? want[first_bad] : 0.0,
              first_bad >= 0 ? got[first_bad] : 0.0);
    cr_log_info("%s: meta(%d) NMSE %.2e, %d subgraphs, %d all-reduces, %d delayed", what, c->n_dev,
                nmse, stats.n_subgraphs, stats.n_allreduce, stats.n_delayed);
    free(want);
    free(got);
    tsr_meta_device_free(meta);
    return stats;
}

static cfg dense(int n)
{
    return (cfg){.n_dev = n,
                 .wtype = TSR_TYPE_F32,
                 .E = 64,
                 .H = 8,
                 .Hk = 4,
                 .D = 16,
                 .Dv = 16,
                 .F = 192,
                 .V = 96,
                 .S = 16,
                 .layers = 2};
}

Test(meta, dense_layer_matches_one_device_for_1_to_6_devices, .timeout = 300)
{
    for (int n = 1; n <= 6; n++) {
        cfg c = dense(n);
        char what[64];
        snprintf(what, sizeof(what), "dense f32 n=%d", n);
        expect_meta_matches(&c, 1e-10, what);
    }
}

Test(meta, uneven_ratios_match, .timeout = 120)
{
    cfg c = dense(2);
    c.ratios[0] = 3.0f;
    c.ratios[1] = 1.0f;
    expect_meta_matches(&c, 1e-10, "ratio 3:1");
    c = dense(3);
    c.ratios[0] = 5.0f;
    c.ratios[1] = 2.0f;
    c.ratios[2] = 1.0f;
    expect_meta_matches(&c, 1e-10, "ratio 5:2:1");
}

Test(meta, more_devices_than_kv_heads_leave_some_devices_idle, .timeout = 120)
{
    cfg c = dense(5);
    c.Hk = 2; /* devices 2..4 get no heads: zero slices in attention */
    c.H = 4;
    expect_meta_matches(&c, 1e-10, "5 devices, 2 kv heads");
    c = dense(4);
    c.Hk = 1;
    c.H = 2;
    c.F = 64; /* 2 units of 32: two devices get no FFN slice either */
    expect_meta_matches(&c, 1e-10, "4 devices, 1 kv head, 2 ffn units");
}

Test(meta, fused_qkv_segments_match, .timeout = 120)
{
    cfg c = dense(3);
    c.fused_qkv = true;
    expect_meta_matches(&c, 1e-10, "fused qkv {Q,1},{KV,2}");
    c.Dv = 32; /* unequal K/V head sizes: {Q},{K},{V} */
    expect_meta_matches(&c, 1e-10, "fused qkv {Q},{K},{V} with Dk != Dv");
}

Test(meta, moe_ffn_matches, .timeout = 120)
{
    cfg c = dense(3);
    c.n_exp = 6;
    c.n_used = 2;
    expect_meta_matches(&c, 1e-10, "moe 6 experts top-2");
    c.moe_bias = true;
    c.n_used = 3;
    expect_meta_matches(&c, 1e-10, "moe with stored-partial down bias");
}

Test(meta, every_weight_type_matches, .timeout = 300)
{
    const tsr_type types[] = {TSR_TYPE_F16, TSR_TYPE_BF16, TSR_TYPE_Q8_0};
    for (int t = 0; t < 3; t++)
        for (int n = 2; n <= 3; n++) {
            cfg c = dense(n);
            c.wtype = types[t];
            c.D = c.Dv = 32; /* q8_0 blocks along attn_output's rows */
            c.E = 128;
            char what[64];
            snprintf(what, sizeof(what), "%s weights n=%d", tsr_type_name(types[t]), n);
            expect_meta_matches(&c, 1e-6, what);
        }
}

Test(meta, partial_sums_are_reduced_once_where_needed, .timeout = 120)
{
    /* Two layers: a sequential block cuts after attn_output and ffn_down;
     * MoE keeps the expert sum partial through add_id, the weighting mul and
     * the views + adds; parallel branches meet in one add: one cut. */
    cfg c = dense(2);
    tsr_meta_stats st = expect_meta_matches(&c, 1e-10, "dense, counting cuts");
    cr_expect_eq(st.n_allreduce, 4, "dense: 2 layers x 2 cuts, got %d", st.n_allreduce);
    c.n_exp = 4;
    c.n_used = 2;
    c.moe_bias = true;
    st = expect_meta_matches(&c, 1e-10, "moe, counting cuts");
    cr_expect_eq(st.n_allreduce, 4, "moe: 2 layers x 2 cuts, got %d", st.n_allreduce);
    cr_expect_geq(st.n_delayed, 2 * 3, "moe: add_id, mul and the adds stay partial (%d)",
                  st.n_delayed);
    c = dense(3);
    c.parallel = true;
    st = expect_meta_matches(&c, 1e-10, "parallel attention + ffn");
    cr_expect_eq(st.n_allreduce, 2, "parallel: 2 layers x 1 cut, got %d", st.n_allreduce);
}

/* ---- per-device memory ---------------------------------------------------------------- */

Test(meta, each_device_holds_only_its_slice, .timeout = 60)
{
    tsr_dev *devs[2] = {tsr_reg_dev_get(tsr_cpu_reg(), 0), tsr_reg_dev_get(tsr_cpu_reg(), 1)};
    cfg c = dense(2);
    c.ratios[0] = 3.0f;
    c.ratios[1] = 1.0f;
    split_ud ud = {&c};
    tsr_dev *meta;
    cr_assert_eq(tsr_meta_device_new(devs, 2, test_split, &ud, &meta), TSR_OK);
    tsr_ctx *ctx = tsr_ctx_new(8);
    tsr_tensor *w =
        tsr_set_name(tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 64, 192), "blk.0.ffn_up.weight");
    tsr_tensor *b = tsr_set_name(tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 64), "norm");
    tsr_buf *buf;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(meta), &buf), TSR_OK, "%s",
                 tsr_last_error());
    /* 192 split 3:1 in units of 32: 128 + 64 rows of 64 floats; the norm on both. */
    const size_t al = tsr_buft_alignment(tsr_dev_buft(meta));
    cr_expect_eq(tsr_buf_lane_size(buf, 0), tu_align(128 * 64 * 4, al) + tu_align(64 * 4, al));
    cr_expect_eq(tsr_buf_lane_size(buf, 1), tu_align(64 * 64 * 4, al) + tu_align(64 * 4, al));
    (void)w;
    (void)b;
    /* Compute memory follows the slices too: an FFN activation [F, T]. */
    tsr_ctx *gctx = tsr_ctx_new(32);
    tsr_tensor *x = tsr_new_tensor_2d(gctx, TSR_TYPE_F32, 64, 100);
    tsr_tensor *y = tsr_silu(gctx, tsr_mul_mat(gctx, w, x));
    tsr_graph *g = tsr_graph_new(32);
    cr_assert_eq(tsr_graph_build(g, y), TSR_OK);
    tsr_gallocr *ga = tsr_gallocr_new(tsr_dev_buft(meta));
    cr_assert_eq(tsr_gallocr_alloc_graph(ga, g), TSR_OK, "%s", tsr_last_error());
    tsr_buf *cb = tsr_gallocr_buffer(ga);
    cr_log_info("compute bytes per device: %zu, %zu", tsr_buf_lane_size(cb, 0),
                tsr_buf_lane_size(cb, 1));
    cr_expect_lt(tsr_buf_lane_size(cb, 1), tsr_buf_lane_size(cb, 0),
                 "the device with a quarter of the rows needs less compute memory");
    cr_expect_lt(tsr_buf_lane_size(cb, 1), (size_t)(64 + 192 * 2) * 100 * 4 / 2);
    tsr_gallocr_free(ga);
    tsr_graph_free(g);
    tsr_ctx_free(gctx);
    tsr_buf_free(buf);
    tsr_ctx_free(ctx);
    tsr_meta_device_free(meta);
}

/* Async host copies on a meta stream go piece by piece to the sub-streams,
 * ordered after their queued work: split (3:1, whole and part rows),
 * mirrored, and a stored partial (which falls back to a blocking write). */
Test(meta, async_copies_on_a_meta_stream, .timeout = 60)
{
    tsr_dev *devs[2] = {tsr_reg_dev_get(tsr_cpu_reg(), 0), tsr_reg_dev_get(tsr_cpu_reg(), 1)};
    cfg c = dense(2);
    c.ratios[0] = 3.0f;
    c.ratios[1] = 1.0f;
    split_ud ud = {&c};
    tsr_dev *meta;
    cr_assert_eq(tsr_meta_device_new(devs, 2, test_split, &ud, &meta), TSR_OK);
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(meta, &be), TSR_OK);
    tsr_ctx *ctx = tsr_ctx_new(8);
    tsr_tensor *w =
        tsr_set_name(tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 64, 192), "blk.0.ffn_up.weight");
    tsr_tensor *nrm = tsr_set_name(tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 64), "norm");
    tsr_buf *buf;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(meta), &buf), TSR_OK, "%s",
                 tsr_last_error());
    static float host[64 * 192], back[64 * 192], part[64 * 192];
    for (int i = 0; i < 64 * 192; i++)
        host[i] = (float)i;
    cr_assert_eq(tsr_backend_set_async(be, w, host, 0, sizeof(host)), TSR_OK, "%s",
                 tsr_last_error());
    cr_assert_eq(tsr_backend_set_async(be, nrm, host, 0, 64 * sizeof(float)), TSR_OK);
    /* A range that starts and ends inside rows of the split axis. */
    for (int i = 0; i < 64 * 192; i++)
        part[i] = -1.0f - (float)i;
    const size_t off = (5 * 64 + 3) * sizeof(float), len = (150 * 64 + 7) * sizeof(float);
    cr_assert_eq(tsr_backend_set_async(be, w, part, off, len), TSR_OK, "%s", tsr_last_error());
    memset(back, 0, sizeof(back));
    cr_assert_eq(tsr_backend_get_async(be, w, back, 0, sizeof(back)), TSR_OK, "%s",
                 tsr_last_error());
    float nb[64];
    cr_assert_eq(tsr_backend_get_async(be, nrm, nb, 0, sizeof(nb)), TSR_OK);
    cr_assert_eq(tsr_backend_synchronize(be), TSR_OK, "%s", tsr_last_error());
    for (size_t i = 0; i < 64 * 192; i++) {
        const bool in = i * sizeof(float) >= off && i * sizeof(float) < off + len;
        const float want = in ? part[i - off / sizeof(float)] : host[i];
        cr_assert_eq(back[i], want, "element %zu: %g, want %g", i, back[i], want);
    }
    for (int i = 0; i < 64; i++)
        cr_assert_eq(nb[i], (float)i);
    /* Ordered after queued work: a graph writes y, the read comes after it. */
    tsr_ctx *gctx = tsr_ctx_new(8);
    tsr_tensor *y = tsr_scale(gctx, nrm, 2.0f);
    tsr_graph *g = tsr_graph_new(8);
    tsr_gallocr *ga = tsr_gallocr_new(tsr_dev_buft(meta));
    cr_assert_eq(tsr_graph_build(g, y), TSR_OK);
    cr_assert_eq(tsr_gallocr_alloc_graph(ga, g), TSR_OK, "%s", tsr_last_error());
    float yb[64];
    cr_assert_eq(tsr_backend_graph_compute_async(be, g), TSR_OK);
    cr_assert_eq(tsr_backend_get_async(be, y, yb, 0, sizeof(yb)), TSR_OK);
    cr_assert_eq(tsr_backend_synchronize(be), TSR_OK, "%s", tsr_last_error());
    for (int i = 0; i < 64; i++)
        cr_assert_eq(yb[i], 2.0f * (float)i);
    tsr_gallocr_free(ga);
    tsr_graph_free(g);
    tsr_ctx_free(gctx);
    tsr_buf_free(buf);
    tsr_ctx_free(ctx);
    tsr_backend_free(be);
    tsr_meta_device_free(meta);
}

/* ---- error paths ------------------------------------------------------------------------ */

Test(meta, construction_errors)
{
    tsr_dev *cpu0 = tsr_reg_dev_get(tsr_cpu_reg(), 0);
    tsr_dev *devs[17];
    for (int i = 0; i < 17; i++)
        devs[i] = tsr_reg_dev_get(tsr_cpu_reg(), (size_t)(i % tsr_reg_dev_count(tsr_cpu_reg())));
    tsr_dev *meta = NULL, *nested = NULL;
    cr_expect_eq(tsr_meta_device_new(devs, 0, NULL, NULL, &meta), TSR_EINVAL);
    cr_expect_eq(tsr_meta_device_new(devs, 17, NULL, NULL, &meta), TSR_EINVAL);
    cr_expect(strstr(tsr_last_error(), "17") != NULL, "%s", tsr_last_error());
    tsr_dev *twice[2] = {cpu0, cpu0};
    cr_expect_eq(tsr_meta_device_new(twice, 2, NULL, NULL, &meta), TSR_EINVAL);
    cr_assert_eq(tsr_meta_device_new(&cpu0, 1, NULL, NULL, &meta), TSR_OK);
    cr_expect_eq(tsr_dev_get_type(meta), TSR_DEV_META);
    cr_expect_eq(tsr_meta_device_new(&meta, 1, NULL, NULL, &nested), TSR_EINVAL);
    cr_expect(strstr(tsr_last_error(), "nest") != NULL, "%s", tsr_last_error());
    cr_expect_null(nested);
    tsr_meta_device_free(meta);
}

static tsr_status split_logits(const tsr_tensor *t, int n, tsr_split *out, void *ud)
{
    (void)ud;
    if (strcmp(t->name, "out") == 0)
        return tsr_split_simple(out, TSR_SPLIT_A1, n, t->ne[1], 1, NULL, 0);
    if (strcmp(t->name, "bias") == 0) {
        *out = tsr_split_partial(n, NULL);
        return TSR_OK;
    }
    if (strcmp(t->name, "bad") == 0)
        return tsr_split_simple(out, TSR_SPLIT_A0, n, t->ne[0] - 1, 1, NULL, 0);
    *out = tsr_split_mirrored(n);
    return TSR_OK;
}

Test(meta, ops_without_a_rule_are_errors_at_build_time)
{
    tsr_dev *devs[2] = {tsr_reg_dev_get(tsr_cpu_reg(), 0), tsr_reg_dev_get(tsr_cpu_reg(), 1)};
    tsr_dev *meta;
    cr_assert_eq(tsr_meta_device_new(devs, 2, split_logits, NULL, &meta), TSR_OK);
    tsr_ctx *ctx = tsr_ctx_new(16);
    tsr_tensor *w = tsr_set_name(tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 8, 10), "out");
    tsr_tensor *x = tsr_set_name(tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 8, 2), "x");
    tsr_tensor *logits = tsr_mul_mat(ctx, w, x); /* A0: vocab split */
    tsr_tensor *best = tsr_argmax(ctx, logits);  /* a per-row op over a cut row */
    tsr_graph *g = tsr_graph_new(16);
    cr_assert_eq(tsr_graph_build(g, best), TSR_OK);
    cr_expect_eq(tsr_meta_check_graph(meta, g), TSR_EUNSUPPORTED);
    cr_expect(strstr(tsr_last_error(), "ARGMAX") && strstr(tsr_last_error(), "A0"), "%s",
              tsr_last_error());
    tsr_gallocr *ga = tsr_gallocr_new(tsr_dev_buft(meta));
    cr_expect_eq(tsr_gallocr_alloc_graph(ga, g), TSR_EUNSUPPORTED, "allocation refuses it too");
    tsr_gallocr_free(ga);
    tsr_graph_free(g);
    tsr_ctx_free(ctx);
    tsr_meta_device_free(meta);
}

Test(meta, partial_tensors_cannot_be_read_and_bad_splits_are_refused)
{
    tsr_dev *devs[2] = {tsr_reg_dev_get(tsr_cpu_reg(), 0), tsr_reg_dev_get(tsr_cpu_reg(), 1)};
    tsr_dev *meta;
    cr_assert_eq(tsr_meta_device_new(devs, 2, split_logits, NULL, &meta), TSR_OK);
    tsr_ctx *ctx = tsr_ctx_new(8);
    tsr_tensor *bias = tsr_set_name(tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 6), "bias");
    tsr_buf *buf;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(meta), &buf), TSR_OK);
    const float v[6] = {1, 2, 3, 4, 5, 6};
    float back[6];
    cr_expect_eq(tsr_tensor_set(bias, v, 0, sizeof(v)), TSR_OK, "writing a partial is allowed");
    cr_expect_eq(tsr_tensor_get(bias, back, 0, sizeof(back)), TSR_EINVAL);
    cr_expect(strstr(tsr_last_error(), "partial") != NULL, "%s", tsr_last_error());
    /* On a stream too: the write falls back to a blocking one, the read fails. */
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(meta, &be), TSR_OK);
    cr_expect_eq(tsr_backend_set_async(be, bias, v, 0, sizeof(v)), TSR_OK, "%s", tsr_last_error());
    cr_expect_eq(tsr_backend_get_async(be, bias, back, 0, sizeof(back)), TSR_EINVAL);
    cr_expect_eq(tsr_backend_synchronize(be), TSR_OK);
    tsr_backend_free(be);
    tsr_buf_free(buf);
    tsr_ctx_reset(ctx);
    tsr_set_name(tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 6), "bad");
    cr_expect_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(meta), &buf), TSR_ESHAPE,
                 "a split covering 5 of 6 elements");
    cr_expect(strstr(tsr_last_error(), "bad") != NULL, "%s", tsr_last_error());
    tsr_ctx_free(ctx);
    tsr_meta_device_free(meta);
}

Test(meta, split_helpers_round_to_granularity_and_rotate_the_remainder)
{
    tsr_split s;
    const float r[3] = {1, 1, 1};
    cr_assert_eq(tsr_split_simple(&s, TSR_SPLIT_A1, 3, 10 * 32, 32, r, 0), TSR_OK);
    cr_expect_eq(tsr_split_extent(&s, 0) + tsr_split_extent(&s, 1) + tsr_split_extent(&s, 2), 320);
    for (int j = 0; j < 3; j++)
        cr_expect_eq(tsr_split_extent(&s, j) % 32, 0);
    cr_expect_eq(tsr_split_extent(&s, 2), 4 * 32, "the last device takes the remainder");
    cr_assert_eq(tsr_split_simple(&s, TSR_SPLIT_A1, 3, 10 * 32, 32, r, 1), TSR_OK);
    cr_expect_eq(tsr_split_extent(&s, 0), 4 * 32, "rotation moves the remainder");
    const float uneven[2] = {3, 1};
    cr_assert_eq(tsr_split_simple(&s, TSR_SPLIT_A0, 2, 256, 32, uneven, 0), TSR_OK);
    cr_expect_eq(tsr_split_extent(&s, 0), 192);
    cr_expect_eq(tsr_split_extent(&s, 1), 64);
    cr_expect_eq(tsr_split_simple(&s, TSR_SPLIT_A0, 2, 100, 32, NULL, 0), TSR_EINVAL,
                 "100 is not a multiple of 32");
    char buf[128];
    tsr_split_segment seg[2] = {{64, 1, 16}, {32, 2, 8}};
    cr_assert_eq(tsr_split_make(&s, TSR_SPLIT_A1, 2, seg, 2, NULL, 0), TSR_OK);
    cr_expect_eq(tsr_split_total(&s), 128);
    cr_log_info("segments: %s", tsr_split_str(&s, buf, sizeof(buf)));
    cr_expect_eq(s.ne[0][0], 32);
    cr_expect_eq(s.ne[1][1], 16);
}
