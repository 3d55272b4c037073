/* model/gguf_model.c — a model to and from a GGUF file with llama.cpp's
 * "llama" architecture keys and tensor names.
 *
 * Not the file format (model/gguf.c, model/gguf_write.c): this file maps the
 * llama.* keys onto tsr_model_hparams, finds every tensor the model needs,
 * checks its shape, and uploads it (straight from the read-only mapping, so
 * pages stream in as they are copied; a meta buffer scatters each tensor to
 * its devices). Features are inferred from the tensors present (fused QKV,
 * QK-norm, biases, tied output), as llama.cpp does; a tensor the model has
 * no place for is an error, not silently ignored.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model_impl.h"

/* ---- reading --------------------------------------------------------------------- */

/* An optional integer key: absent keeps *out; present but invalid is an error. */
static tsr_status opt_i32(const tsr_gguf *g, const char *path, const char *key, int *out)
{
    if (tsr_gguf_find_key(g, key) < 0)
        return TSR_OK;
    int32_t v;
    tsr_status st = tsr_gguf_get_i32(g, key, &v);
    if (st != TSR_OK)
        return tsr__error(st, "%s: key '%s': %s", path, key, tsr_last_error());
    *out = v;
    return TSR_OK;
}

static tsr_status need_i32(const tsr_gguf *g, const char *path, const char *key, int *out)
{
    if (tsr_gguf_find_key(g, key) < 0)
        return tsr__error(TSR_EFORMAT, "%s: key '%s' is missing", path, key);
    return opt_i32(g, path, key, out);
}

static tsr_status opt_f32(const tsr_gguf *g, const char *path, const char *key, float *out)
{
    if (tsr_gguf_find_key(g, key) < 0)
        return TSR_OK;
    tsr_status st = tsr_gguf_get_f32(g, key, out);
    if (st != TSR_OK)
        return tsr__error(st, "%s: key '%s': %s", path, key, tsr_last_error());
    return TSR_OK;
}

static bool has(const tsr_gguf *g, const char *name) { return tsr_gguf_tensor_by_name(g, name); }

