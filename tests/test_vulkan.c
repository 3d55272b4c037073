/* tests/test_vulkan.c — the Vulkan backend beyond what every device shares
 * with the others (test_backend_ops runs every op on it, test_backend its
 * buffers): device listing and selection, asynchronous streams, events
 * between Vulkan streams and with CPU streams, copies from other backends,
 * run-time errors at synchronize, tensors above the storage-buffer range,
 * refused allocations, and that validation-layer errors fail calls.
 *
 * Every test needs a Vulkan device and otherwise skips, saying why (no
 * loader, no device, TSR_VULKAN_DEVICES). ctest runs this suite with the
 * validation layer on; each test then also checks that the layer reported
 * nothing. Asynchrony is proven as in test_backend: a stream waits on a
 * "gate" event of a test-only device that the test opens by hand.
 */
#define _DEFAULT_SOURCE /* setenv */
#include <criterion/criterion.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/vulkan/vk_impl.h"
#include "core/backend_impl.h"
#include "tessera/vulkan.h"
#include "testutil.h"

/* ---- fixtures ------------------------------------------------------------------------------ */

static tsr_dev *vk_dev(void)
{
    tsr_reg *reg = tsr_vulkan_reg();
    if (tsr_reg_dev_count(reg) == 0)
        cr_skip_test("no Vulkan device: %s",
                     *tsr_vulkan_reason() ? tsr_vulkan_reason() : "none listed");
    return tsr_reg_dev_get(reg, 0);
}

/* Errors a test provokes on purpose. */
static uint64_t expected_errors;

static void no_validation_errors(void)
{
    if (tsr_reg_dev_count(tsr_vulkan_reg()) > 0)
        cr_expect_eq(tsr_vulkan_validation_errors(), expected_errors,
                     "the validation layer reported %llu error(s) (see the log)",
                     (unsigned long long)(tsr_vulkan_validation_errors() - expected_errors));
}

TestSuite(vulkan, .fini = no_validation_errors);

/* y = 2x + 1 over n floats on dev. */
typedef struct {
    tsr_ctx *ctx;
    tsr_tensor *x, *y;
    tsr_graph *g;
    tsr_buf *buf;
} small_graph;

static small_graph small_graph_new(tsr_dev *dev, int64_t n)
{
    small_graph s = {.ctx = tsr_ctx_new(8), .g = tsr_graph_new(8)};
    s.x = tsr_new_tensor_1d(s.ctx, TSR_TYPE_F32, n);
    s.y = tsr_scale_bias(s.ctx, s.x, 2.0f, 1.0f);
    cr_assert_eq(tsr_ctx_alloc_tensors(s.ctx, tsr_dev_buft(dev), &s.buf), TSR_OK, "%s",
                 tsr_last_error());
    cr_assert_eq(tsr_graph_build(s.g, s.y), TSR_OK);
    return s;
}

static void small_graph_free(small_graph *s)
{
    tsr_graph_free(s->g);
    tsr_buf_free(s->buf);
    tsr_ctx_free(s->ctx);
}

static void fill_const(tsr_tensor *t, float v)
{
    const int64_t n = tsr_nelements(t);
    float *buf = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        buf[i] = v;
    cr_assert_eq(tsr_tensor_set(t, buf, 0, (size_t)n * sizeof(float)), TSR_OK);
    free(buf);
}

static void expect_all(const tsr_tensor *t, float want, const char *what)
{
    const int64_t n = tsr_nelements(t);
    float *buf = malloc((size_t)n * sizeof(float));
    cr_assert_eq(tsr_tensor_get(t, buf, 0, (size_t)n * sizeof(float)), TSR_OK);
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (buf[i] != want)
            bad = i;
    cr_expect(bad < 0, "%s: element %lld is %g, expected %g", what, (long long)bad,
              bad >= 0 ? (double)buf[bad] : 0.0, (double)want);
    free(buf);
}

/* ---- a test-only device whose events are gates the test opens ------------------------------- */

static atomic_int gate_open;

static const char *gate_name(tsr_dev *d)
{
    (void)d;
    return "gate";
}

static tsr_status gate_event_new(tsr_dev *d, tsr_event **out)
{
    tsr_event *e = calloc(1, sizeof(*e));
    e->dev = d;
    *out = e;
    return TSR_OK;
}

static void gate_event_free(tsr_dev *d, tsr_event *e)
{
    (void)d;
    free(e);
}

static tsr_status gate_event_sync(tsr_dev *d, tsr_event *e)
{
    (void)d;
    (void)e;
    while (!atomic_load(&gate_open))
        ;
    return TSR_OK;
}

static const struct tsr_dev_i gate_iface = {
    .get_name = gate_name,
    .event_new = gate_event_new,
    .event_free = gate_event_free,
    .event_synchronize = gate_event_sync,
};
static tsr_dev gate_dev = {.iface = &gate_iface};

