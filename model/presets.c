/* model/presets.c — named model shapes for generated weights, and the
 * checks every set of hyper-parameters must pass.
 *
 * Not the weights (model/weights.c). The shapes follow public models
 * (TinyLlama-1.1B, Llama-3-8B with fewer layers) and small ones for tests.
 */
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "tessera/model.h"

typedef struct {
    const char *name, *what;
    tsr_model_hparams hp;
} preset;

#define LLAMA_DEFAULTS \
    .rms_eps = 1e-5f, .rope_base = 10000.0f, .rope_scale = 1.0f, .rope_mode = TSR_ROPE_NORMAL

static const preset presets[] = {
    {"tiny",
     "a tiny Llama for tests: 4 layers, n_embd 256, 8 heads / 4 kv heads, vocab 512",
     {.n_vocab = 512,
      .n_embd = 256,
      .n_layer = 4,
      .n_head = 8,
      .n_head_kv = 4,
      .head_dim = 32,
      .head_dim_v = 32,
      .n_ff = 768,
      .n_ctx_train = 2048,
      LLAMA_DEFAULTS,
      .wtype = TSR_TYPE_F32}},
    {"tiny-moe",
     "a tiny MoE Llama: 2 layers, 8 experts, top-2, vocab 512",
     {.n_vocab = 512,
      .n_embd = 256,
      .n_layer = 2,
      .n_head = 8,
      .n_head_kv = 4,
      .head_dim = 32,
      .head_dim_v = 32,
      .n_ff = 256,
      .n_ctx_train = 2048,
      LLAMA_DEFAULTS,
      .n_expert = 8,
      .n_expert_used = 2,
      .wtype = TSR_TYPE_F32}},
    {"tinyllama",
     "the TinyLlama-1.1B shape: 22 layers, n_embd 2048, 32 heads / 4 kv heads, n_ff "
     "5632, vocab 32000, F16",
     {.n_vocab = 32000,
      .n_embd = 2048,
      .n_layer = 22,
      .n_head = 32,
      .n_head_kv = 4,
      .head_dim = 64,
      .head_dim_v = 64,
      .n_ff = 5632,
      .n_ctx_train = 2048,
      LLAMA_DEFAULTS,
      .wtype = TSR_TYPE_F16}},
    {"llama3-8b-4l",
     "the Llama-3-8B shape with 4 of its 32 layers: n_embd 4096, 32 heads / 8 kv "
     "heads, n_ff 14336, vocab 128256, F16",
     {.n_vocab = 128256,
      .n_embd = 4096,
      .n_layer = 4,
      .n_head = 32,
      .n_head_kv = 8,
      .head_dim = 128,
      .head_dim_v = 128,
      .n_ff = 14336,
      .n_ctx_train = 8192,
      .rms_eps = 1e-5f,
      .rope_base = 500000.0f,
      .rope_scale = 1.0f,
      .rope_mode = TSR_ROPE_NORMAL,
      .wtype = TSR_TYPE_F16}},
    {"moe-small",
     "a small MoE: 8 layers, n_embd 1024, 16 heads / 4 kv heads, 8 experts top-2, "
     "vocab 32000, F16",
     {.n_vocab = 32000,
      .n_embd = 1024,
      .n_layer = 8,
      .n_head = 16,
      .n_head_kv = 4,
      .head_dim = 64,
      .head_dim_v = 64,
      .n_ff = 1408,
      .n_ctx_train = 4096,
      LLAMA_DEFAULTS,
      .n_expert = 8,
      .n_expert_used = 2,
      .wtype = TSR_TYPE_F16}},
};

static const char *preset_names[TSR_ARRAY_SIZE(presets) + 1];

const char *const *tsr_model_preset_names(void)
{
    for (size_t i = 0; i < TSR_ARRAY_SIZE(presets); i++)
        preset_names[i] = presets[i].name;
    return preset_names;
}

