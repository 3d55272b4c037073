/* tests/test_model.c — the transformer end to end: tensor and layer splits
 * against one device on generated models (same greedy tokens over 32 decode
 * steps, logits within NMSE 1e-6 in F32), for device counts 2..5, uneven
 * ratios, awkward head counts and sizes, fused QKV, MoE and Q8_0; the
 * distributed sampler against the gathered one; GGUF save/load round trips
 * and malformed files; and the errors a user can provoke.
 *
 * Run with TSR_CPU_DEVICES=5 (ctest does): the devices are CPU devices, one
 * thread each.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "tessera/gguf.h"
#include "tessera/model.h"
#include "testutil.h"

#define PROMPT 8
#define STEPS 32

/* Greedy tokens and the logits of the last prompt position and of every
 * decode step. */
typedef struct {
    int32_t tokens[STEPS];
    float *logits; /* [(STEPS + 1) · n_vocab] */
    int n_vocab;
} trace;

static tsr_dev *cpu(int j)
{
    tsr_dev *d = tsr_reg_dev_get(tsr_cpu_reg(), (size_t)j);
    if (!d)
        cr_skip_test("needs %d CPU devices (TSR_CPU_DEVICES)", j + 1);
    return d;
}

static tsr_model_hparams tiny(void)
{
    tsr_model_hparams hp;
    cr_assert_eq(tsr_model_preset("tiny", &hp), TSR_OK, "%s", tsr_last_error());
    return hp;
}

static void config(tsr_model_config *cfg, tsr_split_mode mode, int n, const float *ratios)
{
    tsr_model_config_default(cfg);
    cfg->split_mode = mode;
    cfg->n_devices = n;
    cfg->n_threads = 1;
    cfg->n_ctx = 64;
    cfg->kv_type = TSR_TYPE_F32;
    cfg->quiet = true;
    for (int j = 0; j < n; j++) {
        cfg->devices[j] = cpu(j);
        cfg->tensor_split[j] = ratios ? ratios[j] : 0.0f;
    }
}

/* Prefill PROMPT seeded tokens, then STEPS greedy steps, recording tokens
 * and logits. */
static void trace_model(tsr_model *m, trace *tr)
{
    const tsr_model_hparams *hp = tsr_model_get_hparams(m);
    tr->n_vocab = hp->n_vocab;
    tr->logits = malloc((size_t)(STEPS + 1) * (size_t)hp->n_vocab * sizeof(float));
    cr_assert_not_null(tr->logits);
    int32_t prompt[PROMPT];
    tu_rng r = {11};
    for (int i = 0; i < PROMPT; i++)
        prompt[i] = (int32_t)(tu_next(&r) % (uint64_t)hp->n_vocab);
    const tsr_sampler_params greedy = {.temperature = 0.0f, .top_p = 1.0f, .repeat_penalty = 1.0f};
    cr_assert_eq(tsr_model_eval(m, prompt, PROMPT), TSR_OK, "prefill: %s", tsr_last_error());
    for (int s = 0; s < STEPS; s++) {
        cr_assert_eq(tsr_model_logits(m, tr->logits + (size_t)s * (size_t)hp->n_vocab), TSR_OK,
                     "%s", tsr_last_error());
        cr_assert_eq(tsr_model_sample(m, &greedy, &tr->tokens[s]), TSR_OK, "sample: %s",
                     tsr_last_error());
        cr_assert_eq(tsr_model_eval(m, &tr->tokens[s], 1), TSR_OK, "decode %d: %s", s,
                     tsr_last_error());
    }
    cr_assert_eq(tsr_model_logits(m, tr->logits + (size_t)STEPS * (size_t)hp->n_vocab), TSR_OK);
}

static void run_trace(const tsr_model_hparams *hp, const tsr_model_config *cfg, trace *tr)
{
    tsr_model *m = NULL;
    cr_assert_eq(tsr_model_generate(hp, 42, cfg, &m), TSR_OK, "generate: %s", tsr_last_error());
    trace_model(m, tr);
    tsr_model_free(m);
}

/* The greedy choice must equal the argmax of the logits read back. */
static void check_greedy_is_argmax(const trace *t)
{
    for (int s = 0; s < STEPS; s++) {
        const float *l = t->logits + (size_t)s * (size_t)t->n_vocab;
        int best = 0;
        for (int i = 1; i < t->n_vocab; i++)
            if (l[i] > l[best])
                best = i;
        cr_assert_eq(t->tokens[s], best, "step %d: sampled %d, argmax %d", s, t->tokens[s], best);
    }
}

