/* tests/test_rpc_mesh.c — server-to-server work over RPC (protocol version
 * 2): the servers' own all-reduce against the sum computed here, copies
 * between servers, tensor parallelism over remote devices against one local
 * device, the fallback through the client when the servers cannot reach each
 * other, and a server killed in the middle of decoding.
 *
 * Every server is a tessera-rpc-server process on a port chosen at run
 * time (loopback). Each test runs in its own process (Criterion), so the
 * RPC registry starts empty in each.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"
#include "rpc_testutil.h"
#include "tessera/comm.h"
#include "tessera/model.h"
#include "tessera/rpc.h"
#include "tessera/tessera.h"

/* ---- servers --------------------------------------------------------------------------------- */

typedef struct srv {
    rt_server s;
    size_t first, n;
} srv;

/* A server exposing n_dev CPU devices, attached with opt (may be NULL). */
static srv start(int n_dev, const char *token_file, const tsr_rpc_options *opt)
{
    const char *args[12] = {0};
    int k = 0;
    static const char *const names[] = {"cpu:0", "cpu:1", "cpu:2", "cpu:3"};
    for (int i = 0; i < n_dev; i++) {
        args[k++] = "--device";
        args[k++] = names[i];
    }
    if (token_file) {
        args[k++] = "--token-file";
        args[k++] = token_file;
    }
    srv r = {0};
    cr_assert(rt_server_start(&r.s, NULL, args), "the server did not start");
    const tsr_status st = tsr_rpc_add_server(r.s.url, opt, &r.first, &r.n);
    cr_assert_eq(st, TSR_OK, "add_server %s: %s", r.s.url, tsr_last_error());
    cr_assert_eq(r.n, (size_t)n_dev);
    return r;
}

static tsr_dev *rdev(const srv *r, size_t i)
{
    return tsr_reg_dev_get(tsr_rpc_reg(), r->first + i);
}

static void init(void)
{
    setenv("TSR_CPU_DEVICES", "3", 1); /* inherited by the servers */
    setenv("TSR_RPC_COMPUTE_TIMEOUT_MS", "8000", 1);
}

/* ---- all-reduce ------------------------------------------------------------------------------ */

/* Element i of tensor j: small multiples of 1/4, so every sum is exact. */
static float value(size_t i, int j)
{
    return (float)((int)((i * 7 + (size_t)j * 13) % 17) - 8) * 0.25f;
}

typedef struct set {
    int n;
    tsr_dev *dev[8];
    tsr_backend *be[8];
    tsr_buf *buf[8];
    tsr_tensor t[8];
} set;

static void set_open(set *s, int n, tsr_dev *const *devs, size_t max_elems)
{
    s->n = n;
    for (int j = 0; j < n; j++) {
        s->dev[j] = devs[j];
        cr_assert_eq(tsr_backend_new(devs[j], &s->be[j]), TSR_OK, "%s", tsr_last_error());
        cr_assert_eq(tsr_buft_alloc(tsr_dev_buft(devs[j]), max_elems * 4, &s->buf[j]), TSR_OK, "%s",
                     tsr_last_error());
    }
}

static void set_close(set *s)
{
    for (int j = 0; j < s->n; j++) {
        tsr_buf_free(s->buf[j]);
        tsr_backend_free(s->be[j]);
    }
}

/* Runs one all-reduce of `elems` elements of `type` on the set and checks
 * every device's result against the sum computed here; returns the path. */
