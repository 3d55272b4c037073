/* tools/cli_run.c — `tessera run`: a model (GGUF file or generated preset)
 * on a set of devices in one split mode; prefill, decode, speed, memory and
 * all-reduce figures, and optionally a check against one device.
 *
 * Not the model (model/). Verification feeds the single-device run the
 * tokens the split run chose (teacher forcing), so the logits of every step
 * are compared at the same positions and the first step where the two would
 * pick different tokens is reported.
 */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessera/model.h"
#include "tools/cli.h"

int cli_run(int argc, char **argv);

typedef struct run_opts {
    const char *model, *preset, *devices, *dump, *rpc;
    tsr_split_mode mode;
    bool mode_set;
    float ratios[CLI_MAX_DEVICES];
    int n_ratios;
    int prompt_tokens, gen, n_ctx, threads;
    int32_t *prompt;
    int n_prompt;
    uint64_t seed;
    tsr_sampler_params sp;
    tsr_type wtype, kv_type;
    bool wtype_set, verify, json, quiet;
} run_opts;

static void run_usage(FILE *f)
{
    fprintf(
        f,
        "usage: tessera run (--model FILE | --preset NAME) [options]\n"
        "\n"
        "Runs a model over a set of devices: a prompt, then --gen decode steps; prints\n"
        "prefill and decode tokens/s, memory per device and the all-reduce figures.\n"
        "\n"
        "model:\n"
        "  --model FILE          a GGUF file (llama architecture)\n"
        "  --preset NAME         generated weights of a named shape (see below)\n"
        "  --wtype TYPE          preset weight type: f32, f16, bf16, q8_0 (default: the preset's)\n"
        "  --seed S              seed of the generated weights, prompt and sampling (default 1)\n"
        "devices:\n"
        "  --devices LIST        e.g. cpu:0,cpu:1 (default: every GPU, else every CPU device)\n"
        "  --rpc ENDPOINT[,...]  add the devices of tessera RPC servers, named rpc:0, rpc:1, ...\n"
        "                        in --devices (host:port, tcp://, ipc://, tls+tcp://)\n"
        "  --split-mode MODE     none | layer | tensor (default: tensor for several devices)\n"
        "  --tensor-split R      device shares, e.g. 3,1 (default: even)\n"
        "  --threads N           CPU threads per CPU device (default: its share of the cores)\n"
        "  --ctx N               KV cache length (default: prompt + gen)\n"
        "  --kv-type TYPE        f16 or f32 (default f16)\n"
        "tokens:\n"
        "  --prompt-tokens N     a prompt of N token ids drawn from --seed (default 32)\n"
        "  --prompt-ids LIST     the prompt as token ids, e.g. 1,15043,3186\n"
        "  --gen N               decode steps (default 32)\n"
        "sampling (default greedy):\n"
        "  --temp T  --top-k K  --top-p P  --repeat-penalty R  --repeat-last-n N\n"
        "  --gather-logits       sample from the full logits instead of per-device candidates\n"
        "output:\n"
        "  --verify              re-run on the first device alone; compare logits and tokens\n"
        "                        (exit status 1 when the tokens differ)\n"
        "  --dump-logits FILE    float32 logits, one row of n_vocab per step (the last prompt\n"
        "                        position, then every decode step)\n"
        "  --json                one JSON object instead of the table\n"
        "  --quiet               no progress bar or warnings\n"
        "\npresets:\n");
    for (const char *const *p = tsr_model_preset_names(); *p; p++)
        fprintf(f, "  %-14s %s\n", *p, tsr_model_preset_describe(*p));
}

static bool parse_type(const char *opt, const char *s, tsr_type *out)
{
    const tsr_type all[] = {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_BF16, TSR_TYPE_Q8_0};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (strcmp(s, tsr_type_name(all[i])) == 0) {
            *out = all[i];
            return true;
        }
    fprintf(stderr, "tessera: %s: '%s' is not one of f32, f16, bf16, q8_0\n", opt, s);
    return false;
}

