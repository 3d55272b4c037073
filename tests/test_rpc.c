/* tests/test_rpc.c — remote devices through the public API: listing, remote
 * buffers and streams against a local CPU device, pipelining, errors at
 * synchronize, events and copies across devices, the tensor-split model over
 * a local CPU device and two remote ones, and faults (a server killed with
 * -9 mid-compute, a stopped server) that must turn into errors within the
 * timeout, never a hang.
 *
 * Every test starts its own tessera-rpc-server processes on free loopback
 * ports (or ipc:// in a private directory). The protocol-level tests (bad
 * frames, isolation, authentication, TLS) are in test_rpc_server.c.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "rpc_testutil.h"
#include "tessera/rpc.h"
#include "testutil.h"

static const char *const cpu0_args[] = {"--device", "cpu:0", NULL};

typedef struct {
    rt_server srv;
    size_t first, n;
    tsr_dev *dev;
} remote;

static remote remote_start(const char *listen, const tsr_rpc_options *opt)
{
    remote r = {0};
    cr_assert(rt_server_start(&r.srv, listen, cpu0_args), "the server did not start");
    const tsr_status st = tsr_rpc_add_server(r.srv.url, opt, &r.first, &r.n);
    cr_assert_eq(st, TSR_OK, "add_server %s: %s", r.srv.url, tsr_last_error());
    cr_assert_eq(r.n, 1, "one device exposed, got %zu", r.n);
    r.dev = tsr_reg_dev_get(tsr_rpc_reg(), r.first);
    cr_assert_not_null(r.dev);
    return r;
}

static void remote_stop(remote *r)
{
    cr_expect_eq(rt_server_stop(&r->srv), 0, "the server exits cleanly (no crash, no leak)");
}

static tsr_dev *cpu0(void) { return tsr_reg_dev_get(tsr_cpu_reg(), 0); }

/* ---- devices --------------------------------------------------------------------------------- */

Test(rpc, remote_devices_are_listed_with_a_name_type_memory_and_caps, .timeout = 60)
{
    remote r = remote_start(NULL, NULL);
    char name[16];
    snprintf(name, sizeof(name), "rpc%zu", r.first);
    cr_expect_str_eq(tsr_dev_name(r.dev), name);
    cr_expect_eq(tsr_dev_by_name(name), r.dev);
    cr_expect_eq(tsr_dev_get_type(r.dev), TSR_DEV_REMOTE);
    cr_expect(strstr(tsr_dev_description(r.dev), "cpu0") &&
                  strstr(tsr_dev_description(r.dev), r.srv.url),
              "description: %s", tsr_dev_description(r.dev));
    size_t free_b = 0, total_b = 0;
    tsr_dev_memory(r.dev, &free_b, &total_b);
    cr_expect_gt(total_b, 0);
    cr_expect_leq(free_b, total_b);
    const tsr_dev_caps caps = tsr_dev_get_caps(r.dev);
    cr_expect(caps.async && caps.events);
    cr_expect_eq(tsr_buft_alignment(tsr_dev_buft(r.dev)), 64);
    cr_expect(!tsr_buft_is_host(tsr_dev_buft(r.dev)));
    cr_expect_not_null(tsr_reg_get_proc(tsr_rpc_reg(), "tsr_rpc_add_server"));
    cr_expect_eq(tsr_reg_by_name("rpc"), tsr_rpc_reg());
    remote_stop(&r);
}

