/* model/model_impl.h — the model's internals shared by the files of model/: the
 * per-layer tensor set, the stages (one per device in layer mode, one
 * otherwise) and their compute state. Not installed.
 */
#ifndef TESSERA_MODEL_IMPL_H
#define TESSERA_MODEL_IMPL_H

#include "core/internal.h"
#include "tessera/gguf.h"
#include "tessera/model.h"

#define MODEL_MAX_STAGES TSR_META_MAX_DEVICES

typedef struct model_layer {
    tsr_tensor *attn_norm;
    tsr_tensor *wq, *wk, *wv, *wqkv, *wo;
    tsr_tensor *bq, *bk, *bv, *bqkv, *bo;
    tsr_tensor *q_norm, *k_norm;
    tsr_tensor *ffn_norm;
    tsr_tensor *gate, *up, *down;
    tsr_tensor *b_gate, *b_up, *b_down;
    tsr_tensor *gate_inp, *gate_exps, *up_exps, *down_exps, *b_down_exps;
    tsr_tensor *k_cache, *v_cache;
} model_layer;

/* A device running layers [l0, l1): its weights, KV cache and graph state.
 * Stage 0 also embeds the tokens; the last stage applies the output head. */
typedef struct model_stage {
    tsr_dev *dev;
    tsr_backend *be;
    int l0, l1;
    tsr_ctx *wctx; /* weights and KV cache of this stage */
    tsr_buf *wbuf, *kvbuf;
    tsr_tensor *tok_embd, *out_norm, *output; /* on stage 0 / the last stage */
    tsr_gallocr *ga;
    tsr_ctx *gctx;
    tsr_graph *g;
    tsr_tensor *in_tokens, *in_pos, *in_mask, *in_h; /* inputs of the current graph */
    tsr_tensor *out; /* h [n_embd, T] (not last) or logits [n_vocab, 1] (last) */
} model_stage;

struct tsr_model {
    tsr_model_hparams hp;
    tsr_model_config cfg;
    const tsr_gguf *file; /* while loading: tensor types come from it */
    tsr_dev *meta;        /* tensor mode */
    model_stage st[MODEL_MAX_STAGES];
    int n_stages;
    model_layer *layers; /* [n_layer], pointing into the stages' contexts */
    int pos;             /* tokens in the KV cache */
    bool have_logits;
    tsr_model_stats stats;
    bool pending;        /* an eval is enqueued and not yet waited for */
    uint64_t pending_t0; /* when it started */
    int pending_n;       /* its token count */
    /* Host scratch for inputs, grown as needed. */
    int32_t *pos_buf;
    int pos_cap;
    uint16_t *mask_buf;
    size_t mask_cap;
    /* Sampling: per-device candidate graphs (tensor mode) and the history. */
    struct model_sampler *sampler;
    int32_t *history;
    int n_history, cap_history;
};

/* ---- weights (model/weights.c) --------------------------------------------------- */

/* Creates the tensors of stage s (its layers' weights and KV cache, the
 * embedding on stage 0, the head on the last stage) in st->wctx. */
tsr_status tsr__model_make_tensors(tsr_model *m, int s);
/* Fills every weight of stage s with seeded values (same values whatever the
 * split: they depend on the seed and the tensor name only). */
tsr_status tsr__model_fill_random(tsr_model *m, int s, uint64_t seed);
/* Allocates stage s's weights and KV cache on its device (split by
 * tsr_model_split on a meta device) and zeroes the cache. */
tsr_status tsr__model_alloc(tsr_model *m, int s);

/* ---- graph and run (model/graph.c, model/run.c) ---------------------------------- */

/* Builds stage s's graph for T tokens at position pos0 into st->g. */
tsr_status tsr__model_build(tsr_model *m, int s, int T, int pos0);
/* Waits for an enqueued evaluation (tsr_model_eval_async) and books its time. */
tsr_status tsr__model_finish(tsr_model *m);
/* Sets up stages, streams and (tensor mode) the meta device for cfg. */
tsr_status tsr__model_setup(tsr_model *m, const tsr_model_config *cfg);

/* ---- sampling (model/sample.c) ------------------------------------------------- */

void tsr__model_sampler_free(struct model_sampler *s);
/* Reseeds at the next draw (after tsr_model_reset). */
void tsr__model_sampler_reset(struct model_sampler *s);

#endif /* TESSERA_MODEL_IMPL_H */