static tsr_allreduce_path run_sum(set *s, tsr_allreduce *ar, size_t elems, tsr_type type)
{
    const size_t es = tsr_type_size(type);
    uint8_t *host = malloc(elems * 4);
    float *want = calloc(elems, sizeof(float));
    cr_assert(host && want);
    tsr_tensor *tp[8];
    for (int j = 0; j < s->n; j++) {
        s->t[j] = (tsr_tensor){.type = type, .ne = {(int64_t)elems, 1, 1, 1}};
        s->t[j].nb[0] = es;
        s->t[j].nb[1] = s->t[j].nb[2] = s->t[j].nb[3] = es * elems;
        cr_assert_eq(tsr_buf_place_tensor(s->buf[j], &s->t[j], 0), TSR_OK);
        for (size_t i = 0; i < elems; i++) {
            const float v = value(i, j);
            want[i] += v;
            if (type == TSR_TYPE_F32)
                memcpy(host + i * 4, &v, 4);
            else {
                const uint16_t h = tsr_f32_to_fp16(v);
                memcpy(host + i * 2, &h, 2);
            }
        }
        cr_assert_eq(tsr_backend_set_async(s->be[j], &s->t[j], host, 0, elems * es), TSR_OK);
        tp[j] = &s->t[j];
    }
    cr_assert_eq(tsr_allreduce_run(ar, tp), TSR_OK, "%zu elements: %s", elems, tsr_last_error());
    const tsr_allreduce_path path = tsr_allreduce_last_path(ar);
    for (int j = 0; j < s->n; j++) {
        cr_assert_eq(tsr_backend_synchronize(s->be[j]), TSR_OK, "%s", tsr_last_error());
        cr_assert_eq(tsr_tensor_get(&s->t[j], host, 0, elems * es), TSR_OK);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < elems; i++) {
            float got;
            if (type == TSR_TYPE_F32)
                memcpy(&got, host + i * 4, 4);
            else {
                uint16_t h;
                memcpy(&h, host + i * 2, 2);
                got = tsr_fp16_to_f32(h);
            }
            if (got != want[i] && bad++ == 0)
                first = i;
        }
        cr_assert_eq(bad, 0, "N=%d, %zu elements, device %d (%s): %zu wrong, first at %zu", s->n,
                     elems, j, tsr_dev_name(s->dev[j]), bad, first);
    }
    free(host);
    free(want);
    return path;
}

Test(rpc_mesh, servers_all_reduce_among_themselves_for_2_to_5_devices, .timeout = 600)
{
    init();
    srv a = start(3, NULL, NULL), b = start(2, NULL, NULL);
    /* N = 2..5 over both servers (A's devices first, then B's), and two
     * devices of one server alone (summed in place there). */
    tsr_dev *const mixes[5][5] = {{rdev(&a, 0), rdev(&b, 0)},
                                  {rdev(&a, 0), rdev(&a, 1), rdev(&b, 0)},
                                  {rdev(&a, 0), rdev(&b, 0), rdev(&a, 1), rdev(&b, 1)},
                                  {rdev(&a, 0), rdev(&a, 1), rdev(&a, 2), rdev(&b, 0), rdev(&b, 1)},
                                  {rdev(&a, 1), rdev(&a, 2)}};
    const int counts[5] = {2, 3, 4, 5, 2};
    const size_t sizes[] = {1, 3, 4096, 100003, (size_t)1 << 20};
    for (int m = 0; m < 5; m++) {
        const bool big = m == 0 || m == 3; /* 16M elements on two of the sets */
        const size_t max = big ? (size_t)16 << 20 : (size_t)1 << 20;
        set s;
        set_open(&s, counts[m], mixes[m], max);
        tsr_allreduce *ar;
        cr_assert_eq(tsr_allreduce_new(s.be, s.n, &ar), TSR_OK, "%s", tsr_last_error());
        cr_expect(tsr_allreduce_has_native(ar), "set %d: the RPC registry offers its collective",
                  m);
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
            cr_expect_eq(run_sum(&s, ar, sizes[k], TSR_TYPE_F32), TSR_ALLREDUCE_NATIVE,
                         "set %d, %zu elements: the servers' own path", m, sizes[k]);
        cr_expect_eq(run_sum(&s, ar, 4099, TSR_TYPE_F16), TSR_ALLREDUCE_NATIVE);
        if (big)
            cr_expect_eq(run_sum(&s, ar, max, TSR_TYPE_F32), TSR_ALLREDUCE_NATIVE);
        tsr_allreduce_free(ar);
        set_close(&s);
    }
    cr_expect_eq(rt_server_stop(&a.s), 0, "server A exits cleanly");
    cr_expect_eq(rt_server_stop(&b.s), 0, "server B exits cleanly");
}

/* ---- copies between servers ------------------------------------------------------------------ */