Test(rpc, bad_endpoints_are_refused_with_a_reason, .timeout = 60)
{
    cr_expect_eq(tsr_rpc_add_server("", NULL, NULL, NULL), TSR_EINVAL);
    cr_expect_eq(tsr_rpc_add_server("nohost", NULL, NULL, NULL), TSR_EINVAL);
    cr_expect_eq(tsr_rpc_add_server("http://127.0.0.1:80", NULL, NULL, NULL), TSR_EINVAL);
    cr_expect(strstr(tsr_last_error(), "scheme") != NULL, "%s", tsr_last_error());
    /* Nothing listens on a port we just freed. */
    rt_server s;
    cr_assert(rt_server_start(&s, NULL, cpu0_args));
    char url[300];
    snprintf(url, sizeof(url), "%s", s.url);
    rt_server_stop(&s);
    cr_expect_eq(tsr_rpc_add_server(url, NULL, NULL, NULL), TSR_EDEVICE);
    cr_expect(strstr(tsr_last_error(), url) != NULL, "%s", tsr_last_error());
}

/* ---- buffers --------------------------------------------------------------------------------- */

Test(rpc, remote_buffers_round_trip_bytes_2d_rows_memset_copy_and_clear, .timeout = 60)
{
    remote r = remote_start(NULL, NULL);
    tsr_ctx *ctx = tsr_ctx_new(8);
    tsr_tensor *a = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 16, 8);
    tsr_tensor *b = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 16, 8);
    tsr_buf *buf;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(r.dev), &buf), TSR_OK, "%s",
                 tsr_last_error());
    float in[128], out[128];
    for (int i = 0; i < 128; i++)
        in[i] = (float)i;
    cr_assert_eq(tsr_tensor_set(a, in, 0, sizeof(in)), TSR_OK, "%s", tsr_last_error());
    cr_assert_eq(tsr_tensor_get(a, out, 0, sizeof(out)), TSR_OK, "%s", tsr_last_error());
    cr_expect_arr_eq(out, in, sizeof(in));
    /* Offsets inside the tensor. */
    cr_assert_eq(tsr_tensor_get(a, out, 40, 8), TSR_OK);
    cr_expect_float_eq(out[0], 10.0f, 0.0f);
    cr_expect_float_eq(out[1], 11.0f, 0.0f);
    cr_expect_eq(tsr_tensor_get(a, out, 500, 64), TSR_ERANGE);
    /* Column 3 as 8 rows of 4 bytes, stride 64. */
    float col[8];
    cr_assert_eq(tsr_tensor_get_2d(a, col, 12, 4, 8, 64, 4), TSR_OK, "%s", tsr_last_error());
    for (int i = 0; i < 8; i++)
        cr_expect_float_eq(col[i], (float)(16 * i + 3), 0.0f);
    const float neg[8] = {-1, -2, -3, -4, -5, -6, -7, -8};
    cr_assert_eq(tsr_tensor_set_2d(a, neg, 12, 4, 8, 64, 4), TSR_OK, "%s", tsr_last_error());
    cr_assert_eq(tsr_tensor_get(a, out, 0, sizeof(out)), TSR_OK);
    cr_expect_float_eq(out[3], -1.0f, 0.0f);
    cr_expect_float_eq(out[16 * 7 + 3], -8.0f, 0.0f);
    cr_expect_float_eq(out[4], 4.0f, 0.0f, "neighbours untouched");
    /* Host data with a stride of its own (two floats per row, every other). */
    const float wide[16] = {100, 0, 101, 0, 102, 0, 103, 0, 104, 0, 105, 0, 106, 0, 107, 0};
    cr_assert_eq(tsr_tensor_set_2d(a, wide, 0, 4, 8, 64, 8), TSR_OK, "%s", tsr_last_error());
    cr_assert_eq(tsr_tensor_get_2d(a, col, 0, 4, 8, 64, 4), TSR_OK);
    for (int i = 0; i < 8; i++)
        cr_expect_float_eq(col[i], 100.0f + (float)i, 0.0f);
    /* Memset, copy on the server, clear. */
    cr_assert_eq(tsr_tensor_memset(b, 0, 0, tsr_nbytes(b)), TSR_OK);
    cr_assert_eq(tsr_tensor_copy(a, b), TSR_OK, "%s", tsr_last_error());
    float got[128];
    cr_assert_eq(tsr_tensor_get(a, out, 0, sizeof(out)), TSR_OK);
    cr_assert_eq(tsr_tensor_get(b, got, 0, sizeof(got)), TSR_OK);
    cr_expect_arr_eq(got, out, sizeof(out));
    cr_assert_eq(tsr_buf_clear(buf, 0), TSR_OK);
    cr_assert_eq(tsr_tensor_get(b, got, 0, sizeof(got)), TSR_OK);
    for (int i = 0; i < 128; i++)
        cr_expect_float_eq(got[i], 0.0f, 0.0f);
    tsr_buf_free(buf);
    tsr_ctx_free(ctx);
    remote_stop(&r);
}

