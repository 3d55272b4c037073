/* tests/test_rpc_fuzz_live.c — a live server under random and mutated
 * frames: at least 100,000 of them (TSR_RPC_FUZZ_FRAMES changes the count)
 * sent to one tessera-rpc-server (built with ASan + UBSan in the sanitizer
 * pass), after which a well-behaved client must still be served and the
 * server must stop cleanly (no crash, no sanitizer report, no leak).
 *
 * Frames are small (most under 600 bytes) so the run takes seconds. Most
 * are valid frames of every command with a few bytes or fields changed
 * (handles, sizes, offsets, counts, op codes set to edge values); some are
 * random commands with random payloads; a few break the framing (bad magic
 * or version), which ends the connection, and the test reconnects. The
 * header's length always matches the bytes sent, so each connection's
 * framing holds until a breaking frame. HELLO and AUTH are left out of the
 * mix (the server rightly ends a session that repeats them; the handshake
 * has its own tests). A thread drains replies; before a connection ends, a
 * marked PING must come back, which proves every frame before it was
 * processed, and only those are counted.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"
#include "rpc_testutil.h"
#include "tessera/rpc.h"
#include "testutil.h"

typedef struct {
    const uint8_t *p;
    size_t n;
} frame_ref;

/* Splits a sequence of frames into their start and length. */
static size_t split(const rpc_wr *w, frame_ref *out, size_t max)
{
    size_t n = 0;
    for (size_t off = 0; off + RPC_HDR_SIZE <= w->len && n < max;) {
        rpc_hdr h;
        tsr__rpc_hdr_decode(w->p + off, &h);
        const size_t len = RPC_HDR_SIZE + (size_t)h.length;
        out[n++] = (frame_ref){w->p + off, len};
        off += len;
    }
    return n;
}

static const uint64_t interesting[] = {0,
                                       1,
                                       7,
                                       8,
                                       63,
                                       64,
                                       4095,
                                       4096,
                                       4097,
                                       1ull << 31,
                                       1ull << 32,
                                       1ull << 40,
                                       1ull << 62,
                                       1ull << 63,
                                       UINT64_MAX,
                                       UINT64_MAX - 7,
                                       RT_H_BUF_A,
                                       RT_H_BUF_B,
                                       RT_H_STREAM,
                                       RT_H_EVENT,
                                       0x0100000200000000ull,
                                       0x0200000100000000ull};

static void put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* Appends a mutated copy of f to w. */
static void mutate(rpc_wr *w, frame_ref f, tu_rng *r)
{
    uint8_t buf[8192];
    size_t n = TSR_MIN(f.n, sizeof(buf) - 64);
    memcpy(buf, f.p, n);
    uint8_t *pl = buf + RPC_HDR_SIZE;
    size_t plen = n - RPC_HDR_SIZE;
    const int k = 1 + (int)(tu_next(r) % 4);
    for (int i = 0; i < k; i++) {
        const unsigned what = (unsigned)(tu_next(r) % 10);
        if (what <= 2 && plen > 0) { /* a random byte */
            pl[tu_next(r) % plen] = (uint8_t)tu_next(r);
        } else if (what <= 4 && plen >= 8) { /* an aligned field to an edge value */
            const size_t at = (size_t)(tu_next(r) % (plen / 8)) * 8;
            put_u64(pl + at, interesting[tu_next(r) % TSR_ARRAY_SIZE(interesting)]);
        } else if (what == 5 && plen >= 4) { /* a 32-bit field (counts, ops, types, indices) */
            const size_t at = (size_t)(tu_next(r) % (plen / 4)) * 4;
            const uint32_t v[] = {0, 1, 2, 31, 64, 0x7fffffff, 0xffffffff, 1u << 20, 1000};
            memcpy(pl + at, &v[tu_next(r) % TSR_ARRAY_SIZE(v)], 4);
        } else if (what == 6) { /* the command */
            const uint16_t cmds[] = {0x03, 0x10, 0x11, 0x12, 0x13, 0x14, 0x20, 0x21,  0x22, 0x23,
                                     0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x40, 0x41,  0x42, 0x43,
                                     0x44, 0x50, 0x51, 0x52, 0x53, 0x54, 0x70, 0xffff};
            const uint16_t c = cmds[tu_next(r) % TSR_ARRAY_SIZE(cmds)];
            memcpy(buf + 6, &c, 2);
        } else if (what == 7) { /* reply wanted or not */
            buf[16] ^= 1;
        } else if (what == 8 && plen > 0) { /* shorter */
            plen = (size_t)(tu_next(r) % plen);
        } else if (plen + 16 < sizeof(buf) - RPC_HDR_SIZE) { /* longer */
            for (int j = 0; j < 16; j++)
                pl[plen + (size_t)j] = (uint8_t)tu_next(r);
            plen += 1 + tu_next(r) % 16;
        }
    }
    const uint64_t len = plen;
    memcpy(buf + 24, &len, 8);
    rpc_wr_bytes(w, buf, RPC_HDR_SIZE + plen);
}

