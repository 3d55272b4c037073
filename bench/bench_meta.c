/* bench/bench_meta.c — tensor parallelism on the meta device against one
 * device, measured in the same run: a SwiGLU FFN decode step (one token,
 * n_embd 4096 wide) on one CPU device with one thread, and on meta(2 CPU
 * devices) with one thread each (gate/up split by columns, down by rows, one
 * all-reduce). Decode is memory-bound: the figure to beat is the ratio of
 * two threads' read bandwidth to one thread's, measured here too.
 *
 * Output: a Markdown table on stdout and in <out>/meta.md, JSON lines in
 * <out>/meta.jsonl. Times are medians over repetitions after a warm-up.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "bench_util.h"
#include "tessera/tessera.h"

static void die(const char *what, tsr_status st)
{
    fprintf(stderr, "bench_meta: %s: %s (%s)\n", what, tsr_status_str(st), tsr_last_error());
    exit(1);
}

typedef struct {
    int64_t E, F;
    tsr_type wtype;
} ffn_shape;

/* The FFN split: gate/up by columns (A1), down by rows (A0), cut in units
 * of 128 rows. */
static tsr_status ffn_split(const tsr_tensor *t, int n, tsr_split *out, void *ud)
{
    const ffn_shape *s = ud;
    if (strcmp(t->name, "gate") == 0 || strcmp(t->name, "up") == 0)
        return tsr_split_simple(out, TSR_SPLIT_A1, n, s->F, 128, NULL, 0);
    if (strcmp(t->name, "down") == 0)
        return tsr_split_simple(out, TSR_SPLIT_A0, n, s->F, 128, NULL, 0);
    *out = tsr_split_mirrored(n);
    return TSR_OK;
}

typedef struct {
    tsr_ctx *wctx, *gctx;
    tsr_buf *wbuf;
    tsr_gallocr *ga;
    tsr_graph *g;
    tsr_tensor *x, *y;
} ffn;

static void ffn_make(ffn *f, tsr_dev *dev, const ffn_shape *s)
{
    f->wctx = tsr_ctx_new(8);
    tsr_tensor *gate = tsr_set_name(tsr_new_tensor_2d(f->wctx, s->wtype, s->E, s->F), "gate");
    tsr_tensor *up = tsr_set_name(tsr_new_tensor_2d(f->wctx, s->wtype, s->E, s->F), "up");
    tsr_tensor *down = tsr_set_name(tsr_new_tensor_2d(f->wctx, s->wtype, s->F, s->E), "down");
    tsr_status st = tsr_ctx_alloc_tensors(f->wctx, tsr_dev_buft(dev), &f->wbuf);
    if (st != TSR_OK)
        die("weights", st);
    /* Small values, one row converted at a time. */
    const int64_t rows_max = s->F > s->E ? s->F : s->E;
    float *row = malloc((size_t)rows_max * sizeof(float));
    void *conv = malloc(tsr_row_size(s->wtype, rows_max));
    tsr_tensor *w[3] = {gate, up, down};
    for (int k = 0; k < 3; k++)
        for (int64_t r = 0; r < w[k]->ne[1]; r++) {
            for (int64_t i = 0; i < w[k]->ne[0]; i++)
                row[i] = (float)(((r * 13 + i * 7) % 29) - 14) * 0.002f;
            tsr_row_from_f32(s->wtype, row, conv, w[k]->ne[0]);
            if ((st = tsr_tensor_set(w[k], conv, (size_t)r * w[k]->nb[1],
                                     tsr_row_size(s->wtype, w[k]->ne[0]))) != TSR_OK)
                die("upload", st);
        }
    free(row);
    free(conv);
    f->gctx = tsr_ctx_new(32);
    f->x = tsr_new_tensor_2d(f->gctx, TSR_TYPE_F32, s->E, 1);
    f->x->flags |= TSR_TENSOR_FLAG_INPUT;
    tsr_tensor *h =
        tsr_swiglu(f->gctx, tsr_mul_mat(f->gctx, gate, f->x), tsr_mul_mat(f->gctx, up, f->x));
    f->y = tsr_add(f->gctx, f->x, tsr_mul_mat(f->gctx, down, h));
    f->g = tsr_graph_new(32);
    f->ga = tsr_gallocr_new(tsr_dev_buft(dev));
    if ((st = tsr_graph_build(f->g, f->y)) != TSR_OK ||
        (st = tsr_gallocr_alloc_graph(f->ga, f->g)) != TSR_OK)
        die("graph", st);
    float *xv = malloc((size_t)s->E * sizeof(float));
    for (int64_t i = 0; i < s->E; i++)
        xv[i] = (float)((i % 17) - 8) * 0.05f;
    if ((st = tsr_tensor_set(f->x, xv, 0, tsr_nbytes(f->x))) != TSR_OK)
        die("input", st);
    free(xv);
}

static void ffn_free(ffn *f)
{
    tsr_gallocr_free(f->ga);
    tsr_graph_free(f->g);
    tsr_ctx_free(f->gctx);
    tsr_buf_free(f->wbuf);
    tsr_ctx_free(f->wctx);
}