/* ---- streams --------------------------------------------------------------------------------- */

typedef struct {
    tsr_ctx *ctx;
    tsr_tensor *w, *x, *b, *y;
    tsr_graph *g;
    tsr_buf *buf;
} ffn;

/* y = silu(Wᵀx) + b, W: [K, N], x: [K, T], y: [N, T]. */
static ffn ffn_new(tsr_dev *dev, int K, int N, int T)
{
    ffn f = {.ctx = tsr_ctx_new(16)};
    f.w = tsr_set_name(tsr_new_tensor_2d(f.ctx, TSR_TYPE_F16, K, N), "w");
    f.x = tsr_set_name(tsr_new_tensor_2d(f.ctx, TSR_TYPE_F32, K, T), "x");
    f.b = tsr_set_name(tsr_new_tensor_1d(f.ctx, TSR_TYPE_F32, N), "b");
    f.y = tsr_set_name(tsr_add(f.ctx, tsr_silu(f.ctx, tsr_mul_mat(f.ctx, f.w, f.x)), f.b), "y");
    cr_assert_not_null(f.y, "%s", tsr_ctx_error(f.ctx));
    cr_assert_eq(tsr_ctx_alloc_tensors(f.ctx, tsr_dev_buft(dev), &f.buf), TSR_OK, "%s",
                 tsr_last_error());
    f.g = tsr_graph_new(16);
    cr_assert_eq(tsr_graph_build(f.g, f.y), TSR_OK);
    return f;
}

static void ffn_free(ffn *f)
{
    tsr_graph_free(f->g);
    tsr_buf_free(f->buf);
    tsr_ctx_free(f->ctx);
}

/* Fills w, b (and x with seed) and runs the graph on a new stream; out gets y. */
static void ffn_run(ffn *f, tsr_backend *be, uint64_t seed, float *out)
{
    tu_rng r = {7};
    cr_assert_eq(tu_fill_uniform(f->w, &r, -1, 1), TSR_OK, "%s", tsr_last_error());
    cr_assert_eq(tu_fill_uniform(f->b, &r, -1, 1), TSR_OK);
    const size_t nx = (size_t)tsr_nelements(f->x);
    float *x = malloc(nx * sizeof(float));
    tu_rng rx = {seed};
    for (size_t i = 0; i < nx; i++)
        x[i] = tu_uniform(&rx, -1, 1);
    cr_assert_eq(tsr_backend_set_async(be, f->x, x, 0, nx * sizeof(float)), TSR_OK);
    cr_assert_eq(tsr_backend_graph_compute_async(be, f->g), TSR_OK, "%s", tsr_last_error());
    cr_assert_eq(tsr_backend_get_async(be, f->y, out, 0, tsr_nbytes(f->y)), TSR_OK, "%s",
                 tsr_last_error());
    cr_assert_eq(tsr_backend_synchronize(be), TSR_OK, "%s", tsr_last_error());
    free(x);
}

