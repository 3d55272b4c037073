/* bench/bench_rpc.c — remote devices against raw NNG on the same transport,
 * measured in the same run:
 *   round trip   an empty graph compute + synchronize, beside a raw 64-byte
 *                echo over an NNG stream;
 *   bandwidth    blocking tensor set / get of 4 KiB .. 256 MiB, beside raw
 *                NNG moving the same bytes (one way, 1-byte answer) with
 *                buffers reused on both ends;
 *   pipelining   1000 small asynchronous sets + one synchronize, against
 *                three raw round trips;
 *   upload       loading a TinyLlama-1.1B-shaped GGUF (F16) onto a remote
 *                device, against loading it onto the local CPU and against
 *                its bytes at the raw 64 MiB rate.
 * over tcp:// (127.0.0.1) and ipc://. The raw side and the server are each a
 * separate process (forked / tessera-rpc-server), so both paths cross the
 * same process boundary. Every figure is the median of repetitions.
 *
 * Output: a Markdown table on stdout and in <out>/rpc.md, JSON lines in
 * <out>/rpc.jsonl, and <out>/rpc.dat for bench/plot_rpc.gp.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <nng/nng.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "raw_nng.h"
#include "rpc_testutil.h"
#include "tessera/model.h"
#include "tessera/rpc.h"
#include "tessera/tessera.h"

static void die(const char *what)
{
    fprintf(stderr, "bench_rpc: %s: %s\n", what, tsr_last_error());
    exit(1);
}

/* ---- timing --------------------------------------------------------------------------------- */

typedef struct {
    const char *out_dir;
    bool quick;
    FILE *jl, *md, *dat;
    char *host; /* reused client buffer, touched */
    size_t host_size;
} bench;

/* Median seconds of one op, repeated until ~budget seconds (at least 3,
 * at most max times), after one untimed warm-up. */
#define TIMED(b, budget, max, out, op)                                             \
    do {                                                                           \
        op;                                                                        \
        double _t[1000];                                                           \
        int _n = 0;                                                                \
        const double _t0 = bu_now();                                               \
        while (_n < (max) && _n < 1000 && (_n < 3 || bu_now() - _t0 < (budget))) { \
            const double _s = bu_now();                                            \
            op;                                                                    \
            _t[_n++] = bu_now() - _s;                                              \
        }                                                                          \
        (out) = bu_median(_t, _n);                                                 \
    } while (0)

static double budget(const bench *b) { return b->quick ? 0.1 : 0.4; }

/* Medians of two ops timed alternately (a, b, a, b, ...), each warmed up
 * once, for ~budget seconds (3..max pairs): load that comes and goes hits
 * both alike. */
#define PAIRED(budget, max, ta, opa, tb, opb)                                      \
    do {                                                                           \
        opa;                                                                       \
        opb;                                                                       \
        double _a[1000], _b[1000];                                                 \
        int _n = 0;                                                                \
        const double _t0 = bu_now();                                               \
        while (_n < (max) && _n < 1000 && (_n < 3 || bu_now() - _t0 < (budget))) { \
            double _s = bu_now();                                                  \
            opa;                                                                   \
            _a[_n] = bu_now() - _s;                                                \
            _s = bu_now();                                                         \
            opb;                                                                   \
            _b[_n++] = bu_now() - _s;                                              \
        }                                                                          \
        (ta) = bu_median(_a, _n);                                                  \
        (tb) = bu_median(_b, _n);                                                  \
    } while (0)

static void row(bench *b, const char *what, const char *tr, size_t bytes, double rpc, double base,
                const char *unit, const char *base_name, double ratio, const char *target)
{
    fprintf(b->jl,
            "{\"bench\":\"rpc\",\"what\":\"%s\",\"transport\":\"%s\",\"bytes\":%zu,\"rpc\":%.6g,"
            "\"baseline\":%.6g,\"unit\":\"%s\",\"baseline_name\":\"%s\",\"ratio\":%.4f,"
            "\"target\":\"%s\"}\n",
            what, tr, bytes, rpc, base, unit, base_name, ratio, target);
    char sz[32] = "";
    if (bytes >= (1u << 20))
        snprintf(sz, sizeof(sz), "%zu MiB", bytes >> 20);
    else if (bytes)
        snprintf(sz, sizeof(sz), "%zu KiB", bytes >> 10);
    const char *line = "| %-9s | %-4s | %8s | %10.3f %s | %10.3f %s (%s) | %6.2fx | %s |\n";
    printf(line, what, tr, sz, rpc, unit, base, unit, base_name, ratio, target);
    fprintf(b->md, line, what, tr, sz, rpc, unit, base, unit, base_name, ratio, target);
}

