/* tests/test_rpc_server.c — the server as a network service: every kind of
 * bad request gets an error reply with a status and a reason and leaves the
 * connection usable, broken framing ends only that connection, clients are
 * isolated from each other, a disconnect releases what the client owned,
 * and the token and TLS options do what they say.
 *
 * A raw client (rpc_testutil.h) writes frames byte by byte, so requests the
 * library's own client would never send can be sent.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "rpc_testutil.h"
#include "tessera/rpc.h"
#include "testutil.h"

bool rt_make_cert(const char *cn, const char *cert_path, const char *key_path);

static const char *const cpu0_args[] = {"--device", "cpu:0", NULL};

/* A raw client with the setup objects (RT_H_*) created. */
static void raw_setup(rt_raw *c, const char *url)
{
    cr_assert_eq(rt_raw_connect(c, url, true), TSR_OK, "connect %s: %s", url, tsr_last_error());
    rpc_wr w = {0};
    rt_setup_frames(&w, false);
    cr_assert_eq(rt_raw_write(c, w.p, w.len), TSR_OK);
    free(w.p);
    for (int i = 0; i < 4; i++) {
        rpc_hdr h;
        uint8_t buf[64];
        size_t len;
        cr_assert_eq(rt_raw_recv(c, &h, buf, sizeof(buf), &len, 10000), TSR_OK);
        cr_assert_eq(h.status, TSR_OK, "setup reply %d: status %d", i, h.status);
    }
}

/* Sends one request wanting a reply; expects `status` and a reason holding `needle`. */
static void expect_refused(rt_raw *c, uint16_t cmd, const void *p, size_t len, tsr_status status,
                           const char *needle, const char *what)
{
    rpc_hdr h;
    uint8_t out[64];
    size_t got;
    char reason[RPC_REASON_MAX + 1] = "";
    cr_assert_eq(rt_raw_call(c, cmd, p, len, &h, out, sizeof(out), &got, reason, sizeof(reason)),
                 TSR_OK, "%s: no reply (%s)", what, tsr_last_error());
    cr_expect_eq(h.status, status, "%s: status %d (%s), want %s; reason: %s", what, h.status,
                 tsr_status_name((tsr_status)h.status), tsr_status_name(status), reason);
    cr_expect(strstr(reason, needle) != NULL, "%s: reason '%s' lacks '%s'", what, reason, needle);
}

static void expect_ping(rt_raw *c)
{
    rpc_hdr h;
    uint8_t out[16];
    size_t got;
    cr_assert_eq(
        rt_raw_call(c, RPC_CMD_PING, "hello, server", 13, &h, out, sizeof(out), &got, NULL, 0),
        TSR_OK, "the connection still works");
    cr_expect_eq(h.status, TSR_OK);
    cr_expect(got == 13 && memcmp(out, "hello, server", 13) == 0);
}

static size_t u64s(uint8_t *out, const uint64_t *v, int n)
{
    rpc_wr w = {.p = out, .cap = (size_t)n * 8};
    for (int i = 0; i < n; i++)
        rpc_wr_u64(&w, v[i]);
    return w.len;
}

/* A GRAPH_COMPUTE payload on the setup stream. */
static void graph_begin(rpc_wr *w, uint32_t n)
{
    w->len = 0;
    rpc_wr_u64(w, RT_H_STREAM);
    rpc_wr_u64(w, 1);
    rpc_wr_u32(w, n);
    rpc_wr_u32(w, 0);
}

static const int64_t V64[4] = {64, 1, 1, 1};
#define NODE (RPC_REC_NODE | TSR_TENSOR_FLAG_COMPUTE)

