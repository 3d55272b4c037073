/* model/weights.c — the model's tensors: names and shapes (llama.cpp's
 * "llama" naming), seeded random values, allocation on the devices, and the
 * split table that says which slice of each every device holds.
 *
 * Not the graph (model/graph.c) nor file I/O (model/gguf_model.c). Split
 * table (DESIGN.md §4.2): attention in whole GQA groups (a KV head moves
 * with its Q heads, the KV cache follows the K/V cut), FFN in multiples of
 * lcm(block, 128) rows, output by vocab, norms and embeddings mirrored, the
 * device taking rounding remainders rotating per layer.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model_impl.h"

/* ---- tensors ---------------------------------------------------------------------- */

/* Matrices read from a file keep the file's type (vectors are converted to
 * F32 on upload); generated ones get the requested type. */
static tsr_type pick_type(const tsr_model *m, const char *name, tsr_type type)
{
    if (!m->file || type == TSR_TYPE_F32 || strncmp(name, "cache_", 6) == 0)
        return type;
    const tsr_gguf_tensor *ft = tsr_gguf_tensor_by_name(m->file, name);
    return ft ? ft->type : type;
}

static tsr_tensor *mk(const tsr_model *m, tsr_ctx *ctx, tsr_type type, int64_t ne0, int64_t ne1,
                      int64_t ne2, const char *fmt, int l)
{
    char name[TSR_MAX_NAME];
    snprintf(name, sizeof(name), fmt, l);
    tsr_tensor *t = tsr_new_tensor_3d(ctx, pick_type(m, name, type), ne0, ne1, ne2);
    if (t) {
        tsr_set_name(t, "%s", name);
        t->flags |= TSR_TENSOR_FLAG_PARAM;
    }
    return t;
}

tsr_status tsr__model_make_tensors(tsr_model *m, int s)
{
    const tsr_model_hparams *hp = &m->hp;
    model_stage *st = &m->st[s];
    const int n_per = 24; /* tensors per layer, at most */
    st->wctx = tsr_ctx_new((size_t)(st->l1 - st->l0) * n_per + 16);
    if (!st->wctx)
        return tsr__error(TSR_ENOMEM, "model: weight context");
    tsr_ctx *c = st->wctx;
    const tsr_type wt = hp->wtype, f32 = TSR_TYPE_F32;
    const int64_t E = hp->n_embd, F = hp->n_ff, V = hp->n_vocab;
    const int64_t nq = (int64_t)hp->n_head * hp->head_dim,
                  nk = (int64_t)hp->n_head_kv * hp->head_dim;
    const int64_t nv = (int64_t)hp->n_head_kv * hp->head_dim_v,
                  no = (int64_t)hp->n_head * hp->head_dim_v;
    if (s == 0)
        st->tok_embd = mk(m, c, wt, E, V, 1, "token_embd.weight", 0);
    if (s == m->n_stages - 1) {
        st->out_norm = mk(m, c, f32, E, 1, 1, "output_norm.weight", 0);
        st->output = hp->tied_embd
                         ? (s == 0 ? st->tok_embd : mk(m, c, wt, E, V, 1, "token_embd.weight", 0))
                         : mk(m, c, wt, E, V, 1, "output.weight", 0);
    }
    for (int l = st->l0; l < st->l1; l++) {
        model_layer *L = &m->layers[l];
        memset(L, 0, sizeof(*L));
        L->attn_norm = mk(m, c, f32, E, 1, 1, "blk.%d.attn_norm.weight", l);
        if (hp->fused_qkv) {
            L->wqkv = mk(m, c, wt, E, nq + nk + nv, 1, "blk.%d.attn_qkv.weight", l);
            if (hp->attn_bias)
                L->bqkv = mk(m, c, f32, nq + nk + nv, 1, 1, "blk.%d.attn_qkv.bias", l);
        } else {
            L->wq = mk(m, c, wt, E, nq, 1, "blk.%d.attn_q.weight", l);
            L->wk = mk(m, c, wt, E, nk, 1, "blk.%d.attn_k.weight", l);
            L->wv = mk(m, c, wt, E, nv, 1, "blk.%d.attn_v.weight", l);
            if (hp->attn_bias) {
                L->bq = mk(m, c, f32, nq, 1, 1, "blk.%d.attn_q.bias", l);
                L->bk = mk(m, c, f32, nk, 1, 1, "blk.%d.attn_k.bias", l);
                L->bv = mk(m, c, f32, nv, 1, 1, "blk.%d.attn_v.bias", l);
            }
        }
        L->wo = mk(m, c, wt, no, E, 1, "blk.%d.attn_output.weight", l);
        if (hp->attn_bias)
            L->bo = mk(m, c, f32, E, 1, 1, "blk.%d.attn_output.bias", l);
        if (hp->qk_norm) {
            L->q_norm = mk(m, c, f32, hp->head_dim, 1, 1, "blk.%d.attn_q_norm.weight", l);
            L->k_norm = mk(m, c, f32, hp->head_dim, 1, 1, "blk.%d.attn_k_norm.weight", l);
        }
        L->ffn_norm = mk(m, c, f32, E, 1, 1, "blk.%d.ffn_norm.weight", l);
        if (hp->n_expert) {
            const int64_t X = hp->n_expert;
            L->gate_inp = mk(m, c, f32, E, X, 1, "blk.%d.ffn_gate_inp.weight", l);
            L->gate_exps = mk(m, c, wt, E, F, X, "blk.%d.ffn_gate_exps.weight", l);
            L->up_exps = mk(m, c, wt, E, F, X, "blk.%d.ffn_up_exps.weight", l);
            L->down_exps = mk(m, c, wt, F, E, X, "blk.%d.ffn_down_exps.weight", l);
            if (hp->ffn_bias)
                L->b_down_exps = mk(m, c, f32, E, X, 1, "blk.%d.ffn_down_exps.bias", l);
        } else {
            L->gate = mk(m, c, wt, E, F, 1, "blk.%d.ffn_gate.weight", l);
            L->up = mk(m, c, wt, E, F, 1, "blk.%d.ffn_up.weight", l);
            L->down = mk(m, c, wt, F, E, 1, "blk.%d.ffn_down.weight", l);
            if (hp->ffn_bias) {
                L->b_gate = mk(m, c, f32, F, 1, 1, "blk.%d.ffn_gate.bias", l);
                L->b_up = mk(m, c, f32, F, 1, 1, "blk.%d.ffn_up.bias", l);
                L->b_down = mk(m, c, f32, E, 1, 1, "blk.%d.ffn_down.bias", l);
            }
        }
        L->k_cache = mk(m, c, m->cfg.kv_type, nk, m->cfg.n_ctx, 1, "cache_k_l%d", l);
        L->v_cache = mk(m, c, m->cfg.kv_type, nv, m->cfg.n_ctx, 1, "cache_v_l%d", l);
        L->k_cache->flags &= ~TSR_TENSOR_FLAG_PARAM;
        L->v_cache->flags &= ~TSR_TENSOR_FLAG_PARAM;
    }
    if (tsr_ctx_status(c) != TSR_OK)
        return tsr__error(tsr_ctx_status(c), "model: %s", tsr_ctx_error(c));
    return TSR_OK;
}