static void copy_between(tsr_dev *from, tsr_dev *to, size_t n)
{
    set s;
    tsr_dev *d[2] = {from, to};
    set_open(&s, 2, d, n);
    float *x = malloc(n * 4), *y = calloc(n, 4);
    for (size_t i = 0; i < n; i++)
        x[i] = value(i, 3);
    for (int j = 0; j < 2; j++) {
        s.t[j] = (tsr_tensor){
            .type = TSR_TYPE_F32, .ne = {(int64_t)n, 1, 1, 1}, .nb = {4, 4 * n, 4 * n, 4 * n}};
        cr_assert_eq(tsr_buf_place_tensor(s.buf[j], &s.t[j], 0), TSR_OK);
    }
    cr_assert_eq(tsr_backend_set_async(s.be[0], &s.t[0], x, 0, n * 4), TSR_OK);
    cr_assert_eq(tsr_backend_copy_async(s.be[0], s.be[1], &s.t[0], &s.t[1]), TSR_OK, "%s",
                 tsr_last_error());
    cr_assert_eq(tsr_backend_synchronize(s.be[1]), TSR_OK, "%s", tsr_last_error());
    cr_assert_eq(tsr_tensor_get(&s.t[1], y, 0, n * 4), TSR_OK);
    cr_expect_eq(memcmp(x, y, n * 4), 0, "%zu floats copied from %s to %s", n, tsr_dev_name(from),
                 tsr_dev_name(to));
    free(x);
    free(y);
    set_close(&s);
}

Test(rpc_mesh, copies_between_servers_arrive_intact, .timeout = 120)
{
    init();
    srv a = start(1, NULL, NULL), b = start(1, NULL, NULL);
    copy_between(rdev(&a, 0), rdev(&b, 0), 1);
    copy_between(rdev(&a, 0), rdev(&b, 0), 300001);
    copy_between(rdev(&b, 0), rdev(&a, 0), (size_t)4 << 20);
    cr_expect_eq(rt_server_stop(&a.s), 0);
    cr_expect_eq(rt_server_stop(&b.s), 0);
}

/* A demands a token that B does not have: the servers cannot link, so
 * copies and all-reduces go through this client, with the same results. */
Test(rpc_mesh, servers_that_cannot_reach_each_other_fall_back_to_the_client, .timeout = 180)
{
    init();
    char dir[256], tok[300];
    cr_assert(rt_tmpdir(dir, sizeof(dir)));
    snprintf(tok, sizeof(tok), "%s/token", dir);
    cr_assert(rt_write_text(tok, "only-the-client-and-b-know-this\n"));
    /* B (rank 1) dials A (rank 0), which wants the token B lacks. */
    const tsr_rpc_options oa = {.token_file = tok};
    srv a = start(1, tok, &oa);
    srv b = start(1, NULL, NULL);
    copy_between(rdev(&a, 0), rdev(&b, 0), 100000);
    set s;
    tsr_dev *d[2] = {rdev(&a, 0), rdev(&b, 0)};
    set_open(&s, 2, d, 1 << 16);
    tsr_allreduce *ar;
    cr_assert_eq(tsr_allreduce_new(s.be, 2, &ar), TSR_OK);
    cr_expect(!tsr_allreduce_has_native(ar), "no native collective without links");
    const tsr_allreduce_path p = run_sum(&s, ar, 40000, TSR_TYPE_F32);
    cr_expect(p == TSR_ALLREDUCE_BUTTERFLY || p == TSR_ALLREDUCE_RING, "generic path, got %s",
              tsr_allreduce_path_name(p));
    tsr_allreduce_free(ar);
    set_close(&s);
    cr_expect_eq(rt_server_stop(&a.s), 0);
    cr_expect_eq(rt_server_stop(&b.s), 0);
    unlink(tok);
    rmdir(dir);
}

/* ---- servers that prove themselves to each other -------------------------------------------- */

bool rt_make_cert(const char *cn, const char *cert_path, const char *key_path);

/* A two-server all-reduce must take the servers' own path: their link formed. */
static void expect_linked(tsr_dev *a, tsr_dev *b, const char *what)
{
    set s;
    tsr_dev *d[2] = {a, b};
    set_open(&s, 2, d, 1 << 16);
    tsr_allreduce *ar;
    cr_assert_eq(tsr_allreduce_new(s.be, 2, &ar), TSR_OK);
    cr_expect(tsr_allreduce_has_native(ar), "%s: the servers linked", what);
    cr_expect_eq(run_sum(&s, ar, 30000, TSR_TYPE_F32), TSR_ALLREDUCE_NATIVE, "%s", what);
    tsr_allreduce_free(ar);
    set_close(&s);
}