Test(rpc_server, every_bad_request_gets_a_status_and_a_reason_and_the_connection_goes_on,
     .timeout = 60)
{
    rt_server s;
    cr_assert(rt_server_start(&s, NULL, cpu0_args));
    rt_raw c;
    raw_setup(&c, s.url);
    uint8_t p[256];
    size_t n;

    expect_refused(&c, 0x7777, NULL, 0, TSR_EUNSUPPORTED, "unknown command", "unknown command");
    n = u64s(p, (const uint64_t[]){0, RT_H_BUF_A, 4000, 200}, 4);
    memset(p + n, 1, 200);
    expect_refused(&c, RPC_CMD_TENSOR_SET, p, n + 200, TSR_ERANGE, "outside", "set past the end");
    n = u64s(p, (const uint64_t[]){0, RT_H_BUF_A, 0, 100}, 4);
    expect_refused(&c, RPC_CMD_TENSOR_SET, p, n + 50, TSR_EPROTO, "declared", "short data");
    n = u64s(p, (const uint64_t[]){0, RT_H_STREAM, 0, 16}, 4);
    expect_refused(&c, RPC_CMD_TENSOR_GET, p, n, TSR_EINVAL, "not a buffer", "a stream as buffer");
    n = u64s(p, (const uint64_t[]){0, 0x0100123400000000ull, 0, 16}, 4);
    expect_refused(&c, RPC_CMD_TENSOR_GET, p, n, TSR_EINVAL, "not a buffer", "a made-up handle");
    n = u64s(p, (const uint64_t[]){0, RT_H_BUF_A, 0, 8, 1ull << 62, 1ull << 62}, 6);
    expect_refused(&c, RPC_CMD_TENSOR_GET_2D, p, n, TSR_ERANGE, "overflow", "2-D overflow");
    n = u64s(p, (const uint64_t[]){0, RT_H_BUF_A, 0, 64, 4, 16}, 6);
    expect_refused(&c, RPC_CMD_TENSOR_GET_2D, p, n, TSR_EINVAL, "overlap", "overlapping rows");
    n = u64s(p, (const uint64_t[]){RT_H_BUF_A}, 1);
    expect_refused(&c, RPC_CMD_SYNCHRONIZE, p, n, TSR_EINVAL, "not a stream", "sync a buffer");
    n = u64s(p, (const uint64_t[]){9ull, 1ull << 20}, 2);
    expect_refused(&c, RPC_CMD_BUF_ALLOC, p, n, TSR_EINVAL, "device 9", "no such device");
    n = u64s(p, (const uint64_t[]){0, 1ull << 62}, 2);
    expect_refused(&c, RPC_CMD_BUF_ALLOC, p, n, TSR_ENOMEM, "bytes", "a huge allocation");
    memset(p, 0, 100);
    expect_refused(&c, RPC_CMD_DEV_MEMORY, p, 100, TSR_EPROTO, "at most", "payload too long");
    n = u64s(p, (const uint64_t[]){RT_H_STREAM, 77}, 2);
    expect_refused(&c, RPC_CMD_GRAPH_RECOMPUTE, p, n, TSR_EINVAL, "not cached", "nothing cached");

    /* Graphs. */
    rpc_wr g = {0};
    graph_begin(&g, 1);
    rt_rec(&g, TSR_TYPE_F32, TSR_OP_SILU, V64, (const int32_t[]){3}, 1, -1, NODE, RT_H_BUF_A, 0,
           NULL, "fwd");
    expect_refused(&c, RPC_CMD_GRAPH_COMPUTE, g.p, g.len, TSR_EINVAL, "earlier records",
                   "a forward reference");
    graph_begin(&g, 3);
    rt_rec(&g, TSR_TYPE_F32, TSR_OP_NONE, (const int64_t[]){16, 4, 1, 1}, NULL, 0, -1, 0,
           RT_H_BUF_A, 0, NULL, "w");
    rt_rec(&g, TSR_TYPE_F32, TSR_OP_NONE, (const int64_t[]){8, 2, 1, 1}, NULL, 0, -1, 0, RT_H_BUF_A,
           512, NULL, "x");
    rt_rec(&g, TSR_TYPE_F32, TSR_OP_MUL_MAT, (const int64_t[]){4, 2, 1, 1}, (const int32_t[]){0, 1},
           2, -1, NODE, RT_H_BUF_A, 1024, NULL, "y");
    expect_refused(&c, RPC_CMD_GRAPH_COMPUTE, g.p, g.len, TSR_ESHAPE, "ne[0]",
                   "mul_mat with mismatched K");
    graph_begin(&g, 2);
    rt_rec(&g, TSR_TYPE_F32, TSR_OP_NONE, V64, NULL, 0, -1, 0, RT_H_BUF_A, 0, NULL, "x");
    rt_rec(&g, TSR_TYPE_F32, TSR_OP_SILU, (const int64_t[]){32, 1, 1, 1}, (const int32_t[]){0}, 1,
           -1, NODE, RT_H_BUF_A, 512, NULL, "y");
    expect_refused(&c, RPC_CMD_GRAPH_COMPUTE, g.p, g.len, TSR_EINVAL, "declared",
                   "a declared shape the op does not give");
    int32_t op[TSR_MAX_OP_PARAMS] = {0};
    op[0] = 0;
    graph_begin(&g, 2);
    rt_rec(&g, TSR_TYPE_F32, TSR_OP_NONE, V64, NULL, 0, -1, 0, RT_H_BUF_A, 0, NULL, "x");
    rt_rec(&g, TSR_TYPE_I32, TSR_OP_TOP_K, (const int64_t[]){0, 1, 1, 1}, (const int32_t[]){0}, 1,
           -1, NODE, RT_H_BUF_A, 512, op, "k0");
    expect_refused(&c, RPC_CMD_GRAPH_COMPUTE, g.p, g.len, TSR_EINVAL, "k = 0", "top_k with k 0");
    graph_begin(&g, 2);
    rt_rec(&g, TSR_TYPE_F32, TSR_OP_NONE, V64, NULL, 0, -1, 0, RT_H_BUF_A, 0, NULL, "x");
    rt_rec(&g, TSR_TYPE_F32, TSR_OP_SILU, V64, (const int32_t[]){0}, 1, -1, NODE, RT_H_BUF_A,
           RT_BUF_SIZE - 128, NULL, "y");
    expect_refused(&c, RPC_CMD_GRAPH_COMPUTE, g.p, g.len, TSR_ERANGE, "outside",
                   "a node placed past the buffer end");
    graph_begin(&g, 1000);
    rt_rec(&g, TSR_TYPE_F32, TSR_OP_NONE, V64, NULL, 0, -1, 0, RT_H_BUF_A, 0, NULL, "x");
    expect_refused(&c, RPC_CMD_GRAPH_COMPUTE, g.p, g.len, TSR_EPROTO, "cannot fit",
                   "a record count larger than the message");
    /* Strides whose extent overflows 64 bits. */
    graph_begin(&g, 1);
    rpc_rec big = {.type = TSR_TYPE_F32,
                   .op = TSR_OP_NONE,
                   .ne = {1 << 20, 1 << 19, 1, 1},
                   .nb = {4, 1ull << 47, 8, 8},
                   .view_src = -1,
                   .buffer = RT_H_BUF_A};
    for (int k = 0; k < TSR_MAX_SRC; k++)
        big.src[k] = -1;
    tsr__rpc_rec_encode(&g, &big);
    expect_refused(&c, RPC_CMD_GRAPH_COMPUTE, g.p, g.len, TSR_ERANGE, "out of range",
                   "overflowing strides");
    /* A view reaching past the tensor it views. */
    graph_begin(&g, 2);
    rt_rec(&g, TSR_TYPE_F32, TSR_OP_NONE, V64, NULL, 0, -1, 0, RT_H_BUF_A, 0, NULL, "x");
    rpc_rec v = {.type = TSR_TYPE_F32,
                 .op = TSR_OP_VIEW,
                 .ne = {64, 1, 1, 1},
                 .nb = {4, 256, 256, 256},
                 .view_src = 0,
                 .view_offs = 16,
                 .flags = RPC_REC_NODE};
    v.src[0] = 0;
    for (int k = 1; k < TSR_MAX_SRC; k++)
        v.src[k] = -1;
    tsr__rpc_rec_encode(&g, &v);
    expect_refused(&c, RPC_CMD_GRAPH_COMPUTE, g.p, g.len, TSR_ERANGE, "exceed", "a view too far");
    free(g.p);

    /* Header fields. */
    rpc_wr w = {0};
    rt_frame(&w, RPC_CMD_PING, RPC_F_REPLY_WANTED | 0x100, 900, "x", 1);
    cr_assert_eq(rt_raw_write(&c, w.p, w.len), TSR_OK);
    rpc_hdr h;
    uint8_t out[600];
    size_t got;
    cr_assert_eq(rt_raw_recv(&c, &h, out, sizeof(out), &got, 10000), TSR_OK);
    cr_expect_eq(h.status, TSR_EPROTO, "unknown flag bits are refused");
    cr_expect_eq(h.id, 900);

    /* A pipelined failure comes back at the stream's next synchronize. */
    n = u64s(p, (const uint64_t[]){RT_H_STREAM, RT_H_BUF_A, RT_BUF_SIZE, 8}, 4);
    memset(p + n, 0, 8);
    cr_assert_eq(rt_raw_send(&c, RPC_CMD_TENSOR_SET, 0, p, n + 8, NULL), TSR_OK);
    n = u64s(p, (const uint64_t[]){RT_H_STREAM}, 1);
    expect_refused(&c, RPC_CMD_SYNCHRONIZE, p, n, TSR_ERANGE, "TENSOR_SET",
                   "the deferred error of a pipelined write");
    n = u64s(p, (const uint64_t[]){RT_H_STREAM}, 1);
    expect_refused(&c, RPC_CMD_SYNCHRONIZE, p, n, TSR_OK, "", "reported once");
    expect_ping(&c);
    free(w.p);
    rt_raw_close(&c);
    cr_expect(rt_server_alive(&s));
    cr_expect_eq(rt_server_stop(&s), 0);
}