static void random_frame(rpc_wr *w, tu_rng *r)
{
    uint8_t p[256];
    const size_t n = (size_t)(tu_next(r) % sizeof(p));
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)tu_next(r);
    uint16_t cmd = tu_next(r) % 3 ? (uint16_t)(tu_next(r) % 0x60) : (uint16_t)tu_next(r);
    if (cmd == RPC_CMD_HELLO || cmd == RPC_CMD_AUTH)
        cmd = RPC_CMD_PING;
    rt_frame(w, cmd, (uint32_t)(tu_next(r) % 2), tu_next(r), p, n);
}

static void breaking_frame(rpc_wr *w, tu_rng *r)
{
    rt_frame(w, RPC_CMD_PING, 0, 1, NULL, 0);
    uint8_t *h = w->p + w->len - RPC_HDR_SIZE;
    if (tu_next(r) % 2)
        h[0] ^= 0x5a; /* magic */
    else
        h[4] = 9; /* version */
}

#define MARK 0x4d41524b4d41524bull

typedef struct {
    rt_raw c;
    pthread_t th;
    atomic_int marked;
    atomic_long replies;
    bool open;
} wire;

/* Reads replies until the connection ends; notes the marked PING. */
static void *drain(void *arg)
{
    wire *l = arg;
    for (;;) {
        rpc_hdr h;
        size_t len;
        if (rt_raw_recv(&l->c, &h, NULL, 0, &len, 60000) != TSR_OK)
            break;
        atomic_fetch_add(&l->replies, 1);
        if (h.id == MARK)
            atomic_store(&l->marked, 1);
    }
    return NULL;
}

static void wire_open(wire *l, const char *url, const rpc_wr *setup)
{
    cr_assert_eq(rt_raw_connect(&l->c, url, true), TSR_OK, "connect: %s", tsr_last_error());
    atomic_store(&l->marked, 0);
    cr_assert_eq(rt_raw_write(&l->c, setup->p, setup->len), TSR_OK);
    pthread_create(&l->th, NULL, drain, l);
    l->open = true;
}