tsr_status tsr__model_alloc(tsr_model *m, int s)
{
    model_stage *st = &m->st[s];
    tsr_status status = tsr_ctx_alloc_tensors(st->wctx, tsr_dev_buft(st->dev), &st->wbuf);
    if (status != TSR_OK)
        return tsr__error(status, "model: weights on %s: %s", tsr_dev_name(st->dev),
                          tsr_last_error());
    tsr_buf_set_usage(st->wbuf, TSR_BUF_USAGE_WEIGHTS);
    for (int l = st->l0; l < st->l1 && status == TSR_OK; l++) {
        status = tsr_tensor_memset(m->layers[l].k_cache, 0, 0, tsr_nbytes(m->layers[l].k_cache));
        if (status == TSR_OK)
            status =
                tsr_tensor_memset(m->layers[l].v_cache, 0, 0, tsr_nbytes(m->layers[l].v_cache));
    }
    return status;
}

/* ---- seeded values ------------------------------------------------------------------ */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t name_key(uint64_t seed, const char *name)
{
    uint64_t h = 1469598103934665603ull ^ seed;
    for (const char *p = name; *p; p++)
        h = (h ^ (uint64_t)(unsigned char)*p) * 1099511628211ull;
    return mix64(h);
}

/* Magnitudes that keep a random model's activations of order one: unit
 * variance through every matrix, norms near one, small biases. */
static void value_range(const tsr_tensor *t, float *center, float *scale)
{
    *center = 0.0f;
    if (strstr(t->name, "norm")) {
        *center = 1.0f;
        *scale = 0.1f;
    } else if (strstr(t->name, ".bias")) {
        *scale = 0.1f;
    } else if (strcmp(t->name, "token_embd.weight") == 0) {
        *scale = 1.0f;
    } else {
        *scale = sqrtf(3.0f / (float)t->ne[0]);
    }
}

/* Rows [r0, r1) of a tensor: row r is a 64-bit LCG seeded from (key, r),
 * uniform in [-1, 1) scaled about a center, converted to the tensor's type. */
typedef struct {
    const tsr_tensor *t;
    uint64_t key;
    float center, scale;
    int64_t r0, r1;
    char *host;
    tsr_status st;
} fill_job;