/* Version 2 (server to server) commands are checked like the rest: refused
 * on a version-1 connection, every field validated, the connection goes on. */
Test(rpc_server, version_2_commands_are_checked_like_the_rest, .timeout = 60)
{
    rt_server s;
    cr_assert(rt_server_start(&s, NULL, cpu0_args));
    rt_raw c1, c;
    cr_assert_eq(rt_raw_connect(&c1, s.url, true), TSR_OK);
    uint8_t p[512] = {0};
    expect_refused(&c1, RPC_CMD_MESH_JOIN, p, 40, TSR_EUNSUPPORTED, "needs protocol version 2",
                   "MESH_JOIN on a version-1 connection");
    expect_ping(&c1);
    rt_raw_close(&c1);
    cr_assert_eq(rt_raw_connect_v2(&c, s.url), TSR_OK, "%s", tsr_last_error());
    /* MESH_JOIN: ticket[32], rank, n, n x (u16 length, endpoint). */
    struct {
        uint32_t rank, n;
        const char *urls[2];
        size_t extra;
        const char *needle, *what;
    } joins[] = {{0, 1, {"tcp://127.0.0.1:1"}, 0, "of 1 servers", "a mesh of one"},
                 {2, 2, {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2"}, 0, "rank 2 of 2", "rank >= n"},
                 {0, 2, {"", "tcp://127.0.0.1:2"}, 0, "endpoint 0", "an empty endpoint"},
                 {0, 2, {"ftp://x:1", "tcp://127.0.0.1:2"}, 0, "endpoint 0", "an unknown scheme"},
                 {0,
                  2,
                  {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2"},
                  3,
                  "after the last endpoint",
                  "trailing bytes"}};
    for (size_t k = 0; k < sizeof(joins) / sizeof(joins[0]); k++) {
        rpc_wr w = {.p = p, .cap = sizeof(p)};
        rpc_wr_bytes(&w, (const uint8_t[32]){1, 2, 3}, 32);
        rpc_wr_u32(&w, joins[k].rank);
        rpc_wr_u32(&w, joins[k].n);
        for (uint32_t i = 0; i < joins[k].n; i++) {
            rpc_wr_u16(&w, (uint16_t)strlen(joins[k].urls[i]));
            rpc_wr_bytes(&w, joins[k].urls[i], strlen(joins[k].urls[i]));
        }
        rpc_wr_bytes(&w, "\0\0\0", joins[k].extra);
        expect_refused(&c, RPC_CMD_MESH_JOIN, p, w.len, TSR_EINVAL, joins[k].needle, joins[k].what);
    }
    /* PEER_SEND / PEER_RECV without a mesh, and a PEER_DATA on a session. */
    memset(p, 0, 48);
    expect_refused(&c, RPC_CMD_PEER_SEND, p, 48, TSR_EINVAL, "no mesh", "PEER_SEND, no mesh");
    expect_refused(&c, RPC_CMD_PEER_RECV, p, 47, TSR_EINVAL, "48 bytes", "PEER_RECV, short");
    expect_refused(&c, RPC_CMD_PEER_DATA, NULL, 0, TSR_EPROTO, "outside a peer link",
                   "PEER_DATA on a session");
    /* ALLREDUCE: tag, type, n_local, n, n_group, 0, ranks, (stream, buffer, offset) each. */
    struct {
        uint32_t type, n_local, n_group;
        tsr_status status;
        const char *needle, *what;
    } ars[] = {{TSR_TYPE_Q8_0, 1, 1, TSR_ETYPE, "F32, F16 or BF16", "a block type"},
               {TSR_TYPE_F32, 0, 1, TSR_EINVAL, "0 local tensors", "no tensors"},
               {TSR_TYPE_F32, 1, 2, TSR_EINVAL, "no MESH_JOIN yet", "a group without a mesh"},
               {TSR_TYPE_F32, 1, 1, TSR_EINVAL, "not a stream", "a handle of no stream"}};
    for (size_t k = 0; k < sizeof(ars) / sizeof(ars[0]); k++) {
        rpc_wr w = {.p = p, .cap = sizeof(p)};
        rpc_wr_u64(&w, 256);
        rpc_wr_u32(&w, ars[k].type);
        rpc_wr_u32(&w, ars[k].n_local);
        rpc_wr_u64(&w, 64);
        rpc_wr_u32(&w, ars[k].n_group);
        rpc_wr_u32(&w, 0);
        for (uint32_t i = 0; i < ars[k].n_group; i++)
            rpc_wr_u32(&w, i);
        for (uint32_t i = 0; i < ars[k].n_local; i++) {
            rpc_wr_u64(&w, 0x0200000100000777ull);
            rpc_wr_u64(&w, 0x0100000100000778ull);
            rpc_wr_u64(&w, 0);
        }
        expect_refused(&c, RPC_CMD_ALLREDUCE, p, w.len, ars[k].status, ars[k].needle, ars[k].what);
    }
    expect_ping(&c);
    rt_raw_close(&c);
    cr_expect_eq(rt_server_stop(&s), 0);
}

Test(rpc_server, broken_framing_ends_only_that_connection, .timeout = 60)
{
    rt_server s;
    cr_assert(rt_server_start(&s, NULL, cpu0_args));
    rt_raw a, b;
    raw_setup(&a, s.url);
    raw_setup(&b, s.url);
    /* Bad magic: the server cannot trust the length, so it closes. */
    uint8_t junk[RPC_HDR_SIZE];
    memset(junk, 0xab, sizeof(junk));
    cr_assert_eq(rt_raw_write(&a, junk, sizeof(junk)), TSR_OK);
    rpc_hdr h;
    uint8_t out[16];
    size_t got;
    cr_expect_eq(rt_raw_recv(&a, &h, out, sizeof(out), &got, 10000), TSR_ECLOSED);
    /* A header claiming a 1 GiB graph: refused (larger than GRAPH_COMPUTE
     * takes), nothing allocated, and more than is worth skipping: closed. */
    rpc_wr w = {0};
    rt_frame(&w, RPC_CMD_GRAPH_COMPUTE, RPC_F_REPLY_WANTED, 5, NULL, 0);
    rpc_hdr fake = {.magic = RPC_MAGIC,
                    .version = 1,
                    .cmd = RPC_CMD_GRAPH_COMPUTE,
                    .id = 5,
                    .flags = RPC_F_REPLY_WANTED,
                    .length = 1ull << 30};
    tsr__rpc_hdr_encode(&fake, w.p);
    cr_assert_eq(rt_raw_write(&b, w.p, w.len), TSR_OK);
    uint8_t reason[600];
    cr_assert_eq(rt_raw_recv(&b, &h, reason, sizeof(reason), &got, 10000), TSR_OK);
    cr_expect_eq(h.status, TSR_EPROTO);
    cr_expect_eq(rt_raw_recv(&b, &h, out, sizeof(out), &got, 10000), TSR_ECLOSED);
    free(w.p);
    rt_raw_close(&a);
    rt_raw_close(&b);
    /* Everyone else is served as before. */
    rt_raw c;
    raw_setup(&c, s.url);
    expect_ping(&c);
    /* Versions: a client that only speaks 2..3 is told why. */
    rt_raw d;
    cr_assert_eq(rt_raw_connect(&d, s.url, false), TSR_OK);
    uint8_t hello[48] = {0};
    rpc_wr hw = {.p = hello, .cap = sizeof(hello)};
    /* Versions newer than any this server speaks. */
    rpc_wr_u16(&hw, RPC_VERSION_MAX + 1);
    rpc_wr_u16(&hw, RPC_VERSION_MAX + 2);
    expect_refused(&d, RPC_CMD_HELLO, hello, sizeof(hello), TSR_EPROTO,
                   "no common protocol version", "versions newer than this server's");
    rt_raw_close(&c);
    rt_raw_close(&d);
    cr_expect_eq(rt_server_stop(&s), 0);
}

Test(rpc_server, a_client_can_never_name_another_clients_objects, .timeout = 60)
{
    rt_server s;
    cr_assert(rt_server_start(&s, NULL, cpu0_args));
    rt_raw a, b;
    raw_setup(&a, s.url);
    uint8_t p[128], out[64];
    size_t n = u64s(p, (const uint64_t[]){0, RT_H_BUF_A, 0, 16}, 4);
    memcpy(p + n, "AAAAAAAAAAAAAAAA", 16);
    rpc_hdr h;
    size_t got;
    cr_assert_eq(
        rt_raw_call(&a, RPC_CMD_TENSOR_SET, p, n + 16, &h, out, sizeof(out), &got, NULL, 0),
        TSR_OK);
    cr_assert_eq(h.status, TSR_OK);
    /* B, before it owns anything, names A's buffer, stream and event. */
    cr_assert_eq(rt_raw_connect(&b, s.url, true), TSR_OK);
    n = u64s(p, (const uint64_t[]){0, RT_H_BUF_A, 0, 16}, 4);
    expect_refused(&b, RPC_CMD_TENSOR_GET, p, n, TSR_EINVAL, "not a buffer of this connection",
                   "B reads A's buffer");
    memcpy(p + n, "BBBBBBBBBBBBBBBB", 16);
    expect_refused(&b, RPC_CMD_TENSOR_SET, p, n + 16, TSR_EINVAL, "not a buffer",
                   "B writes A's buffer");
    n = u64s(p, (const uint64_t[]){RT_H_BUF_A}, 1);
    expect_refused(&b, RPC_CMD_BUF_FREE, p, n, TSR_EINVAL, "not a buffer", "B frees A's buffer");
    n = u64s(p, (const uint64_t[]){RT_H_STREAM}, 1);
    expect_refused(&b, RPC_CMD_SYNCHRONIZE, p, n, TSR_EINVAL, "not a stream", "B syncs A's stream");
    n = u64s(p, (const uint64_t[]){RT_H_EVENT}, 1);
    expect_refused(&b, RPC_CMD_EVENT_SYNC, p, n, TSR_EINVAL, "not an event", "B waits A's event");
    /* B's own first buffer has the same handle value, and is B's memory. */
    n = u64s(p, (const uint64_t[]){0, RT_BUF_SIZE}, 2);
    cr_assert_eq(rt_raw_call(&b, RPC_CMD_BUF_ALLOC, p, n, &h, out, sizeof(out), &got, NULL, 0),
                 TSR_OK);
    cr_assert_eq(h.status, TSR_OK);
    rpc_rd r = rpc_rd_init(out, got);
    cr_expect_eq(rpc_rd_u64(&r), RT_H_BUF_A, "handles are per connection");
    n = u64s(p, (const uint64_t[]){0, RT_H_BUF_A, 0, 16}, 4);
    memcpy(p + n, "BBBBBBBBBBBBBBBB", 16);
    cr_assert_eq(
        rt_raw_call(&b, RPC_CMD_TENSOR_SET, p, n + 16, &h, out, sizeof(out), &got, NULL, 0),
        TSR_OK);
    /* A is unaffected. */
    n = u64s(p, (const uint64_t[]){0, RT_H_BUF_A, 0, 16}, 4);
    cr_assert_eq(rt_raw_call(&a, RPC_CMD_TENSOR_GET, p, n, &h, out, sizeof(out), &got, NULL, 0),
                 TSR_OK);
    cr_expect_eq(h.status, TSR_OK);
    cr_expect(got == 16 && memcmp(out, "AAAAAAAAAAAAAAAA", 16) == 0, "A's bytes are A's");
    expect_ping(&a);
    rt_raw_close(&a);
    rt_raw_close(&b);
    cr_expect_eq(rt_server_stop(&s), 0);
}

static long rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

Test(rpc_server, a_disconnect_releases_everything_and_memory_is_limited_per_client, .timeout = 60)
{
    const char *const args[] = {"--device", "cpu:0", "--max-memory", "96M", NULL};
#if defined(__SANITIZE_ADDRESS__)
    /* AddressSanitizer keeps freed memory in a quarantine: memory returns to
     * the system at free only without it. */
    char opts[512];
    snprintf(opts, sizeof(opts), "%s:quarantine_size_mb=0",
             getenv("ASAN_OPTIONS") ? getenv("ASAN_OPTIONS") : "");
    setenv("ASAN_OPTIONS", opts, 1);
#endif
    rt_server s;
    cr_assert(rt_server_start(&s, NULL, args));
    rt_raw a;
    cr_assert_eq(rt_raw_connect(&a, s.url, true), TSR_OK);
    uint8_t p[64], out[64];
    rpc_hdr h;
    size_t got;
    size_t n = u64s(p, (const uint64_t[]){0, 64ull << 20}, 2);
    cr_assert_eq(rt_raw_call(&a, RPC_CMD_BUF_ALLOC, p, n, &h, out, sizeof(out), &got, NULL, 0),
                 TSR_OK);
    cr_assert_eq(h.status, TSR_OK);
    rpc_rd r = rpc_rd_init(out, got);
    const uint64_t hb = rpc_rd_u64(&r);
    n = u64s(p, (const uint64_t[]){0, 48ull << 20}, 2);
    expect_refused(&a, RPC_CMD_BUF_ALLOC, p, n, TSR_ENOMEM, "limit", "past the per-client limit");
    n = u64s(p, (const uint64_t[]){hb, 7}, 2);
    cr_assert_eq(rt_raw_call(&a, RPC_CMD_BUF_CLEAR, p, n, &h, out, sizeof(out), &got, NULL, 0),
                 TSR_OK, "touch every page");
    const long during = rss_kb(s.pid);
    rt_raw_close(&a);
    long after = during;
    for (int i = 0; i < 100 && after > during - 48 * 1024; i++) {
        const struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
        after = rss_kb(s.pid);
    }
    cr_expect_lt(after, during - 48 * 1024, "server RSS %ld kB -> %ld kB after the disconnect",
                 during, after);
    /* Another client gets the whole limit again. */
    rt_raw b;
    cr_assert_eq(rt_raw_connect(&b, s.url, true), TSR_OK);
    n = u64s(p, (const uint64_t[]){0, 80ull << 20}, 2);
    cr_assert_eq(rt_raw_call(&b, RPC_CMD_BUF_ALLOC, p, n, &h, out, sizeof(out), &got, NULL, 0),
                 TSR_OK);
    cr_expect_eq(h.status, TSR_OK);
    rt_raw_close(&b);
    cr_expect_eq(rt_server_stop(&s), 0);
}

/* ---- authentication and TLS ----------------------------------------------------------------- */

/* A remote buffer round trip through the library's client. */
static void round_trip(tsr_dev *dev)
{
    tsr_buf *buf;
    cr_assert_eq(tsr_buft_alloc(tsr_dev_buft(dev), 256, &buf), TSR_OK, "%s", tsr_last_error());
    tsr_tensor t = {.type = TSR_TYPE_F32, .ne = {64, 1, 1, 1}, .nb = {4, 256, 256, 256}};
    cr_assert_eq(tsr_buf_place_tensor(buf, &t, 0), TSR_OK);
    float in[64], out[64];
    for (int i = 0; i < 64; i++)
        in[i] = (float)i * 3.0f;
    cr_assert_eq(tsr_tensor_set(&t, in, 0, sizeof(in)), TSR_OK, "%s", tsr_last_error());
    cr_assert_eq(tsr_tensor_get(&t, out, 0, sizeof(out)), TSR_OK, "%s", tsr_last_error());
    cr_expect_arr_eq(out, in, sizeof(in));
    tsr_buf_free(buf);
}

Test(rpc_server, a_token_server_refuses_clients_without_the_token, .timeout = 60)
{
    char dir[256], tok[300], bad[300];
    cr_assert(rt_tmpdir(dir, sizeof(dir)));
    snprintf(tok, sizeof(tok), "%s/token", dir);
    snprintf(bad, sizeof(bad), "%s/wrong", dir);
    cr_assert(rt_write_text(tok, "correct horse battery staple\n"));
    cr_assert(rt_write_text(bad, "incorrect horse\n"));
    const char *const args[] = {"--device", "cpu:0", "--token-file", tok, NULL};
    rt_server s;
    cr_assert(rt_server_start(&s, NULL, args));
    unsetenv("TSR_RPC_TOKEN_FILE");
    cr_expect_eq(tsr_rpc_add_server(s.url, NULL, NULL, NULL), TSR_EAUTH);
    cr_expect(strstr(tsr_last_error(), "token") != NULL, "%s", tsr_last_error());
    const tsr_rpc_options wrong = {.token_file = bad};
    cr_expect_eq(tsr_rpc_add_server(s.url, &wrong, NULL, NULL), TSR_EAUTH);
    cr_expect(strstr(tsr_last_error(), "authentication failed") != NULL, "%s", tsr_last_error());
    /* A raw client that skips AUTH is refused and disconnected. */
    rt_raw c;
    cr_assert_eq(rt_raw_connect(&c, s.url, true), TSR_OK);
    uint8_t p[16];
    const size_t n = u64s(p, (const uint64_t[]){0, 4096}, 2);
    expect_refused(&c, RPC_CMD_BUF_ALLOC, p, n, TSR_EAUTH, "authentication", "no AUTH");
    rpc_hdr h;
    uint8_t out[8];
    size_t got;
    cr_expect_eq(rt_raw_recv(&c, &h, out, sizeof(out), &got, 10000), TSR_ECLOSED);
    rt_raw_close(&c);
    /* The right token, from a file or from memory. */
    const tsr_rpc_options right = {.token_file = tok};
    size_t first, count;
    cr_assert_eq(tsr_rpc_add_server(s.url, &right, &first, &count), TSR_OK, "%s", tsr_last_error());
    round_trip(tsr_reg_dev_get(tsr_rpc_reg(), first));
    const tsr_rpc_options mem = {.token = "correct horse battery staple", .token_len = 28};
    cr_assert_eq(tsr_rpc_add_server(s.url, &mem, &first, &count), TSR_OK, "%s", tsr_last_error());
    round_trip(tsr_reg_dev_get(tsr_rpc_reg(), first));
    cr_expect_eq(rt_server_stop(&s), 0);
    unlink(tok);
    unlink(bad);
    rmdir(dir);
}

Test(rpc_server, tls_round_trip_with_a_certificate_made_at_test_time, .timeout = 60)
{
    char dir[256], cert[300], key[300], cert2[300], key2[300];
    cr_assert(rt_tmpdir(dir, sizeof(dir)));
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    snprintf(cert2, sizeof(cert2), "%s/other.pem", dir);
    snprintf(key2, sizeof(key2), "%s/other-key.pem", dir);
    cr_assert(rt_make_cert("tessera-test", cert, key), "making a certificate");
    cr_assert(rt_make_cert("tessera-test", cert2, key2), "making a second certificate");
    const char *const args[] = {"--device", "cpu:0", "--tls-cert", cert, "--tls-key", key, NULL};
    rt_server s;
    cr_assert(rt_server_start(&s, "tls+tcp://127.0.0.1:0", args));
    cr_expect(strncmp(s.url, "tls+tcp://", 10) == 0, "%s", s.url);
    const tsr_rpc_options ok = {.tls_ca_file = cert, .tls_server_name = "tessera-test"};
    size_t first, count;
    cr_assert_eq(tsr_rpc_add_server(s.url, &ok, &first, &count), TSR_OK, "%s", tsr_last_error());
    round_trip(tsr_reg_dev_get(tsr_rpc_reg(), first));
    /* A certificate signed by someone else, or the wrong name, is refused. */
    const tsr_rpc_options other = {.tls_ca_file = cert2, .tls_server_name = "tessera-test"};
    cr_expect_neq(tsr_rpc_add_server(s.url, &other, NULL, NULL), TSR_OK);
    const tsr_rpc_options name = {.tls_ca_file = cert, .tls_server_name = "someone-else"};
    cr_expect_neq(tsr_rpc_add_server(s.url, &name, NULL, NULL), TSR_OK);
    /* Plain TCP to a TLS port gets nowhere (and does not hang). */
    char plain[300];
    snprintf(plain, sizeof(plain), "tcp://%s", s.url + strlen("tls+tcp://"));
    const tsr_rpc_options quick = {.timeout_ms = 2000};
    cr_expect_neq(tsr_rpc_add_server(plain, &quick, NULL, NULL), TSR_OK);
    cr_expect_eq(rt_server_stop(&s), 0);
    unlink(cert);
    unlink(key);
    unlink(cert2);
    unlink(key2);
    rmdir(dir);
}