Test(rpc, graphs_on_a_remote_stream_match_a_local_cpu_device_and_rerun_by_reference, .timeout = 120)
{
    remote r = remote_start(NULL, NULL);
    enum { K = 96, N = 40, T = 3 };
    ffn fr = ffn_new(r.dev, K, N, T), fl = ffn_new(cpu0(), K, N, T);
    tsr_backend *br, *bl;
    cr_assert_eq(tsr_backend_new(r.dev, &br), TSR_OK, "%s", tsr_last_error());
    cr_assert_eq(tsr_backend_new(cpu0(), &bl), TSR_OK);
    cr_expect(tsr_backend_is_rpc(br) && !tsr_backend_is_rpc(bl));
    float want[N * T], got[N * T];
    /* The same graph three times with new inputs: the second and third run
     * the server's cached copy (GRAPH_RECOMPUTE). */
    for (uint64_t seed = 1; seed <= 3; seed++) {
        ffn_run(&fl, bl, seed, want);
        ffn_run(&fr, br, seed, got);
        cr_expect_leq(tu_nmse(got, want, N * T), 1e-10, "seed %llu: nmse %g",
                      (unsigned long long)seed, tu_nmse(got, want, N * T));
    }
    /* Freeing a buffer drops the cached graphs on both ends; the graph is
     * then sent again and still right. */
    tsr_buf *junk;
    cr_assert_eq(tsr_buft_alloc(tsr_dev_buft(r.dev), 4096, &junk), TSR_OK);
    tsr_buf_free(junk);
    ffn_run(&fl, bl, 9, want);
    ffn_run(&fr, br, 9, got);
    cr_expect_leq(tu_nmse(got, want, N * T), 1e-10);
    tsr_backend_free(br);
    tsr_backend_free(bl);
    ffn_free(&fr);
    ffn_free(&fl);
    remote_stop(&r);
}

Test(rpc, thousands_of_pipelined_writes_and_graphs_apply_in_order, .timeout = 120)
{
    remote r = remote_start(NULL, NULL);
    tsr_ctx *ctx = tsr_ctx_new(8);
    tsr_tensor *x = tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 16);
    tsr_tensor *y = tsr_scale_bias(ctx, x, 2.0f, 1.0f);
    tsr_buf *buf;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(r.dev), &buf), TSR_OK);
    tsr_graph *g = tsr_graph_new(8);
    cr_assert_eq(tsr_graph_build(g, y), TSR_OK);
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(r.dev, &be), TSR_OK);
    static float vals[3000];
    float last = 0;
    for (int i = 0; i < 3000; i++) {
        vals[i] = (float)i;
        cr_assert_eq(tsr_backend_set_async(be, x, &vals[i], 0, sizeof(float)), TSR_OK);
        if (i % 3 == 0) {
            cr_assert_eq(tsr_backend_graph_compute_async(be, g), TSR_OK, "%s", tsr_last_error());
            last = 2.0f * (float)i + 1.0f;
        }
    }
    cr_assert_eq(tsr_backend_synchronize(be), TSR_OK, "%s", tsr_last_error());
    float y0, x0;
    cr_assert_eq(tsr_tensor_get(y, &y0, 0, sizeof(y0)), TSR_OK);
    cr_assert_eq(tsr_tensor_get(x, &x0, 0, sizeof(x0)), TSR_OK);
    cr_expect_float_eq(y0, last, 0.0f, "the last graph saw the write before it");
    cr_expect_float_eq(x0, 2999.0f, 0.0f, "the last write landed last");
    tsr_backend_free(be);
    tsr_graph_free(g);
    tsr_buf_free(buf);
    tsr_ctx_free(ctx);
    remote_stop(&r);
}

/* Graph work that the caller follows with nothing must still start: the
 * client sends it within its flush deadline on its own. */