/* 0: parsed; 1: --help shown; 2: usage error. */
static int parse(int argc, char **argv, run_opts *o)
{
    enum {
        O_MODEL = 256,
        O_PRESET,
        O_WTYPE,
        O_SEED,
        O_DEVICES,
        O_MODE,
        O_SPLIT,
        O_THREADS,
        O_CTX,
        O_KV,
        O_PTOK,
        O_PIDS,
        O_GEN,
        O_TEMP,
        O_TOPK,
        O_TOPP,
        O_RPEN,
        O_RLAST,
        O_GATHER,
        O_VERIFY,
        O_DUMP,
        O_JSON,
        O_QUIET,
        O_HELP,
        O_RPC
    };
    static const struct option longopts[] = {{"model", required_argument, 0, O_MODEL},
                                             {"preset", required_argument, 0, O_PRESET},
                                             {"wtype", required_argument, 0, O_WTYPE},
                                             {"seed", required_argument, 0, O_SEED},
                                             {"devices", required_argument, 0, O_DEVICES},
                                             {"rpc", required_argument, 0, O_RPC},
                                             {"split-mode", required_argument, 0, O_MODE},
                                             {"tensor-split", required_argument, 0, O_SPLIT},
                                             {"threads", required_argument, 0, O_THREADS},
                                             {"ctx", required_argument, 0, O_CTX},
                                             {"kv-type", required_argument, 0, O_KV},
                                             {"prompt-tokens", required_argument, 0, O_PTOK},
                                             {"prompt-ids", required_argument, 0, O_PIDS},
                                             {"gen", required_argument, 0, O_GEN},
                                             {"temp", required_argument, 0, O_TEMP},
                                             {"top-k", required_argument, 0, O_TOPK},
                                             {"top-p", required_argument, 0, O_TOPP},
                                             {"repeat-penalty", required_argument, 0, O_RPEN},
                                             {"repeat-last-n", required_argument, 0, O_RLAST},
                                             {"gather-logits", no_argument, 0, O_GATHER},
                                             {"verify", no_argument, 0, O_VERIFY},
                                             {"dump-logits", required_argument, 0, O_DUMP},
                                             {"json", no_argument, 0, O_JSON},
                                             {"quiet", no_argument, 0, O_QUIET},
                                             {"help", no_argument, 0, O_HELP},
                                             {0, 0, 0, 0}};
    long v;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case O_MODEL:
            o->model = optarg;
            break;
        case O_PRESET:
            o->preset = optarg;
            break;
        case O_WTYPE:
            ok = parse_type("--wtype", optarg, &o->wtype), o->wtype_set = true;
            break;
        case O_SEED:
            ok = cli_u64("--seed", optarg, &o->seed);
            break;
        case O_DEVICES:
            o->devices = optarg;
            break;
        case O_RPC:
            o->rpc = optarg;
            break;
        case O_MODE:
            o->mode_set = true;
            if (strcmp(optarg, "none") == 0)
                o->mode = TSR_SPLIT_NONE;
            else if (strcmp(optarg, "layer") == 0)
                o->mode = TSR_SPLIT_LAYER;
            else if (strcmp(optarg, "tensor") == 0)
                o->mode = TSR_SPLIT_TENSOR;
            else {
                fprintf(stderr, "tessera: --split-mode: '%s' is not none, layer or tensor\n",
                        optarg);
                ok = false;
            }
            break;
        case O_SPLIT:
            ok = cli_floats("--tensor-split", optarg, o->ratios, CLI_MAX_DEVICES, &o->n_ratios);
            break;
        case O_THREADS:
            ok = cli_long("--threads", optarg, 1, 1024, &v), o->threads = (int)v;
            break;
        case O_CTX:
            ok = cli_long("--ctx", optarg, 1, 1 << 20, &v), o->n_ctx = (int)v;
            break;
        case O_KV:
            ok = parse_type("--kv-type", optarg, &o->kv_type);
            break;
        case O_PTOK:
            ok = cli_long("--prompt-tokens", optarg, 1, 1 << 20, &v), o->prompt_tokens = (int)v;
            break;
        case O_PIDS:
            free(o->prompt);
            o->prompt = malloc(strlen(optarg) * sizeof(int32_t) + sizeof(int32_t));
            ok = o->prompt &&
                 cli_ints("--prompt-ids", optarg, o->prompt, (int)strlen(optarg) + 1, &o->n_prompt);
            break;
        case O_GEN:
            ok = cli_long("--gen", optarg, 0, 1 << 20, &v), o->gen = (int)v;
            break;
        case O_TEMP:
            ok = cli_float("--temp", optarg, 0, 100, &o->sp.temperature);
            break;
        case O_TOPK:
            ok = cli_long("--top-k", optarg, 0, INT32_MAX, &v), o->sp.top_k = (int)v;
            break;
        case O_TOPP:
            ok = cli_float("--top-p", optarg, 0, 1, &o->sp.top_p);
            break;
        case O_RPEN:
            ok = cli_float("--repeat-penalty", optarg, 1e-3, 1e3, &o->sp.repeat_penalty);
            break;
        case O_RLAST:
            ok = cli_long("--repeat-last-n", optarg, 0, 1 << 20, &v), o->sp.repeat_last_n = (int)v;
            break;
        case O_GATHER:
            o->sp.gather_logits = true;
            break;
        case O_VERIFY:
            o->verify = true;
            break;
        case O_DUMP:
            o->dump = optarg;
            break;
        case O_JSON:
            o->json = true;
            break;
        case O_QUIET:
            o->quiet = true;
            break;
        case 'h':
        case O_HELP:
            run_usage(stdout);
            return 1;
        default:
            fprintf(stderr,
                    "tessera run: unknown or incomplete option '%s' (see tessera run --help)\n",
                    argv[optind - 1]);
            return 2;
        }
        if (!ok)
            return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "tessera run: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o->model == !o->preset) {
        fprintf(stderr, "tessera run: give one of --model FILE or --preset NAME (see --help)\n");
        return 2;
    }
    if (o->model && o->wtype_set) {
        fprintf(stderr, "tessera run: --wtype applies to --preset only\n");
        return 2;
    }
    return 0;
}