static void compare(const tsr_model_hparams *hp, const tsr_model_config *cfg, double tol,
                    const char *what)
{
    tsr_model_config one;
    config(&one, TSR_SPLIT_NONE, 1, NULL);
    trace want, got;
    run_trace(hp, &one, &want);
    run_trace(hp, cfg, &got);
    check_greedy_is_argmax(&want);
    check_greedy_is_argmax(&got);
    double worst = 0;
    for (int s = 0; s <= STEPS; s++) {
        const size_t o = (size_t)s * (size_t)hp->n_vocab;
        worst = fmax(worst, tu_nmse(got.logits + o, want.logits + o, hp->n_vocab));
    }
    for (int s = 0; s < STEPS; s++)
        cr_assert_eq(got.tokens[s], want.tokens[s], "%s: tokens differ at step %d (%d vs %d)", what,
                     s, got.tokens[s], want.tokens[s]);
    cr_assert_leq(worst, tol, "%s: logits NMSE %.3g > %.3g", what, worst, tol);
    /* The tokens must not be one repeated value (a model that says nothing);
     * a random model with a tied head tends to repeat its input, though. */
    int distinct = hp->tied_embd ? 4 : 0;
    for (int s = 0; s < STEPS; s++) {
        bool seen = false;
        for (int p = 0; p < s; p++)
            seen |= want.tokens[p] == want.tokens[s];
        distinct += !seen;
    }
    cr_assert_geq(distinct, 4, "%s: only %d distinct tokens in %d steps", what, distinct, STEPS);
    free(want.logits);
    free(got.logits);
}

static void compare_tensor(const tsr_model_hparams *hp, int n, const float *ratios, double tol)
{
    tsr_model_config cfg;
    config(&cfg, TSR_SPLIT_TENSOR, n, ratios);
    char what[64];
    snprintf(what, sizeof(what), "tensor split over %d", n);
    compare(hp, &cfg, tol, what);
}

/* ---- split modes and device counts --------------------------------------------- */

Test(model, tensor_2)
{
    tsr_model_hparams hp = tiny();
    compare_tensor(&hp, 2, NULL, 1e-6);
}
Test(model, tensor_3)
{
    tsr_model_hparams hp = tiny();
    compare_tensor(&hp, 3, NULL, 1e-6);
}
Test(model, tensor_4)
{
    tsr_model_hparams hp = tiny();
    compare_tensor(&hp, 4, NULL, 1e-6);
}
/* Five devices, four KV heads: one device holds no attention head. */
Test(model, tensor_5)
{
    tsr_model_hparams hp = tiny();
    compare_tensor(&hp, 5, NULL, 1e-6);
}

Test(model, tensor_ratio_3_1)
{
    tsr_model_hparams hp = tiny();
    const float r[2] = {3, 1};
    compare_tensor(&hp, 2, r, 1e-6);
}

Test(model, layer_split)
{
    tsr_model_hparams hp = tiny();
    for (int n = 2; n <= 3; n++) {
        tsr_model_config cfg;
        config(&cfg, TSR_SPLIT_LAYER, n, NULL);
        compare(&hp, &cfg, 1e-6, "layer split");
    }
    const float r[2] = {3, 1};
    tsr_model_config cfg;
    config(&cfg, TSR_SPLIT_LAYER, 2, r);
    compare(&hp, &cfg, 1e-6, "layer split 3:1");
}

/* ---- shapes ------------------------------------------------------------------------ */

Test(model, kv_heads_3)
{
    tsr_model_hparams hp = tiny();
    hp.n_head = 6;
    hp.n_head_kv = 3;
    hp.n_embd = 192;
    compare_tensor(&hp, 2, NULL, 1e-6);
    compare_tensor(&hp, 4, NULL, 1e-6);
}

Test(model, head_dim_80)
{
    tsr_model_hparams hp = tiny();
    hp.n_head = 4;
    hp.n_head_kv = 2;
    hp.head_dim = hp.head_dim_v = hp.n_rot = 80;
    hp.n_embd = 320;
    compare_tensor(&hp, 2, NULL, 1e-6);
    compare_tensor(&hp, 3, NULL, 1e-6);
}

/* Fused QKV with K heads of 48 and V heads of 32 (three segments), QK-norm,
 * biases everywhere and a tied output head. */