Test(rpc_mesh, servers_with_a_token_link_with_that_token, .timeout = 120)
{
    init();
    char dir[256], tok[300];
    cr_assert(rt_tmpdir(dir, sizeof(dir)));
    snprintf(tok, sizeof(tok), "%s/token", dir);
    cr_assert(rt_write_text(tok, "shared by the client and both servers\n"));
    const tsr_rpc_options o = {.token_file = tok};
    srv a = start(1, tok, &o), b = start(1, tok, &o);
    expect_linked(rdev(&a, 0), rdev(&b, 0), "token");
    cr_expect_eq(rt_server_stop(&a.s), 0);
    cr_expect_eq(rt_server_stop(&b.s), 0);
    unlink(tok);
    rmdir(dir);
}

/* tls+tcp:// with client certificates: each server presents its
 * certificate to the other, as the client does, and checks the other's. */
Test(rpc_mesh, servers_over_tls_link_over_tls, .timeout = 120)
{
    init();
    char dir[256], cert[300], key[300];
    cr_assert(rt_tmpdir(dir, sizeof(dir)));
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    cr_assert(rt_make_cert("127.0.0.1", cert, key), "making a test certificate");
    const char *const args[] = {"--device", "cpu:0",    "--tls-cert", cert, "--tls-key",
                                key,        "--tls-ca", cert,         NULL};
    const tsr_rpc_options o = {.tls_ca_file = cert, .tls_cert_file = cert, .tls_key_file = key};
    srv v[2];
    for (int i = 0; i < 2; i++) {
        cr_assert(rt_server_start(&v[i].s, "tls+tcp://127.0.0.1:0", args));
        cr_assert_eq(tsr_rpc_add_server(v[i].s.url, &o, &v[i].first, &v[i].n), TSR_OK, "%s",
                     tsr_last_error());
    }
    expect_linked(rdev(&v[0], 0), rdev(&v[1], 0), "tls");
    for (int i = 0; i < 2; i++)
        cr_expect_eq(rt_server_stop(&v[i].s), 0);
    unlink(cert);
    unlink(key);
    rmdir(dir);
}

/* ---- graphs held by the server --------------------------------------------------------------- */

/* n graphs y_k = x * (k + 1) on one stream, run round after round: the
 * client sends each once while the server can hold them all, and re-runs
 * them by reference; with more graphs than slots they are sent again, and
 * every result is right either way. */
static void run_graphs(tsr_dev *dev, int n, int rounds, tsr_rpc_stats *delta)
{
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(dev, &be), TSR_OK);
    tsr_ctx *ctx = tsr_ctx_new((size_t)n + 4);
    tsr_tensor *x = tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 64), *y[300];
    tsr_graph *g[300];
    cr_assert(n <= 300);
    for (int k = 0; k < n; k++) {
        y[k] = tsr_scale(ctx, x, (float)(k + 1));
        g[k] = tsr_graph_new(4);
        cr_assert_eq(tsr_graph_build(g[k], y[k]), TSR_OK);
    }
    tsr_buf *buf;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(dev), &buf), TSR_OK, "%s",
                 tsr_last_error());
    tsr_rpc_stats a, b;
    tsr_rpc_stats_get(dev, &a);
    float xv[64], yv[64];
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < n; k++) {
            for (int i = 0; i < 64; i++)
                xv[i] = (float)(i + r);
            cr_assert_eq(tsr_tensor_set(x, xv, 0, sizeof(xv)), TSR_OK);
            cr_assert_eq(tsr_backend_graph_compute(be, g[k]), TSR_OK, "%s", tsr_last_error());
            cr_assert_eq(tsr_tensor_get(y[k], yv, 0, sizeof(yv)), TSR_OK);
            for (int i = 0; i < 64; i++)
                cr_assert_eq(yv[i], xv[i] * (float)(k + 1), "round %d, graph %d, element %d", r, k,
                             i);
        }
    tsr_rpc_stats_get(dev, &b);
    *delta = (tsr_rpc_stats){b.round_trips - a.round_trips, b.graphs_sent - a.graphs_sent,
                             b.graphs_by_reference - a.graphs_by_reference};
    for (int k = 0; k < n; k++)
        tsr_graph_free(g[k]);
    tsr_buf_free(buf);
    tsr_ctx_free(ctx);
    tsr_backend_free(be);
}