const char *tsr_model_preset_describe(const char *name)
{
    for (size_t i = 0; name && i < TSR_ARRAY_SIZE(presets); i++)
        if (strcmp(presets[i].name, name) == 0)
            return presets[i].what;
    return NULL;
}

tsr_status tsr_model_preset(const char *name, tsr_model_hparams *hp)
{
    for (size_t i = 0; name && i < TSR_ARRAY_SIZE(presets); i++) {
        if (strcmp(presets[i].name, name) == 0) {
            *hp = presets[i].hp;
            hp->n_rot = hp->head_dim;
            return TSR_OK;
        }
    }
    char list[256] = "";
    size_t o = 0;
    for (size_t i = 0; i < TSR_ARRAY_SIZE(presets) && o < sizeof(list); i++)
        o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%s", i ? ", " : "", presets[i].name);
    return tsr__error(TSR_ENOTFOUND, "model: no preset named '%s' (known: %s)", name ? name : "",
                      list);
}

tsr_status tsr_model_hparams_check(const tsr_model_hparams *hp)
{
#define NEED(cond, ...)                                           \
    do {                                                          \
        if (!(cond))                                              \
            return tsr__error(TSR_EINVAL, "model: " __VA_ARGS__); \
    } while (0)
    NEED(hp->n_vocab > 0 && hp->n_embd > 0 && hp->n_layer > 0 && hp->n_ff > 0,
         "sizes must be positive (vocab %d, embd %d, layers %d, ff %d)", hp->n_vocab, hp->n_embd,
         hp->n_layer, hp->n_ff);
    NEED(hp->n_layer <= 1024, "%d layers (at most 1024)", hp->n_layer);
    NEED(hp->n_head > 0 && hp->n_head_kv > 0 && hp->n_head % hp->n_head_kv == 0,
         "%d heads are not a multiple of %d kv heads", hp->n_head, hp->n_head_kv);
    NEED(hp->head_dim > 0 && hp->head_dim_v > 0 && hp->head_dim % 2 == 0,
         "head sizes %d / %d (K must be even)", hp->head_dim, hp->head_dim_v);
    NEED(hp->n_rot > 0 && hp->n_rot <= hp->head_dim && hp->n_rot % 2 == 0, "rotated dims %d of %d",
         hp->n_rot, hp->head_dim);
    NEED(hp->rope_mode == TSR_ROPE_NORMAL || hp->rope_mode == TSR_ROPE_NEOX, "rope mode %d",
         hp->rope_mode);
    NEED(hp->rms_eps > 0.0f && hp->rope_base > 0.0f, "eps %g, rope base %g", (double)hp->rms_eps,
         (double)hp->rope_base);
    NEED(hp->n_expert == 0 || (hp->n_expert_used > 0 && hp->n_expert_used <= hp->n_expert),
         "%d of %d experts used", hp->n_expert_used, hp->n_expert);
    NEED(hp->wtype == TSR_TYPE_F32 || hp->wtype == TSR_TYPE_F16 || hp->wtype == TSR_TYPE_BF16 ||
             hp->wtype == TSR_TYPE_Q8_0,
         "weight type %s", tsr_type_name(hp->wtype));
    const int64_t blk = tsr_type_block_size(hp->wtype);
    NEED(hp->n_embd % blk == 0 && hp->n_ff % blk == 0 &&
             (int64_t)hp->n_head * hp->head_dim_v % blk == 0,
         "%s weights need n_embd (%d), n_ff (%d) and heads x head_dim_v multiples of %lld",
         tsr_type_name(hp->wtype), hp->n_embd, hp->n_ff, (long long)blk);
    return TSR_OK;
#undef NEED
}

void tsr_model_config_default(tsr_model_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->split_mode = TSR_SPLIT_NONE;
    cfg->n_ctx = 512;
    cfg->kv_type = TSR_TYPE_F16;
}
