/* bench/bench_model.c — the transformer's prefill and decode speed for split
 * none / layer / tensor over 1..4 CPU devices, on the TinyLlama-1.1B shape
 * (F16 and Q8_0 weights), each beside its physical bound measured in the
 * same run:
 *   decode  — a step reads every weight once, so tokens/s cannot exceed the
 *             streaming-read bandwidth (all cores; the best pass of those
 *             just before and after the decode run) divided by the weight
 *             bytes a step reads;
 *   prefill — the matrix products dominate, so the yardstick is tessera's
 *             own GEMM throughput for that weight type at bench_ops' shape
 *             (4096 x 14336 weights, 512 tokens, all cores); the prefill's
 *             rate counts the FLOPs of its matrix products only.
 * Each weight type's model is generated once into a GGUF file and loaded
 * (mapped) for every configuration. Threads: all cores for none and layer
 * (layer stages run one after another for one sequence), an even share
 * for tensor.
 *
 * Output: a Markdown table on stdout and in <out>/model.md, JSON lines in
 * <out>/model.jsonl, and <out>/model.dat for bench/plot_model.gp.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "tessera/model.h"
#ifdef TSR_BENCH_RPC
#include "rpc_testutil.h"
#include "tessera/rpc.h"
#endif
#include "tessera/tessera.h"

typedef struct {
    const char *out_dir, *preset;
    bool quick, remote_only;
    int prompt, gen, max_dev, cores;
    FILE *jl, *md, *dat;
} bench;

static void die(const char *what, tsr_status st)
{
    fprintf(stderr, "bench_model: %s: %s (%s)\n", what, tsr_status_str(st), tsr_last_error());
    exit(1);
}

static uint64_t remote_round_trips(tsr_dev *d)
{
#ifdef TSR_BENCH_RPC
    return tsr_rpc_round_trips(d);
#else
    (void)d;
    return 0;
#endif
}

/* Graphs re-run by reference on d's server (<< 32) plus graphs sent. */
static uint64_t remote_graphs(tsr_dev *d)
{
#ifdef TSR_BENCH_RPC
    tsr_rpc_stats st;
    tsr_rpc_stats_get(d, &st);
    return st.graphs_by_reference << 32 | st.graphs_sent;
#else
    (void)d;
    return 0;
#endif
}

/* tessera's GEMM on cpu0 (all cores): W [K, N] of `type` times X [K, T];
 * GFLOP/s of the best of 5. */
static double gemm_gflops(tsr_type type, int64_t K, int64_t N, int64_t T, int cores)
{
    tsr_dev *dev = tsr_reg_dev_get(tsr_cpu_reg(), 0);
    tsr_backend *be = NULL;
    tsr_status st = tsr_backend_new(dev, &be);
    if (st == TSR_OK)
        st = tsr_cpu_set_n_threads(be, cores);
    tsr_ctx *c = tsr_ctx_new(8);
    tsr_tensor *w = tsr_new_tensor_2d(c, type, K, N), *x = tsr_new_tensor_2d(c, TSR_TYPE_F32, K, T);
    tsr_tensor *y = tsr_mul_mat(c, w, x);
    tsr_graph *g = tsr_graph_new(8);
    tsr_buf *buf = NULL;
    if (st == TSR_OK)
        st = tsr_graph_build(g, y);
    if (st == TSR_OK)
        st = tsr_ctx_alloc_tensors(c, tsr_dev_buft(dev), &buf);
    if (st != TSR_OK)
        die("gemm baseline", st);
    /* Small values (any values time the same); zeros would be too easy for no one. */
    float *row = malloc((size_t)K * sizeof(float));
    void *conv = malloc(tsr_row_size(type, K));
    for (int64_t i = 0; i < K; i++)
        row[i] = (float)((i * 7) % 13 - 6) * 0.01f;
    tsr_row_from_f32(type, row, conv, K);
    for (int64_t r = 0; r < N && st == TSR_OK; r++)
        st = tsr_tensor_set(w, conv, (size_t)r * w->nb[1], tsr_row_size(type, K));
    for (int64_t r = 0; r < T && st == TSR_OK; r++)
        st = tsr_tensor_set(x, row, (size_t)r * x->nb[1], (size_t)K * sizeof(float));
    double best = 1e30;
    for (int rep = 0; rep < 5 && st == TSR_OK; rep++) {
        const double t0 = bu_now();
        st = tsr_backend_graph_compute(be, g);
        best = fmin(best, bu_now() - t0);
    }
    if (st != TSR_OK)
        die("gemm baseline", st);
    free(row);
    free(conv);
    tsr_buf_free(buf);
    tsr_graph_free(g);
    tsr_ctx_free(c);
    tsr_backend_free(be);
    return 2.0 * (double)K * (double)N * (double)T / best * 1e-9;
}