/* Waits (up to 60 s, while the server lives) for the marked PING sent last. */
static bool wire_marked(wire *l, rt_server *s)
{
    for (int i = 0; i < 6000 && !atomic_load(&l->marked) && rt_server_alive(s); i++) {
        const struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return atomic_load(&l->marked);
}

static void wire_close(wire *l)
{
    if (!l->open)
        return;
    l->c.io->shutdown(l->c.io);
    pthread_join(l->th, NULL);
    rt_raw_close(&l->c);
    l->open = false;
}

Test(rpc_fuzz_live, a_server_survives_100k_random_and_mutated_frames_and_still_serves,
     .timeout = 900)
{
    const long want = tsr__env_long("TSR_RPC_FUZZ_FRAMES", 120000);
    /* --no-peers: a mutated MESH_JOIN must not make the server dial out. */
    const char *const args[] = {"--device", "cpu:0", "--max-memory", "16M", "--no-peers", NULL};
    rt_server s;
    cr_assert(rt_server_start(&s, NULL, args));
    rpc_wr setup = {0}, base = {0};
    rt_setup_frames(&setup, false);
    for (int v = 0; v < 8; v++)
        rt_exercise_frames(&base, v);
    static frame_ref frames[1024];
    const size_t nf = split(&base, frames, 1024);
    cr_assert_gt(nf, 100);
    tu_rng r = {20240601};
    printf("seed %llu, %zu base frames, %ld frames to send\n", (unsigned long long)r.s, nf, want);
    wire l = {0};
    wire_open(&l, s.url, &setup);
    long processed = 0, pending = 0, connections = 1, breaks = 0, replies = 0;
    rpc_wr batch = {0};
    const uint64_t t0 = tsr__time_ns();
    while (processed < want) {
        batch.len = 0;
        for (int i = 0; i < 64; i++, pending++) {
            const unsigned pick = (unsigned)(tu_next(&r) % 1000);
            if (pick < 600) {
                mutate(&batch, frames[tu_next(&r) % nf], &r);
            } else if (pick < 900) {
                random_frame(&batch, &r);
            } else {
                const frame_ref f = frames[tu_next(&r) % nf];
                rpc_wr_bytes(&batch, f.p, f.n);
            }
        }
        /* About one batch in 40 ends its connection on purpose; the last
         * batch ends it too. */
        const bool last = processed + pending >= want;
        const bool brk = last || tu_next(&r) % 40 == 0;
        if (brk) {
            rt_frame(&batch, RPC_CMD_PING, RPC_F_REPLY_WANTED, MARK, "mark", 4);
            if (!last)
                breaking_frame(&batch, &r);
        }
        cr_assert(!batch.bad);
        cr_assert_eq(rt_raw_write(&l.c, batch.p, batch.len), TSR_OK,
                     "the server closed a connection after %ld frames of it", pending);
        if (brk) {
            cr_assert(wire_marked(&l, &s),
                      "no answer to the marked PING after %ld frames (%ld before); server %s",
                      pending, processed, rt_server_alive(&s) ? "alive" : "dead");
            processed += pending;
            pending = 0;
            replies += atomic_load(&l.replies);
            wire_close(&l);
            cr_assert(rt_server_alive(&s), "the server died after %ld frames", processed);
            if (!last) {
                breaks++;
                atomic_store(&l.replies, 0);
                wire_open(&l, s.url, &setup);
                connections++;
            }
        }
    }
    const double secs = (double)(tsr__time_ns() - t0) * 1e-9;
    printf("%ld frames processed over %ld connections (%ld ended by a broken frame), %ld replies, "
           "in %.1f s\n",
           processed, connections, breaks, replies, secs);
    cr_assert(rt_server_alive(&s), "the server died");
    /* A well-behaved client is served as if nothing happened. */
    size_t first, n;
    cr_assert_eq(tsr_rpc_add_server(s.url, NULL, &first, &n), TSR_OK, "%s", tsr_last_error());
    tsr_dev *dev = tsr_reg_dev_get(tsr_rpc_reg(), first);
    tsr_ctx *ctx = tsr_ctx_new(8);
    tsr_tensor *x = tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 256);
    tsr_tensor *y = tsr_scale_bias(ctx, x, 3.0f, -1.0f);
    tsr_buf *buf;
    cr_assert_eq(tsr_ctx_alloc_tensors(ctx, tsr_dev_buft(dev), &buf), TSR_OK, "%s",
                 tsr_last_error());
    float in[256], out[256];
    for (int i = 0; i < 256; i++)
        in[i] = (float)i;
    cr_assert_eq(tsr_tensor_set(x, in, 0, sizeof(in)), TSR_OK, "%s", tsr_last_error());
    tsr_graph *g = tsr_graph_new(8);
    cr_assert_eq(tsr_graph_build(g, y), TSR_OK);
    tsr_backend *be;
    cr_assert_eq(tsr_backend_new(dev, &be), TSR_OK, "%s", tsr_last_error());
    cr_assert_eq(tsr_backend_graph_compute(be, g), TSR_OK, "%s", tsr_last_error());
    cr_assert_eq(tsr_tensor_get(y, out, 0, sizeof(out)), TSR_OK, "%s", tsr_last_error());
    for (int i = 0; i < 256; i++)
        cr_expect_float_eq(out[i], 3.0f * (float)i - 1.0f, 0.0f);
    tsr_backend_free(be);
    tsr_graph_free(g);
    tsr_buf_free(buf);
    tsr_ctx_free(ctx);
    free(batch.p);
    free(setup.p);
    free(base.p);
    cr_expect_eq(rt_server_stop(&s), 0, "the server stops cleanly (no sanitizer or leak report)");
}
