/* model/graph.c — the decoder graph of one stage for T tokens at position
 * pos0: the same builder serves prefill (T > 1) and decode (T = 1), one
 * device, layer stages and the meta device.
 *
 * Not execution (model/run.c). Shapes (ggml convention): hidden h: [E, T];
 * q: [D, H, T] → [D, T, H] for attention; the KV cache of layer l:
 * [Hk·D, n_ctx], written with set_rows at the token positions and read
 * through views of its first n_kv = pos0 + T columns; attention output
 * [Dv, H, T] → [H·Dv, T]. Only the last token's hidden state goes through
 * the output head (logits [V, 1]).
 */
#include <math.h>
#include <string.h>

#include "model/model_impl.h"

typedef struct {
    tsr_ctx *c;
    const tsr_model_hparams *hp;
    int T, n_kv;
    tsr_tensor *pos, *mask;
} gb;

static tsr_tensor *norm(gb *b, tsr_tensor *x, tsr_tensor *w)
{
    return tsr_mul(b->c, tsr_rms_norm(b->c, x, b->hp->rms_eps), w);
}

static tsr_tensor *linear(gb *b, tsr_tensor *w, tsr_tensor *bias, tsr_tensor *x)
{
    tsr_tensor *y = tsr_mul_mat(b->c, w, x);
    return bias ? tsr_add(b->c, y, bias) : y;
}

static tsr_tensor *attention(gb *b, const model_layer *L, tsr_tensor *x, int l)
{
    const tsr_model_hparams *hp = b->hp;
    tsr_ctx *c = b->c;
    const int T = b->T, D = hp->head_dim, Dv = hp->head_dim_v, H = hp->n_head, Hk = hp->n_head_kv;
    tsr_tensor *q, *k, *v;
    if (L->wqkv) {
        tsr_tensor *qkv = linear(b, L->wqkv, L->bqkv, x);
        const size_t es = sizeof(float);
        q = tsr_view_3d(c, qkv, D, H, T, (size_t)D * es, qkv->nb[1], 0);
        k = tsr_view_3d(c, qkv, D, Hk, T, (size_t)D * es, qkv->nb[1], (size_t)H * D * es);
        v = tsr_view_2d(c, qkv, (int64_t)Hk * Dv, T, qkv->nb[1], (size_t)(H + Hk) * D * es);
    } else {
        q = tsr_reshape_3d(c, linear(b, L->wq, L->bq, x), D, H, T);
        k = tsr_reshape_3d(c, linear(b, L->wk, L->bk, x), D, Hk, T);
        v = linear(b, L->wv, L->bv, x);
    }
    if (L->q_norm) {
        q = norm(b, q, L->q_norm);
        k = norm(b, k, L->k_norm);
    }
    q = tsr_rope(c, q, b->pos, hp->n_rot, (tsr_rope_mode)hp->rope_mode, hp->rope_base,
                 hp->rope_scale);
    k = tsr_rope(c, k, b->pos, hp->n_rot, (tsr_rope_mode)hp->rope_mode, hp->rope_base,
                 hp->rope_scale);
    /* Write the new keys and values at their positions, then read the
     * cache's first n_kv columns (through the writes, so they run first). */
    tsr_tensor *kc = L->k_cache, *vc = L->v_cache;
    tsr_tensor *kw = tsr_set_rows(c, kc, tsr_reshape_2d(c, k, (int64_t)Hk * D, T), b->pos);
    tsr_tensor *vw = tsr_set_rows(c, vc, v, b->pos);
    const size_t kes = tsr_type_size(kc->type);
    tsr_tensor *kk = tsr_view_3d(c, kw, D, Hk, b->n_kv, (size_t)D * kes, kc->nb[1], 0);
    tsr_tensor *vv = tsr_view_3d(c, vw, Dv, Hk, b->n_kv, (size_t)Dv * kes, vc->nb[1], 0);
    tsr_tensor *fa =
        tsr_flash_attn_ext(c, tsr_permute(c, q, 0, 2, 1, 3), tsr_permute(c, kk, 0, 2, 1, 3),
                           tsr_permute(c, vv, 0, 2, 1, 3), b->mask, 1.0f / sqrtf((float)D), 0.0f);
    tsr_set_name(fa, "attn_%d", l);
    return linear(b, L->wo, L->bo, tsr_reshape_2d(c, fa, (int64_t)H * Dv, T));
}

static tsr_tensor *ffn_dense(gb *b, const model_layer *L, tsr_tensor *x)
{
    tsr_tensor *g = linear(b, L->gate, L->b_gate, x);
    tsr_tensor *u = linear(b, L->up, L->b_up, x);
    return linear(b, L->down, L->b_down, tsr_swiglu(b->c, g, u));
}

/* Router softmax, top-k experts with renormalized weights, SwiGLU experts
 * via mul_mat_id, the weighted sum of the k expert outputs. */