/* ---- devices ----------------------------------------------------------------------------- */

Test(vulkan, every_device_reports_name_type_memory_and_caps)
{
    vk_dev();
    tsr_reg *reg = tsr_reg_by_name("vulkan");
    cr_assert_eq(reg, tsr_vulkan_reg());
    for (size_t i = 0; i < tsr_reg_dev_count(reg); i++) {
        tsr_dev *d = tsr_reg_dev_get(reg, i);
        char name[32];
        snprintf(name, sizeof(name), "vulkan%zu", i);
        cr_expect_str_eq(tsr_dev_name(d), name);
        cr_expect_eq(tsr_dev_by_name(name), d);
        const tsr_dev_type t = tsr_dev_get_type(d);
        cr_expect(t == TSR_DEV_GPU || t == TSR_DEV_IGPU || t == TSR_DEV_CPU, "type %d", (int)t);
        size_t free_b, total_b;
        tsr_dev_memory(d, &free_b, &total_b);
        cr_expect_gt(total_b, 0);
        cr_expect_leq(free_b, total_b);
        const tsr_dev_caps caps = tsr_dev_get_caps(d);
        cr_expect(caps.async && caps.events);
        cr_expect_gt(tsr_buft_max_size(tsr_dev_buft(d)), 0);
        cr_log_info("%s: %s (%s), %zu of %zu MiB free", name, tsr_dev_description(d),
                    tsr_dev_type_name(t), free_b >> 20, total_b >> 20);
    }
    cr_expect_not_null(tsr_reg_get_proc(reg, "tsr_vulkan_validation_errors"));
    cr_expect_null(tsr_reg_get_proc(reg, "tsr_no_such_thing"));
}

Test(vulkan, TSR_VULKAN_DEVICES_none_leaves_the_registry_empty)
{
    setenv("TSR_VULKAN_DEVICES", "none", 1);
    cr_expect_eq(tsr_reg_dev_count(tsr_vulkan_reg()), 0);
    cr_expect(strstr(tsr_vulkan_reason(), "TSR_VULKAN_DEVICES") != NULL ||
                  strstr(tsr_vulkan_reason(), "loader") != NULL,
              "reason: %s", tsr_vulkan_reason());
    cr_expect_null(tsr_dev_by_name("vulkan0"));
}

Test(vulkan, a_missing_loader_means_zero_devices_and_a_reason)
{
    setenv("TSR_VULKAN_LOADER", "/nonexistent/libvulkan.so.1", 1);
    cr_expect_eq(tsr_reg_dev_count(tsr_vulkan_reg()), 0);
    cr_expect(strstr(tsr_vulkan_reason(), "loader") != NULL, "reason: %s", tsr_vulkan_reason());
    cr_expect_gt(tsr_dev_count(), 0, "the CPU devices are still there");
}

Test(vulkan, allocations_above_the_device_limit_are_refused_naming_it)
{
    tsr_dev *d = vk_dev();
    tsr_buft *buft = tsr_dev_buft(d);
    const size_t max = tsr_buft_max_size(buft);
    tsr_buf *buf = NULL;
    cr_expect_eq(tsr_buft_alloc(buft, max + 1, &buf), TSR_ENOMEM);
    cr_expect_null(buf);
    cr_expect(strstr(tsr_last_error(), "largest allocation") != NULL, "%s", tsr_last_error());
}

Test(vulkan, hundreds_of_live_buffers_and_their_texel_views)
{
    tsr_dev *d = vk_dev();
    enum { N = 300 }; /* more than one descriptor pool's worth of texel views */
    static tsr_buf *bufs[N];
    for (int i = 0; i < N; i++)
        cr_assert_eq(tsr_buft_alloc(tsr_dev_buft(d), 4096, &bufs[i]), TSR_OK, "buffer %d: %s", i,
                     tsr_last_error());
    for (int i = 0; i < N; i += 2)
        tsr_buf_free(bufs[i]);
    for (int i = 0; i < N; i += 2)
        cr_assert_eq(tsr_buft_alloc(tsr_dev_buft(d), 8192, &bufs[i]), TSR_OK);
    for (int i = 0; i < N; i++)
        tsr_buf_free(bufs[i]);
}

/* ---- streams ------------------------------------------------------------------------------ */