/* FLOPs of the matrix products of a prefill of T tokens (logits for the
 * last token only). */
static double prefill_flops(const tsr_model_hparams *hp, int T)
{
    const double E = hp->n_embd,
                 qkv = (double)hp->n_head * hp->head_dim + 2.0 * hp->n_head_kv * hp->head_dim;
    const double o = (double)hp->n_head * hp->head_dim_v;
    const double ffn = 3.0 * hp->n_ff * (hp->n_expert ? hp->n_expert_used : 1);
    const double per_tok = 2.0 * E * (qkv + o + ffn) * hp->n_layer;
    return per_tok * T + 2.0 * E * hp->n_vocab;
}

/* The streaming-read bandwidth now: the best of three passes. */
static double read_gbs(const bu_mem *mem, int cores)
{
    double best = 0;
    for (int i = 0; i < 3; i++)
        best = fmax(best, bu_read_gbs(mem, cores));
    return best;
}

typedef struct {
    tsr_split_mode mode;
    int n;
} config;

/* Set while the CPU + Vulkan configurations run: devices cpu0 + vulkan0
 * instead of cpu0..cpu(n-1). */
static bool with_vulkan;
/* Set while the remote configurations run: these devices instead (one per
 * tessera-rpc-server on this host), and the baseline they are compared to. */
static tsr_dev *remote[2];
static bool with_remote;
static double remote_baseline; /* decode tok/s of tensor x2 over local devices, 1 thread each */
static int force_threads;      /* CPU threads per device when > 0 */
#ifdef TSR_BENCH_RPC
static rt_server srv[2]; /* the servers behind remote[] */
#endif

static const char *mode_name(tsr_split_mode m)
{
    return m == TSR_SPLIT_TENSOR ? "tensor" : m == TSR_SPLIT_LAYER ? "layer" : "none";
}