Test(rpc_mesh, graphs_the_server_holds_are_rerun_by_reference, .timeout = 120)
{
    init();
    srv a = start(1, NULL, NULL);
    tsr_rpc_stats d;
    run_graphs(rdev(&a, 0), 5, 6, &d);
    cr_expect_eq(d.graphs_sent, 5, "5 graphs sent once each, got %llu",
                 (unsigned long long)d.graphs_sent);
    cr_expect_eq(d.graphs_by_reference, 25, "then re-run by reference: %llu",
                 (unsigned long long)d.graphs_by_reference);
    run_graphs(rdev(&a, 0), 64, 2, &d);
    cr_expect(d.graphs_sent == 64 && d.graphs_by_reference == 64,
              "64 graphs: %llu sent, %llu by reference", (unsigned long long)d.graphs_sent,
              (unsigned long long)d.graphs_by_reference);
    run_graphs(rdev(&a, 0), 300, 2, &d); /* more than the server holds: sent again, still right */
    cr_expect_eq(d.graphs_sent + d.graphs_by_reference, 600);
    cr_expect_eq(rt_server_stop(&a.s), 0);
}

/* ---- the model over remote devices ----------------------------------------------------------- */

#define STEPS 16
#define PROMPT 8
#define WARM 2 /* decode steps before round trips are counted */

typedef struct run {
    int32_t tokens[STEPS];
    float *logits; /* of the last step */
    int n_vocab;
    uint64_t round_trips[4]; /* per device's server, over the decode steps */
} run;

static tsr_status generate(tsr_dev *const *devs, int n, run *r)
{
    tsr_model_hparams hp;
    cr_assert_eq(tsr_model_preset("tiny", &hp), TSR_OK);
    tsr_model_config cfg;
    tsr_model_config_default(&cfg);
    cfg.split_mode = n > 1 ? TSR_SPLIT_TENSOR : TSR_SPLIT_NONE;
    cfg.n_devices = n;
    for (int j = 0; j < n; j++)
        cfg.devices[j] = devs[j];
    cfg.n_threads = 1;
    cfg.n_ctx = 64;
    cfg.kv_type = TSR_TYPE_F32;
    cfg.quiet = true;
    tsr_model *m;
    tsr_status st = tsr_model_generate(&hp, 42, &cfg, &m);
    if (st != TSR_OK)
        return st;
    r->n_vocab = hp.n_vocab;
    r->logits = malloc((size_t)hp.n_vocab * sizeof(float));
    int32_t prompt[PROMPT];
    for (int i = 0; i < PROMPT; i++)
        prompt[i] = (i * 37 + 5) % hp.n_vocab;
    const tsr_sampler_params sp = {.temperature = 0, .top_p = 1, .repeat_penalty = 1};
    st = tsr_model_eval(m, prompt, PROMPT);
    uint64_t rt0[4] = {0};
    for (int s = 0; s < STEPS && st == TSR_OK; s++) {
        /* Round trips are counted once warm: the first steps allocate. */
        if (s == WARM)
            for (int j = 0; j < n && j < 4; j++)
                rt0[j] = tsr_rpc_round_trips(devs[j]);
        if ((st = tsr_model_sample(m, &sp, &r->tokens[s])) == TSR_OK)
            st = tsr_model_eval_async(m, &r->tokens[s], 1);
    }
    for (int j = 0; j < n && j < 4; j++)
        r->round_trips[j] = tsr_rpc_round_trips(devs[j]) - rt0[j];
    if (st == TSR_OK)
        st = tsr_model_logits(m, r->logits);
    tsr_model_free(m);
    return st;
}

