/* bench/bench_ops.c — CPU op throughput against baselines measured in the
 * same run: OpenBLAS sgemm (same thread count) for matrix products, and a
 * streaming read of a 256 MiB array (same thread count) for matrix-vector
 * products, whose real limit is memory bandwidth. Also memcpy, and two CPU
 * devices running independent graphs concurrently versus one after the
 * other (proof that the streams are asynchronous).
 *
 * Output: a Markdown table on stdout and one JSON line per figure in
 * <out>/ops.jsonl (and the table in <out>/ops.md). Timing is the best of
 * several repetitions after a warm-up; every figure stands beside its
 * baseline and the ratio between them.
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "tessera/tessera.h"

void openblas_set_num_threads(int num_threads);

typedef struct {
    int threads;
    bool quick;
    const char *out_dir;
    FILE *jsonl;
    FILE *md;
    FILE *dat; /* "label ratio target" rows for bench/plot_ops.gp */
} bench_cfg;

static void die(const char *what, tsr_status st)
{
    fprintf(stderr, "bench_ops: %s: %s (%s)\n", what, tsr_status_str(st), tsr_last_error());
    exit(1);
}

/* One result row: what, value, unit, baseline name and value, ratio, target. */
static void report(bench_cfg *c, const char *name, const char *shape, double value,
                   const char *unit, const char *base_name, double base, double target)
{
    const double ratio = base > 0 ? value / base : 0.0;
    const char *verdict = target <= 0 ? "" : (ratio >= target ? "met" : "MISSED");
    char tgt[32] = "";
    if (target > 0)
        snprintf(tgt, sizeof(tgt), ">= %.2fx", target);
    fprintf(c->md, "| %-26s | %-26s | %9.1f %-7s | %-24s | %9.1f | %6.2fx | %-9s %s |\n", name,
            shape, value, unit, base_name, base, ratio, tgt, verdict);
    printf("| %-26s | %-26s | %9.1f %-7s | %-24s | %9.1f | %6.2fx | %-9s %s |\n", name, shape,
           value, unit, base_name, base, ratio, tgt, verdict);
    fflush(stdout);
    fprintf(c->jsonl,
            "{\"bench\":\"ops\",\"name\":\"%s\",\"shape\":\"%s\",\"threads\":%d,\"value\":%.4f,"
            "\"unit\":\"%s\",\"baseline\":\"%s\",\"baseline_value\":%.4f,\"ratio\":%.4f,"
            "\"target\":%.2f,\"met\":%s}\n",
            name, shape, c->threads, value, unit, base_name, base, ratio, target,
            target <= 0 ? "null" : (ratio >= target ? "true" : "false"));
    fflush(c->jsonl);
    if (target > 0)
        fprintf(c->dat, "\"%s\\n%s\" %.4f %.2f\n", name, shape, ratio, target);
}

/* ---- baselines ------------------------------------------------------------------------------ */

/* Best of `reps` passes. */
static double best_read(const bu_mem *m, int threads, int reps)
{
    double best = 0;
    for (int r = 0; r < reps; r++) {
        const double g = bu_read_gbs(m, threads);
        best = g > best ? g : best;
    }
    return best;
}

static double best_copy(const bu_mem *m, int threads, int reps)
{
    double best = 0;
    for (int r = 0; r < reps; r++) {
        const double g = bu_copy_gbs(m, threads);
        best = g > best ? g : best;
    }
    return best;
}

/* OpenBLAS: C[N, T] = Wᵀ X in column-major terms: Y (N×T) = Wᵀ (N×K) · X (K×T). */
static double bench_sgemm(bench_cfg *c, int64_t K, int64_t N, int64_t T)
{
    float *w = aligned_alloc(64, (size_t)(K * N) * sizeof(float));
    float *x = aligned_alloc(64, (size_t)(K * T) * sizeof(float));
    float *y = aligned_alloc(64, (size_t)(N * T) * sizeof(float));
    for (int64_t i = 0; i < K * N; i++)
        w[i] = (float)((i * 7) % 13) * 0.01f;
    for (int64_t i = 0; i < K * T; i++)
        x[i] = (float)((i * 3) % 11) * 0.01f;
    openblas_set_num_threads(c->threads);
    double best = 1e30;
    for (int r = 0; r < (c->quick ? 2 : 4); r++) {
        const double t0 = bu_now();
        cblas_sgemm(CblasColMajor, CblasTrans, CblasNoTrans, (int)N, (int)T, (int)K, 1.0f, w,
                    (int)K, x, (int)K, 0.0f, y, (int)N);
        const double t = bu_now() - t0;
        if (r > 0 && t < best)
            best = t;
    }
    free(w);
    free(x);
    free(y);
    return 2.0 * (double)K * (double)N * (double)T / best * 1e-9;
}