/* Hyper-parameters from the llama.* keys and the tensors present. */
static tsr_status read_hparams(const tsr_gguf *g, const char *path, tsr_model_hparams *hp)
{
    const char *arch = NULL;
    tsr_status st = tsr_gguf_get_str(g, "general.architecture", &arch, NULL);
    if (st != TSR_OK)
        return tsr__error(TSR_EFORMAT, "%s: no general.architecture string", path);
    if (strcmp(arch, "llama") != 0)
        return tsr__error(TSR_EUNSUPPORTED, "%s: architecture '%s' (tessera reads 'llama')", path,
                          arch);
    memset(hp, 0, sizeof(*hp));
    hp->rms_eps = 1e-5f;
    hp->rope_base = 10000.0f;
    hp->rope_scale = 1.0f;
    hp->rope_mode = TSR_ROPE_NORMAL;
    hp->n_ctx_train = 2048;
    if ((st = need_i32(g, path, "llama.embedding_length", &hp->n_embd)) != TSR_OK ||
        (st = need_i32(g, path, "llama.block_count", &hp->n_layer)) != TSR_OK ||
        (st = need_i32(g, path, "llama.attention.head_count", &hp->n_head)) != TSR_OK)
        return st;
    if (tsr_gguf_find_key(g, "llama.feed_forward_length") >= 0 &&
        tsr_gguf_kv_type(g, (size_t)tsr_gguf_find_key(g, "llama.feed_forward_length")) ==
            TSR_GGUF_TYPE_ARRAY)
        return tsr__error(TSR_EUNSUPPORTED, "%s: a feed-forward size per layer is not supported",
                          path);
    hp->n_head_kv = hp->n_head;
    if ((st = need_i32(g, path, "llama.feed_forward_length", &hp->n_ff)) != TSR_OK ||
        (st = opt_i32(g, path, "llama.attention.head_count_kv", &hp->n_head_kv)) != TSR_OK ||
        (st = opt_i32(g, path, "llama.context_length", &hp->n_ctx_train)) != TSR_OK ||
        (st = opt_i32(g, path, "llama.expert_count", &hp->n_expert)) != TSR_OK ||
        (st = opt_i32(g, path, "llama.expert_used_count", &hp->n_expert_used)) != TSR_OK ||
        (st = opt_f32(g, path, "llama.attention.layer_norm_rms_epsilon", &hp->rms_eps)) != TSR_OK ||
        (st = opt_f32(g, path, "llama.rope.freq_base", &hp->rope_base)) != TSR_OK)
        return st;
    if (hp->n_head <= 0 || hp->n_embd <= 0)
        return tsr__error(TSR_EFORMAT, "%s: %d heads, n_embd %d", path, hp->n_head, hp->n_embd);
    hp->head_dim = hp->n_embd / hp->n_head;
    if ((st = opt_i32(g, path, "llama.attention.key_length", &hp->head_dim)) != TSR_OK)
        return st;
    hp->head_dim_v = hp->head_dim;
    if ((st = opt_i32(g, path, "llama.attention.value_length", &hp->head_dim_v)) != TSR_OK)
        return st;
    hp->n_rot = hp->head_dim;
    if ((st = opt_i32(g, path, "llama.rope.dimension_count", &hp->n_rot)) != TSR_OK)
        return st;
    float factor = 1.0f;
    if ((st = opt_f32(g, path, "llama.rope.scaling.factor", &factor)) != TSR_OK)
        return st;
    const char *scaling = NULL;
    if (tsr_gguf_get_str(g, "llama.rope.scaling.type", &scaling, NULL) == TSR_OK &&
        strcmp(scaling, "none") != 0 && strcmp(scaling, "linear") != 0)
        return tsr__error(TSR_EUNSUPPORTED, "%s: rope scaling '%s' (none or linear)", path,
                          scaling);
    if (factor > 0.0f && factor != 1.0f)
        hp->rope_scale = 1.0f / factor;
    const char *mode = NULL;
    if (tsr_gguf_get_str(g, "tessera.rope.mode", &mode, NULL) == TSR_OK &&
        strcmp(mode, "neox") == 0)
        hp->rope_mode = TSR_ROPE_NEOX;

    const tsr_gguf_tensor *emb = tsr_gguf_tensor_by_name(g, "token_embd.weight");
    if (!emb || emb->n_dims != 2)
        return tsr__error(TSR_EFORMAT, "%s: no 2-D tensor 'token_embd.weight'", path);
    if (emb->ne[1] > INT32_MAX)
        return tsr__error(TSR_EFORMAT, "%s: vocabulary of %lld tokens", path,
                          (long long)emb->ne[1]);
    hp->n_vocab = (int)emb->ne[1];
    hp->fused_qkv = has(g, "blk.0.attn_qkv.weight");
    hp->qk_norm = has(g, "blk.0.attn_q_norm.weight");
    hp->attn_bias = has(g, "blk.0.attn_output.bias") || has(g, "blk.0.attn_q.bias") ||
                    has(g, "blk.0.attn_qkv.bias");
    hp->ffn_bias = has(g, "blk.0.ffn_down.bias") || has(g, "blk.0.ffn_down_exps.bias");
    hp->tied_embd = !has(g, "output.weight");
    /* The split granularity follows the coarsest block among the matrices. */
    hp->wtype = emb->type;
    for (size_t i = 0; i < tsr_gguf_tensor_count(g); i++) {
        const tsr_gguf_tensor *t = tsr_gguf_tensor_at(g, i);
        if (t->n_dims >= 2 && tsr_type_block_size(t->type) > tsr_type_block_size(hp->wtype))
            hp->wtype = t->type;
    }
    return TSR_OK;
}