Test(vulkan, graph_compute_async_returns_before_the_work_runs)
{
    tsr_dev *d = vk_dev();
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(d, &be), TSR_OK, "%s", tsr_last_error());
    cr_expect(tsr_backend_is_vulkan(be));
    small_graph s = small_graph_new(d, 1000);
    fill_const(s.x, 1.0f);
    fill_const(s.y, -7.0f);
    tsr_event *gate;
    cr_assert_eq(tsr_event_new(&gate_dev, &gate), TSR_OK);
    atomic_store(&gate_open, 0);
    cr_assert_eq(tsr_event_wait(be, gate), TSR_OK, "waiting on a foreign event is enqueued");
    cr_assert_eq(tsr_backend_graph_compute_async(be, s.g), TSR_OK);
    expect_all(s.y, -7.0f, "work ran before the stream's wait ended");
    atomic_store(&gate_open, 1);
    cr_assert_eq(tsr_backend_synchronize(be), TSR_OK, "%s", tsr_last_error());
    expect_all(s.y, 3.0f, "after the gate");
    tsr_event_free(gate);
    small_graph_free(&s);
    tsr_backend_free(be);
}

Test(vulkan, async_set_get_and_2d_with_offsets)
{
    tsr_dev *d = vk_dev();
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(d, &be), TSR_OK);
    small_graph s = small_graph_new(d, 64);
    float in[64], out[64] = {0}, col[8];
    for (int i = 0; i < 64; i++)
        in[i] = (float)i;
    cr_expect_eq(tsr_backend_set_async(be, s.x, in, 0, sizeof(in)), TSR_OK);
    cr_expect_eq(tsr_backend_graph_compute_async(be, s.g), TSR_OK);
    cr_expect_eq(tsr_backend_get_async(be, s.y, out + 8, 32, 64), TSR_OK);
    cr_expect_eq(tsr_backend_get_2d_async(be, s.y, col, 0, 4, 8, 32, 4), TSR_OK);
    cr_expect_eq(tsr_backend_set_async(be, s.x, in, 250, 8), TSR_ERANGE);
    cr_assert_eq(tsr_backend_synchronize(be), TSR_OK, "%s", tsr_last_error());
    for (int i = 0; i < 16; i++)
        cr_expect_float_eq(out[8 + i], 2.0f * (float)(8 + i) + 1.0f, 0.0f);
    for (int i = 0; i < 8; i++)
        cr_expect_float_eq(col[i], 2.0f * (float)(8 * i) + 1.0f, 0.0f);
    const float two[4] = {100, 101, 102, 103};
    cr_expect_eq(tsr_backend_set_2d_async(be, s.x, two, 4, 4, 4, 64, 4), TSR_OK);
    cr_assert_eq(tsr_backend_synchronize(be), TSR_OK);
    float x[64];
    cr_assert_eq(tsr_tensor_get(s.x, x, 0, sizeof(x)), TSR_OK);
    cr_expect_float_eq(x[1], 100.0f, 0.0f);
    cr_expect_float_eq(x[49], 103.0f, 0.0f);
    /* A set reading host memory a pending get writes sees the get's bytes. */
    float relay[64];
    cr_expect_eq(tsr_backend_get_async(be, s.y, relay, 0, sizeof(relay)), TSR_OK);
    cr_expect_eq(tsr_backend_set_async(be, s.x, relay, 0, sizeof(relay)), TSR_OK);
    cr_assert_eq(tsr_backend_synchronize(be), TSR_OK);
    cr_assert_eq(tsr_tensor_get(s.x, x, 0, sizeof(x)), TSR_OK);
    cr_expect_float_eq(x[2], relay[2], 0.0f);
    cr_expect_float_eq(x[2], 2.0f * 2.0f + 1.0f, 0.0f, "x[2] = y[2] of the last compute");
    small_graph_free(&s);
    tsr_backend_free(be);
}

Test(vulkan, large_transfers_go_through_the_ring_in_pieces)
{
    tsr_dev *d = vk_dev();
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(d, &be), TSR_OK);
    const int64_t n = 10 << 20; /* 40 MiB of floats: more than half the largest ring */
    small_graph s = small_graph_new(d, n);
    float *in = malloc((size_t)n * sizeof(float));
    float *out = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        in[i] = (float)(i % 1000);
    for (int rep = 0; rep < 3; rep++) {
        cr_assert_eq(tsr_backend_set_async(be, s.x, in, 0, tsr_nbytes(s.x)), TSR_OK);
        cr_assert_eq(tsr_backend_graph_compute_async(be, s.g), TSR_OK);
        cr_assert_eq(tsr_backend_get_async(be, s.y, out, 0, tsr_nbytes(s.y)), TSR_OK);
    }
    cr_assert_eq(tsr_backend_synchronize(be), TSR_OK, "%s", tsr_last_error());
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (out[i] != 2.0f * in[i] + 1.0f)
            bad = i;
    cr_expect(bad < 0, "element %lld", (long long)bad);
    free(in);
    free(out);
    small_graph_free(&s);
    tsr_backend_free(be);
}