static void *fill_rows(void *arg)
{
    fill_job *j = arg;
    const int64_t ne0 = j->t->ne[0];
    const size_t row_bytes = tsr_row_size(j->t->type, ne0);
    float *row = malloc((size_t)ne0 * sizeof(float));
    j->st = row ? TSR_OK : TSR_ENOMEM;
    for (int64_t r = j->r0; r < j->r1 && j->st == TSR_OK; r++) {
        uint64_t x = mix64(j->key ^ (0x9e3779b97f4a7c15ull * (uint64_t)(r + 1)));
        for (int64_t i = 0; i < ne0; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            row[i] = j->center + j->scale * (float)(int32_t)(x >> 32) * (1.0f / 2147483648.0f);
        }
        j->st = tsr_row_from_f32(j->t->type, row, j->host + (size_t)r * row_bytes, ne0);
    }
    free(row);
    return NULL;
}

static tsr_status fill_tensor(tsr_tensor *t, uint64_t seed)
{
    enum { MAX_JOBS = 8 };
    fill_job job[MAX_JOBS];
    const int64_t rows = tsr_nrows(t);
    const size_t bytes = tsr_row_size(t->type, t->ne[0]) * (size_t)rows;
    char *host = malloc(bytes);
    if (!host)
        return tsr__error(TSR_ENOMEM, "model: %zu bytes of staging for '%s'", bytes, t->name);
    /* Large tensors are filled by several threads (row ranges). */
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int n = bytes < (4u << 20) ? 1 : (int)TSR_MAX(1, TSR_MIN(cores, MAX_JOBS));
    pthread_t tid[MAX_JOBS];
    bool started[MAX_JOBS] = {false};
    for (int k = 0; k < n; k++) {
        job[k] = (fill_job){.t = t,
                            .key = name_key(seed, t->name),
                            .r0 = rows * k / n,
                            .r1 = rows * (k + 1) / n,
                            .host = host};
        value_range(t, &job[k].center, &job[k].scale);
        started[k] = k > 0 && pthread_create(&tid[k], NULL, fill_rows, &job[k]) == 0;
    }
    for (int k = 0; k < n; k++)
        if (!started[k])
            fill_rows(&job[k]); /* this thread's share, or a thread that did not start */
    tsr_status st = TSR_OK;
    for (int k = 0; k < n; k++) {
        if (started[k])
            pthread_join(tid[k], NULL);
        if (st == TSR_OK && job[k].st != TSR_OK)
            st = tsr__error(job[k].st, "model: generating '%s'", t->name);
    }
    if (st == TSR_OK)
        st = tsr_tensor_set(t, host, 0, bytes);
    free(host);
    return st;
}

tsr_status tsr__model_fill_random(tsr_model *m, int s, uint64_t seed)
{
    tsr_ctx *c = m->st[s].wctx;
    tsr_status st = TSR_OK;
    for (size_t i = 0; i < tsr_ctx_n_tensors(c) && st == TSR_OK; i++) {
        tsr_tensor *t = tsr_ctx_tensor(c, i);
        if (t->flags & TSR_TENSOR_FLAG_PARAM)
            st = fill_tensor(t, seed);
    }
    return st;
}

/* ---- split table ------------------------------------------------------------------- */

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* KV heads that move together: enough that attn_output's row cut (group ·
 * head_dim_v per KV head) falls on whole quantization blocks. */
static int64_t kv_unit(const tsr_model_hparams *hp)
{
    const int64_t blk = tsr_type_block_size(hp->wtype);
    const int64_t per = (int64_t)(hp->n_head / hp->n_head_kv) * hp->head_dim_v;
    return blk / gcd64(per, blk);
}

/* FFN cuts: multiples of lcm(block, 128) rows when n_ff allows, else of the
 * block. */
static int64_t ffn_unit(const tsr_model_hparams *hp)
{
    const int64_t blk = tsr_type_block_size(hp->wtype);
    const int64_t g = blk / gcd64(blk, 128) * 128;
    return hp->n_ff % g == 0 ? g : blk;
}

static bool suffix(const char *name, const char *sfx)
{
    const size_t a = strlen(name), b = strlen(sfx);
    return a >= b && strcmp(name + a - b, sfx) == 0;
}

