/* tests/test_backend.c — conformance of the common backend interface on
 * every device: registry and capability lookup, buffers (placement, offsets,
 * 2-D strided set/get, memset, clear, copies), streams (async calls, copies
 * between two streams and two devices, run-time errors at synchronize) and
 * events (ordering between streams, waits on a foreign event).
 *
 * Asynchrony is proven without timing: a stream is made to wait on a "gate"
 * event of a test-only device that the test opens by hand; work enqueued
 * behind it must not have run before the gate opens.
 */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend_impl.h"
#include "testutil.h"

#define MAX_DEVS 32

/* ---- registry -------------------------------------------------------------------------- */

Test(registry, the_cpu_registry_lists_its_devices_and_extensions)
{
    tsr_reg *cpu = tsr_reg_by_name("cpu");
    cr_assert_not_null(cpu);
    cr_expect_eq(cpu, tsr_cpu_reg());
    const long want = getenv("TSR_CPU_DEVICES") ? atol(getenv("TSR_CPU_DEVICES")) : 1;
    cr_expect_eq(tsr_reg_dev_count(cpu), (size_t)want);
    for (size_t i = 0; i < tsr_reg_dev_count(cpu); i++) {
        tsr_dev *d = tsr_reg_dev_get(cpu, i);
        char name[32];
        snprintf(name, sizeof(name), "cpu%zu", i);
        cr_expect_str_eq(tsr_dev_name(d), name);
        cr_expect_eq(tsr_dev_by_name(name), d);
        cr_expect_eq(tsr_dev_get_type(d), TSR_DEV_CPU);
        size_t free_b, total_b;
        tsr_dev_memory(d, &free_b, &total_b);
        cr_expect_gt(total_b, 0);
        cr_expect_leq(free_b, total_b);
        cr_expect(tsr_dev_get_caps(d).async && tsr_dev_get_caps(d).events);
    }
    cr_expect_null(tsr_reg_dev_get(cpu, tsr_reg_dev_count(cpu)), "index past the end");
    cr_expect_not_null(tsr_reg_get_proc(cpu, "tsr_cpu_set_n_threads"));
    cr_expect_not_null(tsr_reg_get_proc(cpu, "tsr_cpu_set_reference"));
    cr_expect_null(tsr_reg_get_proc(cpu, "tsr_no_such_thing"));
    cr_expect_null(tsr_reg_by_name("no-such-registry"));
    cr_expect_null(tsr_dev_by_name("cpu999"));
}

Test(registry, cpu_devices_share_the_cores_and_threads_can_be_set)
{
    tsr_reg *cpu = tsr_cpu_reg();
    tsr_backend *b;
    cr_assert_eq(tsr_backend_new(tsr_reg_dev_get(cpu, 0), &b), TSR_OK);
    cr_expect_geq(tsr_cpu_get_n_threads(b), 1);
    tsr_cpu_set_n_threads_fn set =
        (tsr_cpu_set_n_threads_fn)tsr_reg_get_proc(cpu, "tsr_cpu_set_n_threads");
    cr_assert_not_null(set);
    cr_expect_eq(set(b, 3), TSR_OK);
    cr_expect_eq(tsr_cpu_get_n_threads(b), 3);
    cr_expect_eq(set(b, 0), TSR_EINVAL);
    cr_expect_eq(set(b, 100000), TSR_EINVAL);
    cr_expect_eq(tsr_cpu_get_n_threads(b), 3, "a refused change changes nothing");
    tsr_backend_free(b);
}

/* ---- buffers --------------------------------------------------------------------------------- */

Test(buffer, placement_is_checked_for_fit_and_alignment)
{
    tsr_dev *devs[MAX_DEVS];
    const size_t n = tu_devices(devs, MAX_DEVS);
    for (size_t d = 0; d < n; d++) {
        tsr_buft *buft = tsr_dev_buft(devs[d]);
        const size_t align = tsr_buft_alignment(buft);
        tsr_buf *buf;
        cr_assert_eq(tsr_buft_alloc(buft, 4 * align, &buf), TSR_OK);
        cr_expect_eq(tsr_buf_size(buf), 4 * align);
        tsr_ctx *ctx = tsr_ctx_new(8);
        tsr_tensor *t = tsr_new_tensor_1d(ctx, TSR_TYPE_F32, (int64_t)align / 4);
        tsr_tensor *big = tsr_new_tensor_1d(ctx, TSR_TYPE_F32, (int64_t)align * 2);
        cr_expect_eq(tsr_buf_place_tensor(buf, t, align / 2 + 1), TSR_EINVAL, "misaligned");
        cr_expect_null(t->buffer);
        cr_expect_eq(tsr_buf_place_tensor(buf, big, align), TSR_ERANGE, "past the end");
        cr_expect_eq(tsr_buf_place_tensor(buf, t, 3 * align), TSR_OK, "%s", tsr_last_error());
        cr_expect_eq(t->buffer, buf);
        cr_expect_eq(tsr_buf_place_tensor(buf, t, 0), TSR_EBUSY, "placed twice");
        tsr_ctx_free(ctx);
        tsr_buf_free(buf);
        /* Zero bytes is a valid, empty buffer. */
        cr_assert_eq(tsr_buft_alloc(buft, 0, &buf), TSR_OK);
        cr_expect_eq(tsr_buf_size(buf), 0);
        tsr_buf_free(buf);
    }
}