Test(vulkan, many_small_jobs_overflowing_batches_complete_in_order)
{
    tsr_dev *d = vk_dev();
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(d, &be), TSR_OK);
    small_graph s = small_graph_new(d, 16);
    static float vals[3000];
    for (int i = 0; i < 3000; i++) {
        vals[i] = (float)i;
        cr_assert_eq(tsr_backend_set_async(be, s.x, &vals[i], 0, sizeof(float)), TSR_OK);
        cr_assert_eq(tsr_backend_graph_compute_async(be, s.g), TSR_OK);
    }
    cr_assert_eq(tsr_backend_synchronize(be), TSR_OK);
    float y0;
    tsr_tensor_get(s.y, &y0, 0, sizeof(y0));
    cr_expect_float_eq(y0, 2.0f * 2999.0f + 1.0f, 0.0f, "the last job ran last");
    small_graph_free(&s);
    tsr_backend_free(be);
}

Test(vulkan, run_time_errors_surface_at_synchronize_with_the_node_name)
{
    tsr_dev *d = vk_dev();
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(d, &be), TSR_OK);
    tsr_ctx *ctx = tsr_ctx_new(16);
    tsr_tensor *table = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 4, 10);
    tsr_tensor *ids = tsr_new_tensor_1d(ctx, TSR_TYPE_I32, 2);
    tsr_tensor *rows = tsr_set_name(tsr_get_rows(ctx, table, ids), "token_rows");
    tsr_tensor *w = tsr_new_tensor_3d(ctx, TSR_TYPE_F16, 32, 8, 3);
    tsr_tensor *x = tsr_new_tensor_3d(ctx, TSR_TYPE_F32, 32, 1, 2);
    tsr_tensor *sel = tsr_new_tensor_2d(ctx, TSR_TYPE_I32, 1, 2);
    tsr_tensor *experts = tsr_set_name(tsr_mul_mat_id(ctx, w, x, sel), "experts");
    tsr_buf *buf;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(d), &buf), TSR_OK);
    const int32_t bad[2] = {3, 70000};
    tsr_tensor_set(ids, bad, 0, sizeof(bad));
    tsr_graph *g = tsr_graph_new(16);
    cr_assert_eq(tsr_graph_build(g, rows), TSR_OK);
    cr_expect_eq(tsr_backend_graph_compute_async(be, g), TSR_OK, "enqueueing succeeds");
    cr_expect_eq(tsr_backend_synchronize(be), TSR_ERANGE);
    cr_expect(strstr(tsr_last_error(), "token_rows") && strstr(tsr_last_error(), "70000"), "%s",
              tsr_last_error());
    cr_expect_eq(tsr_backend_synchronize(be), TSR_OK, "the error is reported once");
    const int32_t bad_expert[2] = {1, -2};
    tsr_tensor_set(sel, bad_expert, 0, sizeof(bad_expert));
    tsr_graph_reset(g);
    cr_assert_eq(tsr_graph_build(g, experts), TSR_OK);
    cr_expect_eq(tsr_backend_graph_compute(be, g), TSR_ERANGE);
    cr_expect(strstr(tsr_last_error(), "experts") && strstr(tsr_last_error(), "-2"), "%s",
              tsr_last_error());
    tsr_graph_free(g);
    tsr_buf_free(buf);
    tsr_ctx_free(ctx);
    tsr_backend_free(be);
}

/* ---- events and copies ---------------------------------------------------------------------- */

/* Stream b0 computes y behind a gate and records `done`; b1 waits on it and
 * copies y. Only the event orders the copy after the graph. */