Test(rpc, enqueued_work_starts_without_a_later_call, .timeout = 120)
{
    remote r = remote_start(NULL, NULL);
    ffn f = ffn_new(r.dev, 512, 512, 64);
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(r.dev, &be), TSR_OK);
    float *y = malloc(tsr_nbytes(f.y));
    ffn_run(&f, be, 1, y);
    uint64_t t0 = tsr__time_ns();
    for (int i = 0; i < 5; i++)
        cr_assert_eq(tsr_backend_graph_compute_async(be, f.g), TSR_OK);
    cr_assert_eq(tsr_backend_synchronize(be), TSR_OK);
    const double one = (double)(tsr__time_ns() - t0) * 1e-9 / 5;
    /* About 0.3 s of work, then a long wait without any call. */
    const int n = (int)(0.3 / one) + 1;
    for (int i = 0; i < n; i++)
        cr_assert_eq(tsr_backend_graph_compute_async(be, f.g), TSR_OK);
    const double idle = 3.0 * n * one + 0.5;
    const struct timespec ts = {(time_t)idle, (long)((idle - (double)(time_t)idle) * 1e9)};
    nanosleep(&ts, NULL);
    t0 = tsr__time_ns();
    cr_assert_eq(tsr_backend_synchronize(be), TSR_OK);
    const double left = (double)(tsr__time_ns() - t0) * 1e-9;
    cr_expect_lt(left, 0.5 * n * one,
                 "%d graphs of %.1f ms each were still running %.2f s later (%.3f s left)", n,
                 one * 1e3, idle, left);
    free(y);
    tsr_backend_free(be);
    ffn_free(&f);
    remote_stop(&r);
}

Test(rpc, run_time_errors_come_back_at_synchronize_naming_the_node_and_device, .timeout = 60)
{
    remote r = remote_start(NULL, NULL);
    tsr_ctx *ctx = tsr_ctx_new(8);
    tsr_tensor *table = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 4, 10);
    tsr_tensor *ids = tsr_new_tensor_1d(ctx, TSR_TYPE_I32, 2);
    tsr_tensor *rows = tsr_set_name(tsr_get_rows(ctx, table, ids), "token_rows");
    tsr_buf *buf;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(r.dev), &buf), TSR_OK);
    const int32_t bad[2] = {3, 70000};
    cr_assert_eq(tsr_tensor_set(ids, bad, 0, sizeof(bad)), TSR_OK);
    tsr_graph *g = tsr_graph_new(8);
    cr_assert_eq(tsr_graph_build(g, rows), TSR_OK);
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(r.dev, &be), TSR_OK);
    cr_expect_eq(tsr_backend_graph_compute_async(be, g), TSR_OK, "enqueueing succeeds");
    cr_expect_eq(tsr_backend_synchronize(be), TSR_ERANGE);
    const char *e = tsr_last_error();
    cr_expect(strstr(e, "token_rows") && strstr(e, "70000") && strstr(e, tsr_dev_name(r.dev)), "%s",
              e);
    cr_expect_eq(tsr_backend_synchronize(be), TSR_OK, "the error is reported once");
    /* A pipelined write out of the buffer's range is refused by the client
     * before it is sent; the stream keeps working. */
    cr_expect_eq(tsr_backend_set_async(be, ids, bad, 4, 8), TSR_ERANGE);
    cr_expect_eq(tsr_backend_synchronize(be), TSR_OK);
    tsr_backend_free(be);
    tsr_graph_free(g);
    tsr_buf_free(buf);
    tsr_ctx_free(ctx);
    remote_stop(&r);
}