/* ---- running ---------------------------------------------------------------------- */

typedef struct run_result {
    int32_t *tokens; /* [gen] */
    float *logits;   /* [(gen + 1) · n_vocab] when recorded */
    double load_s;
    tsr_model_stats stats;
    double ar_s;     /* one all-reduce, timed alone */
    int first_diff;  /* verify: first step with another token, -1 when none */
    double max_diff; /* verify: max |Δlogit| */
} run_result;

static tsr_status make_model(const run_opts *o, const tsr_model_config *cfg, tsr_model **m)
{
    if (o->model)
        return tsr_model_load(o->model, cfg, m);
    tsr_model_hparams hp;
    tsr_status st = tsr_model_preset(o->preset, &hp);
    if (st != TSR_OK)
        return st;
    if (o->wtype_set)
        hp.wtype = o->wtype;
    return tsr_model_generate(&hp, o->seed, cfg, m);
}

/* Prompt, then gen steps of sample + eval. With `force` (verification) the
 * tokens fed are force[] while the sampler's own choices are compared. */
static tsr_status generate(tsr_model *m, const run_opts *o, run_result *r, const int32_t *force)
{
    const int V = tsr_model_get_hparams(m)->n_vocab;
    tsr_status st = tsr_model_eval(m, o->prompt, o->n_prompt);
    if (st == TSR_OK && r->logits)
        st = tsr_model_logits(m, r->logits);
    r->first_diff = -1;
    for (int s = 0; s < o->gen && st == TSR_OK; s++) {
        int32_t t;
        if ((st = tsr_model_sample(m, &o->sp, &t)) != TSR_OK)
            break;
        r->tokens[s] = t;
        if (force && t != force[s] && r->first_diff < 0)
            r->first_diff = s;
        /* Enqueued: the next sample waits for it (one round trip per remote
         * server per step); the last step waits here. */
        const int32_t *next = force ? &force[s] : &t;
        st = s + 1 < o->gen ? tsr_model_eval_async(m, next, 1) : tsr_model_eval(m, next, 1);
        if (st != TSR_OK)
            break;
        if (r->logits)
            st = tsr_model_logits(m, r->logits + (size_t)(s + 1) * (size_t)V);
    }
    tsr_model_stats_get(m, &r->stats);
    return st;
}