static void events_between(tsr_dev *d0, tsr_dev *d1)
{
    tsr_backend *b0, *b1;
    cr_assert_eq(tsr_backend_new(d0, &b0), TSR_OK);
    cr_assert_eq(tsr_backend_new(d1, &b1), TSR_OK);
    small_graph s = small_graph_new(d0, 4096);
    tsr_ctx *ctx = tsr_ctx_new(4);
    tsr_tensor *dst = tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 4096);
    tsr_buf *dbuf;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(d0), &dbuf), TSR_OK);
    fill_const(s.x, 1.0f);
    fill_const(s.y, 0.0f);
    fill_const(dst, 0.0f);
    tsr_event *gate, *done;
    cr_assert_eq(tsr_event_new(&gate_dev, &gate), TSR_OK);
    cr_assert_eq(tsr_event_new(d0, &done), TSR_OK);
    atomic_store(&gate_open, 0);
    cr_assert_eq(tsr_event_wait(b0, gate), TSR_OK);
    cr_assert_eq(tsr_backend_graph_compute_async(b0, s.g), TSR_OK);
    cr_assert_eq(tsr_event_record(done, b0), TSR_OK);
    if (d1 == d0) {
        cr_assert_eq(tsr_event_wait(b1, done), TSR_OK);
        cr_assert_eq(tsr_backend_copy_async(b1, b1, s.y, dst), TSR_OK);
    } else {
        /* A CPU stream waits on the Vulkan event, then scales its own
         * tensor; the copy happens on the host after that. */
        cr_assert_eq(tsr_event_wait(b1, done), TSR_OK);
    }
    atomic_store(&gate_open, 1);
    cr_assert_eq(tsr_backend_synchronize(b1), TSR_OK, "%s", tsr_last_error());
    cr_assert_eq(tsr_event_synchronize(done), TSR_OK);
    if (d1 == d0)
        expect_all(dst, 3.0f, "copied before the graph ran");
    else
        expect_all(s.y, 3.0f, "the event completed before the graph");
    /* Without a gate: the wait is done by the GPU (the value is submitted). */
    fill_const(dst, 0.0f);
    cr_assert_eq(tsr_backend_graph_compute_async(b0, s.g), TSR_OK);
    cr_assert_eq(tsr_event_record(done, b0), TSR_OK);
    cr_assert_eq(tsr_event_wait(b1, done), TSR_OK);
    if (d1 == d0) {
        cr_assert_eq(tsr_backend_copy_async(b0, b1, s.y, dst), TSR_OK);
        cr_assert_eq(tsr_backend_synchronize(b1), TSR_OK, "%s", tsr_last_error());
        expect_all(dst, 3.0f, "copy_async between two Vulkan streams");
    }
    cr_assert_eq(tsr_backend_synchronize(b0), TSR_OK);
    cr_assert_eq(tsr_backend_synchronize(b1), TSR_OK, "before the events are freed");
    tsr_event_free(gate);
    tsr_event_free(done);
    tsr_buf_free(dbuf);
    tsr_ctx_free(ctx);
    small_graph_free(&s);
    tsr_backend_free(b0);
    tsr_backend_free(b1);
}

Test(vulkan, events_order_work_between_two_vulkan_streams)
{
    tsr_dev *d = vk_dev();
    events_between(d, d);
}

Test(vulkan, a_cpu_stream_waits_on_a_vulkan_event)
{
    tsr_dev *d = vk_dev();
    events_between(d, tsr_reg_dev_get(tsr_cpu_reg(), 0));
}

/* A CPU stream computes behind a gate; the Vulkan stream copies its result
 * with copy_async (through the ring, after the CPU stream's event) and
 * computes on it. */
Test(vulkan, copies_from_a_cpu_stream_wait_for_its_work)
{
    tsr_dev *d = vk_dev();
    tsr_dev *cpu = tsr_reg_dev_get(tsr_cpu_reg(), 0);
    tsr_backend *bc, *bv;
    cr_assert_eq(tsr_backend_new(cpu, &bc), TSR_OK);
    cr_assert_eq(tsr_backend_new(d, &bv), TSR_OK);
    const int64_t n = 3 << 20; /* 12 MiB: several ring pieces */
    small_graph sc = small_graph_new(cpu, n);
    small_graph sv = small_graph_new(d, n);
    fill_const(sc.x, 1.0f);
    fill_const(sc.y, 0.0f);
    fill_const(sv.x, -1.0f);
    tsr_event *gate;
    cr_assert_eq(tsr_event_new(&gate_dev, &gate), TSR_OK);
    atomic_store(&gate_open, 0);
    cr_assert_eq(tsr_event_wait(bc, gate), TSR_OK);
    cr_assert_eq(tsr_backend_graph_compute_async(bc, sc.g), TSR_OK); /* y = 3 */
    cr_assert_eq(tsr_backend_copy_async(bc, bv, sc.y, sv.x), TSR_OK);
    cr_assert_eq(tsr_backend_graph_compute_async(bv, sv.g), TSR_OK); /* 2·3 + 1 */
    expect_all(sv.x, -1.0f, "the Vulkan stream ran ahead of the CPU stream");
    atomic_store(&gate_open, 1);
    cr_assert_eq(tsr_backend_synchronize(bv), TSR_OK, "%s", tsr_last_error());
    expect_all(sv.y, 7.0f, "after the copy");
    /* And back: a copy from Vulkan memory into CPU memory. */
    cr_assert_eq(tsr_backend_copy_async(bv, bc, sv.y, sc.x), TSR_OK);
    cr_assert_eq(tsr_backend_synchronize(bc), TSR_OK);
    expect_all(sc.x, 7.0f, "copied back");
    tsr_event_free(gate);
    small_graph_free(&sc);
    small_graph_free(&sv);
    tsr_backend_free(bc);
    tsr_backend_free(bv);
}

/* A wait holds the mark the event had when the wait was queued: the event
 * is re-recorded behind a closed gate right after, and the waiting stream
 * must still finish while the gate stays closed (were the wait moved to the
 * new mark, synchronize would hang until the timeout). Both directions:
 * a CPU stream waiting on a Vulkan event, and a Vulkan stream waiting on a
 * CPU event. */
