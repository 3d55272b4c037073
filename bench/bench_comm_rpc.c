/* bench/bench_comm_rpc.c — bench_comm's remote rows: the all-reduce over
 * devices of tessera-rpc-server processes on this host (two servers over
 * tcp://, two over ipc://, and one server beside the local cpu0), auto
 * path (the servers' own all-reduce where every device is remote) and the
 * generic butterfly (now with copies from server to server), F32 4 KiB to
 * 16 MiB, beside the raw NNG one-way latency of a 64-byte message on the same
 * transport (half a raw echo's round trip, measured right before and right
 * after each figure, the lower of the two).
 *
 *   latency    — enqueue on every stream + synchronize them all: includes
 *                the client's round trip to each server;
 *   pipelined  — 44 all-reduces (as many as a TinyLlama decode step has)
 *                enqueued back to back, then one synchronize, per
 *                all-reduce: what a decode step pays, since the client
 *                never waits between them (the target compares this at
 *                16 KiB with 3 raw one-way latencies).
 *
 * Not the CPU rows (bench_comm.c). The raw NNG peers are forked before this
 * process touches NNG (bench_comm_rpc_prepare, first thing in main).
 */
#define _GNU_SOURCE
#include "bench_comm_rpc.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "raw_nng.h"
#include "rpc_testutil.h"
#include "tessera/comm.h"
#include "tessera/rpc.h"
#include "tessera/tessera.h"

#define PIPE 44 /* all-reduces per TinyLlama decode step: the pipeline a decode step makes */

static raw_server raw_tcp, raw_ipc;
static char dir[256];
static bool prepared;

void bench_comm_rpc_prepare(void)
{
    if (!rt_tmpdir(dir, sizeof(dir)))
        return;
    char url[300];
    snprintf(url, sizeof(url), "ipc://%s/raw", dir);
    raw_tcp = raw_start("tcp://127.0.0.1:0");
    raw_ipc = raw_start(url);
    prepared = true;
}

/* Median seconds of fn over ~budget seconds (at least min_reps). */
typedef struct ar_arg {
    tsr_allreduce *ar;
    tsr_backend **b;
    tsr_tensor **t;
    int n, depth;
    tsr_allreduce_path path;
} ar_arg;

static double ar_once(ar_arg *a)
{
    const double t0 = bu_now();
    tsr_status st = TSR_OK;
    for (int k = 0; k < a->depth && st == TSR_OK; k++)
        st = tsr_allreduce_run_path(a->ar, a->t, a->path);
    for (int j = 0; j < a->n && st == TSR_OK; j++)
        st = tsr_backend_synchronize(a->b[j]);
    if (st != TSR_OK) {
        fprintf(stderr, "bench_comm: rpc all-reduce: %s\n", tsr_last_error());
        exit(1);
    }
    return (bu_now() - t0) / a->depth;
}

static double median_of(ar_arg *a, double budget)
{
    double t[200];
    int n = 0;
    ar_once(a); /* warm-up */
    const double t0 = bu_now();
    while (n < 200 && (n < 5 || bu_now() - t0 < budget))
        t[n++] = ar_once(a);
    return bu_median(t, n);
}

/* Half the median round trip of a raw 64-byte echo, the servers idle. */
static double raw_one_way(raw *r, double budget)
{
    char m[64] = {0};
    double t[400];
    int n = 0;
    raw_req(r, RAW_ECHO, m, 64);
    const double t0 = bu_now();
    while (n < 400 && (n < 20 || bu_now() - t0 < budget)) {
        const double s = bu_now();
        raw_req(r, RAW_ECHO, m, 64);
        t[n++] = bu_now() - s;
    }
    return bu_median(t, n) / 2;
}

static tsr_dev *add(const rt_server *s)
{
    size_t first = 0;
    if (tsr_rpc_add_server(s->url, NULL, &first, NULL) != TSR_OK) {
        fprintf(stderr, "bench_comm: %s\n", tsr_last_error());
        exit(1);
    }
    return tsr_reg_dev_get(tsr_rpc_reg(), first);
}