static void progress(const tsr_model *m, size_t done, size_t total)
{
    if (m->cfg.quiet || !isatty(STDERR_FILENO) || total == 0)
        return;
    const int w = 40, fill = (int)((double)w * (double)done / (double)total);
    fprintf(stderr, "\rloading [%.*s%*s] %3d%% %.2f/%.2f GB", fill,
            "########################################", w - fill, "",
            (int)(100.0 * (double)done / (double)total), (double)done / 1e9, (double)total / 1e9);
    if (done == total)
        fputc('\n', stderr);
    fflush(stderr);
}

/* Copies one tensor from the file: same type and shape, or a vector stored
 * in another float type (converted to F32). */
static tsr_status upload(const tsr_model *m, const char *path, tsr_tensor *t, float **scratch,
                         size_t *cap)
{
    const tsr_gguf_tensor *ft = tsr_gguf_tensor_by_name(m->file, t->name);
    if (!ft)
        return tsr__error(TSR_EFORMAT, "%s: tensor '%s' is missing", path, t->name);
    char want[64], got[64] = "[";
    tsr_shape_str(t, want, sizeof(want));
    bool same = true;
    for (int d = 0; d < TSR_MAX_DIMS; d++) {
        same &= ft->ne[d] == t->ne[d];
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%lld%s", (long long)ft->ne[d],
                 d + 1 < TSR_MAX_DIMS ? ", " : "]");
    }
    if (!same)
        return tsr__error(TSR_EFORMAT, "%s: tensor '%s' is %s, the model needs %s", path, t->name,
                          got, want);
    if (ft->type == t->type)
        return tsr_tensor_set(t, ft->data, 0, ft->size);
    if (t->type != TSR_TYPE_F32)
        return tsr__error(TSR_ETYPE, "%s: tensor '%s' is %s, the model needs %s", path, t->name,
                          tsr_type_name(ft->type), tsr_type_name(t->type));
    const size_t n = (size_t)tsr_nelements(t);
    if (n > *cap) {
        float *p = realloc(*scratch, n * sizeof(float));
        if (!p)
            return tsr__error(TSR_ENOMEM, "%s: converting '%s'", path, t->name);
        *scratch = p;
        *cap = n;
    }
    tsr_status st = tsr_row_to_f32(ft->type, ft->data, *scratch, (int64_t)n);
    return st == TSR_OK ? tsr_tensor_set(t, *scratch, 0, n * sizeof(float)) : st;
}

static bool is_model_tensor(const tsr_model *m, const char *name)
{
    for (int s = 0; s < m->n_stages; s++) {
        tsr_ctx *c = m->st[s].wctx;
        for (size_t i = 0; i < tsr_ctx_n_tensors(c); i++)
            if (strcmp(tsr_ctx_tensor(c, i)->name, name) == 0)
                return true;
    }
    return false;
}

static tsr_status load_weights(tsr_model *m, const char *path)
{
    for (size_t i = 0; i < tsr_gguf_tensor_count(m->file); i++) {
        const char *name = tsr_gguf_tensor_at(m->file, i)->name;
        if (!is_model_tensor(m, name))
            return tsr__error(TSR_EUNSUPPORTED,
                              "%s: tensor '%s' has no place in tessera's llama model (a feature "
                              "it does not have)",
                              path, name);
    }
    size_t total = 0, done = 0;
    for (int s = 0; s < m->n_stages; s++)
        for (size_t i = 0; i < tsr_ctx_n_tensors(m->st[s].wctx); i++)
            if (tsr_ctx_tensor(m->st[s].wctx, i)->flags & TSR_TENSOR_FLAG_PARAM)
                total += tsr_nbytes(tsr_ctx_tensor(m->st[s].wctx, i));
    float *scratch = NULL;
    size_t cap = 0;
    tsr_status st = TSR_OK;
    for (int s = 0; s < m->n_stages && st == TSR_OK; s++) {
        st = tsr__model_alloc(m, s);
        for (size_t i = 0; i < tsr_ctx_n_tensors(m->st[s].wctx) && st == TSR_OK; i++) {
            tsr_tensor *t = tsr_ctx_tensor(m->st[s].wctx, i);
            if (!(t->flags & TSR_TENSOR_FLAG_PARAM))
                continue;
            st = upload(m, path, t, &scratch, &cap);
            done += tsr_nbytes(t);
            progress(m, done, total);
        }
    }
    free(scratch);
    return st;
}