static void rerecorded_event_keeps_waits(bool cpu_waits)
{
    tsr_dev *d = vk_dev();
    tsr_dev *cpu = tsr_reg_dev_get(tsr_cpu_reg(), 0);
    tsr_backend *bc, *bv;
    cr_assert_eq(tsr_backend_new(cpu, &bc), TSR_OK);
    cr_assert_eq(tsr_backend_new(d, &bv), TSR_OK);
    tsr_backend *marker = cpu_waits ? bv : bc, *waiter = cpu_waits ? bc : bv;
    small_graph sw = small_graph_new(cpu_waits ? cpu : d, 4096);
    fill_const(sw.x, 1.0f);
    fill_const(sw.y, 0.0f);
    tsr_event *e, *gate;
    cr_assert_eq(tsr_event_new(tsr_backend_dev(marker), &e), TSR_OK);
    cr_assert_eq(tsr_event_new(&gate_dev, &gate), TSR_OK);
    for (int round = 0; round < 3; round++) {
        cr_assert_eq(tsr_event_record(e, marker), TSR_OK);
        cr_assert_eq(tsr_event_wait(waiter, e), TSR_OK);
        cr_assert_eq(tsr_backend_graph_compute_async(waiter, sw.g), TSR_OK);
        atomic_store(&gate_open, 0);
        cr_assert_eq(tsr_event_wait(marker, gate), TSR_OK);
        cr_assert_eq(tsr_event_record(e, marker), TSR_OK); /* behind the gate */
        cr_assert_eq(tsr_backend_synchronize(waiter), TSR_OK, "%s", tsr_last_error());
        expect_all(sw.y, 3.0f, "the waiting stream's work");
        atomic_store(&gate_open, 1);
        cr_assert_eq(tsr_backend_synchronize(marker), TSR_OK, "%s", tsr_last_error());
        fill_const(sw.y, 0.0f);
    }
    cr_assert_eq(tsr_backend_synchronize(waiter), TSR_OK, "before the events are freed");
    tsr_event_free(gate);
    tsr_event_free(e);
    small_graph_free(&sw);
    tsr_backend_free(bc);
    tsr_backend_free(bv);
}

Test(vulkan, a_cpu_wait_on_a_vulkan_event_keeps_its_mark_when_re_recorded, .timeout = 120)
{
    rerecorded_event_keeps_waits(true);
}

Test(vulkan, a_vulkan_wait_on_a_cpu_event_keeps_its_mark_when_re_recorded, .timeout = 120)
{
    rerecorded_event_keeps_waits(false);
}

/* Vulkan memory into a CPU stream's host memory: copy_async returns while
 * the Vulkan stream is still held by a gate (a blocking copy would hang
 * here until the timeout), the CPU stream's earlier work still sees the old
 * bytes, and its later work sees the new ones. Twice, so the second round
 * reuses the stream's pooled copy record and event. */
Test(vulkan, copies_into_a_cpu_stream_return_at_once_and_keep_its_order, .timeout = 120)
{
    tsr_dev *d = vk_dev();
    tsr_dev *cpu = tsr_reg_dev_get(tsr_cpu_reg(), 0);
    tsr_backend *bc, *bv;
    cr_assert_eq(tsr_backend_new(cpu, &bc), TSR_OK);
    cr_assert_eq(tsr_backend_new(d, &bv), TSR_OK);
    const int64_t n = 1 << 20;
    small_graph sc = small_graph_new(cpu, n);
    small_graph sv = small_graph_new(d, n);
    tsr_ctx *ctx = tsr_ctx_new(4);
    tsr_tensor *old = tsr_new_tensor_1d(ctx, TSR_TYPE_F32, n);
    tsr_buf *obuf;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(cpu), &obuf), TSR_OK);
    tsr_event *gate;
    cr_assert_eq(tsr_event_new(&gate_dev, &gate), TSR_OK);
    for (int round = 0; round < 2; round++) {
        const float x = (float)(3 + round); /* Vulkan: y = 2x + 1 */
        fill_const(sv.x, x);
        fill_const(sc.x, 1.0f);
        fill_const(old, 0.0f);
        atomic_store(&gate_open, 0);
        cr_assert_eq(tsr_event_wait(bv, gate), TSR_OK);
        cr_assert_eq(tsr_backend_graph_compute_async(bv, sv.g), TSR_OK);
        cr_assert_eq(tsr_backend_copy_async(bc, bc, sc.x, old), TSR_OK);
        cr_assert_eq(tsr_backend_copy_async(bv, bc, sv.y, sc.x), TSR_OK, "%s", tsr_last_error());
        cr_assert_eq(tsr_backend_graph_compute_async(bc, sc.g), TSR_OK);
        expect_all(sc.x, 1.0f, "copied before the Vulkan work ran");
        atomic_store(&gate_open, 1);
        cr_assert_eq(tsr_backend_synchronize(bc), TSR_OK, "%s", tsr_last_error());
        expect_all(old, 1.0f, "earlier CPU work saw the copied bytes");
        expect_all(sc.x, 2.0f * x + 1.0f, "the copy");
        expect_all(sc.y, 2.0f * (2.0f * x + 1.0f) + 1.0f, "later CPU work");
        cr_assert_eq(tsr_backend_synchronize(bv), TSR_OK, "%s", tsr_last_error());
    }
    tsr_event_free(gate);
    tsr_buf_free(obuf);
    tsr_ctx_free(ctx);
    small_graph_free(&sc);
    small_graph_free(&sv);
    tsr_backend_free(bc);
    tsr_backend_free(bv);
}