static tsr_status run_once(const run_opts *o, const tsr_model_config *cfg, run_result *r,
                           const int32_t *force, int *n_vocab, tsr_model_hparams *hp_out)
{
    tsr_model *m = NULL;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    tsr_status st = make_model(o, cfg, &m);
    clock_gettime(CLOCK_MONOTONIC, &b);
    r->load_s = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    if (st != TSR_OK)
        return st;
    const tsr_model_hparams *hp = tsr_model_get_hparams(m);
    *n_vocab = hp->n_vocab;
    if (hp_out)
        *hp_out = *hp;
    r->tokens = calloc((size_t)o->gen + 1, sizeof(int32_t));
    if (st == TSR_OK && (o->verify || o->dump))
        r->logits = malloc((size_t)(o->gen + 1) * (size_t)hp->n_vocab * sizeof(float));
    if (st == TSR_OK && (!r->tokens || ((o->verify || o->dump) && !r->logits)))
        st = TSR_ENOMEM;
    if (st == TSR_OK)
        st = generate(m, o, r, force);
    if (st == TSR_OK && cfg->split_mode == TSR_SPLIT_TENSOR)
        st = tsr_model_allreduce_time(m, 200, &r->ar_s);
    tsr_model_free(m);
    return st;
}

/* ---- output ------------------------------------------------------------------------ */

static const char *mode_name(tsr_split_mode m)
{
    return m == TSR_SPLIT_TENSOR ? "tensor" : m == TSR_SPLIT_LAYER ? "layer" : "none";
}

static double rate(int n, double s) { return s > 0 ? (double)n / s : 0.0; }

static void print_table(const run_opts *o, const tsr_model_config *cfg, const tsr_model_hparams *hp,
                        const run_result *r, const run_result *ver)
{
    char name[32], b1[32];
    const tsr_model_stats *s = &r->stats;
    printf("model      %s%s: %d layers, n_embd %d, %d/%d heads, n_ff %d, vocab %d, %s%s\n",
           o->model ? "" : "preset ", o->model ? o->model : o->preset, hp->n_layer, hp->n_embd,
           hp->n_head, hp->n_head_kv, hp->n_ff, hp->n_vocab, tsr_type_name(hp->wtype),
           hp->n_expert ? ", MoE" : "");
    printf("devices   ");
    for (int j = 0; j < cfg->n_devices; j++)
        printf(" %s", cli_dev_name(cfg->devices[j], name, sizeof(name)));
    printf("   split %s", mode_name(cfg->split_mode));
    if (o->n_ratios) {
        printf(" (");
        for (int j = 0; j < o->n_ratios; j++)
            printf("%s%g", j ? ":" : "", (double)o->ratios[j]);
        printf(")");
    }
    printf("\n%s       %.2f s\n", o->model ? "load" : "init", r->load_s);
    printf("prefill    %5d tokens  %9.2f tok/s  (%.1f ms)\n", s->prefill_tokens,
           rate(s->prefill_tokens, s->prefill_s), s->prefill_s * 1e3);
    printf("decode     %5d tokens  %9.2f tok/s  (%.2f ms/token)\n", s->decode_tokens,
           rate(s->decode_tokens, s->decode_s),
           s->decode_tokens ? s->decode_s * 1e3 / s->decode_tokens : 0.0);
    if (cfg->split_mode == TSR_SPLIT_TENSOR)
        printf(
            "all-reduce %5d per token, path %s, %.1f us each timed alone (%.2f ms/token, %.1f%% of "
            "a decode step)\n",
            s->allreduce_per_token, tsr_allreduce_path_name(s->path), r->ar_s * 1e6,
            r->ar_s * 1e3 * s->allreduce_per_token,
            s->decode_tokens && s->decode_s > 0
                ? 100.0 * r->ar_s * s->allreduce_per_token / (s->decode_s / s->decode_tokens)
                : 0.0);
    printf("memory    ");
    for (int j = 0; j < cfg->n_devices; j++)
        if (s->device_bytes[j] || cfg->split_mode != TSR_SPLIT_NONE || j == 0)
            printf(" %s %s", cli_dev_name(cfg->devices[j], name, sizeof(name)),
                   cli_bytes((double)s->device_bytes[j], b1, sizeof(b1)));
    printf("\ntokens    ");
    for (int i = 0; i < o->gen; i++)
        printf(" %d", r->tokens[i]);
    printf("\n");
    if (ver) {
        printf("verify     %s alone: max |logit difference| %.3g over %d steps\n",
               cli_dev_name(cfg->devices[0], name, sizeof(name)), ver->max_diff, o->gen + 1);
        if (ver->first_diff < 0)
            printf("verify: tokens match\n");
        else
            printf("verify: tokens differ (first at step %d)\n", ver->first_diff);
    }
}