/* Median seconds of one step (compute + synchronize) over reps. */
static double time_step(tsr_backend *be, ffn *f, int reps)
{
    tsr_status st = tsr_backend_graph_compute(be, f->g);
    if (st != TSR_OK)
        die("compute", st);
    double *t = malloc((size_t)reps * sizeof(double));
    for (int r = 0; r < reps; r++) {
        const double t0 = bu_now();
        tsr_backend_graph_compute(be, f->g);
        t[r] = bu_now() - t0;
    }
    const double m = bu_median(t, reps);
    free(t);
    return m;
}

/* The CPU + Vulkan mix: the same step on meta(cpu0, vulkan0) against each
 * device alone (cpu0 with its default threads), in the same run. On
 * lavapipe the Vulkan device runs on the CPU's own cores, so this shows the
 * plumbing's cost more than a speed-up. The Vulkan device is found through
 * the registry by name (no Vulkan header needed). */
static void bench_vulkan_mix(FILE *jl, FILE *md, ffn_shape *s, bool quick)
{
    tsr_reg *reg = tsr_reg_by_name("vulkan");
    if (!reg || tsr_reg_dev_count(reg) == 0) {
        printf("\nCPU + Vulkan: skipped (not built, no loader or no device)\n");
        fprintf(md, "\nCPU + Vulkan: skipped (not built, no loader or no device)\n");
        return;
    }
    tsr_dev *devs[2] = {tsr_reg_dev_get(tsr_cpu_reg(), 0), tsr_reg_dev_get(reg, 0)}, *meta;
    tsr_status st = tsr_meta_device_new(devs, 2, ffn_split, s, &meta);
    if (st != TSR_OK)
        die("meta device", st);
    tsr_dev *all[3] = {devs[0], devs[1], meta};
    const char *names[3] = {"cpu0", "vulkan0", "meta(cpu0, vulkan0)"};
    double ms[3];
    const int reps = quick ? 3 : 7;
    for (int i = 0; i < 3; i++) {
        tsr_backend *be;
        if ((st = tsr_backend_new(all[i], &be)) != TSR_OK)
            die("stream", st);
        ffn f;
        ffn_make(&f, all[i], s);
        ms[i] = 1e3 * time_step(be, &f, reps);
        ffn_free(&f);
        tsr_backend_free(be);
    }
    const char *hdr =
        "\n| figure | shape | cpu0 | vulkan0 | meta(cpu0, vulkan0) | meta / best single "
        "|\n|---|---|---|---|---|---|\n";
    char shape[64];
    snprintf(shape, sizeof(shape), "E=%lld F=%lld %s", (long long)s->E, (long long)s->F,
             tsr_type_name(s->wtype));
    const double best = ms[0] < ms[1] ? ms[0] : ms[1];
    for (FILE *fp = stdout; fp; fp = fp == stdout ? md : NULL)
        fprintf(fp,
                "%s| ffn decode step, CPU + Vulkan | %s | %.3f ms | %.3f ms | %.3f ms | %.2fx |\n",
                hdr, shape, ms[0], ms[1], ms[2], ms[2] / best);
    for (int i = 0; i < 3; i++)
        fprintf(jl,
                "{\"bench\":\"meta\",\"name\":\"ffn_decode_step_cpu_vulkan\",\"device\":\"%s\","
                "\"E\":%lld,\"F\":%lld,\"type\":\"%s\",\"ms\":%.4f}\n",
                names[i], (long long)s->E, (long long)s->F, tsr_type_name(s->wtype), ms[i]);
    tsr_meta_device_free(meta);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_meta [--out DIR] [--quick] [--type f16|bf16|f32|q8_0]\n"
               "  SwiGLU FFN decode step (n_embd 4096, n_ff 14336) on one CPU device with one\n"
               "  thread and on meta(2 CPU devices, one thread each), in the same run.\n"
               "  Writes DIR/meta.jsonl and DIR/meta.md (default DIR: bench/results).\n");
}