/* ---- tessera ops ------------------------------------------------------------------------------
 */

typedef struct {
    tsr_ctx *ctx;
    tsr_buf *buf;
    tsr_graph *g;
    tsr_tensor *w, *x, *y;
} mm_graph;

static mm_graph mm_graph_new(tsr_dev *dev, tsr_type wtype, int64_t K, int64_t N, int64_t T)
{
    mm_graph m = {.ctx = tsr_ctx_new(8), .g = tsr_graph_new(8)};
    m.w = tsr_new_tensor_2d(m.ctx, wtype, K, N);
    m.x = tsr_new_tensor_2d(m.ctx, TSR_TYPE_F32, K, T);
    m.y = tsr_mul_mat(m.ctx, m.w, m.x);
    if (!m.y)
        die("mul_mat", tsr_ctx_status(m.ctx));
    tsr_status st = tsr_ctx_alloc_tensors(m.ctx, tsr_dev_buft(dev), &m.buf);
    if (st != TSR_OK)
        die("allocating the weights", st);
    if ((st = tsr_graph_build(m.g, m.y)) != TSR_OK)
        die("graph", st);
    /* Weights: small values converted row by row, so every type is valid. */
    float *row = malloc((size_t)K * sizeof(float));
    void *conv = malloc(tsr_row_size(wtype, K));
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k++)
            row[k] = (float)(((n * 31 + k * 7) % 17) - 8) * 0.01f;
        tsr_row_from_f32(wtype, row, conv, K);
        tsr_tensor_set(m.w, conv, (size_t)n * m.w->nb[1], tsr_row_size(wtype, K));
    }
    free(conv);
    free(row);
    float *xv = malloc((size_t)(K * T) * sizeof(float));
    for (int64_t i = 0; i < K * T; i++)
        xv[i] = (float)((i % 23) - 11) * 0.02f;
    tsr_tensor_set(m.x, xv, 0, (size_t)(K * T) * sizeof(float));
    free(xv);
    return m;
}

static void mm_graph_free(mm_graph *m)
{
    tsr_graph_free(m->g);
    tsr_buf_free(m->buf);
    tsr_ctx_free(m->ctx);
}

/* Best time of `reps` runs after one warm-up. */
static double time_graph(tsr_backend *be, tsr_graph *g, int reps)
{
    tsr_status st = tsr_backend_graph_compute(be, g);
    if (st != TSR_OK)
        die("graph compute", st);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = bu_now();
        tsr_backend_graph_compute(be, g);
        const double t = bu_now() - t0;
        if (t < best)
            best = t;
    }
    return best;
}

static tsr_backend *cpu_stream(int dev_index, int threads)
{
    tsr_backend *be = NULL;
    tsr_status st = tsr_backend_new(tsr_reg_dev_get(tsr_cpu_reg(), (size_t)dev_index), &be);
    if (st != TSR_OK)
        die("cpu stream", st);
    if ((st = tsr_cpu_set_n_threads(be, threads)) != TSR_OK)
        die("threads", st);
    return be;
}

static void bench_gemm(bench_cfg *c, tsr_backend *be, tsr_type type, int64_t K, int64_t N,
                       int64_t T, double blas, double target)
{
    mm_graph m = mm_graph_new(tsr_backend_dev(be), type, K, N, T);
    const double t = time_graph(be, m.g, c->quick ? 2 : 3);
    const double gflops = 2.0 * (double)K * (double)N * (double)T / t * 1e-9;
    char name[64], shape[64];
    snprintf(name, sizeof(name), "gemm %s", tsr_type_name(type));
    snprintf(shape, sizeof(shape), "%lldx%lldx%lld", (long long)K, (long long)N, (long long)T);
    report(c, name, shape, gflops, "GFLOP/s", "openblas sgemm", blas, target);
    mm_graph_free(&m);
}