static void print_json(const run_opts *o, const tsr_model_config *cfg, const tsr_model_hparams *hp,
                       const run_result *r, const run_result *ver)
{
    char name[32];
    const tsr_model_stats *s = &r->stats;
    printf("{\"model\": ");
    cli_json_str(stdout, o->model ? o->model : o->preset);
    printf(", \"n_layer\": %d, \"n_embd\": %d, \"n_vocab\": %d, \"wtype\": \"%s\", \"devices\": [",
           hp->n_layer, hp->n_embd, hp->n_vocab, tsr_type_name(hp->wtype));
    for (int j = 0; j < cfg->n_devices; j++)
        printf("%s\"%s\"", j ? ", " : "", cli_dev_name(cfg->devices[j], name, sizeof(name)));
    printf("], \"split_mode\": \"%s\", \"load_s\": %.4f, \"prefill_tokens\": %d, "
           "\"prefill_tok_s\": %.3f, \"decode_tokens\": %d, \"decode_tok_s\": %.3f, ",
           mode_name(cfg->split_mode), r->load_s, s->prefill_tokens,
           rate(s->prefill_tokens, s->prefill_s), s->decode_tokens,
           rate(s->decode_tokens, s->decode_s));
    printf("\"allreduce_per_token\": %d, \"allreduce_path\": \"%s\", \"allreduce_us\": %.2f, "
           "\"device_bytes\": [",
           s->allreduce_per_token,
           cfg->split_mode == TSR_SPLIT_TENSOR ? tsr_allreduce_path_name(s->path) : "none",
           r->ar_s * 1e6);
    for (int j = 0; j < cfg->n_devices; j++)
        printf("%s%zu", j ? ", " : "", s->device_bytes[j]);
    printf("], \"tokens\": [");
    for (int i = 0; i < o->gen; i++)
        printf("%s%d", i ? ", " : "", r->tokens[i]);
    printf("]");
    if (ver)
        printf(", \"verify\": {\"max_abs_diff\": %.6g, \"tokens_match\": %s, \"first_diff\": %d}",
               ver->max_diff, ver->first_diff < 0 ? "true" : "false", ver->first_diff);
    printf("}\n");
}

static tsr_status dump_logits(const char *path, const float *l, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return TSR_EIO;
    const size_t w = fwrite(l, sizeof(float), n, f);
    const int c = fclose(f);
    return w == n && c == 0 ? TSR_OK : TSR_EIO;
}

static void result_free(run_result *r)
{
    free(r->tokens);
    free(r->logits);
}