int main(int argc, char **argv)
{
    const char *out_dir = "bench/results";
    bool quick = false;
    ffn_shape s = {.E = 4096, .F = 14336, .wtype = TSR_TYPE_F16};
    static const struct option opts[] = {{"out", required_argument, 0, 'o'},
                                         {"quick", no_argument, 0, 'q'},
                                         {"type", required_argument, 0, 't'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "o:qt:h", opts, NULL)) != -1) {
        switch (o) {
        case 'o':
            out_dir = optarg;
            break;
        case 'q':
            quick = true;
            break;
        case 't': {
            bool ok = false;
            for (int t = 0; t < TSR_TYPE_COUNT; t++)
                if (strcmp(optarg, tsr_type_name((tsr_type)t)) == 0 && t != TSR_TYPE_I32) {
                    s.wtype = (tsr_type)t;
                    ok = true;
                }
            if (!ok) {
                fprintf(stderr, "bench_meta: --type %s: expected f32, f16, bf16 or q8_0\n", optarg);
                return 2;
            }
            break;
        }
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (quick) {
        s.E = 512;
        s.F = 1024;
    }
    setenv("TSR_CPU_DEVICES", "2", 0);
    if (tsr_reg_dev_count(tsr_cpu_reg()) < 2) {
        fprintf(stderr, "bench_meta: needs 2 CPU devices (TSR_CPU_DEVICES=2)\n");
        return 1;
    }
    FILE *jl, *md;
    if (!bu_open_outputs("bench_meta", out_dir, "meta", &jl, &md, NULL))
        return 1;
    tsr_dev *cpu0 = tsr_reg_dev_get(tsr_cpu_reg(), 0), *cpu1 = tsr_reg_dev_get(tsr_cpu_reg(), 1);
    tsr_dev *subs[2] = {cpu0, cpu1}, *meta;
    tsr_status st = tsr_meta_device_new(subs, 2, ffn_split, &s, &meta);
    if (st != TSR_OK)
        die("meta device", st);

    tsr_backend *one, *tp;
    if ((st = tsr_backend_new(cpu0, &one)) != TSR_OK ||
        (st = tsr_cpu_set_n_threads(one, 1)) != TSR_OK)
        die("cpu stream", st);
    if ((st = tsr_backend_new(meta, &tp)) != TSR_OK)
        die("meta stream", st);
    ffn f1, f2;
    ffn_make(&f1, cpu0, &s);
    ffn_make(&f2, meta, &s);
    /* Rounds alternate the two setups and the 1- and 2-thread read
     * baselines, so that all four share the host's drifting bandwidth; the
     * figures are medians of the per-round values. */
    const int rounds = quick ? 3 : 9, reps = quick ? 3 : 7;
    bu_mem mem = bu_mem_new(quick ? 16u << 20 : 256u << 20, 0);
    double t1v[16], t2v[16], spv[16], attv[16];
    for (int r = 0; r < rounds; r++) {
        t1v[r] = time_step(one, &f1, reps);
        t2v[r] = time_step(tp, &f2, reps);
        const double b1 = bu_read_gbs(&mem, 1), b2 = bu_read_gbs(&mem, 2);
        spv[r] = t1v[r] / t2v[r];
        attv[r] = b2 / b1;
    }
    bu_mem_free(&mem);
    const double t1 = bu_median(t1v, rounds), t2 = bu_median(t2v, rounds);
    const double speedup = bu_median(spv, rounds), attainable = bu_median(attv, rounds);
    tsr_meta_stats stats;
    tsr_meta_stats_get(tp, &stats);
    const double bytes = 3.0 * (double)s.E * (double)s.F * (double)tsr_type_size(s.wtype) /
                         (double)tsr_type_block_size(s.wtype);
    char shape[64];
    snprintf(shape, sizeof(shape), "E=%lld F=%lld %s", (long long)s.E, (long long)s.F,
             tsr_type_name(s.wtype));
    const char *hdr = "| figure | shape | one device, 1 thread | meta(2 cpu), 1 thread each | "
                      "speed-up | target | read bandwidth 2 threads / 1 thread (same run) | "
                      "all-reduce path |\n|---|---|---|---|---|---|---|---|\n";
    printf("tessera bench_meta%s\n\n%s", quick ? " (quick)" : "", hdr);
    fprintf(md, "# bench_meta%s\n\n%s", quick ? " (quick)" : "", hdr);
    const char *fmt =
        "| ffn decode step | %s | %.3f ms (%.1f GB/s) | %.3f ms (%.1f GB/s) | %.2fx | "
        ">= 1.50x %s | %.2fx | %s, %d all-reduce(s) |\n";
    for (FILE *fp = stdout; fp; fp = fp == stdout ? md : NULL)
        fprintf(fp, fmt, shape, 1e3 * t1, bytes / t1 * 1e-9, 1e3 * t2, bytes / t2 * 1e-9, speedup,
                speedup >= 1.5 ? "met" : "MISSED", attainable, tsr_allreduce_path_name(stats.path),
                stats.n_allreduce);
    fprintf(
        jl,
        "{\"bench\":\"meta\",\"name\":\"ffn_decode_step\",\"E\":%lld,\"F\":%lld,\"type\":\"%s\","
        "\"one_device_ms\":%.4f,\"meta2_ms\":%.4f,\"speedup\":%.4f,\"target\":1.5,\"met\":%s,"
        "\"read_bw_ratio_2t_1t\":%.4f,\"allreduce_path\":\"%s\",\"n_allreduce\":%d}\n",
        (long long)s.E, (long long)s.F, tsr_type_name(s.wtype), 1e3 * t1, 1e3 * t2, speedup,
        speedup >= 1.5 ? "true" : "false", attainable, tsr_allreduce_path_name(stats.path),
        stats.n_allreduce);
    ffn_free(&f1);
    ffn_free(&f2);
    tsr_backend_free(one);
    tsr_backend_free(tp);
    tsr_meta_device_free(meta);
    bench_vulkan_mix(jl, md, &s, quick);
    fclose(jl);
    fclose(md);
    printf("\nwrote %s/meta.jsonl and %s/meta.md\n", out_dir, out_dir);
    return 0;
}