/* Matrix-vector products are bound by memory bandwidth, which drifts on a
 * shared host: the streaming read is measured alternately with the kernel,
 * and the figure is the median of the per-repetition ratios. */
static void bench_matvec(bench_cfg *c, tsr_backend *be, tsr_type type, int64_t K, int64_t N,
                         const bu_mem *read)
{
    mm_graph m = mm_graph_new(tsr_backend_dev(be), type, K, N, 1);
    tsr_status st = tsr_backend_graph_compute(be, m.g);
    if (st != TSR_OK)
        die("graph compute", st);
    enum { REPS = 31 };
    double ratio[REPS], ours[REPS], base[REPS];
    const int reps = c->quick ? 5 : REPS;
    for (int r = 0; r < reps; r++) {
        base[r] = bu_read_gbs(read, c->threads);
        const double t0 = bu_now();
        tsr_backend_graph_compute(be, m.g);
        ours[r] = (double)tsr_nbytes(m.w) / (bu_now() - t0) * 1e-9;
        ratio[r] = ours[r] / base[r];
    }
    char name[64], shape[64];
    snprintf(name, sizeof(name), "matvec %s", tsr_type_name(type));
    snprintf(shape, sizeof(shape), "%lldx%lld", (long long)K, (long long)N);
    const double target = type == TSR_TYPE_F32 ? 0.9 : 0.8;
    /* Value and baseline are medians; the ratio is the median ratio. */
    const double mr = bu_median(ratio, reps), mo = bu_median(ours, reps),
                 mb = bu_median(base, reps);
    report(c, name, shape, mo, "GB/s", "streaming read (alt.)", mo / mr, target);
    (void)mb;
    mm_graph_free(&m);
}

/* Two CPU devices, one thread each, two independent GEMM graphs: concurrent
 * wall time against the sum of running them one after the other. */
static double two_dev_speedup;

static void bench_two_devices(bench_cfg *c)
{
    if (tsr_reg_dev_count(tsr_cpu_reg()) < 2) {
        printf("two-device concurrency: skipped (TSR_CPU_DEVICES < 2)\n");
        return;
    }
    const int64_t K = c->quick ? 256 : 2048, N = c->quick ? 256 : 2048, T = c->quick ? 32 : 128;
    tsr_backend *b0 = cpu_stream(0, 1), *b1 = cpu_stream(1, 1);
    mm_graph m0 = mm_graph_new(tsr_backend_dev(b0), TSR_TYPE_F32, K, N, T);
    mm_graph m1 = mm_graph_new(tsr_backend_dev(b1), TSR_TYPE_F32, K, N, T);
    tsr_backend_graph_compute(b0, m0.g);
    tsr_backend_graph_compute(b1, m1.g);
    double seq = 1e30, par = 1e30;
    for (int r = 0; r < (c->quick ? 2 : 5); r++) {
        double t0 = bu_now();
        tsr_backend_graph_compute(b0, m0.g);
        tsr_backend_graph_compute(b1, m1.g);
        const double s = bu_now() - t0;
        t0 = bu_now();
        tsr_backend_graph_compute_async(b0, m0.g);
        tsr_backend_graph_compute_async(b1, m1.g);
        tsr_backend_synchronize(b0);
        tsr_backend_synchronize(b1);
        const double p = bu_now() - t0;
        if (s < seq)
            seq = s;
        if (p < par)
            par = p;
    }
    /* Reported as speed-up (sequential / concurrent) against 1/0.6. */
    char shape[64];
    snprintf(shape, sizeof(shape), "2x gemm f32 %lldx%lldx%lld", (long long)K, (long long)N,
             (long long)T);
    report(c, "2 cpu devices concurrent", shape, 1e3 * par, "ms", "one after the other (ms)",
           1e3 * seq, 0);
    const double ratio = par / seq;
    two_dev_speedup = seq / par;
    printf("two-device concurrency: concurrent/sequential = %.2f (target <= 0.60: %s)\n", ratio,
           ratio <= 0.6 ? "met" : "MISSED");
    fprintf(c->md,
            "\nTwo CPU devices: concurrent / sequential wall time = %.2f (target <= 0.60: %s)\n",
            ratio, ratio <= 0.6 ? "met" : "MISSED");
    fprintf(c->jsonl,
            "{\"bench\":\"ops\",\"name\":\"two_device_concurrency\",\"threads\":1,"
            "\"concurrent_ms\":%.3f,\"sequential_ms\":%.3f,\"ratio\":%.4f,\"target_max\":0.6,"
            "\"met\":%s}\n",
            1e3 * par, 1e3 * seq, ratio, ratio <= 0.6 ? "true" : "false");
    mm_graph_free(&m0);
    mm_graph_free(&m1);
    tsr_backend_free(b0);
    tsr_backend_free(b1);
}