void bench_comm_rpc_run(FILE *md, FILE *jsonl, bool quick, int *met, int *missed)
{
    if (!prepared) {
        printf("\nRPC rows skipped (no temporary directory)\n");
        return;
    }
    const char *const args[] = {"--device", "cpu:0", "--threads", "1", NULL};
    char ipc_a[300], ipc_b[300];
    snprintf(ipc_a, sizeof(ipc_a), "ipc://%s/a", dir);
    snprintf(ipc_b, sizeof(ipc_b), "ipc://%s/b", dir);
    rt_server s[4];
    if (!rt_server_start(&s[0], NULL, args) || !rt_server_start(&s[1], NULL, args) ||
        !rt_server_start(&s[2], ipc_a, args) || !rt_server_start(&s[3], ipc_b, args)) {
        printf("\nRPC rows skipped: tessera-rpc-server did not start\n");
        return;
    }
    tsr_dev *d[4];
    for (int i = 0; i < 4; i++)
        d[i] = add(&s[i]);
    const struct {
        const char *label, *via;
        tsr_dev *dev[2];
    } mixes[3] = {{"RPC×2 tcp", "tcp", {d[0], d[1]}},
                  {"RPC×2 ipc", "ipc", {d[2], d[3]}},
                  {"RPC+CPU0", "tcp", {d[0], tsr_reg_dev_get(tsr_cpu_reg(), 0)}}};
    const double budget = quick ? 0.05 : 0.3;
    const size_t max = quick ? (256u << 10) : (16u << 20);
    const char *hdr =
        "| devices | size | path | latency µs | pipelined µs | busbw GB/s | raw one-way "
        "64 B µs | pipelined / raw one-way | target |\n"
        "|---|---:|---|---:|---:|---:|---:|---:|---|\n";
    printf("\n%s", hdr);
    fprintf(md,
            "\n## Remote devices\n\nAll-reduce over tessera-rpc-server devices on this host "
            "(1 CPU thread each): latency = enqueue + synchronize (includes the client's round "
            "trip); pipelined = %d back to back, then one synchronize, per all-reduce; raw "
            "one-way = half a raw NNG 64-byte echo on the same transport, same run.\n\n%s",
            PIPE, hdr);
    for (int k = 0; k < 3; k++) {
        tsr_backend *b[2];
        tsr_buf *buf[2];
        for (int j = 0; j < 2; j++)
            if (tsr_backend_new(mixes[k].dev[j], &b[j]) != TSR_OK ||
                tsr_buft_alloc(tsr_dev_buft(mixes[k].dev[j]), max, &buf[j]) != TSR_OK) {
                fprintf(stderr, "bench_comm: %s: %s\n", mixes[k].label, tsr_last_error());
                exit(1);
            }
        tsr_allreduce *ar;
        if (tsr_allreduce_new(b, 2, &ar) != TSR_OK)
            exit(1);
        raw r = raw_connect(strcmp(mixes[k].via, "tcp") == 0 ? raw_tcp.url : raw_ipc.url);
        for (size_t bytes = 4u << 10; bytes <= max; bytes *= 4) {
            tsr_tensor t[2], *tp[2];
            for (int j = 0; j < 2; j++) {
                t[j] = (tsr_tensor){.type = TSR_TYPE_F32,
                                    .ne = {(int64_t)(bytes / 4), 1, 1, 1},
                                    .nb = {4, bytes, bytes, bytes}};
                if (tsr_buf_place_tensor(buf[j], &t[j], 0) != TSR_OK)
                    exit(1);
                tsr_buf_clear(buf[j], 0);
                tp[j] = &t[j];
            }
            const tsr_allreduce_path paths[2] = {TSR_ALLREDUCE_AUTO, TSR_ALLREDUCE_BUTTERFLY};
            for (int p = 0; p < 2; p++) {
                ar_arg a = {ar, b, tp, 2, 1, paths[p]};
                /* The baseline right before and right after, the lower of
                 * the two (the strictest yardstick for us). */
                const double ow0 = raw_one_way(&r, budget / 2);
                const double lat = median_of(&a, budget);
                const char *path = tsr_allreduce_path_name(tsr_allreduce_last_path(ar));
                a.depth = PIPE;
                const double pipe = median_of(&a, budget);
                const double ow1 = raw_one_way(&r, budget / 2);
                const double one_way = ow0 < ow1 ? ow0 : ow1;
                const double ratio = pipe / one_way;
                const bool target = k < 2 && p == 0 && bytes == (16u << 10);
                char verdict[40] = "";
                if (target) {
                    snprintf(verdict, sizeof(verdict), "<= 3x: %s", ratio <= 3 ? "met" : "MISSED");
                    ++*(ratio <= 3 ? met : missed);
                }
                char sz[16];
                if (bytes >= (1u << 20))
                    snprintf(sz, sizeof(sz), "%zu MiB", bytes >> 20);
                else
                    snprintf(sz, sizeof(sz), "%zu KiB", bytes >> 10);
                for (int f = 0; f < 2; f++)
                    fprintf(f ? md : stdout,
                            "| %s | %7s | %-9s%s | %9.1f | %9.1f | %6.2f | %6.1f | %6.2fx | %s |\n",
                            mixes[k].label, sz, path, p == 0 ? " (auto)" : "", lat * 1e6,
                            pipe * 1e6, (double)bytes / pipe * 1e-9, one_way * 1e6, ratio, verdict);
                fprintf(jsonl,
                        "{\"bench\":\"comm\",\"devices\":\"%s\",\"type\":\"f32\",\"bytes\":%zu,"
                        "\"path\":\"%s\",\"auto\":%s,\"latency_us\":%.3f,\"pipelined_us\":%.3f,"
                        "\"raw_one_way_us\":%.3f,\"pipelined_vs_raw_one_way\":%.4f}\n",
                        mixes[k].label, bytes, path, p == 0 ? "true" : "false", lat * 1e6,
                        pipe * 1e6, one_way * 1e6, ratio);
                fflush(stdout);
            }
        }
        raw_close(&r);
        tsr_allreduce_free(ar);
        for (int j = 0; j < 2; j++) {
            tsr_buf_free(buf[j]);
            tsr_backend_free(b[j]);
        }
    }
    raw_stop(&raw_tcp);
    raw_stop(&raw_ipc);
    for (int i = 0; i < 4; i++)
        rt_server_stop(&s[i]);
    rmdir(dir);
}