/* ---- the measurements ----------------------------------------------------------------------- */

static void round_trip(bench *b, const char *tr, tsr_dev *dev, const char *raw_url, double *raw_rtt)
{
    raw r = raw_connect(raw_url);
    char m[64] = {0};
    double t_raw, t_rpc, t_one, t_raw2;
    tsr_backend *be;
    if (tsr_backend_new(dev, &be) != TSR_OK)
        die("stream");
    tsr_graph *g = tsr_graph_new(4);
    PAIRED(budget(b), 1000, t_raw, raw_req(&r, RAW_ECHO, m, 64), t_rpc,
           tsr_backend_graph_compute(be, g));
    /* For reference: a one-node graph (16 floats, x + x). */
    tsr_ctx *ctx = tsr_ctx_new(4);
    tsr_tensor *x = tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 16);
    tsr_tensor *y = tsr_add(ctx, x, x);
    tsr_buf *buf;
    tsr_graph *g1 = tsr_graph_new(4);
    if (tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(dev), &buf) != TSR_OK ||
        tsr_graph_build(g1, y) != TSR_OK)
        die("one-node graph");
    PAIRED(budget(b), 1000, t_raw2, raw_req(&r, RAW_ECHO, m, 64), t_one,
           tsr_backend_graph_compute(be, g1));
    raw_close(&r);
    *raw_rtt = t_raw;
    row(b, "rtt-empty", tr, 64, t_rpc * 1e6, t_raw * 1e6, "us", "raw 64 B echo", t_rpc / t_raw,
        "<= 1.5x");
    row(b, "rtt-1node", tr, 64, t_one * 1e6, t_raw2 * 1e6, "us", "raw 64 B echo", t_one / t_raw2,
        "-");
    tsr_graph_free(g);
    tsr_graph_free(g1);
    tsr_buf_free(buf);
    tsr_ctx_free(ctx);
    tsr_backend_free(be);
}

static void pipelined(bench *b, const char *tr, tsr_dev *dev, const char *raw_url)
{
    tsr_backend *be;
    if (tsr_backend_new(dev, &be) != TSR_OK)
        die("stream");
    tsr_buf *buf;
    if (tsr_buft_alloc(tsr_dev_buft(dev), 1000 * 64, &buf) != TSR_OK)
        die("buffer");
    tsr_tensor t = {.type = TSR_TYPE_F32, .ne = {16000, 1, 1, 1}, .nb = {4, 64000, 64000, 64000}};
    if (tsr_buf_place_tensor(buf, &t, 0) != TSR_OK)
        die("place");
    raw r = raw_connect(raw_url);
    char m[64] = {0};
    double t_rpc, t_raw3, t_one;
    /* 1000 writes of 64 bytes, then one synchronize; beside three raw
     * 64-byte round trips, alternately. */
    PAIRED(budget(b), 200, t_raw3, for (int k = 0; k < 3; k++) raw_req(&r, RAW_ECHO, m, 64), t_rpc,
           {
               for (int i = 0; i < 1000; i++)
                   tsr_backend_set_async(be, &t, b->host + (size_t)i * 64, (size_t)i * 64, 64);
               if (tsr_backend_synchronize(be) != TSR_OK)
                   die("synchronize");
           });
    raw_close(&r);
    /* The protocol's own round trip: one blocking 64-byte set. */
    TIMED(b, budget(b), 1000, t_one, tsr_tensor_set(&t, b->host, 0, 64));
    row(b, "1000-sets", tr, 64, t_rpc * 1e6, t_raw3 * 1e6, "us", "3 raw round trips",
        t_rpc / t_raw3, "<= 1x");
    row(b, "1000-sets", tr, 64, t_rpc * 1e6, 3 * t_one * 1e6, "us", "3 blocking 64 B sets",
        t_rpc / (3 * t_one), "-");
    tsr_buf_free(buf);
    tsr_backend_free(be);
}