/* Runs one configuration; returns decode tokens/s. */
static double run_config(bench *b, const char *path, tsr_type wtype, const config *cf, double gemm,
                         const bu_mem *mem, double single_decode)
{
    tsr_model_config cfg;
    tsr_model_config_default(&cfg);
    cfg.split_mode = cf->mode;
    cfg.n_devices = cf->n;
    cfg.n_ctx = b->prompt + b->gen;
    cfg.quiet = true;
    cfg.n_threads =
        cf->mode == TSR_SPLIT_TENSOR ? (b->cores / cf->n > 0 ? b->cores / cf->n : 1) : b->cores;
    if (force_threads > 0)
        cfg.n_threads = force_threads;
    for (int j = 0; j < cf->n; j++)
        cfg.devices[j] = with_remote             ? remote[j]
                         : with_vulkan && j == 1 ? tsr_reg_dev_get(tsr_reg_by_name("vulkan"), 0)
                                                 : tsr_reg_dev_get(tsr_cpu_reg(), (size_t)j);
    tsr_model *m = NULL;
    const double t_load = bu_now();
    tsr_status st = tsr_model_load(path, &cfg, &m);
    if (st != TSR_OK)
        die("load", st);
    const double load_s = bu_now() - t_load;
    const tsr_model_hparams *hp = tsr_model_get_hparams(m);
    int32_t *prompt = malloc((size_t)b->prompt * sizeof(int32_t));
    for (int i = 0; i < b->prompt; i++)
        prompt[i] = (int32_t)((i * 7919 + 17) % hp->n_vocab);
    /* Warm-up: one short prompt and a step, then forget them. */
    const tsr_sampler_params greedy = {.temperature = 0.0f, .top_p = 1.0f, .repeat_penalty = 1.0f};
    int32_t tok = 0;
    if ((st = tsr_model_eval(m, prompt, 4)) != TSR_OK ||
        (st = tsr_model_eval(m, &tok, 1)) != TSR_OK)
        die("warm-up", st);
    tsr_model_reset(m);
    if ((st = tsr_model_eval(m, prompt, b->prompt)) != TSR_OK)
        die("prefill", st);
    tsr_model_stats s0;
    tsr_model_stats_get(m, &s0);
    const double prefill_s = s0.prefill_s;
    const double bw0 = read_gbs(mem, b->cores);
    uint64_t rt[2] = {0, 0}, gr[2] = {0, 0};
    for (int i = 0; i < b->gen && st == TSR_OK; i++) {
        if (i == 1) /* round trips are counted from the second step (the first allocates) */
            for (int j = 0; j < 2 && with_remote; j++) {
                rt[j] = remote_round_trips(remote[j]);
                gr[j] = remote_graphs(remote[j]);
            }
        st = tsr_model_sample(m, &greedy, &tok);
        /* Steps 1 .. gen-1, each an enqueued eval and the sample that waits
         * for it (the last eval, which waits by itself, is not counted). */
        if (i + 1 == b->gen)
            for (int j = 0; j < 2 && with_remote; j++) {
                rt[j] = remote_round_trips(remote[j]) - rt[j];
                gr[j] = remote_graphs(remote[j]) - gr[j];
            }
        /* Enqueued: the next sample waits for it, as tessera run does. */
        if (st == TSR_OK)
            st = i + 1 < b->gen ? tsr_model_eval_async(m, &tok, 1) : tsr_model_eval(m, &tok, 1);
    }
    if (st != TSR_OK)
        die("decode", st);
    double rt_per_step = 0, by_ref = 0;
    for (int j = 0; j < 2 && with_remote && b->gen > 1; j++) {
        rt_per_step = fmax(rt_per_step, (double)rt[j] / (double)(b->gen - 1));
        const double sent = (double)(gr[j] & 0xffffffffu), ref = (double)(gr[j] >> 32);
        by_ref += sent + ref > 0 ? 0.5 * ref / (sent + ref) : 0;
    }
    const double bw1 = read_gbs(mem, b->cores);
    tsr_model_stats s;
    tsr_model_stats_get(m, &s);
    const double decode = s.decode_tokens / s.decode_s, bw = fmax(bw0, bw1);
    const double bound = bw * 1e9 / (double)s.decode_read_bytes;
    const double prefill = b->prompt / prefill_s;
    const double pf_gflops = prefill_flops(hp, b->prompt) / prefill_s * 1e-9;
    char label[48];
    snprintf(label, sizeof(label),
             with_remote   ? "%s %s rpc x%d"
             : with_vulkan ? "%s %s cpu+vk"
                           : "%s %s x%d",
             tsr_type_name(wtype), mode_name(cf->mode), cf->n);
    const double vs_single = single_decode > 0 ? decode / single_decode : 1.0;
    const char *target = "";
    if (wtype == TSR_TYPE_F16 && cf->mode == TSR_SPLIT_NONE)
        target = decode / bound >= 0.8 ? "decode >= 0.8 bound: met" : "decode >= 0.8 bound: MISSED";
    else if (wtype == TSR_TYPE_F16 && cf->mode == TSR_SPLIT_TENSOR && cf->n == 2)
        target = vs_single >= 0.9 ? "decode >= 0.9 single: met" : "decode >= 0.9 single: MISSED";
    char tgt_rpc[160];
    if (with_remote && cf->mode == TSR_SPLIT_TENSOR) {
        snprintf(tgt_rpc, sizeof(tgt_rpc),
                 "%.2fx local x2 1 thread (>= 0.8: %s); %.2f round trips/step/server (<= 1: %s); "
                 "%.0f%% of graphs by reference",
                 decode / remote_baseline, decode / remote_baseline >= 0.8 ? "met" : "MISSED",
                 rt_per_step, rt_per_step <= 1.0 ? "met" : "MISSED", 100 * by_ref);
        target = tgt_rpc;
    } else if (with_remote) {
        snprintf(tgt_rpc, sizeof(tgt_rpc),
                 "%.2f round trips/step/server; %.0f%% of graphs by reference", rt_per_step,
                 100 * by_ref);
        target = tgt_rpc;
    }
    char tgt2[48] = "";
    if (wtype == TSR_TYPE_F16 && cf->mode == TSR_SPLIT_NONE)
        snprintf(tgt2, sizeof(tgt2), "; prefill >= 0.7 gemm: %s",
                 pf_gflops / gemm >= 0.7 ? "met" : "MISSED");
    const char *fmt = "| %-18s | %2d | %7.2f | %7.2f | %5.2fx | %5.2fx | %7.1f | %6.1f | %6.1f | "
                      "%5.2fx | %4.1f | %4d | %s%s |\n";
    for (FILE *f = stdout;; f = b->md) {
        fprintf(f, fmt, label, cfg.n_threads, decode, bound, decode / bound, vs_single, prefill,
                pf_gflops, gemm, pf_gflops / gemm, load_s, s.allreduce_per_token, target, tgt2);
        if (f == b->md)
            break;
    }
    fflush(stdout);
    fprintf(
        b->jl,
        "{\"bench\":\"model\",\"preset\":\"%s\",\"wtype\":\"%s\",\"mode\":\"%s\",\"devices\":%d,"
        "\"threads\":%d,\"prompt\":%d,\"gen\":%d,\"decode_tok_s\":%.4f,\"read_gbs\":%.3f,"
        "\"decode_read_bytes\":%zu,\"decode_bound_tok_s\":%.4f,\"decode_vs_bound\":%.4f,"
        "\"vulkan\":%s,\"remote\":%s,\"round_trips_per_step\":%.3f,\"decode_vs_single\":%.4f,"
        "\"prefill_tok_s\":%.3f,\"prefill_gflops\":%.2f,"
        "\"gemm_gflops\":%.2f,\"prefill_vs_gemm\":%.4f,\"allreduce_per_token\":%d,\"path\":\"%s\"}"
        "\n",
        b->preset, tsr_type_name(wtype), mode_name(cf->mode), cf->n, cfg.n_threads, b->prompt,
        b->gen, decode, bw, s.decode_read_bytes, bound, decode / bound,
        with_vulkan ? "true" : "false", with_remote ? "true" : "false", rt_per_step, vs_single,
        prefill, pf_gflops, gemm, pf_gflops / gemm, s.allreduce_per_token,
        cf->mode == TSR_SPLIT_TENSOR ? tsr_allreduce_path_name(s.path) : "none");
    fprintf(b->dat, "\"%s\" %.4f %.4f\n", label, decode, bound);
    free(prompt);
    tsr_model_free(m);
    return decode;
}

