/* tessera/model.h — a Llama-family decoder (GQA, RoPE, RMSNorm, SwiGLU or
 * MoE FFN) that runs on one device, on consecutive layers per device, or
 * tensor-parallel on a meta device, with a KV cache, sampling, and GGUF or
 * generated weights.
 *
 * Tensor names and hyper-parameters follow llama.cpp's "llama" architecture
 * (token_embd.weight, blk.N.attn_q.weight, ...), so GGUF files written by
 * either can be read by both. The split table (which device holds which
 * slice of every weight and of the KV cache) is tsr_model_split, usable as a
 * meta device's split function.
 */
#ifndef TESSERA_MODEL_H
#define TESSERA_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "meta.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsr_model_hparams {
    int n_vocab, n_embd, n_layer;
    int n_head, n_head_kv;
    int head_dim, head_dim_v; /* K/Q and V head sizes */
    int n_ff;
    int n_ctx_train;
    float rms_eps, rope_base, rope_scale;
    int rope_mode;               /* TSR_ROPE_NORMAL (llama) or TSR_ROPE_NEOX */
    int n_rot;                   /* rotated dims per head (<= head_dim) */
    bool fused_qkv;              /* attn_qkv.weight instead of q/k/v */
    bool qk_norm;                /* attn_q_norm / attn_k_norm (per head dim, shared by heads) */
    bool attn_bias;              /* q/k/v/output biases */
    bool ffn_bias;               /* gate/up/down biases (down_exps bias for MoE) */
    bool tied_embd;              /* no output.weight: the output head is token_embd */
    int n_expert, n_expert_used; /* MoE when n_expert > 0 */
    tsr_type wtype;              /* matrix weights; norms and biases are F32 */
} tsr_model_hparams;

/* Named shapes for generated models ("tiny", "tinyllama", "llama3-8b-4l",
 * "moe-tiny", ...). tsr_model_preset fills hp; TSR_ENOTFOUND otherwise. */
tsr_status tsr_model_preset(const char *name, tsr_model_hparams *hp);
/* The preset names, NULL-terminated, and a one-line description of each. */
const char *const *tsr_model_preset_names(void);
const char *tsr_model_preset_describe(const char *name);
/* Checks hyper-parameters (positive sizes, heads dividing, ...). */
tsr_status tsr_model_hparams_check(const tsr_model_hparams *hp);

typedef enum tsr_split_mode {
    TSR_SPLIT_NONE = 0,  /* one device */
    TSR_SPLIT_LAYER = 1, /* consecutive layers per device; the KV cache follows */
    TSR_SPLIT_TENSOR = 2 /* one meta device over all: tensor parallelism */
} tsr_split_mode;

typedef struct tsr_model_config {
    tsr_split_mode split_mode;
    tsr_dev *devices[TSR_META_MAX_DEVICES];
    int n_devices;
    float tensor_split[TSR_META_MAX_DEVICES]; /* ratios (all 0: even) for layer and tensor */
    int n_ctx;                                /* KV cache length */
    tsr_type kv_type;                         /* F16 or F32 */
    int n_threads;                            /* CPU threads per device (0: the device's share) */
    bool quiet;                               /* no progress bar or warnings on stderr */
} tsr_model_config;

/* Defaults: split none on the first device, n_ctx 512, F16 KV cache. */
void tsr_model_config_default(tsr_model_config *cfg);

typedef struct tsr_model tsr_model;

/* A model with generated weights (seeded: identical on every run and for
 * every split mode). */
tsr_status tsr_model_generate(const tsr_model_hparams *hp, uint64_t seed,
                              const tsr_model_config *cfg, tsr_model **out);
/* A model read from a GGUF file (llama architecture), uploaded to the
 * devices of cfg (streamed; a progress bar on a TTY unless quiet). */
tsr_status tsr_model_load(const char *path, const tsr_model_config *cfg, tsr_model **out);
/* Writes a model's weights and hyper-parameters as GGUF v3 (host copy). */
tsr_status tsr_model_save(tsr_model *m, const char *path);
void tsr_model_free(tsr_model *m);
const tsr_model_hparams *tsr_model_get_hparams(const tsr_model *m);

/* The split of a static model tensor (weights, KV cache) over n devices by
 * DESIGN.md §4.2; userdata is the tsr_model. */
tsr_status tsr_model_split(const tsr_tensor *t, int n_devices, tsr_split *out, void *userdata);

/* ---- running ---------------------------------------------------------------- */

typedef struct tsr_sampler_params {
    float temperature;    /* <= 0: greedy */
    int top_k;            /* 0: all */
    float top_p;          /* 1: off */
    float repeat_penalty; /* 1: off */
    int repeat_last_n;    /* window of the penalty */
    uint64_t seed;
    bool gather_logits; /* sample from the full gathered logits instead of per-device candidates */
} tsr_sampler_params;

typedef struct tsr_model_stats {
    double prefill_s, decode_s; /* wall time of the last prefill / all decode steps */
    int prefill_tokens, decode_tokens;
    int allreduce_per_token;                   /* tensor mode: all-reduces per decode step */
    tsr_allreduce_path path;                   /* and the path they took */
    size_t device_bytes[TSR_META_MAX_DEVICES]; /* weights + KV + compute per device */
    size_t weight_bytes;                       /* every weight, as stored */
    size_t decode_read_bytes; /* weights a decode step reads (all but the embedding table) */
} tsr_model_stats;

/* Feeds n tokens at the current position (prefill or one decode step) and
 * leaves the logits of the last one ready. */
tsr_status tsr_model_eval(tsr_model *m, const int32_t *tokens, int n);
/* The same without waiting: the work is enqueued on the devices and the
 * next tsr_model_sample, tsr_model_logits or eval waits for it (and reports
 * its errors). Over remote devices a decode step then costs one blocking
 * round trip per server: the sampler's read of its candidates. */
tsr_status tsr_model_eval_async(tsr_model *m, const int32_t *tokens, int n);
/* Picks the next token from the last logits. */
tsr_status tsr_model_sample(tsr_model *m, const tsr_sampler_params *sp, int32_t *token);
/* Copies the last logits (n_vocab floats) to the host. */
tsr_status tsr_model_logits(tsr_model *m, float *out);
/* Forgets the KV cache (position 0). */
void tsr_model_reset(tsr_model *m);
int tsr_model_pos(const tsr_model *m);
void tsr_model_stats_get(const tsr_model *m, tsr_model_stats *out);
/* Tensor mode: seconds per all-reduce of a decode step's hidden state
 * (n_embd floats) over the model's devices on the path the model's take,
 * timed alone as a graph runs them: each after a node on every stream,
 * reps of them back to back; the median over 7 trials of rounds with the
 * all-reduce minus rounds without. 0 in other modes. */
tsr_status tsr_model_allreduce_time(tsr_model *m, int reps, double *seconds);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_MODEL_H */