Test(rpc, events_order_work_between_two_remote_streams, .timeout = 60)
{
    remote r = remote_start(NULL, NULL);
    ffn f = ffn_new(r.dev, 64, 32, 2);
    tsr_ctx *ctx = tsr_ctx_new(4);
    tsr_tensor *dst = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 32, 2);
    tsr_buf *dbuf;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(r.dev), &dbuf), TSR_OK);
    tsr_backend *b0, *b1;
    cr_assert_eq(tsr_backend_new(r.dev, &b0), TSR_OK);
    cr_assert_eq(tsr_backend_new(r.dev, &b1), TSR_OK);
    tsr_event *done;
    cr_assert_eq(tsr_event_new(r.dev, &done), TSR_OK, "%s", tsr_last_error());
    cr_expect_eq(tsr_event_synchronize(done), TSR_OK, "a never-recorded event is complete");
    float want[64], got[64];
    ffn_run(&f, b0, 5, want);
    cr_assert_eq(tsr_tensor_memset(dst, 0, 0, tsr_nbytes(dst)), TSR_OK);
    cr_assert_eq(tsr_backend_graph_compute_async(b0, f.g), TSR_OK);
    cr_assert_eq(tsr_event_record(done, b0), TSR_OK);
    cr_assert_eq(tsr_event_wait(b1, done), TSR_OK);
    cr_assert_eq(tsr_backend_copy_async(b1, b1, f.y, dst), TSR_OK, "%s", tsr_last_error());
    cr_assert_eq(tsr_backend_synchronize(b1), TSR_OK, "%s", tsr_last_error());
    cr_assert_eq(tsr_event_synchronize(done), TSR_OK);
    cr_assert_eq(tsr_tensor_get(dst, got, 0, sizeof(got)), TSR_OK);
    cr_expect_arr_eq(got, want, sizeof(got));
    tsr_event_free(done);
    tsr_backend_free(b0);
    tsr_backend_free(b1);
    tsr_buf_free(dbuf);
    tsr_ctx_free(ctx);
    ffn_free(&f);
    remote_stop(&r);
}

Test(rpc, copies_between_remote_and_local_devices_both_ways, .timeout = 60)
{
    remote r = remote_start(NULL, NULL);
    tsr_ctx *ctx = tsr_ctx_new(8);
    tsr_tensor *l = tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 1000);
    tsr_tensor *m = tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 1000);
    tsr_buf *lb, *rb;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(cpu0()), &lb), TSR_OK);
    tsr_ctx *rctx = tsr_ctx_new(8);
    tsr_tensor *rt = tsr_new_tensor_1d(rctx, TSR_TYPE_F32, 1000);
    cr_assert_eq(tsr_ctx_alloc_tensors(rctx, tsr_dev_buft(r.dev), &rb), TSR_OK);
    float in[1000], out[1000];
    for (int i = 0; i < 1000; i++)
        in[i] = (float)i * 0.5f;
    cr_assert_eq(tsr_tensor_set(l, in, 0, sizeof(in)), TSR_OK);
    cr_assert_eq(tsr_tensor_copy(l, rt), TSR_OK, "%s", tsr_last_error());
    cr_assert_eq(tsr_tensor_copy(rt, m), TSR_OK, "%s", tsr_last_error());
    memcpy(out, m->data, sizeof(out));
    cr_expect_arr_eq(out, in, sizeof(in));
    tsr_backend *bl, *br;
    cr_assert_eq(tsr_backend_new(cpu0(), &bl), TSR_OK);
    cr_assert_eq(tsr_backend_new(r.dev, &br), TSR_OK);
    for (int i = 0; i < 1000; i++)
        in[i] = -(float)i;
    cr_assert_eq(tsr_tensor_set(l, in, 0, sizeof(in)), TSR_OK);
    cr_assert_eq(tsr_backend_copy_async(bl, br, l, rt), TSR_OK, "%s", tsr_last_error());
    cr_assert_eq(tsr_backend_copy_async(br, bl, rt, m), TSR_OK, "%s", tsr_last_error());
    cr_assert_eq(tsr_backend_synchronize(bl), TSR_OK);
    cr_assert_eq(tsr_backend_synchronize(br), TSR_OK);
    memcpy(out, m->data, sizeof(out));
    cr_expect_arr_eq(out, in, sizeof(in));
    tsr_backend_free(bl);
    tsr_backend_free(br);
    tsr_buf_free(lb);
    tsr_buf_free(rb);
    tsr_ctx_free(ctx);
    tsr_ctx_free(rctx);
    remote_stop(&r);
}