Test(model, fused_qkv_unequal)
{
    tsr_model_hparams hp = tiny();
    hp.fused_qkv = true;
    hp.head_dim = hp.n_rot = 48;
    hp.head_dim_v = 32;
    hp.qk_norm = true;
    hp.attn_bias = hp.ffn_bias = true;
    hp.tied_embd = true;
    compare_tensor(&hp, 2, NULL, 1e-6);
    compare_tensor(&hp, 3, NULL, 1e-6);
}

/* Fused QKV with equal heads: two segments, [Q | K, V]. */
Test(model, fused_qkv_equal)
{
    tsr_model_hparams hp = tiny();
    hp.fused_qkv = true;
    hp.rope_mode = TSR_ROPE_NEOX;
    compare_tensor(&hp, 2, NULL, 1e-6);
    compare_tensor(&hp, 4, NULL, 1e-6);
}

Test(model, moe)
{
    tsr_model_hparams hp;
    cr_assert_eq(tsr_model_preset("tiny-moe", &hp), TSR_OK);
    compare_tensor(&hp, 2, NULL, 1e-6);
    compare_tensor(&hp, 3, NULL, 1e-6);
    hp.ffn_bias = true;
    compare_tensor(&hp, 2, NULL, 1e-6);
    tsr_model_config cfg;
    config(&cfg, TSR_SPLIT_LAYER, 2, NULL);
    compare(&hp, &cfg, 1e-6, "MoE layer split");
}

/* Q8_0 weights: the split cuts whole blocks, so only the order of sums
 * differs; the tolerance is that of Q8_0 activations. */
Test(model, q8_0)
{
    tsr_model_hparams hp = tiny();
    hp.wtype = TSR_TYPE_Q8_0;
    compare_tensor(&hp, 2, NULL, 1e-4);
    const float r[3] = {1, 2, 1};
    compare_tensor(&hp, 3, r, 1e-4);
}

/* ---- sampling ------------------------------------------------------------------------ */

/* The candidates the devices send must give the same draws as the full
 * logits, with and without a repetition penalty (either direction). */
static void sample_same(int n, const tsr_sampler_params *base)
{
    tsr_model_hparams hp = tiny();
    tsr_model_config cfg;
    config(&cfg, n > 1 ? TSR_SPLIT_TENSOR : TSR_SPLIT_NONE, n, NULL);
    tsr_model *a = NULL, *b = NULL;
    cr_assert_eq(tsr_model_generate(&hp, 3, &cfg, &a), TSR_OK, "%s", tsr_last_error());
    cr_assert_eq(tsr_model_generate(&hp, 3, &cfg, &b), TSR_OK, "%s", tsr_last_error());
    tsr_sampler_params pa = *base, pb = *base;
    pb.gather_logits = true;
    int32_t ta = 1, tb = 1;
    int distinct = 0, prev = -1;
    for (int s = 0; s < 24; s++) {
        cr_assert_eq(tsr_model_eval(a, &ta, 1), TSR_OK, "%s", tsr_last_error());
        cr_assert_eq(tsr_model_eval(b, &tb, 1), TSR_OK, "%s", tsr_last_error());
        cr_assert_eq(tsr_model_sample(a, &pa, &ta), TSR_OK, "%s", tsr_last_error());
        cr_assert_eq(tsr_model_sample(b, &pb, &tb), TSR_OK, "%s", tsr_last_error());
        cr_assert_eq(ta, tb, "%d devices, step %d: candidates drew %d, gathered logits %d", n, s,
                     ta, tb);
        distinct += ta != prev;
        prev = ta;
    }
    /* Not one token over and over (a penalty below 1 rewards repeats, though). */
    cr_assert_gt(distinct, base->repeat_penalty >= 1.0f ? 4 : 1, "%d devices: %d token changes", n,
                 distinct);
    tsr_model_free(a);
    tsr_model_free(b);
}

Test(model, sample_distributed_equals_gathered)
{
    const tsr_sampler_params p[] = {
        {.temperature = 0.0f, .top_p = 1.0f, .repeat_penalty = 1.5f, .repeat_last_n = 16},
        {.temperature = 0.8f, .top_k = 40, .top_p = 0.9f, .repeat_penalty = 1.0f, .seed = 5},
        {.temperature = 1.2f,
         .top_k = 8,
         .top_p = 1.0f,
         .repeat_penalty = 1.3f,
         .repeat_last_n = 8,
         .seed = 9},
        {.temperature = 0.7f,
         .top_k = 5,
         .top_p = 0.5f,
         .repeat_penalty = 0.7f,
         .repeat_last_n = 32,
         .seed = 1},
    };
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) {
        sample_same(1, &p[i]);
        sample_same(3, &p[i]);
    }
}