/* ---- matrix kernels ----------------------------------------------------------------------------
 */

/* y = mul_mat(w, x) on dev with seeded inputs; x is every other column of
 * a wider tensor when strided. Returns the N·T·C2·C3 outputs (malloc'ed). */
static float *run_mul_mat(tsr_dev *dev, tsr_type wt, const int64_t wne[4], const int64_t xne[4],
                          bool strided)
{
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(dev, &be), TSR_OK);
    tsr_ctx *ctx = tsr_ctx_new(8);
    tsr_tensor *w = tsr_new_tensor_4d(ctx, wt, wne[0], wne[1], wne[2], wne[3]);
    tsr_tensor *xb =
        tsr_new_tensor_4d(ctx, TSR_TYPE_F32, xne[0], xne[1] * (strided ? 2 : 1), xne[2], xne[3]);
    tsr_tensor *x = strided ? tsr_view_4d(ctx, xb, xne[0], xne[1], xne[2], xne[3], 2 * xb->nb[1],
                                          xb->nb[2], xb->nb[3], 0)
                            : xb;
    tsr_tensor *y = tsr_mul_mat(ctx, w, x);
    cr_assert_not_null(y, "%s", tsr_ctx_error(ctx));
    tsr_buf *buf;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(dev), &buf), TSR_OK);
    tu_rng r1 = {11}, r2 = {12};
    cr_assert_eq(tu_fill_uniform(w, &r1, -1, 1), TSR_OK);
    cr_assert_eq(tu_fill_uniform(xb, &r2, -1, 1), TSR_OK);
    tsr_graph *g = tsr_graph_new(8);
    cr_assert_eq(tsr_graph_build(g, y), TSR_OK);
    cr_assert_eq(tsr_backend_graph_compute(be, g), TSR_OK, "%s", tsr_last_error());
    float *out = malloc(tsr_nbytes(y));
    cr_assert_eq(tsr_tensor_get(y, out, 0, tsr_nbytes(y)), TSR_OK);
    tsr_graph_free(g);
    tsr_buf_free(buf);
    tsr_ctx_free(ctx);
    tsr_backend_free(be);
    return out;
}

/* Shapes the harness leaves to the matrix-vector kernel (T ≤ 8) taken
 * through the GEMM kernels: broadcast batches, strided x, K not a multiple
 * of 4 (no texel path), BF16 and Q8_0 weights. */
static void gemm_shapes_match_the_cpu(void)
{
    tsr_dev *d = vk_dev();
    tsr_dev *cpu = tsr_reg_dev_get(tsr_cpu_reg(), 0);
    const struct {
        tsr_type t;
        int64_t w[4], x[4];
        bool strided;
    } cases[] = {
        {TSR_TYPE_F32, {64, 40, 2, 1}, {64, 20, 4, 3}, false},
        {TSR_TYPE_F16, {128, 33, 1, 1}, {128, 17, 1, 1}, true},
        {TSR_TYPE_F32, {66, 21, 1, 1}, {66, 35, 1, 1}, false},
        {TSR_TYPE_BF16, {96, 19, 1, 1}, {96, 12, 1, 1}, false},
        {TSR_TYPE_Q8_0, {64, 70, 1, 1}, {64, 9, 1, 1}, false},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        float *want = run_mul_mat(cpu, cases[c].t, cases[c].w, cases[c].x, cases[c].strided);
        float *got = run_mul_mat(d, cases[c].t, cases[c].w, cases[c].x, cases[c].strided);
        const int64_t n = cases[c].w[1] * cases[c].x[1] * cases[c].x[2] * cases[c].x[3];
        const double nmse = tu_nmse(got, want, n);
        cr_expect_leq(nmse, cases[c].t == TSR_TYPE_BF16 ? 1e-4 : 1e-8, "case %zu (%s): NMSE %g", c,
                      tsr_type_name(cases[c].t), nmse);
        free(want);
        free(got);
    }
}

Test(vulkan, gemm_batches_strides_and_types_match_the_cpu) { gemm_shapes_match_the_cpu(); }