Test(buffer, set_get_with_offsets_and_2d_strides)
{
    tsr_dev *devs[MAX_DEVS];
    const size_t n = tu_devices(devs, MAX_DEVS);
    for (size_t d = 0; d < n; d++) {
        tsr_ctx *ctx = tsr_ctx_new(8);
        tsr_tensor *t = tsr_new_tensor_2d(ctx, TSR_TYPE_I32, 16, 8); /* 512 bytes */
        tsr_buf *buf;
        cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(devs[d]), &buf), TSR_OK);
        int32_t src[128], back[128];
        for (int i = 0; i < 128; i++)
            src[i] = i * 7 - 100;
        cr_expect_eq(tsr_tensor_set(t, src, 0, sizeof(src)), TSR_OK);
        memset(back, 0, sizeof(back));
        cr_expect_eq(tsr_tensor_get(t, back + 10, 40, 80), TSR_OK);
        cr_expect_arr_eq(back + 10, src + 10, 80, "offset read");
        cr_expect_eq(tsr_tensor_set(t, src, 500, 16), TSR_ERANGE, "past the end");
        cr_expect_eq(tsr_tensor_get(t, back, SIZE_MAX - 4, 8), TSR_ERANGE, "overflow");
        cr_expect_eq(tsr_tensor_set(t, NULL, 0, 4), TSR_EINVAL);

        /* Column 3..4 of every row: 8 bytes per row at stride 64. */
        int32_t cols[16];
        for (int i = 0; i < 16; i++)
            cols[i] = 1000 + i;
        cr_expect_eq(tsr_tensor_set_2d(t, cols, 12, 8, 8, 64, 8), TSR_OK);
        cr_expect_eq(tsr_tensor_get(t, back, 0, sizeof(back)), TSR_OK);
        for (int r = 0; r < 8; r++)
            for (int c = 0; c < 16; c++) {
                const int32_t want = (c == 3 || c == 4) ? 1000 + r * 2 + (c - 3) : src[r * 16 + c];
                cr_expect_eq(back[r * 16 + c], want, "row %d col %d on %s", r, c,
                             tsr_dev_name(devs[d]));
            }
        int32_t got_cols[16];
        cr_expect_eq(tsr_tensor_get_2d(t, got_cols, 12, 8, 8, 64, 8), TSR_OK);
        cr_expect_arr_eq(got_cols, cols, sizeof(cols));
        cr_expect_eq(tsr_tensor_set_2d(t, cols, 12, 8, 9, 64, 8), TSR_ERANGE,
                     "row 9 is past the end");
        cr_expect_eq(tsr_tensor_set_2d(t, cols, 0, 80, 2, 64, 80), TSR_EINVAL, "overlapping rows");

        cr_expect_eq(tsr_tensor_memset(t, 0x11, 4, 8), TSR_OK);
        cr_expect_eq(tsr_tensor_get(t, back, 0, 16), TSR_OK);
        cr_expect_eq(back[0], src[0]);
        cr_expect_eq(back[1], 0x11111111);
        cr_expect_eq(back[2], 0x11111111);
        cr_expect_eq(back[3], 1000, "the 2-D write of row 0 stays");
        cr_expect_eq(tsr_buf_clear(buf, 0), TSR_OK);
        cr_expect_eq(tsr_tensor_get(t, back, 0, sizeof(back)), TSR_OK);
        for (int i = 0; i < 128; i++)
            cr_expect_eq(back[i], 0);
        tsr_buf_free(buf);
        tsr_ctx_free(ctx);
    }
}