static void bandwidth(bench *b, const char *tr, tsr_dev *dev, const char *raw_url, double *set64,
                      double *raw64)
{
    const size_t sizes[] = {4u << 10, 64u << 10, 1u << 20, 16u << 20, 64u << 20, 256u << 20};
    const int n = b->quick ? 5 : 6;
    tsr_buf *buf;
    if (tsr_buft_alloc(tsr_dev_buft(dev), sizes[n - 1], &buf) != TSR_OK)
        die("buffer");
    tsr_tensor t = {.type = TSR_TYPE_I32};
    for (int i = 0; i < n; i++) {
        const size_t s = sizes[i];
        t = (tsr_tensor){
            .type = TSR_TYPE_I32, .ne = {(int64_t)(s / 4), 1, 1, 1}, .nb = {4, s, s, s}};
        if (tsr_buf_place_tensor(buf, &t, 0) != TSR_OK)
            die("place");
        double t_raw_set, t_raw_get, t_set, t_get;
        raw r = raw_connect(raw_url);
        PAIRED(budget(b), 200, t_raw_set, raw_req(&r, RAW_SINK, b->host, s), t_set,
               tsr_tensor_set(&t, b->host, 0, s));
        PAIRED(budget(b), 200, t_raw_get, raw_req(&r, RAW_SOURCE, b->host, s), t_get,
               tsr_tensor_get(&t, b->host, 0, s));
        raw_close(&r);
        const double g = 1e-9 * (double)s;
        const char *target = s == (64u << 20) ? ">= 0.8x" : "-";
        row(b, "set", tr, s, g / t_set, g / t_raw_set, "GB/s", "raw NNG", t_raw_set / t_set,
            target);
        row(b, "get", tr, s, g / t_get, g / t_raw_get, "GB/s", "raw NNG", t_raw_get / t_get,
            target);
        fprintf(b->dat, "%s %zu %.4f %.4f %.4f %.4f\n", tr, s, g / t_set, g / t_raw_set, g / t_get,
                g / t_raw_get);
        if (s == (64u << 20)) {
            *set64 = g / t_set;
            *raw64 = g / t_raw_set;
        }
    }
    fprintf(b->dat, "\n\n");
    tsr_buf_free(buf);
}

