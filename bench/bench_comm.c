/* bench/bench_comm.c — all-reduce latency and bandwidth of every path
 * (native, butterfly, ring) over 2, 3 and 4 CPU devices, F32, 4 KiB to
 * 256 MiB, against baselines measured in the same run: single-thread
 * memcpy of the same size (measured right before each size's rows, since
 * bandwidth drifts on a shared host) and OpenMPI's MPI_Allreduce with 2
 * ranks (bench_comm_mpi, when mpirun and the MPI program exist).
 *
 * Not a correctness test (tests/test_comm.c is). Conventions of
 * nccl-tests: latency = enqueue on every stream + synchronize every stream,
 * host-measured, median of many repetitions after a warm-up; algbw =
 * bytes / latency; busbw = algbw · 2(n-1)/n. Output: a Markdown table on
 * stdout and in <out>/comm.md, one JSON line per row in <out>/comm.jsonl,
 * and <out>/comm.dat for bench/plot_comm.gp. Every row names the path the
 * engine took. --quick: CPU×2 and small sizes only (a smoke run).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#ifdef TSR_BENCH_RPC
#include "bench_comm_rpc.h"
#endif
#include "tessera/tessera.h"

#define MAX_SIZES 16

typedef struct {
    size_t bytes;
    double us, gbs;
} dat_point;

typedef struct {
    bool quick;
    const char *out_dir;
    FILE *jsonl, *md, *dat;
    int met, missed;
    char misses[2048];
    /* CPU×2 points for comm.dat, one block per series (DAT_* order). */
    dat_point pts[5][MAX_SIZES];
    int n_pts[5];
} bench_cfg;

enum { DAT_NATIVE, DAT_BUTTERFLY, DAT_RING, DAT_MPI, DAT_MEMCPY };
static const char *const dat_names[] = {"native", "butterfly", "ring", "mpi", "memcpy 1 thread"};

static void dat_add(bench_cfg *c, int series, size_t bytes, double seconds)
{
    if (c->n_pts[series] < MAX_SIZES)
        c->pts[series][c->n_pts[series]++] =
            (dat_point){bytes, seconds * 1e6, (double)bytes / seconds * 1e-9};
}