Test(rpc, an_ipc_endpoint_serves_like_tcp, .timeout = 60)
{
    char dir[256], url[300];
    cr_assert(rt_tmpdir(dir, sizeof(dir)));
    snprintf(url, sizeof(url), "ipc://%s/s", dir);
    remote r = remote_start(url, NULL);
    cr_expect_str_eq(r.srv.url, url);
    ffn fr = ffn_new(r.dev, 32, 8, 1), fl = ffn_new(cpu0(), 32, 8, 1);
    tsr_backend *br, *bl;
    cr_assert_eq(tsr_backend_new(r.dev, &br), TSR_OK);
    cr_assert_eq(tsr_backend_new(cpu0(), &bl), TSR_OK);
    float want[8], got[8];
    ffn_run(&fl, bl, 3, want);
    ffn_run(&fr, br, 3, got);
    cr_expect_leq(tu_nmse(got, want, 8), 1e-10);
    tsr_backend_free(br);
    tsr_backend_free(bl);
    ffn_free(&fr);
    ffn_free(&fl);
    remote_stop(&r);
    rmdir(dir);
}

/* ---- the meta device over local and remote devices ------------------------------------------- */

enum { PROMPT = 5, STEPS = 6 };

static void trace(const tsr_model_config *cfg, int32_t *tokens, float *logits, int n_vocab)
{
    tsr_model_hparams hp;
    cr_assert_eq(tsr_model_preset("tiny", &hp), TSR_OK);
    tsr_model *m;
    cr_assert_eq(tsr_model_generate(&hp, 42, cfg, &m), TSR_OK, "generate: %s", tsr_last_error());
    int32_t prompt[PROMPT] = {1, 17, 99, 250, 3};
    const tsr_sampler_params greedy = {.temperature = 0.0f, .top_p = 1.0f, .repeat_penalty = 1.0f};
    cr_assert_eq(tsr_model_eval(m, prompt, PROMPT), TSR_OK, "prefill: %s", tsr_last_error());
    for (int s = 0; s < STEPS; s++) {
        cr_assert_eq(tsr_model_logits(m, logits + (size_t)s * (size_t)n_vocab), TSR_OK, "%s",
                     tsr_last_error());
        cr_assert_eq(tsr_model_sample(m, &greedy, &tokens[s]), TSR_OK, "%s", tsr_last_error());
        cr_assert_eq(tsr_model_eval(m, &tokens[s], 1), TSR_OK, "step %d: %s", s, tsr_last_error());
    }
    tsr_model_free(m);
}

Test(rpc, tensor_split_over_a_cpu_and_two_remote_devices_matches_one_device, .timeout = 300)
{
    remote r1 = remote_start(NULL, NULL), r2 = remote_start(NULL, NULL);
    tsr_model_hparams hp;
    cr_assert_eq(tsr_model_preset("tiny", &hp), TSR_OK);
    const int V = hp.n_vocab;
    float *want = malloc((size_t)STEPS * (size_t)V * sizeof(float));
    float *got = malloc((size_t)STEPS * (size_t)V * sizeof(float));
    int32_t tw[STEPS], tg[STEPS];
    tsr_model_config one, mix;
    tsr_model_config_default(&one);
    one.devices[0] = cpu0();
    one.n_devices = 1;
    one.quiet = true;
    tsr_model_config_default(&mix);
    mix.split_mode = TSR_SPLIT_TENSOR;
    mix.devices[0] = cpu0();
    mix.devices[1] = r1.dev;
    mix.devices[2] = r2.dev;
    mix.n_devices = 3;
    mix.quiet = true;
    trace(&one, tw, want, V);
    trace(&mix, tg, got, V);
    for (int s = 0; s < STEPS; s++) {
        cr_expect_eq(tg[s], tw[s], "step %d: token %d, one device %d", s, tg[s], tw[s]);
        const double e = tu_nmse(got + (size_t)s * V, want + (size_t)s * V, V);
        cr_expect_leq(e, 1e-6, "step %d: logits NMSE %g", s, e);
    }
    free(want);
    free(got);
    remote_stop(&r1);
    remote_stop(&r2);
}