static tsr_tensor *ffn_moe(gb *b, const model_layer *L, tsr_tensor *x)
{
    const tsr_model_hparams *hp = b->hp;
    tsr_ctx *c = b->c;
    const int T = b->T, U = hp->n_expert_used, X = hp->n_expert;
    tsr_tensor *probs = tsr_soft_max(c, tsr_mul_mat(c, L->gate_inp, x), NULL, 1.0f); /* [X, T] */
    tsr_tensor *sel = tsr_top_k(c, probs, U);                                        /* [U, T] */
    tsr_tensor *w = tsr_get_rows(c, tsr_reshape_3d(c, probs, 1, X, T), sel);         /* [1, U, T] */
    tsr_tensor *w2 = tsr_reshape_2d(c, w, U, T);
    w = tsr_reshape_3d(c, tsr_div(c, w2, tsr_sum_rows(c, w2)), 1, U, T);
    tsr_tensor *x3 = tsr_reshape_3d(c, x, hp->n_embd, 1, T);
    tsr_tensor *g = tsr_mul_mat_id(c, L->gate_exps, x3, sel);
    tsr_tensor *u = tsr_mul_mat_id(c, L->up_exps, x3, sel);
    tsr_tensor *d = tsr_mul_mat_id(c, L->down_exps, tsr_swiglu(c, g, u), sel); /* [E, U, T] */
    if (L->b_down_exps)
        d = tsr_add_id(c, d, L->b_down_exps, sel);
    d = tsr_mul(c, d, w);
    tsr_tensor *sum = tsr_view_2d(c, d, hp->n_embd, T, d->nb[2], 0);
    for (int e = 1; e < U; e++)
        sum = tsr_add(c, sum, tsr_view_2d(c, d, hp->n_embd, T, d->nb[2], (size_t)e * d->nb[1]));
    return sum;
}

tsr_status tsr__model_build(tsr_model *m, int s, int T, int pos0)
{
    model_stage *st = &m->st[s];
    const tsr_model_hparams *hp = &m->hp;
    const bool first = s == 0, last = s == m->n_stages - 1;
    tsr_ctx_reset(st->gctx);
    tsr_graph_reset(st->g);
    gb b = {.c = st->gctx, .hp = hp, .T = T, .n_kv = pos0 + T};
    tsr_ctx *c = b.c;
    b.pos = tsr_set_name(tsr_new_tensor_1d(c, TSR_TYPE_I32, T), "inp_pos");
    b.mask = tsr_set_name(tsr_new_tensor_2d(c, TSR_TYPE_F16, b.n_kv, T), "inp_mask");
    st->in_pos = b.pos;
    st->in_mask = b.mask;
    st->in_tokens = st->in_h = NULL;
    tsr_tensor *h;
    if (first) {
        st->in_tokens = tsr_set_name(tsr_new_tensor_1d(c, TSR_TYPE_I32, T), "inp_tokens");
        h = tsr_get_rows(c, st->tok_embd, st->in_tokens);
        if (h)
            h = tsr_reshape_2d(c, h, hp->n_embd, T);
    } else {
        st->in_h = tsr_set_name(tsr_new_tensor_2d(c, TSR_TYPE_F32, hp->n_embd, T), "inp_h");
        h = st->in_h;
    }
    for (tsr_tensor *in = st->in_tokens; in; in = NULL)
        in->flags |= TSR_TENSOR_FLAG_INPUT;
    b.pos->flags |= TSR_TENSOR_FLAG_INPUT;
    b.mask->flags |= TSR_TENSOR_FLAG_INPUT;
    if (st->in_h)
        st->in_h->flags |= TSR_TENSOR_FLAG_INPUT;
    for (int l = st->l0; l < st->l1; l++) {
        const model_layer *L = &m->layers[l];
        tsr_tensor *a = attention(&b, L, norm(&b, h, L->attn_norm), l);
        h = tsr_set_name(tsr_add(c, h, a), "h_attn_%d", l);
        tsr_tensor *f = hp->n_expert ? ffn_moe(&b, L, norm(&b, h, L->ffn_norm))
                                     : ffn_dense(&b, L, norm(&b, h, L->ffn_norm));
        h = tsr_set_name(tsr_add(c, h, f), "h_%d", l);
    }
    if (last) {
        /* Only the last token needs logits. */
        if (h && T > 1)
            h = tsr_view_2d(c, h, hp->n_embd, 1, h->nb[1], (size_t)(T - 1) * h->nb[1]);
        h = norm(&b, h, st->out_norm);
        h = tsr_set_name(tsr_mul_mat(c, st->output, h), "logits");
    }
    st->out = h;
    if (tsr_ctx_status(c) != TSR_OK)
        return tsr__error(tsr_ctx_status(c), "model: building the graph: %s", tsr_ctx_error(c));
    return tsr_graph_build(st->g, h);
}