typedef struct {
    double med, p10, p90;
    int reps;
} stats;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what, tsr_status st)
{
    fprintf(stderr, "bench_comm: %s: %s (%s)\n", what, tsr_status_str(st), tsr_last_error());
    exit(1);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Runs once() twice to warm up, then as often as fits in `budget` seconds
 * (min_reps..3000 times); median and 10th / 90th percentiles. */
static stats time_reps(double (*once)(void *), void *arg, double budget, int min_reps)
{
    once(arg);
    const double warm = once(arg);
    int reps = warm > 0 ? (int)(budget / warm) : 3000;
    reps = reps < min_reps ? min_reps : reps > 3000 ? 3000 : reps;
    double *t = malloc((size_t)reps * sizeof(double));
    for (int r = 0; r < reps; r++)
        t[r] = once(arg);
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    stats s = {t[reps / 2], t[reps / 10], t[reps * 9 / 10], reps};
    free(t);
    return s;
}

static const char *size_label(size_t bytes, char *buf, size_t n)
{
    if (bytes >= (1u << 20))
        snprintf(buf, n, "%zu MiB", bytes >> 20);
    else
        snprintf(buf, n, "%zu KiB", bytes >> 10);
    return buf;
}

/* ---- baselines ---------------------------------------------------------------------------- */

typedef struct {
    char *src, *dst;
    size_t bytes;
} memcpy_arg;

static double memcpy_once(void *a)
{
    memcpy_arg *m = a;
    const double t0 = now_s();
    memcpy(m->dst, m->src, m->bytes);
    const double t = now_s() - t0;
    m->src[0]++; /* keep the copy observable */
    return t;
}

/* mpirun's full path, or NULL. */
static const char *find_in_path(const char *prog, char *out, size_t n)
{
    const char *path = getenv("PATH");
    if (!path)
        return NULL;
    char *dup = strdup(path), *save = NULL;
    const char *found = NULL;
    for (char *d = strtok_r(dup, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, n, "%s/%s", d, prog);
        if (access(out, X_OK) == 0) {
            found = out;
            break;
        }
    }
    free(dup);
    return found;
}

/* MPI_Allreduce with 2 ranks at every size: fills mpi[i] (seconds, 0 when
 * missing). Prints why when it cannot run. */
static void run_mpi(bench_cfg *c, const size_t *sizes, int n_sizes, stats *mpi)
{
    memset(mpi, 0, (size_t)n_sizes * sizeof(*mpi));
    if (c->quick) {
        printf("MPI baseline skipped: --quick\n");
        return;
    }
    char mpirun[1024], self[1024], prog[1200];
    if (!find_in_path("mpirun", mpirun, sizeof(mpirun))) {
        printf("MPI baseline skipped: mpirun not found\n");
        return;
    }
    const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0) {
        printf("MPI baseline skipped: cannot locate bench_comm_mpi\n");
        return;
    }
    self[len] = '\0';
    snprintf(prog, sizeof(prog), "%s/bench_comm_mpi", dirname(self));
    if (access(prog, X_OK) != 0) {
        printf("MPI baseline skipped: %s not built (no MPI compiler at configure time)\n", prog);
        return;
    }
    char cmd[8192];
    int o =
        snprintf(cmd, sizeof(cmd), "%s%s -np 2 %s",
                 geteuid() == 0 ? "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " : "",
                 mpirun, prog);
    for (int i = 0; i < n_sizes && o < (int)sizeof(cmd) - 32; i++)
        o += snprintf(cmd + o, sizeof(cmd) - (size_t)o, " %zu", sizes[i]);
    printf("MPI baseline: %s -np 2 bench_comm_mpi (OpenMPI defaults)\n", mpirun);
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    if (!p) {
        printf("MPI baseline skipped: cannot run mpirun: %s\n", strerror(errno));
        return;
    }
    size_t bytes;
    int reps;
    double med, p10, p90;
    while (fscanf(p, "%zu %d %lf %lf %lf", &bytes, &reps, &med, &p10, &p90) == 5)
        for (int i = 0; i < n_sizes; i++)
            if (sizes[i] == bytes)
                mpi[i] = (stats){med * 1e-6, p10 * 1e-6, p90 * 1e-6, reps};
    const int rc = pclose(p);
    if (rc != 0)
        printf("MPI baseline: mpirun exited with status %d (missing sizes are left out)\n", rc);
}

/* ---- collectives ---------------------------------------------------------------------------- */

typedef struct {
    tsr_allreduce *ar;
    tsr_backend **b;
    int n;
    tsr_tensor **t;
    tsr_allreduce_path path;
} coll_arg;

static double coll_once(void *a)
{
    coll_arg *c = a;
    const double t0 = now_s();
    tsr_status st = tsr_allreduce_run_path(c->ar, c->t, c->path);
    for (int j = 0; j < c->n && st == TSR_OK; j++)
        st = tsr_backend_synchronize(c->b[j]);
    const double t = now_s() - t0;
    if (st != TSR_OK)
        die("allreduce", st);
    return t;
}

/* PIPE_DEPTH collectives enqueued back to back, then one synchronize:
 * seconds per collective when the caller runs ahead (the meta device's
 * use), as MPI's loop of MPI_Allreduce calls does. */
#define PIPE_DEPTH 16
#define PIPE_MAX_BYTES (1u << 20)