Test(vulkan, the_tiled_gemm_matches_the_cpu_where_texels_would_run)
{
    setenv("TSR_VULKAN_MM", "tiled", 1);
    gemm_shapes_match_the_cpu();
}

/* ---- limits ------------------------------------------------------------------------------- */

/* A weight matrix and an add above maxStorageBufferRange (128 MiB on
 * lavapipe): shaders address tensors by device address, so no binding
 * window applies. */
Test(vulkan, tensors_above_the_storage_buffer_range_compute_correctly, .timeout = 120)
{
    tsr_dev *d = vk_dev();
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(d, &be), TSR_OK);
    const int64_t K = 1024, N = 34000; /* 139 MB of F32 weights */
    tsr_ctx *ctx = tsr_ctx_new(8);
    tsr_tensor *w = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, K, N);
    tsr_tensor *x = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, K, 2);
    tsr_tensor *y = tsr_mul_mat(ctx, w, x);
    tsr_tensor *z = tsr_add(ctx, w, w);
    tsr_buf *buf;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(d), &buf), TSR_OK, "%s", tsr_last_error());
    cr_log_info("maxStorageBufferRange of %s: %zu MiB; W: %zu MiB", tsr_dev_name(d),
                (size_t)tsr__vk_device_of(d)->limits.maxStorageBufferRange >> 20,
                tsr_nbytes(w) >> 20);
    float *row = malloc((size_t)K * sizeof(float));
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k++)
            row[k] = (float)((n + k) % 7) - 3.0f;
        tsr_tensor_set(w, row, (size_t)n * w->nb[1], (size_t)K * sizeof(float));
    }
    float xv[2048];
    for (int i = 0; i < 2048; i++)
        xv[i] = i < 1024 ? 1.0f : (float)(i % 3);
    tsr_tensor_set(x, xv, 0, sizeof(xv));
    tsr_graph *g = tsr_graph_new(8);
    cr_assert_eq(tsr_graph_build(g, y), TSR_OK);
    cr_assert_eq(tsr_graph_build(g, z), TSR_OK);
    cr_assert_eq(tsr_backend_graph_compute(be, g), TSR_OK, "%s", tsr_last_error());
    float *yv = malloc((size_t)N * 2 * sizeof(float));
    cr_assert_eq(tsr_tensor_get(y, yv, 0, tsr_nbytes(y)), TSR_OK);
    for (int64_t n = 0; n < N; n += 997) {
        double want0 = 0, want1 = 0;
        for (int64_t k = 0; k < K; k++) {
            const double wv = (double)((n + k) % 7) - 3.0;
            want0 += wv;
            want1 += wv * (double)xv[1024 + k];
        }
        cr_expect_float_eq(yv[n], (float)want0, 1e-3, "y[%lld, 0]", (long long)n);
        cr_expect_float_eq(yv[N + n], (float)want1, 1e-3, "y[%lld, 1]", (long long)n);
    }
    const int64_t last = N - 1;
    cr_assert_eq(tsr_tensor_get(z, row, (size_t)last * z->nb[1], (size_t)K * sizeof(float)),
                 TSR_OK);
    for (int64_t k = 0; k < K; k++)
        cr_expect_float_eq(row[k], 2.0f * ((float)((last + k) % 7) - 3.0f), 0.0f);
    free(row);
    free(yv);
    tsr_graph_free(g);
    tsr_buf_free(buf);
    tsr_ctx_free(ctx);
    tsr_backend_free(be);
}

/* ---- validation ------------------------------------------------------------------------------ */

/* A deliberately invalid Vulkan call (a zero-sized buffer) must make the
 * next tessera call on a Vulkan object fail with the layer's message. */
Test(vulkan, a_validation_error_fails_the_next_call)
{
    tsr_dev *d = vk_dev();
    if (!tsr_vulkan_validation_enabled())
        cr_skip_test("the validation layer is off (TSR_VULKAN_VALIDATION=1 turns it on)");
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(d, &be), TSR_OK);
    vk_device *vd = tsr__vk_device_of(d);
    const VkBufferCreateInfo bad = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                                    .size = 0,
                                    .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT};
    VkBuffer b = VK_NULL_HANDLE;
    const uint64_t before = tsr_vulkan_validation_errors();
    VKF.vkCreateBuffer(vd->dev, &bad, NULL, &b);
    cr_expect_gt(tsr_vulkan_validation_errors(), before, "the layer saw the invalid call");
    cr_expect_eq(tsr_backend_synchronize(be), TSR_EDEVICE);
    cr_expect(strstr(tsr_last_error(), "validation") != NULL, "%s", tsr_last_error());
    cr_expect_eq(tsr_backend_synchronize(be), TSR_OK, "reported once");
    if (b)
        VKF.vkDestroyBuffer(vd->dev, b, NULL);
    tsr_backend_free(be);
    expected_errors = tsr_vulkan_validation_errors();
}