/* ---- faults ---------------------------------------------------------------------------------- */

Test(rpc, a_server_killed_mid_compute_fails_within_the_timeout_naming_endpoint_and_device,
     .timeout = 120)
{
    const tsr_rpc_options opt = {.timeout_ms = 3000, .compute_timeout_ms = 8000};
    remote r = remote_start(NULL, &opt);
    ffn f = ffn_new(r.dev, 1024, 1024, 64);
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(r.dev, &be), TSR_OK);
    float *y = malloc(tsr_nbytes(f.y));
    ffn_run(&f, be, 1, y);
    /* Queue a lot of work, let it start, then kill the server. */
    for (int i = 0; i < 200; i++)
        cr_assert_eq(tsr_backend_graph_compute_async(be, f.g), TSR_OK, "%s", tsr_last_error());
    const struct timespec pause = {0, 100000000};
    nanosleep(&pause, NULL);
    rt_server_kill9(&r.srv);
    const uint64_t t0 = tsr__time_ns();
    const tsr_status st = tsr_backend_synchronize(be);
    const double s = (double)(tsr__time_ns() - t0) * 1e-9;
    cr_expect(st == TSR_EDEVICE || st == TSR_ETIMEDOUT, "status %s", tsr_status_name(st));
    cr_expect_lt(s, 8.0 + 2.0, "the error came after %.2f s", s);
    const char *e = tsr_last_error();
    cr_expect(strstr(e, r.srv.url) && strstr(e, tsr_dev_name(r.dev)), "%s", e);
    /* Later calls fail at once, with the same names. */
    const uint64_t t1 = tsr__time_ns();
    cr_expect_eq(tsr_tensor_get(f.y, y, 0, 16), TSR_EDEVICE);
    cr_expect_lt((double)(tsr__time_ns() - t1) * 1e-9, 1.0);
    cr_expect(strstr(tsr_last_error(), r.srv.url) != NULL, "%s", tsr_last_error());
    tsr_buf *b2;
    cr_expect_eq(tsr_buft_alloc(tsr_dev_buft(r.dev), 64, &b2), TSR_EDEVICE);
    free(y);
    tsr_backend_free(be);
    ffn_free(&f);
}

Test(rpc, a_stopped_server_turns_into_a_timeout_not_a_hang, .timeout = 60)
{
    const tsr_rpc_options opt = {.timeout_ms = 500, .compute_timeout_ms = 1000};
    remote r = remote_start(NULL, &opt);
    tsr_ctx *ctx = tsr_ctx_new(4);
    tsr_tensor *x = tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 1024);
    tsr_buf *buf;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(r.dev), &buf), TSR_OK);
    float v[1024] = {0};
    kill(r.srv.pid, SIGSTOP);
    /* A signal lands when it lands: wait until the server is really stopped
     * (it is our child), or the read may still be answered. */
    int ws = 0;
    cr_assert_eq(waitpid(r.srv.pid, &ws, WUNTRACED), r.srv.pid);
    cr_assert(WIFSTOPPED(ws));
    const uint64_t t0 = tsr__time_ns();
    cr_expect_eq(tsr_tensor_get(x, v, 0, sizeof(v)), TSR_ETIMEDOUT);
    const double s = (double)(tsr__time_ns() - t0) * 1e-9;
    cr_expect(s >= 0.4 && s < 3.0, "timed out after %.2f s (timeout 0.5 s)", s);
    cr_expect(strstr(tsr_last_error(), "500 ms") && strstr(tsr_last_error(), r.srv.url), "%s",
              tsr_last_error());
    cr_expect_eq(tsr_tensor_set(x, v, 0, sizeof(v)), TSR_EDEVICE, "the connection is closed");
    kill(r.srv.pid, SIGCONT);
    tsr_buf_free(buf);
    tsr_ctx_free(ctx);
    remote_stop(&r);
}