static double coll_pipe_once(void *a)
{
    coll_arg *c = a;
    const double t0 = now_s();
    tsr_status st = TSR_OK;
    for (int k = 0; k < PIPE_DEPTH && st == TSR_OK; k++)
        st = tsr_allreduce_run_path(c->ar, c->t, c->path);
    for (int j = 0; j < c->n && st == TSR_OK; j++)
        st = tsr_backend_synchronize(c->b[j]);
    const double t = now_s() - t0;
    if (st != TSR_OK)
        die("allreduce", st);
    return t / PIPE_DEPTH;
}

/* One target verdict appended to `out`; counted in the summary. */
static void verdict(bench_cfg *c, char *out, size_t n, const char *what, bool met, const char *row)
{
    const size_t len = strlen(out);
    snprintf(out + len, n - len, "%s%s: %s", len ? "; " : "", what, met ? "met" : "MISSED");
    if (met) {
        c->met++;
    } else {
        c->missed++;
        const size_t ml = strlen(c->misses);
        snprintf(c->misses + ml, sizeof(c->misses) - ml, "- %s: %s\n", row, what);
    }
}

typedef struct {
    int n;
    size_t bytes;
    const char *path;
    stats s;
    double pipe_s; /* 0: not measured */
    double memcpy_gbs;
    double native_s; /* 0: none */
    double mpi_s;    /* 0: none */
    char targets[256];
} row;

static void report(bench_cfg *c, const row *r)
{
    char sz[32];
    size_label(r->bytes, sz, sizeof(sz));
    const double algbw = (double)r->bytes / r->s.med * 1e-9;
    const double busbw = algbw * 2.0 * (r->n - 1) / r->n;
    char vs_native[32] = "", mpi[32] = "", vs_mpi[32] = "", pipe[32] = "";
    if (r->pipe_s > 0)
        snprintf(pipe, sizeof(pipe), "%.1f", r->pipe_s * 1e6);
    if (r->native_s > 0)
        snprintf(vs_native, sizeof(vs_native), "%.2fx", r->s.med / r->native_s);
    if (r->mpi_s > 0) {
        snprintf(mpi, sizeof(mpi), "%.1f", r->mpi_s * 1e6);
        snprintf(vs_mpi, sizeof(vs_mpi), "%.1fx", r->mpi_s / r->s.med);
    }
    const char *fmt = "| CPU×%d | %7s | %-9s | %10.1f | %6s | %7.2f | %7.2f | %7.2f | %5.2fx | %6s "
                      "| %10s | %7s | %s |\n";
    for (int k = 0; k < 2; k++)
        fprintf(k ? c->md : stdout, fmt, r->n, sz, r->path, r->s.med * 1e6, pipe, algbw, busbw,
                r->memcpy_gbs, busbw / r->memcpy_gbs, vs_native, mpi, vs_mpi, r->targets);
    fflush(stdout);
    fprintf(c->jsonl,
            "{\"bench\":\"comm\",\"devices\":%d,\"type\":\"f32\",\"bytes\":%zu,\"path\":\"%s\","
            "\"latency_us\":%.3f,\"p10_us\":%.3f,\"p90_us\":%.3f,\"reps\":%d,"
            "\"pipelined_us\":%.3f,\"algbw_gbs\":%.4f,"
            "\"busbw_gbs\":%.4f,\"memcpy_gbs\":%.4f,\"busbw_over_memcpy\":%.4f,"
            "\"vs_native\":%.4f,\"mpi_us\":%.3f,\"mpi_over_this\":%.4f,\"targets\":\"%s\"}\n",
            r->n, r->bytes, r->path, r->s.med * 1e6, r->s.p10 * 1e6, r->s.p90 * 1e6, r->s.reps,
            r->pipe_s * 1e6, algbw, busbw, r->memcpy_gbs, busbw / r->memcpy_gbs,
            r->native_s > 0 ? r->s.med / r->native_s : 0.0, r->mpi_s * 1e6,
            r->mpi_s > 0 ? r->mpi_s / r->s.med : 0.0, r->targets);
    fflush(c->jsonl);
}