/* A seed gives the same tokens again; another seed, other tokens. */
Test(model, sample_seeded)
{
    tsr_model_hparams hp = tiny();
    tsr_model_config cfg;
    config(&cfg, TSR_SPLIT_TENSOR, 2, NULL);
    tsr_model *m = NULL;
    cr_assert_eq(tsr_model_generate(&hp, 3, &cfg, &m), TSR_OK, "%s", tsr_last_error());
    int32_t run[3][16];
    const uint64_t seeds[3] = {7, 7, 8};
    for (int k = 0; k < 3; k++) {
        tsr_model_reset(m);
        const tsr_sampler_params sp = {.temperature = 1.5f,
                                       .top_k = 50,
                                       .top_p = 1.0f,
                                       .repeat_penalty = 1.0f,
                                       .seed = seeds[k]};
        int32_t t = 2;
        for (int s = 0; s < 16; s++) {
            cr_assert_eq(tsr_model_eval(m, &t, 1), TSR_OK, "%s", tsr_last_error());
            cr_assert_eq(tsr_model_sample(m, &sp, &t), TSR_OK, "%s", tsr_last_error());
            run[k][s] = t;
        }
    }
    cr_assert_arr_eq(run[0], run[1], sizeof(run[0]), "same seed, different tokens");
    cr_assert(memcmp(run[0], run[2], sizeof(run[0])) != 0, "seeds 7 and 8 drew the same tokens");
    tsr_model_free(m);
}

/* ---- errors ---------------------------------------------------------------------------- */

Test(model, errors)
{
    tsr_model_hparams hp = tiny();
    tsr_model_config cfg;
    config(&cfg, TSR_SPLIT_TENSOR, 2, NULL);
    tsr_model *m = NULL;
    cr_assert_eq(tsr_model_generate(&hp, 1, &cfg, &m), TSR_OK, "%s", tsr_last_error());
    const int32_t bad = hp.n_vocab;
    cr_assert_eq(tsr_model_eval(m, &bad, 1), TSR_ERANGE);
    cr_assert(strstr(tsr_last_error(), "vocabulary"), "%s", tsr_last_error());
    int32_t tok[65] = {0};
    cr_assert_eq(tsr_model_eval(m, tok, 65), TSR_ERANGE, "a prompt longer than the context");
    cr_assert(strstr(tsr_last_error(), "context"), "%s", tsr_last_error());
    int32_t t;
    const tsr_sampler_params sp = {.temperature = 1.0f, .top_p = 1.0f, .repeat_penalty = 1.0f};
    cr_assert_eq(tsr_model_sample(m, &sp, &t), TSR_EINVAL, "sampling before any evaluation");
    const tsr_sampler_params bad_p = {.temperature = 1.0f, .top_p = 2.0f, .repeat_penalty = 1.0f};
    cr_assert_eq(tsr_model_eval(m, tok, 1), TSR_OK);
    cr_assert_eq(tsr_model_sample(m, &bad_p, &t), TSR_EINVAL);
    /* A tensor without a split rule. */
    tsr_ctx *c = tsr_ctx_new(4);
    tsr_tensor *x =
        tsr_set_name(tsr_new_tensor_1d(c, TSR_TYPE_F32, 8), "blk.0.attn_mystery.weight");
    tsr_split s;
    cr_assert_eq(tsr_model_split(x, 2, &s, m), TSR_EUNSUPPORTED);
    cr_assert(strstr(tsr_last_error(), "attn_mystery"), "%s", tsr_last_error());
    tsr_ctx_free(c);
    tsr_model_free(m);

    /* More layer stages than layers. */
    hp.n_layer = 2;
    config(&cfg, TSR_SPLIT_LAYER, 3, NULL);
    cr_assert_eq(tsr_model_generate(&hp, 1, &cfg, &m), TSR_EINVAL);
    cr_assert(strstr(tsr_last_error(), "layers"), "%s", tsr_last_error());
    cr_assert_null(m);
    /* Bad hyper-parameters. */
    hp = tiny();
    hp.n_head_kv = 3;
    config(&cfg, TSR_SPLIT_NONE, 1, NULL);
    cr_assert_eq(tsr_model_generate(&hp, 1, &cfg, &m), TSR_EINVAL);
    hp = tiny();
    hp.wtype = TSR_TYPE_Q8_0;
    hp.n_ff = 100;
    cr_assert_eq(tsr_model_generate(&hp, 1, &cfg, &m), TSR_EINVAL);
}