/* Tensor and layer split over two tessera-rpc-server processes on this host
 * (one CPU device, one thread each), against tensor split over two local
 * CPU devices with one thread each, measured just before. */
static void run_remote(bench *b, const char *path, tsr_type wtype, double gemm, const bu_mem *mem,
                       double single)
{
#ifdef TSR_BENCH_RPC
    if (!remote[0]) {
        const char *const args[] = {"--device", "cpu:0", "--threads", "1", NULL};
        for (int j = 0; j < 2; j++) {
            size_t first = 0;
            if (!rt_server_start(&srv[j], NULL, args) ||
                tsr_rpc_add_server(srv[j].url, NULL, &first, NULL) != TSR_OK) {
                printf("rpc rows skipped: %s\n", tsr_last_error());
                return;
            }
            remote[j] = tsr_reg_dev_get(tsr_rpc_reg(), first);
        }
    }
    const config tensor2 = {TSR_SPLIT_TENSOR, 2}, layer2 = {TSR_SPLIT_LAYER, 2};
    force_threads = 1;
    remote_baseline = run_config(b, path, wtype, &tensor2, gemm, mem, single);
    with_remote = true;
    run_config(b, path, wtype, &tensor2, gemm, mem, single);
    run_config(b, path, wtype, &layer2, gemm, mem, single);
    with_remote = false;
    force_threads = 0;
#else
    (void)b, (void)path, (void)wtype, (void)gemm, (void)mem, (void)single;
    printf("rpc rows skipped: built without RPC\n");
#endif
}