/* Every size and path over n devices cpu0..cpu(n-1). */
static void bench_devices(bench_cfg *c, int n, const size_t *sizes, int n_sizes, const stats *mpi,
                          memcpy_arg *mc)
{
    tsr_backend *b[8];
    for (int j = 0; j < n; j++) {
        tsr_status st = tsr_backend_new(tsr_reg_dev_get(tsr_cpu_reg(), (size_t)j), &b[j]);
        if (st != TSR_OK)
            die("backend_new", st);
    }
    /* Two engines: the native path as it runs (small tensors over idle
     * streams are summed by the caller), and with every collective enqueued
     * as jobs (TSR_CPU_COMM_INLINE=0), which is what the generic paths, also
     * enqueued, are compared with. */
    tsr_allreduce *ar, *ar_queued;
    tsr_status st = tsr_allreduce_new(b, n, &ar);
    if (st != TSR_OK)
        die("allreduce_new", st);
    setenv("TSR_CPU_COMM_INLINE", "0", 1);
    st = tsr_allreduce_new(b, n, &ar_queued);
    unsetenv("TSR_CPU_COMM_INLINE");
    if (st != TSR_OK)
        die("allreduce_new", st);
    const tsr_allreduce_path paths[] = {TSR_ALLREDUCE_NATIVE, TSR_ALLREDUCE_NATIVE,
                                        TSR_ALLREDUCE_BUTTERFLY, TSR_ALLREDUCE_RING};
    const double budget = c->quick ? 0.02 : 0.25;
    for (int i = 0; i < n_sizes; i++) {
        const size_t bytes = sizes[i];
        tsr_ctx *ctx[8];
        tsr_buf *buf[8];
        tsr_tensor *t[8];
        for (int j = 0; j < n; j++) {
            ctx[j] = tsr_ctx_new(2);
            t[j] = tsr_new_tensor_1d(ctx[j], TSR_TYPE_F32, (int64_t)(bytes / sizeof(float)));
            if ((st = tsr_ctx_alloc_tensors(ctx[j], tsr_dev_buft(tsr_backend_dev(b[j])),
                                            &buf[j])) != TSR_OK)
                die("tensor allocation", st);
            tsr_buf_clear(buf[j], 0); /* first touch, outside the timing */
        }
        mc->bytes = bytes;
        const stats ms = time_reps(memcpy_once, mc, budget, 5);
        const double memcpy_gbs = (double)bytes / ms.med * 1e-9;
        double native_s = 0;
        char sz[32];
        size_label(bytes, sz, sizeof(sz));
        for (size_t p = 0; p < sizeof(paths) / sizeof(paths[0]); p++) {
            const bool queued = p == 1;
            coll_arg ca = {queued ? ar_queued : ar, b, n, t, paths[p]};
            row r = {.n = n, .bytes = bytes, .memcpy_gbs = memcpy_gbs};
            r.s = time_reps(coll_once, &ca, budget, c->quick ? 3 : 5);
            r.path = queued ? "native-q" : tsr_allreduce_path_name(tsr_allreduce_last_path(ar));
            if (bytes <= PIPE_MAX_BYTES)
                r.pipe_s = time_reps(coll_pipe_once, &ca, budget, 3).med;
            if (queued)
                native_s = r.s.med;
            else if (paths[p] != TSR_ALLREDUCE_NATIVE)
                r.native_s = native_s;
            r.mpi_s = n == 2 ? mpi[i].med : 0;
            char name[96];
            snprintf(name, sizeof(name), "CPU×%d %s %s", n, sz, r.path);
            if (n == 2) {
                const double busbw = (double)bytes / r.s.med * 1e-9 * 2.0 * (n - 1) / n;
                if (p <= 1 && bytes == (16u << 10))
                    verdict(c, r.targets, sizeof(r.targets), "<= 20 us", r.s.med <= 20e-6, name);
                if (p == 0 && bytes == (64u << 20))
                    verdict(c, r.targets, sizeof(r.targets), "busbw >= 0.70x memcpy",
                            busbw >= 0.7 * memcpy_gbs, name);
                if (paths[p] != TSR_ALLREDUCE_NATIVE)
                    verdict(c, r.targets, sizeof(r.targets), "<= 2x native-q",
                            r.s.med <= 2.0 * native_s, name);
                if (r.mpi_s > 0 && p == 0) {
                    verdict(c, r.targets, sizeof(r.targets), "faster than MPI", r.s.med < r.mpi_s,
                            name);
                    if (r.pipe_s > 0)
                        verdict(c, r.targets, sizeof(r.targets), "pipelined faster than MPI",
                                r.pipe_s < r.mpi_s, name);
                }
            }
            report(c, &r);
            if (n == 2 && p != 1)
                dat_add(c, DAT_NATIVE + (int)p - (p > 1), bytes, r.s.med);
        }
        if (n == 2) {
            dat_add(c, DAT_MEMCPY, bytes, ms.med);
            if (mpi[i].med > 0)
                dat_add(c, DAT_MPI, bytes, mpi[i].med);
        }
        for (int j = 0; j < n; j++) {
            tsr_buf_free(buf[j]);
            tsr_ctx_free(ctx[j]);
        }
    }
    tsr_allreduce_free(ar);
    tsr_allreduce_free(ar_queued);
    for (int j = 0; j < n; j++)
        tsr_backend_free(b[j]);
}