/* ---- Vulkan devices and the CPU + Vulkan mix ------------------------------------------------ */

/* Every Vulkan device (found through the registry by name, so this file
 * needs no Vulkan header): F32, F16 and BF16 GEMM 1024³ against the CPU backend's
 * F32 GEMM 1024³ measured right before (target >= 0.25x: on lavapipe, which
 * runs on the same cores, this measures shader quality), matrix-vector
 * products against the streaming read, and on GPUs F32 and F16 GEMM 4096³.
 * Then two independent GEMMs on cpu0 and vulkan0 at once against one after
 * the other (the CPU + Vulkan mix). */
static void bench_vulkan(bench_cfg *c, const bu_mem *read)
{
    tsr_reg *reg = tsr_reg_by_name("vulkan");
    const size_t n_vk = reg ? tsr_reg_dev_count(reg) : 0;
    if (n_vk == 0) {
        printf("vulkan: skipped (not built, no loader or no device)\n");
        fprintf(c->md, "\nVulkan: skipped (not built, no loader or no device)\n");
        return;
    }
    const int64_t sq = c->quick ? 256 : 1024;
    const int reps = c->quick ? 2 : 5;
    char shape[64];
    snprintf(shape, sizeof(shape), "%lldx%lldx%lld", (long long)sq, (long long)sq, (long long)sq);
    tsr_backend *cpu = cpu_stream(0, c->threads);
    mm_graph m = mm_graph_new(tsr_backend_dev(cpu), TSR_TYPE_F32, sq, sq, sq);
    const double cpu_gf = 2.0 * (double)(sq * sq * sq) / time_graph(cpu, m.g, reps) * 1e-9;
    mm_graph_free(&m);
    report(c, "gemm f32 cpu0", shape, cpu_gf, "GFLOP/s", "itself", cpu_gf, 0);
    for (size_t i = 0; i < n_vk; i++) {
        tsr_dev *d = tsr_reg_dev_get(reg, i);
        tsr_backend *be;
        tsr_status st = tsr_backend_new(d, &be);
        if (st != TSR_OK)
            die("vulkan stream", st);
        printf("%s: %s\n", tsr_dev_name(d), tsr_dev_description(d));
        const tsr_type types[3] = {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_BF16};
        char name[64];
        for (int t = 0; t < 3; t++) {
            m = mm_graph_new(d, types[t], sq, sq, sq);
            const double gf = 2.0 * (double)(sq * sq * sq) / time_graph(be, m.g, reps) * 1e-9;
            mm_graph_free(&m);
            snprintf(name, sizeof(name), "gemm %s %s", tsr_type_name(types[t]), tsr_dev_name(d));
            report(c, name, shape, gf, "GFLOP/s", "gemm f32 cpu0", cpu_gf,
                   types[t] == TSR_TYPE_F32 ? 0.25 : 0);
        }
        /* Decode: bytes of W read per second, beside the host's read. */
        const int64_t K = c->quick ? 512 : 4096, N = c->quick ? 1024 : 14336;
        for (int t = 0; t < 3; t++) {
            m = mm_graph_new(d, types[t], K, N, 1);
            const double gbs = (double)tsr_nbytes(m.w) / time_graph(be, m.g, reps) * 1e-9;
            mm_graph_free(&m);
            char mshape[64];
            snprintf(mshape, sizeof(mshape), "%lldx%lld", (long long)K, (long long)N);
            snprintf(name, sizeof(name), "matvec %s %s", tsr_type_name(types[t]), tsr_dev_name(d));
            report(c, name, mshape, gbs, "GB/s", "streaming read", bu_read_gbs(read, c->threads),
                   0);
        }
        if (tsr_dev_get_type(d) != TSR_DEV_CPU && !c->quick) {
            const int64_t big = 4096;
            char bshape[64];
            snprintf(bshape, sizeof(bshape), "%lldx%lldx%lld", (long long)big, (long long)big,
                     (long long)big);
            for (int t = 1; t >= 0; t--) {
                m = mm_graph_new(d, types[t], big, big, big);
                const double gf = 2.0 * (double)(big * big * big) / time_graph(be, m.g, 3) * 1e-9;
                mm_graph_free(&m);
                snprintf(name, sizeof(name), "gemm %s %s", tsr_type_name(types[t]),
                         tsr_dev_name(d));
                report(c, name, bshape, gf, "GFLOP/s", "gemm f32 cpu0", cpu_gf, 0);
                printf("%s: %s GEMM 4096^3: %.2f TFLOP/s\n", tsr_dev_name(d),
                       tsr_type_name(types[t]), gf * 1e-3);
            }
        }
        tsr_backend_free(be);
    }
    /* The mix: GEMMs on cpu0 and vulkan0, concurrent vs sequential. */
    tsr_dev *vk0 = tsr_reg_dev_get(reg, 0);
    tsr_backend *vb;
    tsr_status st = tsr_backend_new(vk0, &vb);
    if (st != TSR_OK)
        die("vulkan stream", st);
    const int64_t ms = c->quick ? 128 : 512;
    mm_graph mc = mm_graph_new(tsr_backend_dev(cpu), TSR_TYPE_F32, ms, ms, ms);
    mm_graph mv = mm_graph_new(vk0, TSR_TYPE_F32, ms, ms, ms);
    tsr_backend_graph_compute(cpu, mc.g);
    tsr_backend_graph_compute(vb, mv.g);
    double seq = 1e30, par = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = bu_now();
        tsr_backend_graph_compute(cpu, mc.g);
        tsr_backend_graph_compute(vb, mv.g);
        const double s1 = bu_now() - t0;
        t0 = bu_now();
        tsr_backend_graph_compute_async(cpu, mc.g);
        tsr_backend_graph_compute_async(vb, mv.g);
        tsr_backend_synchronize(cpu);
        tsr_backend_synchronize(vb);
        const double p1 = bu_now() - t0;
        seq = s1 < seq ? s1 : seq;
        par = p1 < par ? p1 : par;
    }
    snprintf(shape, sizeof(shape), "2x gemm f32 %lld^3", (long long)ms);
    report(c, "cpu0 + vulkan0 concurrent", shape, 1e3 * par, "ms", "one after the other (ms)",
           1e3 * seq, 0);
    mm_graph_free(&mc);
    mm_graph_free(&mv);
    tsr_backend_free(vb);
    tsr_backend_free(cpu);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_ops [--threads N] [--out DIR] [--quick] [--vulkan]\n"
               "  CPU op throughput against OpenBLAS sgemm and a streaming read, measured in the\n"
               "  same run with the same thread count. Writes DIR/ops.jsonl and DIR/ops.md\n"
               "  (default DIR: bench/results).\n"
               "  --threads N  threads for every figure (default: all cores)\n"
               "  --quick      small shapes, for a smoke test (ratios are not meaningful)\n"
               "  --vulkan     only the Vulkan rows (and the CPU GEMM they are compared with)\n");
}