static void run_type(bench *b, tsr_type wtype, const bu_mem *mem)
{
    tsr_model_hparams hp;
    tsr_status st = tsr_model_preset(b->preset, &hp);
    if (st != TSR_OK)
        die("preset", st);
    hp.wtype = wtype;
    char path[512];
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(path, sizeof(path), "%s/bench_model_%s_%s_%d.gguf", tmp, b->preset,
             tsr_type_name(wtype), (int)getpid());
    tsr_model_config cfg;
    tsr_model_config_default(&cfg);
    cfg.n_ctx = 1;
    cfg.quiet = true;
    tsr_model *m = NULL;
    if ((st = tsr_model_generate(&hp, 1, &cfg, &m)) != TSR_OK ||
        (st = tsr_model_save(m, path)) != TSR_OK)
        die("generating the model", st);
    tsr_model_free(m);
    /* The yardstick: bench_ops' GEMM shape (4096 x 14336 x 512) in this weight type. */
    const double gemm = b->quick ? gemm_gflops(wtype, 512, 1024, 64, b->cores)
                                 : gemm_gflops(wtype, 4096, 14336, 512, b->cores);
    const config cfgs[] = {{TSR_SPLIT_NONE, 1},   {TSR_SPLIT_TENSOR, 2}, {TSR_SPLIT_TENSOR, 3},
                           {TSR_SPLIT_TENSOR, 4}, {TSR_SPLIT_LAYER, 2},  {TSR_SPLIT_LAYER, 3},
                           {TSR_SPLIT_LAYER, 4}};
    double single = 0;
    for (size_t i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]) && !b->remote_only; i++) {
        if (cfgs[i].n > b->max_dev || cfgs[i].n > hp.n_layer)
            continue;
        const double d = run_config(b, path, wtype, &cfgs[i], gemm, mem, single);
        if (cfgs[i].mode == TSR_SPLIT_NONE)
            single = d;
    }
    /* The CPU + Vulkan mix: tensor and layer split over cpu0 and vulkan0. */
    tsr_reg *vk = tsr_reg_by_name("vulkan");
    if (b->remote_only) {
    } else if (vk && tsr_reg_dev_count(vk) > 0) {
        with_vulkan = true;
        for (size_t i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++)
            if (cfgs[i].n == 2)
                run_config(b, path, wtype, &cfgs[i], gemm, mem, single);
        with_vulkan = false;
    } else {
        printf("cpu+vk rows skipped: no Vulkan device\n");
    }
    if (wtype == (b->quick ? TSR_TYPE_F32 : TSR_TYPE_F16))
        run_remote(b, path, wtype, gemm, mem, single);
    unlink(path);
}