/* ---- Vulkan: two streams on one device, and CPU + Vulkan ---------------------------------- */

/* The all-reduce over two streams of vulkan0, and over cpu0 + vulkan0 (no
 * native collective spans them: the generic paths run, from async copies
 * through host memory and one-node ADD graphs), auto path and each generic
 * path, F32, 4 KiB to 16 MiB (256 KiB with --quick), against the same
 * single-thread memcpy. Vulkan devices are found through the registry by
 * name, so this file needs no Vulkan header. */
static void bench_vulkan(bench_cfg *c, memcpy_arg *mc)
{
    tsr_reg *reg = tsr_reg_by_name("vulkan");
    if (!reg || tsr_reg_dev_count(reg) == 0) {
        printf("\nVulkan rows skipped (not built, no loader or no device)\n");
        fprintf(c->md, "\nVulkan rows skipped (not built, no loader or no device)\n");
        return;
    }
    tsr_dev *vk = tsr_reg_dev_get(reg, 0), *cpu = tsr_reg_dev_get(tsr_cpu_reg(), 0);
    const struct {
        const char *label;
        tsr_dev *d[2];
    } sets[2] = {{"VK0×2", {vk, vk}}, {"CPU0+VK0", {cpu, vk}}};
    const tsr_allreduce_path paths[] = {TSR_ALLREDUCE_AUTO, TSR_ALLREDUCE_BUTTERFLY,
                                        TSR_ALLREDUCE_RING};
    const size_t max = c->quick ? (256u << 10) : (16u << 20);
    const double budget = c->quick ? 0.02 : 0.25;
    const char *hdr =
        "| devices | size | path | latency µs | algbw GB/s | busbw GB/s | memcpy GB/s "
        "| busbw / memcpy |\n|---|---:|---|---:|---:|---:|---:|---:|\n";
    printf("\n%s", hdr);
    fprintf(c->md, "\n## Vulkan\n\n%s", hdr);
    for (int k = 0; k < 2; k++) {
        tsr_backend *b[2];
        for (int j = 0; j < 2; j++) {
            tsr_status st = tsr_backend_new(sets[k].d[j], &b[j]);
            if (st != TSR_OK)
                die("backend_new", st);
        }
        tsr_allreduce *ar;
        tsr_status st = tsr_allreduce_new(b, 2, &ar);
        if (st != TSR_OK)
            die("allreduce_new", st);
        for (size_t bytes = 4u << 10; bytes <= max; bytes *= 4) {
            tsr_ctx *ctx[2];
            tsr_buf *buf[2];
            tsr_tensor *t[2];
            for (int j = 0; j < 2; j++) {
                ctx[j] = tsr_ctx_new(2);
                t[j] = tsr_new_tensor_1d(ctx[j], TSR_TYPE_F32, (int64_t)(bytes / sizeof(float)));
                if ((st = tsr_ctx_alloc_tensors(ctx[j], tsr_dev_buft(sets[k].d[j]), &buf[j])) !=
                    TSR_OK)
                    die("tensor allocation", st);
                tsr_buf_clear(buf[j], 0);
            }
            mc->bytes = bytes;
            const double memcpy_gbs =
                (double)bytes / time_reps(memcpy_once, mc, budget, 5).med * 1e-9;
            char sz[32];
            size_label(bytes, sz, sizeof(sz));
            for (size_t p = 0; p < sizeof(paths) / sizeof(paths[0]); p++) {
                coll_arg ca = {ar, b, 2, t, paths[p]};
                const stats s = time_reps(coll_once, &ca, budget, c->quick ? 3 : 5);
                const char *path = tsr_allreduce_path_name(tsr_allreduce_last_path(ar));
                const double algbw = (double)bytes / s.med * 1e-9, busbw = algbw;
                for (int f = 0; f < 2; f++)
                    fprintf(f ? c->md : stdout,
                            "| %s | %7s | %-9s%s | %10.1f | %7.2f | %7.2f | %7.2f | %5.2fx |\n",
                            sets[k].label, sz, path, p == 0 ? " (auto)" : "", s.med * 1e6, algbw,
                            busbw, memcpy_gbs, busbw / memcpy_gbs);
                fprintf(c->jsonl,
                        "{\"bench\":\"comm\",\"devices\":\"%s\",\"type\":\"f32\",\"bytes\":%zu,"
                        "\"path\":\"%s\",\"auto\":%s,\"latency_us\":%.3f,\"p10_us\":%.3f,"
                        "\"p90_us\":%.3f,\"busbw_gbs\":%.4f,\"memcpy_gbs\":%.4f}\n",
                        sets[k].label, bytes, path, p == 0 ? "true" : "false", s.med * 1e6,
                        s.p10 * 1e6, s.p90 * 1e6, busbw, memcpy_gbs);
            }
            fflush(stdout);
            for (int j = 0; j < 2; j++) {
                tsr_buf_free(buf[j]);
                tsr_ctx_free(ctx[j]);
            }
        }
        tsr_allreduce_free(ar);
        for (int j = 0; j < 2; j++)
            tsr_backend_free(b[j]);
    }
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_comm [--quick] [--out DIR]\n"
               "  --quick    CPU×2, 4 KiB..256 KiB, few repetitions, no MPI (a smoke run)\n"
               "  --out DIR  where comm.md, comm.jsonl and comm.dat go (default bench/results)\n");
}