Test(buffer, copies_between_any_two_devices)
{
    tsr_dev *devs[MAX_DEVS];
    const size_t n = tu_devices(devs, MAX_DEVS);
    for (size_t a = 0; a < n; a++)
        for (size_t b = 0; b < n; b++) {
            tsr_ctx *ca = tsr_ctx_new(4), *cb = tsr_ctx_new(4);
            tsr_tensor *s = tsr_new_tensor_2d(ca, TSR_TYPE_F16, 33, 5);
            tsr_tensor *d = tsr_new_tensor_2d(cb, TSR_TYPE_F16, 33, 5);
            tsr_tensor *wrong = tsr_new_tensor_2d(cb, TSR_TYPE_F32, 33, 5);
            tsr_buf *ba, *bb;
            cr_assert_eq(tsr_ctx_alloc_tensors(ca, tsr_dev_buft(devs[a]), &ba), TSR_OK);
            cr_assert_eq(tsr_ctx_alloc_tensors(cb, tsr_dev_buft(devs[b]), &bb), TSR_OK);
            tu_rng r = {a * 31 + b};
            tu_fill_uniform(s, &r, -2, 2);
            cr_expect_eq(tsr_tensor_copy(s, d), TSR_OK, "%s", tsr_last_error());
            float x[165], y[165];
            tu_read_f32(s, x);
            tu_read_f32(d, y);
            cr_expect_arr_eq(x, y, sizeof(x), "%s -> %s", tsr_dev_name(devs[a]),
                             tsr_dev_name(devs[b]));
            cr_expect_eq(tsr_tensor_copy(s, wrong), TSR_ESHAPE);
            tsr_buf_free(ba);
            tsr_buf_free(bb);
            tsr_ctx_free(ca);
            tsr_ctx_free(cb);
        }
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

/* ---- streams -----------------------------------------------------------------------------------
 */

/* y = 2x + 1 over n floats, on backend be, with x and y on its device. */
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
    cr_assert_eq(tsr_ctx_alloc_tensors(s.ctx, tsr_dev_buft(dev), &s.buf), TSR_OK);
    cr_assert_eq(tsr_graph_build(s.g, s.y), TSR_OK);
    return s;
}

static void small_graph_free(small_graph *s)
{
    tsr_graph_free(s->g);
    tsr_buf_free(s->buf);
    tsr_ctx_free(s->ctx);
}

Test(stream, graph_compute_async_returns_before_the_work_runs)
{
    tsr_dev *cpu = tsr_reg_dev_get(tsr_cpu_reg(), 0);
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(cpu, &be), TSR_OK);
    small_graph s = small_graph_new(cpu, 1000);
    float ones[1000], sentinel[1000], got[1000];
    for (int i = 0; i < 1000; i++) {
        ones[i] = 1.0f;
        sentinel[i] = -7.0f;
    }
    cr_assert_eq(tsr_tensor_set(s.x, ones, 0, sizeof(ones)), TSR_OK);
    cr_assert_eq(tsr_tensor_set(s.y, sentinel, 0, sizeof(sentinel)), TSR_OK);

    tsr_event *gate;
    cr_assert_eq(tsr_event_new(&gate_dev, &gate), TSR_OK);
    atomic_store(&gate_open, 0);
    cr_assert_eq(tsr_event_wait(be, gate), TSR_OK, "waiting on a foreign event is enqueued");
    cr_assert_eq(tsr_backend_graph_compute_async(be, s.g), TSR_OK);
    /* The gate is closed: the graph cannot have run, yet the call returned. */
    memcpy(got, s.y->data, sizeof(got));
    cr_expect_arr_eq(got, sentinel, sizeof(got), "work ran before the stream's wait ended");
    atomic_store(&gate_open, 1);
    cr_assert_eq(tsr_backend_synchronize(be), TSR_OK);
    cr_assert_eq(tsr_tensor_get(s.y, got, 0, sizeof(got)), TSR_OK);
    for (int i = 0; i < 1000; i++)
        cr_expect_float_eq(got[i], 3.0f, 0.0f);
    tsr_event_free(gate);
    small_graph_free(&s);
    tsr_backend_free(be);
}