tsr_status tsr_model_load(const char *path, const tsr_model_config *cfg, tsr_model **out)
{
    if (!path || !cfg || !out)
        return tsr__error(TSR_EINVAL, "model_load: NULL argument");
    *out = NULL;
    tsr_gguf *g = NULL;
    tsr_status st = tsr_gguf_open(path, &g);
    if (st != TSR_OK)
        return st;
    tsr_model *m = calloc(1, sizeof(*m));
    if (!m) {
        tsr_gguf_close(g);
        return tsr__error(TSR_ENOMEM, "model: %zu bytes", sizeof(*m));
    }
    m->file = g;
    st = read_hparams(g, path, &m->hp);
    if (st == TSR_OK)
        st = tsr__model_setup(m, cfg);
    if (st == TSR_OK)
        st = load_weights(m, path);
    m->file = NULL;
    tsr_gguf_close(g);
    if (st != TSR_OK) {
        tsr_model_free(m);
        return st;
    }
    *out = m;
    return TSR_OK;
}

/* ---- writing ------------------------------------------------------------------------ */

/* Reads elements [first, first + n) of a model tensor back from its device. */
static tsr_status fill_from_device(void *user, const char *name, int64_t first, int64_t n,
                                   void *dst)
{
    (void)name;
    const tsr_tensor *t = user;
    const int64_t blk = tsr_type_block_size(t->type);
    const size_t es = tsr_type_size(t->type);
    return tsr_tensor_get(t, dst, (size_t)(first / blk) * es, (size_t)(n / blk) * es);
}

/* llama.cpp's general.file_type for a weight type. */
static uint32_t file_type(tsr_type t)
{
    switch (t) {
    case TSR_TYPE_F16:
        return 1;
    case TSR_TYPE_Q8_0:
        return 7;
    case TSR_TYPE_BF16:
        return 32;
    default:
        return 0;
    }
}

/* A vocabulary llama.cpp accepts: <unk>, <s>, </s>, the 256 byte tokens,
 * then placeholders (ids only carry meaning here). Tiny vocabularies get
 * none ("no_vocab"). */
static tsr_status write_vocab(tsr_gguf_writer *w, int n_vocab)
{
    if (n_vocab < 3 + 256)
        return tsr_gguf_writer_set_str(w, "tokenizer.ggml.model", "no_vocab");
    char **tok = calloc((size_t)n_vocab, sizeof(char *));
    char *text = malloc((size_t)n_vocab * 16);
    float *score = calloc((size_t)n_vocab, sizeof(float));
    int32_t *type = malloc((size_t)n_vocab * sizeof(int32_t));
    tsr_status st =
        tok && text && score && type ? TSR_OK : tsr__error(TSR_ENOMEM, "model_save: vocabulary");
    for (int i = 0; i < n_vocab && st == TSR_OK; i++) {
        tok[i] = text + (size_t)i * 16;
        if (i < 3) {
            snprintf(tok[i], 16, "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
            type[i] = i == 0 ? 2 : 3; /* unknown, control */
        } else if (i < 3 + 256) {
            snprintf(tok[i], 16, "<0x%02X>", i - 3);
            type[i] = 6; /* byte */
        } else {
            snprintf(tok[i], 16, "t%d", i);
            type[i] = 1; /* normal */
        }
    }
    if (st == TSR_OK)
        st = tsr_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (st == TSR_OK)
        st = tsr_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", (const char *const *)tok,
                                           (size_t)n_vocab);
    if (st == TSR_OK)
        st = tsr_gguf_writer_set_array(w, "tokenizer.ggml.scores", TSR_GGUF_TYPE_FLOAT32, score,
                                       (size_t)n_vocab);
    if (st == TSR_OK)
        st = tsr_gguf_writer_set_array(w, "tokenizer.ggml.token_type", TSR_GGUF_TYPE_INT32, type,
                                       (size_t)n_vocab);
    if (st == TSR_OK)
        st = tsr_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (st == TSR_OK)
        st = tsr_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (st == TSR_OK)
        st = tsr_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    free(tok);
    free(text);
    free(score);
    free(type);
    return st;
}