int main(int argc, char **argv)
{
    bench_cfg c = {.threads = 0, .out_dir = "bench/results"};
    bool vulkan_only = false;
    static const struct option opts[] = {
        {"threads", required_argument, 0, 't'}, {"out", required_argument, 0, 'o'},
        {"quick", no_argument, 0, 'q'},         {"vulkan", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "t:o:qvh", opts, NULL)) != -1) {
        switch (o) {
        case 't':
            c.threads = atoi(optarg);
            if (c.threads < 1 || c.threads > 64) {
                fprintf(stderr, "bench_ops: --threads %s: expected 1..64\n", optarg);
                return 2;
            }
            break;
        case 'o':
            c.out_dir = optarg;
            break;
        case 'q':
            c.quick = true;
            break;
        case 'v':
            vulkan_only = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!c.threads)
        c.threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    /* Two CPU devices for the concurrency figure, unless the user chose. */
    setenv("TSR_CPU_DEVICES", "2", 0);
    if (!bu_open_outputs("bench_ops", c.out_dir, "ops", &c.jsonl, &c.md, &c.dat))
        return 1;
    const char *hdr =
        "| figure                     | shape                      | value             | "
        "baseline                 |  baseline | ratio   | target          |\n"
        "|----------------------------|----------------------------|-------------------|-"
        "-------------------------|-----------|---------|-----------------|\n";
    printf("tessera bench_ops: %d threads%s\n\n%s", c.threads, c.quick ? " (quick)" : "", hdr);
    fprintf(c.md, "# bench_ops (%d threads%s)\n\n%s", c.threads, c.quick ? ", quick" : "", hdr);

    bu_mem read = bu_mem_new(c.quick ? 16u << 20 : 256u << 20, 0);
    if (vulkan_only) {
        bench_vulkan(&c, &read);
        bu_mem_free(&read);
        fclose(c.jsonl);
        fclose(c.md);
        fclose(c.dat);
        return 0;
    }
    bu_mem copy = bu_mem_new(c.quick ? 8u << 20 : 64u << 20, 1);
    const double read_gbs = best_read(&read, c.threads, c.quick ? 3 : 8);
    report(&c, "streaming read", c.quick ? "16 MiB" : "256 MiB", read_gbs, "GB/s", "itself",
           read_gbs, 0);
    report(&c, "memcpy", c.quick ? "8 MiB" : "64 MiB", best_copy(&copy, c.threads, c.quick ? 3 : 8),
           "GB/s", "streaming read", read_gbs, 0);
    bu_mem_free(&copy);

    tsr_backend *be = cpu_stream(0, c.threads);
    const int64_t sq = c.quick ? 256 : 2048;
    const double blas_sq = bench_sgemm(&c, sq, sq, sq);
    bench_gemm(&c, be, TSR_TYPE_F32, sq, sq, sq, blas_sq, 0.9);
    const int64_t K = c.quick ? 512 : 4096, N = c.quick ? 1024 : 14336, T = c.quick ? 64 : 512;
    const double blas_pf = bench_sgemm(&c, K, N, T);
    bench_gemm(&c, be, TSR_TYPE_F32, K, N, T, blas_pf, 0);
    bench_gemm(&c, be, TSR_TYPE_F16, K, N, T, blas_pf, 1.5);
    bench_gemm(&c, be, TSR_TYPE_BF16, K, N, T, blas_pf, 1.5);
    bench_gemm(&c, be, TSR_TYPE_Q8_0, K, N, T, blas_pf, 0);
    bench_matvec(&c, be, TSR_TYPE_F32, K, N, &read);
    bench_matvec(&c, be, TSR_TYPE_F16, K, N, &read);
    bench_matvec(&c, be, TSR_TYPE_BF16, K, N, &read);
    bench_matvec(&c, be, TSR_TYPE_Q8_0, K, N, &read);
    tsr_backend_free(be);
    bench_vulkan(&c, &read);
    bu_mem_free(&read);
    bench_two_devices(&c);
    fprintf(c.dat, "\"2 cpu devices\\nsequential/concurrent\" %.4f %.2f\n", two_dev_speedup,
            1.0 / 0.6);
    fclose(c.jsonl);
    fclose(c.md);
    fclose(c.dat);
    printf("\nwrote %s/ops.jsonl and %s/ops.md\n", c.out_dir, c.out_dir);
    return 0;
}