Test(stream, async_set_get_and_2d_with_offsets)
{
    tsr_dev *cpu = tsr_reg_dev_get(tsr_cpu_reg(), 0);
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(cpu, &be), TSR_OK);
    small_graph s = small_graph_new(cpu, 64);
    float in[64], out[64] = {0}, col[8];
    for (int i = 0; i < 64; i++)
        in[i] = (float)i;
    cr_expect_eq(tsr_backend_set_async(be, s.x, in, 0, sizeof(in)), TSR_OK);
    cr_expect_eq(tsr_backend_graph_compute_async(be, s.g), TSR_OK);
    cr_expect_eq(tsr_backend_get_async(be, s.y, out + 8, 32, 64), TSR_OK);
    cr_expect_eq(tsr_backend_get_2d_async(be, s.y, col, 0, 4, 8, 32, 4), TSR_OK);
    cr_expect_eq(tsr_backend_set_async(be, s.x, in, 250, 8), TSR_ERANGE);
    cr_assert_eq(tsr_backend_synchronize(be), TSR_OK);
    for (int i = 0; i < 16; i++)
        cr_expect_float_eq(out[8 + i], 2.0f * (float)(8 + i) + 1.0f, 0.0f);
    for (int i = 0; i < 8; i++)
        cr_expect_float_eq(col[i], 2.0f * (float)(8 * i) + 1.0f, 0.0f);
    float two[4] = {100, 101, 102, 103};
    cr_expect_eq(tsr_backend_set_2d_async(be, s.x, two, 4, 4, 4, 64, 4), TSR_OK);
    cr_assert_eq(tsr_backend_synchronize(be), TSR_OK);
    cr_expect_float_eq(((float *)s.x->data)[1], 100.0f, 0.0f);
    cr_expect_float_eq(((float *)s.x->data)[49], 103.0f, 0.0f);
    small_graph_free(&s);
    tsr_backend_free(be);
}

Test(stream, run_time_errors_surface_at_synchronize_with_the_node_name)
{
    tsr_dev *cpu = tsr_reg_dev_get(tsr_cpu_reg(), 0);
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(cpu, &be), TSR_OK);
    tsr_ctx *ctx = tsr_ctx_new(8);
    tsr_tensor *table = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 4, 10);
    tsr_tensor *ids = tsr_new_tensor_1d(ctx, TSR_TYPE_I32, 2);
    tsr_tensor *rows = tsr_set_name(tsr_get_rows(ctx, table, ids), "token_rows");
    tsr_buf *buf;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(cpu), &buf), TSR_OK);
    const int32_t bad[2] = {3, 70000};
    tsr_tensor_set(ids, bad, 0, sizeof(bad));
    tsr_graph *g = tsr_graph_new(8);
    cr_assert_eq(tsr_graph_build(g, rows), TSR_OK);
    cr_expect_eq(tsr_backend_graph_compute_async(be, g), TSR_OK, "enqueueing succeeds");
    cr_expect_eq(tsr_backend_synchronize(be), TSR_ERANGE);
    cr_expect(strstr(tsr_last_error(), "token_rows") && strstr(tsr_last_error(), "70000"), "%s",
              tsr_last_error());
    cr_expect_eq(tsr_backend_synchronize(be), TSR_OK, "the error is reported once");
    tsr_graph_free(g);
    tsr_buf_free(buf);
    tsr_ctx_free(ctx);
    tsr_backend_free(be);
}

Test(stream, unplaced_nodes_are_refused_at_enqueue)
{
    tsr_dev *cpu = tsr_reg_dev_get(tsr_cpu_reg(), 0);
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(cpu, &be), TSR_OK);
    tsr_ctx *ctx = tsr_ctx_new(8);
    tsr_tensor *y = tsr_silu(ctx, tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 4));
    tsr_graph *g = tsr_graph_new(8);
    cr_assert_eq(tsr_graph_build(g, y), TSR_OK);
    cr_expect_eq(tsr_backend_graph_compute_async(be, g), TSR_EINVAL);
    cr_expect(strstr(tsr_last_error(), "not allocated") != NULL, "%s", tsr_last_error());
    tsr_graph_free(g);
    tsr_ctx_free(ctx);
    tsr_backend_free(be);
}

/* Two streams (on two devices when there are two): the second copies the
 * first's result after waiting on an event; the first stream is held at a
 * gate until everything is enqueued, so only the event orders them. */