/* ---- GGUF ------------------------------------------------------------------------------ */

static void temp_path(char *buf, size_t size, const char *tag)
{
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    static int serial;
    snprintf(buf, size, "%s/tsr_test_model_%d_%s_%d.gguf", dir, (int)getpid(), tag, serial++);
}

/* Saving and loading gives the same model: the same tokens and logits as the
 * generated original, for the features the file has to describe. */
static void round_trip(tsr_model_hparams hp, const char *tag)
{
    char path[256];
    temp_path(path, sizeof(path), tag);
    tsr_model_config one, two;
    config(&one, TSR_SPLIT_NONE, 1, NULL);
    config(&two, TSR_SPLIT_TENSOR, 2, NULL);
    tsr_model *m = NULL;
    cr_assert_eq(tsr_model_generate(&hp, 42, &one, &m), TSR_OK, "%s", tsr_last_error());
    cr_assert_eq(tsr_model_save(m, path), TSR_OK, "save: %s", tsr_last_error());
    tsr_model_free(m);
    trace want, got;
    run_trace(&hp, &one, &want);
    tsr_model *l = NULL;
    cr_assert_eq(tsr_model_load(path, &two, &l), TSR_OK, "load %s: %s", tag, tsr_last_error());
    const tsr_model_hparams *lh = tsr_model_get_hparams(l);
    cr_assert(lh->n_vocab == hp.n_vocab && lh->n_layer == hp.n_layer &&
                  lh->head_dim == hp.head_dim && lh->head_dim_v == hp.head_dim_v &&
                  lh->fused_qkv == hp.fused_qkv && lh->qk_norm == hp.qk_norm &&
                  lh->attn_bias == hp.attn_bias && lh->ffn_bias == hp.ffn_bias &&
                  lh->tied_embd == hp.tied_embd && lh->n_expert == hp.n_expert &&
                  lh->rope_mode == hp.rope_mode && lh->wtype == hp.wtype &&
                  lh->rms_eps == hp.rms_eps && lh->rope_base == hp.rope_base,
              "%s: hyper-parameters changed in the file", tag);
    trace_model(l, &got);
    tsr_model_free(l);
    unlink(path);
    for (int s = 0; s < STEPS; s++)
        cr_assert_eq(got.tokens[s], want.tokens[s], "%s: step %d", tag, s);
    for (int s = 0; s <= STEPS; s++) {
        const size_t o = (size_t)s * (size_t)hp.n_vocab;
        const double e = tu_nmse(got.logits + o, want.logits + o, hp.n_vocab);
        cr_assert_leq(e, 1e-6, "%s: step %d NMSE %.3g", tag, s, e);
    }
    free(want.logits);
    free(got.logits);
}

Test(model_gguf, round_trip)
{
    tsr_model_hparams hp = tiny();
    round_trip(hp, "plain");
    hp.fused_qkv = hp.qk_norm = hp.attn_bias = hp.ffn_bias = hp.tied_embd = true;
    hp.head_dim = hp.n_rot = 48;
    hp.head_dim_v = 32;
    hp.rope_mode = TSR_ROPE_NEOX;
    round_trip(hp, "features");
    cr_assert_eq(tsr_model_preset("tiny-moe", &hp), TSR_OK);
    hp.ffn_bias = true;
    round_trip(hp, "moe");
    hp = tiny();
    hp.wtype = TSR_TYPE_Q8_0;
    round_trip(hp, "q8_0");
    hp.wtype = TSR_TYPE_F16;
    round_trip(hp, "f16");
}

/* A hand-written one-layer llama file, with one thing wrong. */
typedef enum { GOOD, NO_ARCH_LLAMA, MISSING_TENSOR, EXTRA_TENSOR, WRONG_SHAPE, NO_EMBD_KEY } flaw;