int main(int argc, char **argv)
{
    bench b = {
        .out_dir = "bench/results", .preset = "tinyllama", .prompt = 128, .gen = 32, .max_dev = 4};
    const char *types = "f16,q8_0";
    static const struct option opts[] = {{"out", required_argument, 0, 'o'},
                                         {"quick", no_argument, 0, 'q'},
                                         {"types", required_argument, 0, 't'},
                                         {"preset", required_argument, 0, 'p'},
                                         {"max-devices", required_argument, 0, 'd'},
                                         {"remote-only", no_argument, 0, 'r'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "o:qt:p:d:rh", opts, NULL)) != -1) {
        switch (o) {
        case 'o':
            b.out_dir = optarg;
            break;
        case 'q':
            b.quick = true;
            break;
        case 't':
            types = optarg;
            break;
        case 'p':
            b.preset = optarg;
            break;
        case 'd':
            b.max_dev = atoi(optarg);
            break;
        case 'r':
            b.remote_only = true;
            break;
        case 'h':
            printf("usage: bench_model [--out DIR] [--quick] [--types f16,q8_0] [--preset NAME] "
                   "[--max-devices N] [--remote-only]\n"
                   "Prefill and decode tokens/s for split none/layer/tensor over 1..N CPU devices, "
                   "beside the\nstreaming-read bound and tessera's GEMM throughput measured in the "
                   "same run;\nthen tensor and layer split over two tessera-rpc-server processes "
                   "on this "
                   "host against\nlocal tensor split with the same threads (--remote-only: just "
                   "those).\n--quick: the tiny preset, 16-token prompt, 8 steps (a smoke run).\n");
            return 0;
        default:
            return 2;
        }
    }
    if (b.max_dev < 1 || b.max_dev > 16) {
        fprintf(stderr, "bench_model: --max-devices %d (1..16)\n", b.max_dev);
        return 2;
    }
    if (b.quick) {
        b.preset = "tiny";
        b.prompt = 16;
        b.gen = 8;
        types = "f32,q8_0";
    }
    /* As many CPU devices as the largest configuration, set before the
     * registry starts. */
    char nd[8];
    snprintf(nd, sizeof(nd), "%d", b.max_dev);
    setenv("TSR_CPU_DEVICES", nd, 1);
    b.cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (b.cores < 1)
        b.cores = 1;
    if (!bu_open_outputs("bench_model", b.out_dir, "model", &b.jl, &b.md, &b.dat))
        return 1;
    bu_mem mem = bu_mem_new(b.quick ? (64u << 20) : (256u << 20), 0);
    const char *hdr = "| config             | th | decode  | bound   | /bound | /none  | prefill | "
                      "GFLOP/s | GEMM   | /GEMM  | load | AR/t | targets |\n"
                      "|--------------------|----|---------|---------|--------|--------|---------|-"
                      "--------|--------|--------|------|------|---------|\n";
    printf(
        "bench_model: preset %s, prompt %d, %d decode steps, %d cores; tok/s, bound = read GB/s / "
        "weight bytes per step\n\n%s",
        b.preset, b.prompt, b.gen, b.cores, hdr);
    fprintf(b.md, "# bench_model: preset %s, prompt %d, %d decode steps, %d cores\n\n%s", b.preset,
            b.prompt, b.gen, b.cores, hdr);
    char list[64];
    snprintf(list, sizeof(list), "%s", types);
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        tsr_type wt;
        if (strcmp(t, "f16") == 0)
            wt = TSR_TYPE_F16;
        else if (strcmp(t, "q8_0") == 0)
            wt = TSR_TYPE_Q8_0;
        else if (strcmp(t, "f32") == 0)
            wt = TSR_TYPE_F32;
        else if (strcmp(t, "bf16") == 0)
            wt = TSR_TYPE_BF16;
        else {
            fprintf(stderr, "bench_model: --types: unknown type '%s'\n", t);
            return 2;
        }
        run_type(&b, wt, &mem);
    }
    bu_mem_free(&mem);
#ifdef TSR_BENCH_RPC
    for (int j = 0; j < 2 && remote[j]; j++)
        rt_server_stop(&srv[j]);
#endif
    fclose(b.jl);
    fclose(b.md);
    fclose(b.dat);
    printf("\nresults: %s/model.{jsonl,md,dat}\n", b.out_dir);
    return 0;
}