tsr_status tsr_model_split(const tsr_tensor *t, int n, tsr_split *out, void *userdata)
{
    const tsr_model *m = userdata;
    const tsr_model_hparams *hp = &m->hp;
    const float *r = m->cfg.tensor_split;
    const char *nm = t->name;
    int l = 0;
    const bool layer = sscanf(nm, "blk.%d.", &l) == 1 || sscanf(nm, "cache_k_l%d", &l) == 1 ||
                       sscanf(nm, "cache_v_l%d", &l) == 1;
    const int rot = layer ? l % n : 0;
    const int64_t u = kv_unit(hp), group = hp->n_head / hp->n_head_kv;
    const int64_t nq = (int64_t)hp->n_head * hp->head_dim,
                  nk = (int64_t)hp->n_head_kv * hp->head_dim;
    const int64_t nv = (int64_t)hp->n_head_kv * hp->head_dim_v;
    const int64_t gq = u * group * hp->head_dim, gk = u * hp->head_dim, gv = u * hp->head_dim_v;
    const int64_t gf = ffn_unit(hp);
    *out = tsr_split_mirrored(n);
    if (strncmp(nm, "inp_", 4) == 0) /* the graph's inputs: tokens, positions, mask */
        return TSR_OK;
    if (suffix(nm, "norm.weight") || strcmp(nm, "token_embd.weight") == 0 ||
        suffix(nm, "attn_output.bias") || suffix(nm, "ffn_down.bias") ||
        suffix(nm, "ffn_gate_inp.weight"))
        return TSR_OK;
    if (strcmp(nm, "output.weight") == 0)
        return tsr_split_simple(out, TSR_SPLIT_A1, n, hp->n_vocab, 1, r, 0);
    if (suffix(nm, "attn_q.weight") || suffix(nm, "attn_q.bias"))
        return tsr_split_simple(out, suffix(nm, "weight") ? TSR_SPLIT_A1 : TSR_SPLIT_A0, n, nq, gq,
                                r, rot);
    if (suffix(nm, "attn_k.weight") || suffix(nm, "attn_k.bias"))
        return tsr_split_simple(out, suffix(nm, "weight") ? TSR_SPLIT_A1 : TSR_SPLIT_A0, n, nk, gk,
                                r, rot);
    if (suffix(nm, "attn_v.weight") || suffix(nm, "attn_v.bias"))
        return tsr_split_simple(out, suffix(nm, "weight") ? TSR_SPLIT_A1 : TSR_SPLIT_A0, n, nv, gv,
                                r, rot);
    if (strncmp(nm, "cache_k_l", 9) == 0)
        return tsr_split_simple(out, TSR_SPLIT_A0, n, nk, gk, r, rot);
    if (strncmp(nm, "cache_v_l", 9) == 0)
        return tsr_split_simple(out, TSR_SPLIT_A0, n, nv, gv, r, rot);
    if (suffix(nm, "attn_qkv.weight") || suffix(nm, "attn_qkv.bias")) {
        /* Cut inside each part: [Q | K, V] (K and V alike) or [Q | K | V]. */
        tsr_split_segment seg[3] = {{nq, 1, gq}, {nk, 2, gk}, {0, 1, 1}};
        int n_seg = 2;
        if (hp->head_dim != hp->head_dim_v) {
            seg[1].repeat = 1;
            seg[2] = (tsr_split_segment){nv, 1, gv};
            n_seg = 3;
        }
        return tsr_split_make(out, suffix(nm, "weight") ? TSR_SPLIT_A1 : TSR_SPLIT_A0, n, seg,
                              n_seg, r, rot);
    }
    if (suffix(nm, "attn_output.weight"))
        return tsr_split_simple(out, TSR_SPLIT_A0, n, (int64_t)hp->n_head * hp->head_dim_v,
                                u * group * hp->head_dim_v, r, rot);
    if (suffix(nm, "ffn_gate.weight") || suffix(nm, "ffn_up.weight") ||
        suffix(nm, "ffn_gate_exps.weight") || suffix(nm, "ffn_up_exps.weight"))
        return tsr_split_simple(out, TSR_SPLIT_A1, n, hp->n_ff, gf, r, rot);
    if (suffix(nm, "ffn_gate.bias") || suffix(nm, "ffn_up.bias") || suffix(nm, "ffn_down.weight") ||
        suffix(nm, "ffn_down_exps.weight"))
        return tsr_split_simple(out, TSR_SPLIT_A0, n, hp->n_ff, gf, r, rot);
    if (suffix(nm, "ffn_down_exps.bias")) {
        /* A stored partial: value / contributors on the devices holding a
         * slice of the experts' hidden dim. */
        tsr_split fs;
        tsr_status st = tsr_split_simple(&fs, TSR_SPLIT_A0, n, hp->n_ff, gf, r, rot);
        bool contrib[TSR_META_MAX_DEVICES];
        for (int j = 0; j < n; j++)
            contrib[j] = tsr_split_extent(&fs, j) != 0;
        *out = tsr_split_partial(n, contrib);
        return st;
    }
    return tsr__error(TSR_EUNSUPPORTED, "model: no split rule for tensor '%s'", nm);
}