int cli_run(int argc, char **argv)
{
    run_opts o = {
        .mode = TSR_SPLIT_TENSOR,
        .prompt_tokens = 32,
        .gen = 32,
        .seed = 1,
        .kv_type = TSR_TYPE_F16,
        .sp = {.temperature = 0.0f, .top_p = 1.0f, .repeat_penalty = 1.0f, .repeat_last_n = 64}};
    int rc = parse(argc, argv, &o);
    if (rc) {
        free(o.prompt);
        return rc == 1 ? 0 : 2;
    }
    o.sp.seed = o.seed;
    cli_prepare_cpu_devices(o.devices);
    if (o.rpc && !cli_add_rpc("run", o.rpc)) {
        free(o.prompt);
        return 1;
    }
    tsr_model_config cfg;
    tsr_model_config_default(&cfg);
    if (o.devices ? !cli_parse_devices(o.devices, cfg.devices, CLI_MAX_DEVICES, &cfg.n_devices)
                  : (cfg.n_devices = cli_default_devices(cfg.devices, CLI_MAX_DEVICES)) == 0) {
        if (!o.devices)
            fprintf(stderr, "tessera run: no devices\n");
        free(o.prompt);
        return 2;
    }
    cfg.split_mode = o.mode_set ? o.mode : cfg.n_devices > 1 ? TSR_SPLIT_TENSOR : TSR_SPLIT_NONE;
    if (cfg.split_mode == TSR_SPLIT_NONE && cfg.n_devices > 1) {
        fprintf(stderr, "tessera run: --split-mode none runs on one device, %d given\n",
                cfg.n_devices);
        free(o.prompt);
        return 2;
    }
    if (o.n_ratios && o.n_ratios != cfg.n_devices) {
        fprintf(stderr, "tessera run: --tensor-split has %d values for %d devices\n", o.n_ratios,
                cfg.n_devices);
        free(o.prompt);
        return 2;
    }
    for (int j = 0; j < o.n_ratios; j++)
        cfg.tensor_split[j] = o.ratios[j];
    if (!o.prompt) {
        o.n_prompt = o.prompt_tokens;
        o.prompt = malloc((size_t)o.n_prompt * sizeof(int32_t));
        if (!o.prompt)
            return 1;
        /* Ids below 1000 fit every preset's vocabulary; a file's is checked on eval. */
        uint64_t x = o.seed * 0x9e3779b97f4a7c15ull + 1;
        for (int i = 0; i < o.n_prompt; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            o.prompt[i] = (int32_t)(x % 500) + 3;
        }
    }
    cfg.n_ctx = o.n_ctx ? o.n_ctx : o.n_prompt + o.gen;
    cfg.kv_type = o.kv_type;
    cfg.n_threads = o.threads;
    cfg.quiet = o.quiet || o.json;

    run_result r = {0}, ver = {0};
    tsr_model_hparams hp;
    int V = 0;
    tsr_status st = run_once(&o, &cfg, &r, NULL, &V, &hp);
    if (st == TSR_OK && o.verify) {
        tsr_model_config one = cfg;
        one.split_mode = TSR_SPLIT_NONE;
        one.n_devices = 1;
        st = run_once(&o, &one, &ver, r.tokens, &V, NULL);
        for (size_t i = 0; st == TSR_OK && i < (size_t)(o.gen + 1) * (size_t)V; i++)
            ver.max_diff = fmax(ver.max_diff, fabs((double)r.logits[i] - (double)ver.logits[i]));
    }
    if (st == TSR_OK && o.dump &&
        dump_logits(o.dump, r.logits, (size_t)(o.gen + 1) * (size_t)V) != TSR_OK) {
        fprintf(stderr, "tessera run: cannot write --dump-logits file '%s'\n", o.dump);
        rc = 1;
    }
    if (st != TSR_OK) {
        fprintf(stderr, "tessera run: %s\n",
                tsr_last_error()[0] ? tsr_last_error() : tsr_status_str(st));
        rc = 1;
    } else {
        if (o.json)
            print_json(&o, &cfg, &hp, &r, o.verify ? &ver : NULL);
        else
            print_table(&o, &cfg, &hp, &r, o.verify ? &ver : NULL);
        if (o.verify && ver.first_diff >= 0)
            rc = 1;
    }
    result_free(&r);
    result_free(&ver);
    free(o.prompt);
    return rc;
}