static tsr_status write_keys(tsr_gguf_writer *w, const tsr_model_hparams *hp)
{
    tsr_status st = TSR_OK;
#define SET(call)         \
    do {                  \
        if (st == TSR_OK) \
            st = call;    \
    } while (0)
    SET(tsr_gguf_writer_set_str(w, "general.architecture", "llama"));
    SET(tsr_gguf_writer_set_str(w, "general.name", "tessera generated"));
    SET(tsr_gguf_writer_set_u32(w, "general.file_type", file_type(hp->wtype)));
    SET(tsr_gguf_writer_set_u32(w, "llama.context_length", (uint32_t)hp->n_ctx_train));
    SET(tsr_gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)hp->n_embd));
    SET(tsr_gguf_writer_set_u32(w, "llama.block_count", (uint32_t)hp->n_layer));
    SET(tsr_gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)hp->n_ff));
    SET(tsr_gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)hp->n_head));
    SET(tsr_gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)hp->n_head_kv));
    SET(tsr_gguf_writer_set_u32(w, "llama.attention.key_length", (uint32_t)hp->head_dim));
    SET(tsr_gguf_writer_set_u32(w, "llama.attention.value_length", (uint32_t)hp->head_dim_v));
    SET(tsr_gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)hp->n_rot));
    SET(tsr_gguf_writer_set_f32(w, "llama.rope.freq_base", hp->rope_base));
    SET(tsr_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", hp->rms_eps));
    SET(tsr_gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)hp->n_vocab));
    if (hp->rope_scale != 1.0f) {
        SET(tsr_gguf_writer_set_str(w, "llama.rope.scaling.type", "linear"));
        SET(tsr_gguf_writer_set_f32(w, "llama.rope.scaling.factor", 1.0f / hp->rope_scale));
    }
    if (hp->rope_mode == TSR_ROPE_NEOX)
        SET(tsr_gguf_writer_set_str(w, "tessera.rope.mode", "neox"));
    if (hp->n_expert) {
        SET(tsr_gguf_writer_set_u32(w, "llama.expert_count", (uint32_t)hp->n_expert));
        SET(tsr_gguf_writer_set_u32(w, "llama.expert_used_count", (uint32_t)hp->n_expert_used));
    }
#undef SET
    return st == TSR_OK ? write_vocab(w, hp->n_vocab) : st;
}

tsr_status tsr_model_save(tsr_model *m, const char *path)
{
    if (!m || !path)
        return tsr__error(TSR_EINVAL, "model_save: NULL argument");
    tsr_gguf_writer *w = NULL;
    tsr_status st = tsr_gguf_writer_new(&w);
    if (st == TSR_OK)
        st = write_keys(w, &m->hp);
    for (int s = 0; s < m->n_stages && st == TSR_OK; s++) {
        tsr_ctx *c = m->st[s].wctx;
        for (size_t i = 0; i < tsr_ctx_n_tensors(c) && st == TSR_OK; i++) {
            tsr_tensor *t = tsr_ctx_tensor(c, i);
            /* Weights only; a tied head on another stage is the same tensor. */
            if (!(t->flags & TSR_TENSOR_FLAG_PARAM) ||
                (s > 0 && strcmp(t->name, "token_embd.weight") == 0))
                continue;
            int nd = tsr_n_dims(t);
            st = tsr_gguf_writer_add_tensor_fn(w, t->name, t->type, nd, t->ne, fill_from_device, t);
        }
    }
    if (st == TSR_OK)
        st = tsr_gguf_writer_write(w, path);
    tsr_gguf_writer_free(w);
    return st;
}