Test(rpc_mesh, tensor_split_over_remote_devices_equals_one_device, .timeout = 300)
{
    init();
    srv a = start(2, NULL, NULL), b = start(2, NULL, NULL);
    tsr_dev *local = tsr_reg_dev_get(tsr_cpu_reg(), 0);
    run ref;
    cr_assert_eq(generate(&local, 1, &ref), TSR_OK, "%s", tsr_last_error());
    tsr_dev *const mixes[3][4] = {{rdev(&a, 0), rdev(&b, 0)},
                                  {rdev(&a, 0), rdev(&a, 1), rdev(&b, 0)},
                                  {rdev(&a, 0), rdev(&b, 0), rdev(&a, 1), rdev(&b, 1)}};
    for (int m = 0; m < 3; m++) {
        run r;
        cr_assert_eq(generate(mixes[m], m + 2, &r), TSR_OK, "%d devices: %s", m + 2,
                     tsr_last_error());
        cr_expect_eq(memcmp(r.tokens, ref.tokens, sizeof(ref.tokens)), 0,
                     "%d remote devices: greedy tokens differ from one device", m + 2);
        double num = 0, den = 0;
        for (int i = 0; i < ref.n_vocab; i++) {
            num += ((double)r.logits[i] - ref.logits[i]) * ((double)r.logits[i] - ref.logits[i]);
            den += (double)ref.logits[i] * ref.logits[i];
        }
        cr_expect_leq(num / den, 1e-6, "%d remote devices: logits NMSE %g", m + 2, num / den);
        /* Decode steps are pipelined: the sampler's read is the one wait. */
        for (int j = 0; j < m + 2; j++)
            cr_expect_leq(r.round_trips[j], STEPS - WARM,
                          "%d remote devices: %llu blocking round trips to %s's server in %d "
                          "decode steps",
                          m + 2, (unsigned long long)r.round_trips[j], tsr_dev_name(mixes[m][j]),
                          STEPS - WARM);
        free(r.logits);
    }
    free(ref.logits);
    cr_expect_eq(rt_server_stop(&a.s), 0);
    cr_expect_eq(rt_server_stop(&b.s), 0);
}

Test(rpc_mesh, a_server_killed_while_decoding_is_a_clean_error, .timeout = 120)
{
    init();
    srv a = start(1, NULL, NULL), b = start(1, NULL, NULL);
    tsr_model_hparams hp;
    cr_assert_eq(tsr_model_preset("tiny", &hp), TSR_OK);
    tsr_model_config cfg;
    tsr_model_config_default(&cfg);
    cfg.split_mode = TSR_SPLIT_TENSOR;
    cfg.n_devices = 2;
    cfg.devices[0] = rdev(&a, 0);
    cfg.devices[1] = rdev(&b, 0);
    cfg.n_ctx = 64;
    cfg.quiet = true;
    tsr_model *m;
    cr_assert_eq(tsr_model_generate(&hp, 1, &cfg, &m), TSR_OK, "%s", tsr_last_error());
    const tsr_sampler_params sp = {.temperature = 0, .top_p = 1, .repeat_penalty = 1};
    int32_t t = 1;
    cr_assert_eq(tsr_model_eval(m, &t, 1), TSR_OK);
    cr_assert_eq(tsr_model_sample(m, &sp, &t), TSR_OK);
    cr_assert_eq(tsr_model_eval_async(m, &t, 1), TSR_OK);
    rt_server_kill9(&b.s);
    const uint64_t t0 = tsr__time_ns();
    tsr_status st = tsr_model_sample(m, &sp, &t);
    for (int i = 0; i < 3 && st == TSR_OK; i++)
        if ((st = tsr_model_eval_async(m, &t, 1)) == TSR_OK)
            st = tsr_model_sample(m, &sp, &t);
    const double s = (double)(tsr__time_ns() - t0) * 1e-9;
    cr_expect_neq(st, TSR_OK, "decoding goes on after the server died");
    cr_expect(st == TSR_EDEVICE || st == TSR_ETIMEDOUT, "status %s", tsr_status_name(st));
    cr_expect(strstr(tsr_last_error(), "rpc") != NULL, "the error names the device: %s",
              tsr_last_error());
    cr_expect_lt(s, 10.0, "the error came after %.1f s", s);
    tsr_model_free(m);
    cr_expect_eq(rt_server_stop(&a.s), 0, "the surviving server exits cleanly");
}