static void upload(bench *b, tsr_dev *dev, double raw64)
{
    const char *preset = b->quick ? "tiny" : "tinyllama";
    tsr_model_hparams hp;
    if (tsr_model_preset(preset, &hp) != TSR_OK)
        die("preset");
    hp.wtype = TSR_TYPE_F16;
    char path[512];
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(path, sizeof(path), "%s/bench_rpc_%s_%d.gguf", tmp, preset, (int)getpid());
    tsr_model_config cfg;
    tsr_model_config_default(&cfg);
    cfg.n_ctx = 1;
    cfg.quiet = true;
    tsr_model *m = NULL;
    if (tsr_model_generate(&hp, 1, &cfg, &m) != TSR_OK || tsr_model_save(m, path) != TSR_OK)
        die("generating the model");
    tsr_model_free(m);
    tsr_model_stats st;
    double t_local, t_remote;
    cfg.devices[0] = tsr_reg_dev_get(tsr_cpu_reg(), 0);
    TIMED(b, 0, 3, t_local, {
        if (tsr_model_load(path, &cfg, &m) != TSR_OK)
            die("local load");
        tsr_model_stats_get(m, &st);
        tsr_model_free(m);
    });
    cfg.devices[0] = dev;
    TIMED(b, 0, 3, t_remote, {
        if (tsr_model_load(path, &cfg, &m) != TSR_OK)
            die("remote load");
        tsr_model_free(m);
    });
    unlink(path);
    const double bytes = (double)st.weight_bytes;
    const double t_raw = bytes * 1e-9 / raw64;
    char what[32];
    snprintf(what, sizeof(what), "upload");
    row(b, what, "tcp", (size_t)bytes, t_remote, t_local, "s", "local CPU load", t_remote / t_local,
        "-");
    row(b, what, "tcp", (size_t)bytes, t_remote, t_raw, "s", "bytes at raw 64 MiB rate",
        t_remote / t_raw, "-");
    printf("(%s, %.2f GB of F16 weights: %.2f GB/s to the remote device)\n", preset, bytes * 1e-9,
           bytes * 1e-9 / t_remote);
    fprintf(b->md, "\n%s, %.2f GB of F16 weights: %.2f GB/s to the remote device.\n", preset,
            bytes * 1e-9, bytes * 1e-9 / t_remote);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"out", required_argument, 0, 'o'},
                                             {"quick", no_argument, 0, 'q'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    bench b = {.out_dir = "bench/results"};
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'o')
            b.out_dir = optarg;
        else if (c == 'q')
            b.quick = true;
        else {
            printf("usage: bench_rpc [--out DIR] [--quick]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    if (!bu_open_outputs("bench_rpc", b.out_dir, "rpc", &b.jl, &b.md, &b.dat))
        return 1;
    b.host_size = b.quick ? (64u << 20) : (256u << 20);
    b.host = malloc(b.host_size);
    memset(b.host, 3, b.host_size);
    char dir[256], ipc[300], raw_ipc[300];
    if (!rt_tmpdir(dir, sizeof(dir)))
        die("temp dir");
    snprintf(ipc, sizeof(ipc), "ipc://%s/rpc", dir);
    snprintf(raw_ipc, sizeof(raw_ipc), "ipc://%s/raw", dir);
    /* The raw peers first: they fork, and NNG must not be in use yet. */
    raw_server rt = raw_start("tcp://127.0.0.1:0"), ri = raw_start(raw_ipc);
    const char *const args[] = {"--device", "cpu:0", NULL};
    rt_server st, si;
    if (!rt_server_start(&st, NULL, args) || !rt_server_start(&si, ipc, args))
        die("starting tessera-rpc-server");
    size_t ft, fi;
    if (tsr_rpc_add_server(st.url, NULL, &ft, NULL) != TSR_OK ||
        tsr_rpc_add_server(si.url, NULL, &fi, NULL) != TSR_OK)
        die("connecting");
    const char *hdr = "| what      | via  |     size |        tessera RPC |                  "
                      "baseline (same run) |  ratio | target |\n"
                      "|---|---|---|---|---|---|---|\n";
    printf("bench_rpc: tessera RPC against raw NNG streams, same transport, same run\n\n%s", hdr);
    fprintf(b.md,
            "# bench_rpc\n\ntessera RPC against raw NNG streams (same transport, same "
            "message sizes, buffers reused), measured in the same run; medians.\n\n%s",
            hdr);
    struct {
        const char *tr;
        tsr_dev *dev;
        const char *raw;
    } links[2] = {{"tcp", tsr_reg_dev_get(tsr_rpc_reg(), ft), rt.url},
                  {"ipc", tsr_reg_dev_get(tsr_rpc_reg(), fi), ri.url}};
    double raw64_tcp = 0;
    for (int k = 0; k < 2; k++) {
        double rtt, set64 = 0, raw64 = 0;
        round_trip(&b, links[k].tr, links[k].dev, links[k].raw, &rtt);
        pipelined(&b, links[k].tr, links[k].dev, links[k].raw);
        bandwidth(&b, links[k].tr, links[k].dev, links[k].raw, &set64, &raw64);
        if (k == 0)
            raw64_tcp = raw64;
    }
    upload(&b, links[0].dev, raw64_tcp);
    raw_stop(&rt);
    raw_stop(&ri);
    rt_server_stop(&st);
    rt_server_stop(&si);
    rmdir(dir);
    free(b.host);
    fclose(b.jl);
    fclose(b.md);
    fclose(b.dat);
    return 0;
}