Test(stream, events_order_work_between_two_streams)
{
    tsr_reg *cpu = tsr_cpu_reg();
    tsr_dev *d0 = tsr_reg_dev_get(cpu, 0);
    tsr_dev *d1 = tsr_reg_dev_get(cpu, tsr_reg_dev_count(cpu) > 1 ? 1 : 0);
    tsr_backend *b0, *b1;
    cr_assert_eq(tsr_backend_new(d0, &b0), TSR_OK);
    cr_assert_eq(tsr_backend_new(d1, &b1), TSR_OK);
    small_graph s = small_graph_new(d0, 4096);
    tsr_ctx *ctx = tsr_ctx_new(4);
    tsr_tensor *dst = tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 4096);
    tsr_buf *dbuf;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(d1), &dbuf), TSR_OK);
    float ones[4096], got[4096];
    for (int i = 0; i < 4096; i++)
        ones[i] = 1.0f;
    tsr_tensor_set(s.x, ones, 0, sizeof(ones));
    tsr_tensor_memset(s.y, 0, 0, tsr_nbytes(s.y));
    tsr_tensor_memset(dst, 0, 0, tsr_nbytes(dst));

    tsr_event *gate, *done;
    cr_assert_eq(tsr_event_new(&gate_dev, &gate), TSR_OK);
    cr_assert_eq(tsr_event_new(d0, &done), TSR_OK);
    atomic_store(&gate_open, 0);
    cr_assert_eq(tsr_event_wait(b0, gate), TSR_OK);
    cr_assert_eq(tsr_backend_graph_compute_async(b0, s.g), TSR_OK);
    cr_assert_eq(tsr_event_record(done, b0), TSR_OK);
    cr_assert_eq(tsr_event_wait(b1, done), TSR_OK);
    cr_assert_eq(tsr_backend_copy_async(b1, b1, s.y, dst), TSR_OK);
    atomic_store(&gate_open, 1);
    cr_assert_eq(tsr_backend_synchronize(b1), TSR_OK);
    cr_assert_eq(tsr_event_synchronize(done), TSR_OK);
    tsr_tensor_get(dst, got, 0, sizeof(got));
    for (int i = 0; i < 4096; i++)
        cr_expect_float_eq(got[i], 3.0f, 0.0f, "element %d copied before the graph ran", i);

    /* copy_async from another stream orders itself after that stream. */
    tsr_tensor_memset(dst, 0, 0, tsr_nbytes(dst));
    atomic_store(&gate_open, 0);
    cr_assert_eq(tsr_event_wait(b0, gate), TSR_OK);
    cr_assert_eq(tsr_backend_graph_compute_async(b0, s.g), TSR_OK);
    cr_assert_eq(tsr_backend_copy_async(b0, b1, s.y, dst), TSR_OK);
    atomic_store(&gate_open, 1);
    cr_assert_eq(tsr_backend_synchronize(b1), TSR_OK);
    tsr_tensor_get(dst, got, 0, sizeof(got));
    for (int i = 0; i < 4096; i++)
        cr_expect_float_eq(got[i], 3.0f, 0.0f, "copy_async ran ahead of its source stream");

    if (d1 != d0)
        cr_expect_eq(tsr_event_record(done, b1), TSR_EINVAL, "an event records on its own device");
    tsr_event_free(gate);
    tsr_event_free(done);
    tsr_buf_free(dbuf);
    tsr_ctx_free(ctx);
    small_graph_free(&s);
    tsr_backend_free(b0);
    tsr_backend_free(b1);
}

Test(stream, a_never_recorded_event_is_complete)
{
    tsr_dev *cpu = tsr_reg_dev_get(tsr_cpu_reg(), 0);
    tsr_event *e;
    tsr_backend *be;
    cr_assert_eq(tsr_event_new(cpu, &e), TSR_OK);
    cr_assert_eq(tsr_backend_new(cpu, &be), TSR_OK);
    cr_expect_eq(tsr_event_synchronize(e), TSR_OK);
    cr_expect_eq(tsr_event_wait(be, e), TSR_OK);
    cr_expect_eq(tsr_backend_synchronize(be), TSR_OK);
    tsr_event_free(e);
    tsr_backend_free(be);
}

Test(stream, many_small_jobs_overflowing_the_queue_complete_in_order)
{
    tsr_dev *cpu = tsr_reg_dev_get(tsr_cpu_reg(), 0);
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(cpu, &be), TSR_OK);
    small_graph s = small_graph_new(cpu, 16);
    static float vals[5000];
    for (int i = 0; i < 5000; i++) {
        vals[i] = (float)i;
        cr_assert_eq(tsr_backend_set_async(be, s.x, &vals[i], 0, sizeof(float)), TSR_OK);
        cr_assert_eq(tsr_backend_graph_compute_async(be, s.g), TSR_OK);
    }
    cr_assert_eq(tsr_backend_synchronize(be), TSR_OK);
    float y0;
    tsr_tensor_get(s.y, &y0, 0, sizeof(y0));
    cr_expect_float_eq(y0, 2.0f * 4999.0f + 1.0f, 0.0f, "the last job ran last");
    small_graph_free(&s);
    tsr_backend_free(be);
}