static void write_small(const char *path, flaw f)
{
    tsr_gguf_writer *w = NULL;
    cr_assert_eq(tsr_gguf_writer_new(&w), TSR_OK);
    cr_assert_eq(
        tsr_gguf_writer_set_str(w, "general.architecture", f == NO_ARCH_LLAMA ? "gpt2" : "llama"),
        TSR_OK);
    if (f != NO_EMBD_KEY)
        tsr_gguf_writer_set_u32(w, "llama.embedding_length", 32);
    tsr_gguf_writer_set_u32(w, "llama.block_count", 1);
    tsr_gguf_writer_set_u32(w, "llama.feed_forward_length", 64);
    tsr_gguf_writer_set_u32(w, "llama.attention.head_count", 2);
    tsr_gguf_writer_set_u32(w, "llama.attention.head_count_kv", 1);
    tsr_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    static float zeros[64 * 64];
    const struct {
        const char *name;
        int64_t ne0, ne1;
    } t[] = {{"token_embd.weight", 32, 64},    {"output_norm.weight", 32, 1},
             {"output.weight", 32, 64},        {"blk.0.attn_norm.weight", 32, 1},
             {"blk.0.attn_q.weight", 32, 32},  {"blk.0.attn_k.weight", 32, 16},
             {"blk.0.attn_v.weight", 32, 16},  {"blk.0.attn_output.weight", 32, 32},
             {"blk.0.ffn_norm.weight", 32, 1}, {"blk.0.ffn_gate.weight", 32, 64},
             {"blk.0.ffn_up.weight", 32, 64},  {"blk.0.ffn_down.weight", 64, 32}};
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        if (f == MISSING_TENSOR && strcmp(t[i].name, "blk.0.ffn_up.weight") == 0)
            continue;
        int64_t ne[2] = {t[i].ne0, t[i].ne1};
        if (f == WRONG_SHAPE && strcmp(t[i].name, "blk.0.attn_k.weight") == 0)
            ne[1] = 32;
        cr_assert_eq(
            tsr_gguf_writer_add_tensor(w, t[i].name, TSR_TYPE_F32, ne[1] > 1 ? 2 : 1, ne, zeros),
            TSR_OK, "%s", tsr_last_error());
    }
    if (f == EXTRA_TENSOR) {
        const int64_t ne[1] = {32};
        cr_assert_eq(
            tsr_gguf_writer_add_tensor(w, "blk.0.attn_sinks.weight", TSR_TYPE_F32, 1, ne, zeros),
            TSR_OK);
    }
    cr_assert_eq(tsr_gguf_writer_write(w, path), TSR_OK, "%s", tsr_last_error());
    tsr_gguf_writer_free(w);
}

Test(model_gguf, malformed)
{
    const struct {
        flaw f;
        tsr_status st;
        const char *says;
    } cases[] = {{GOOD, TSR_OK, ""},
                 {NO_ARCH_LLAMA, TSR_EUNSUPPORTED, "gpt2"},
                 {MISSING_TENSOR, TSR_EFORMAT, "blk.0.ffn_up.weight"},
                 {EXTRA_TENSOR, TSR_EUNSUPPORTED, "blk.0.attn_sinks.weight"},
                 {WRONG_SHAPE, TSR_EFORMAT, "blk.0.attn_k.weight"},
                 {NO_EMBD_KEY, TSR_EFORMAT, "llama.embedding_length"}};
    tsr_model_config cfg;
    config(&cfg, TSR_SPLIT_TENSOR, 2, NULL);
    char path[256];
    temp_path(path, sizeof(path), "small");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_small(path, cases[i].f);
        tsr_model *m = NULL;
        const tsr_status st = tsr_model_load(path, &cfg, &m);
        cr_assert_eq(st, cases[i].st, "case %zu: %s (%s)", i, tsr_status_str(st), tsr_last_error());
        if (st == TSR_OK) {
            const int32_t tok = 5;
            cr_assert_eq(tsr_model_eval(m, &tok, 1), TSR_OK, "%s", tsr_last_error());
        } else {
            cr_assert_null(m);
            cr_assert(strstr(tsr_last_error(), cases[i].says), "case %zu: '%s' does not name '%s'",
                      i, tsr_last_error(), cases[i].says);
            cr_assert(strstr(tsr_last_error(), path), "case %zu: '%s' does not name the file", i,
                      tsr_last_error());
        }
        tsr_model_free(m);
    }
    /* Every truncation of a valid file fails cleanly. */
    write_small(path, GOOD);
    FILE *fp = fopen(path, "rb");
    cr_assert_not_null(fp);
    static char whole[1 << 16];
    const size_t n = fread(whole, 1, sizeof(whole), fp);
    fclose(fp);
    for (size_t cut = 0; cut < n; cut += n / 97 + 1) {
        fp = fopen(path, "wb");
        cr_assert_eq(fwrite(whole, 1, cut, fp), cut);
        fclose(fp);
        tsr_model *m = NULL;
        cr_assert_neq(tsr_model_load(path, &cfg, &m), TSR_OK, "a file cut at %zu of %zu loaded",
                      cut, n);
        cr_assert_null(m);
    }
    unlink(path);
}