int main(int argc, char **argv)
{
#ifdef TSR_BENCH_RPC
    bench_comm_rpc_prepare(); /* forks: before anything uses NNG */
#endif
    bench_cfg c = {.out_dir = "bench/results"};
    static const struct option opts[] = {{"out", required_argument, 0, 'o'},
                                         {"quick", no_argument, 0, 'q'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "o:qh", opts, NULL)) != -1) {
        switch (o) {
        case 'o':
            c.out_dir = optarg;
            break;
        case 'q':
            c.quick = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    /* Four CPU devices (one thread each on this project's 2-core machines),
     * unless the user chose. */
    setenv("TSR_CPU_DEVICES", "4", 0);
    if (!bu_open_outputs("bench_comm", c.out_dir, "comm", &c.jsonl, &c.md, &c.dat))
        return 1;

    size_t sizes[MAX_SIZES];
    int n_sizes = 0;
    const size_t max = c.quick ? (256u << 10) : (256u << 20);
    for (size_t s = 4u << 10; s <= max; s *= 4)
        sizes[n_sizes++] = s;
    const int n_devs = (int)tsr_reg_dev_count(tsr_cpu_reg());
    const int max_n = c.quick ? 2 : n_devs < 4 ? n_devs : 4;
    if (max_n < 2) {
        fprintf(stderr, "bench_comm: needs at least 2 CPU devices (TSR_CPU_DEVICES=%d)\n", n_devs);
        return 1;
    }

    printf("tessera bench_comm: all-reduce of F32 tensors over CPU devices%s\n",
           c.quick ? " (quick)" : "");
    stats mpi[MAX_SIZES];
    run_mpi(&c, sizes, n_sizes, mpi);
    const char *hdr =
        "| devices | size | path | latency µs | pipelined µs | algbw GB/s | busbw GB/s | "
        "memcpy GB/s | busbw / memcpy | × native-q | MPI µs | MPI / this | targets |\n"
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
    printf("\n%s", hdr);
    fprintf(c.md,
            "# bench_comm%s\n\nAll-reduce of F32 tensors over CPU devices (one worker thread "
            "each). latency = enqueue on every stream + synchronize all, median; algbw = "
            "bytes / latency; busbw = algbw · 2(n−1)/n; pipelined = %d collectives enqueued back "
            "to back, then one synchronize, per collective (up to 1 MiB); memcpy = single-thread "
            "memcpy of the same size, measured just before; MPI = OpenMPI MPI_Allreduce, 2 ranks, "
            "defaults (barrier, then the call; the slowest rank). native: the CPU collective as it "
            "runs (over idle streams, small tensors are summed by the caller: no job at all); "
            "native-q: the same with every collective enqueued as jobs (TSR_CPU_COMM_INLINE=0), "
            "the yardstick of the generic paths, which are always enqueued. × native-q and MPI / "
            "this compare latencies.\n\n%s",
            c.quick ? " (quick)" : "", PIPE_DEPTH, hdr);

    /* memcpy buffers for the largest size, touched once. */
    memcpy_arg mc = {malloc(max), malloc(max), 0};
    if (!mc.src || !mc.dst) {
        fprintf(stderr, "bench_comm: cannot allocate 2 x %zu bytes\n", max);
        return 1;
    }
    memset(mc.src, 1, max);
    memset(mc.dst, 2, max);

    for (int n = 2; n <= max_n; n++) {
        /* More devices: stop at 64 MiB (time and memory). */
        int ns = n_sizes;
        while (n > 2 && ns > 0 && sizes[ns - 1] > (64u << 20))
            ns--;
        bench_devices(&c, n, sizes, ns, mpi, &mc);
    }
    bench_vulkan(&c, &mc);
#ifdef TSR_BENCH_RPC
    bench_comm_rpc_run(c.md, c.jsonl, c.quick, &c.met, &c.missed);
#else
    printf("\nRPC rows skipped (built without RPC)\n");
#endif
    printf("\ntargets: %d met, %d missed\n%s", c.met, c.missed, c.misses);
    fprintf(c.md, "\ntargets: %d met, %d missed\n%s", c.met, c.missed, c.misses);
    free(mc.src);
    free(mc.dst);
    fclose(c.jsonl);
    fclose(c.md);
    /* comm.dat: CPU×2, one block per series (gnuplot `index`). */
    fprintf(c.dat, "# CPU x2 all-reduce, F32: bytes latency_us algbw_GBps (= busbw for 2)\n");
    for (int k = 0; k < 5; k++) {
        fprintf(c.dat, "%s# %s\n", k ? "\n\n" : "", dat_names[k]);
        for (int i = 0; i < c.n_pts[k]; i++)
            fprintf(c.dat, "%zu %.3f %.4f\n", c.pts[k][i].bytes, c.pts[k][i].us, c.pts[k][i].gbs);
    }
    fclose(c.dat);
    return 0;
}
