/* tests/rpc_testutil.c — see rpc_testutil.h. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "rpc_testutil.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"

/* ---- server processes ----------------------------------------------------------------------- */

const char *rt_server_bin(void)
{
    const char *env = getenv("TSR_RPC_SERVER");
    if (env && *env)
        return env;
#ifdef TSR_RPC_SERVER_BIN
    return TSR_RPC_SERVER_BIN;
#else
    return "tessera-rpc-server";
#endif
}

bool rt_server_start(rt_server *s, const char *listen, const char *const *args)
{
    *s = (rt_server){.pid = -1};
    int fds[2];
    if (pipe(fds) != 0)
        return false;
    const char *argv[64] = {rt_server_bin(), "--listen", listen ? listen : "tcp://127.0.0.1:0"};
    int n = 3;
    for (int i = 0; args && args[i] && n < 62; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    const pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return false;
    }
    if (pid == 0) {
        /* A test that fails before it stops its server must not leave it
         * running (holding ctest's output pipe open): it dies with us. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "rt_server_start: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    s->pid = pid;
    char line[512];
    size_t len = 0;
    const uint64_t deadline = tsr__time_ns() + 20000000000ull;
    bool ok = false;
    while (len < sizeof(line) - 1 && tsr__time_ns() < deadline) {
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        if (poll(&p, 1, 200) <= 0)
            continue;
        const ssize_t got = read(fds[0], line + len, 1);
        if (got <= 0)
            break;
        if (line[len] == '\n') {
            ok = true;
            break;
        }
        len++;
    }
    line[len] = '\0';
    close(fds[0]);
    const char *at = strstr(line, "listening on ");
    if (!ok || !at) {
        fprintf(stderr, "rt_server_start: the server did not come up (said: '%s')\n", line);
        rt_server_kill9(s);
        return false;
    }
    at += strlen("listening on ");
    const size_t ul = strcspn(at, ", ");
    snprintf(s->url, sizeof(s->url), "%.*s", (int)ul, at);
    return true;
}

static int wait_for(rt_server *s, int ms)
{
    for (int waited = 0; waited <= ms; waited += 10) {
        int status;
        const pid_t r = waitpid(s->pid, &status, WNOHANG);
        if (r == s->pid) {
            s->pid = -1;
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        }
        if (r < 0) {
            s->pid = -1;
            return -1;
        }
        const struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return -2;
}

int rt_server_stop(rt_server *s)
{
    if (s->pid <= 0)
        return -1;
    kill(s->pid, SIGTERM);
    int rc = wait_for(s, 20000);
    if (rc == -2) {
        fprintf(stderr, "rt_server_stop: the server ignored SIGTERM for 20 s; killing it\n");
        rt_server_kill9(s);
        rc = -1;
    }
    return rc;
}

void rt_server_kill9(rt_server *s)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = -1;
}

bool rt_server_alive(rt_server *s)
{
    if (s->pid <= 0)
        return false;
    int status;
    if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
        s->pid = -1;
        return false;
    }
    return true;
}

bool rt_tmpdir(char *out, size_t size)
{
    const char *base = getenv("TMPDIR");
    snprintf(out, size, "%s/tsr-rpc-XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(out) != NULL;
}

bool rt_write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    const bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* ---- the raw client ------------------------------------------------------------------------- */

tsr_status rt_raw_connect(rt_raw *c, const char *url, bool hello)
{
    *c = (rt_raw){0};
    const tsr_rpc_options opt = {0};
    tsr_status st = tsr__rpc_dial(url, &opt, 5000, &c->io);
    if (st != TSR_OK)
        return st;
    if (!tsr__rpc_reader_init(&c->rd, c->io, 64 << 10))
        return TSR_ENOMEM;
    if (!hello)
        return TSR_OK;
    uint8_t p[48] = {0}, reply[64];
    rpc_wr w = {.p = p, .cap = sizeof(p)};
    rpc_wr_u16(&w, 1);
    rpc_wr_u16(&w, 1);
    rpc_hdr h;
    size_t got;
    st = rt_raw_call(c, RPC_CMD_HELLO, p, sizeof(p), &h, reply, sizeof(reply), &got, NULL, 0);
    return st != TSR_OK ? st : (tsr_status)h.status;
}

tsr_status rt_raw_connect_v2(rt_raw *c, const char *url)
{
    tsr_status st = rt_raw_connect(c, url, false);
    if (st != TSR_OK)
        return st;
    uint8_t p[48] = {0}, reply[64];
    rpc_wr w = {.p = p, .cap = sizeof(p)};
    rpc_wr_u16(&w, 1);
    rpc_wr_u16(&w, 2);
    rpc_hdr h;
    size_t got;
    st = rt_raw_call(c, RPC_CMD_HELLO, p, sizeof(p), &h, reply, sizeof(reply), &got, NULL, 0);
    if (st != TSR_OK || h.status != TSR_OK)
        return st != TSR_OK ? st : (tsr_status)h.status;
    rpc_rd r = rpc_rd_init(reply, got);
    c->version = rpc_rd_u16(&r);
    return c->version == 2 ? TSR_OK : TSR_EPROTO;
}

void rt_raw_close(rt_raw *c)
{
    if (c->io)
        c->io->free(c->io);
    tsr__rpc_reader_free(&c->rd);
    *c = (rt_raw){0};
}

tsr_status rt_raw_write(rt_raw *c, const void *p, size_t n)
{
    const rpc_iov iov = {p, n};
    return c->io->send_all(c->io, &iov, 1, 10000);
}

void rt_frame(rpc_wr *w, uint16_t cmd, uint32_t flags, uint64_t id, const void *payload, size_t len)
{
    const rpc_hdr h = {
        .magic = RPC_MAGIC, .version = 1, .cmd = cmd, .id = id, .flags = flags, .length = len};
    uint8_t hb[RPC_HDR_SIZE];
    tsr__rpc_hdr_encode(&h, hb);
    rpc_wr_bytes(w, hb, sizeof(hb));
    rpc_wr_bytes(w, payload, len);
}

tsr_status rt_raw_send(rt_raw *c, uint16_t cmd, uint32_t flags, const void *payload, size_t len,
                       uint64_t *id)
{
    rpc_wr w = {0};
    const uint64_t i = ++c->next_id;
    rt_frame(&w, cmd, flags, i, payload, len);
    if (c->version > 1 && w.len >= 6) { /* the header's version field (bytes 4..5) */
        w.p[4] = (uint8_t)(c->version & 0xff);
        w.p[5] = (uint8_t)(c->version >> 8);
    }
    if (id)
        *id = i;
    const tsr_status st = w.bad ? TSR_ENOMEM : rt_raw_write(c, w.p, w.len);
    free(w.p);
    return st;
}

tsr_status rt_raw_recv(rt_raw *c, rpc_hdr *h, void *out, size_t cap, size_t *len, int timeout_ms)
{
    uint8_t hb[RPC_HDR_SIZE];
    tsr_status st = tsr__rpc_read(&c->rd, hb, sizeof(hb), timeout_ms);
    if (st != TSR_OK)
        return st;
    tsr__rpc_hdr_decode(hb, h);
    const size_t keep = (size_t)TSR_MIN(h->length, (uint64_t)cap);
    if (len)
        *len = (size_t)h->length;
    if (keep && (st = tsr__rpc_read(&c->rd, out, keep, timeout_ms)) != TSR_OK)
        return st;
    return tsr__rpc_skip(&c->rd, h->length - keep, timeout_ms);
}

tsr_status rt_raw_call(rt_raw *c, uint16_t cmd, const void *payload, size_t len, rpc_hdr *h,
                       void *out, size_t cap, size_t *got, char *reason, size_t reason_size)
{
    uint64_t id;
    tsr_status st = rt_raw_send(c, cmd, RPC_F_REPLY_WANTED, payload, len, &id);
    uint8_t tmp[2 + RPC_REASON_MAX];
    if (st != TSR_OK)
        return st;
    for (;;) {
        st = rt_raw_recv(c, h, tmp, sizeof(tmp), got, 10000);
        if (st != TSR_OK || h->id == id)
            break;
    }
    if (st != TSR_OK)
        return st;
    if (h->status == TSR_OK) {
        memcpy(out, tmp, TSR_MIN(*got, TSR_MIN(cap, sizeof(tmp))));
        if (*got > sizeof(tmp))
            return TSR_ERANGE; /* the caller asked for more than a small reply */
    } else if (reason && reason_size) {
        const size_t n = *got >= 2 ? TSR_MIN((size_t)(tmp[0] | tmp[1] << 8), *got - 2) : 0;
        snprintf(reason, reason_size, "%.*s", (int)n, (const char *)tmp + 2);
    }
    return TSR_OK;
}

/* ---- frames --------------------------------------------------------------------------------- */

void rt_rec(rpc_wr *w, uint32_t type, uint32_t op, const int64_t ne[4], const int32_t *src,
            int n_src, int32_t view_src, uint32_t flags, uint64_t buffer, uint64_t offset,
            const int32_t *op_params, const char *name)
{
    rpc_rec r = {.type = type,
                 .op = op,
                 .view_src = view_src,
                 .flags = flags,
                 .buffer = buffer,
                 .offset = offset};
    const size_t ts = tsr_type_size((tsr_type)type);
    r.nb[0] = ts;
    r.nb[1] = ts * (size_t)(ne[0] / tsr_type_block_size((tsr_type)type));
    r.nb[2] = r.nb[1] * (size_t)ne[1];
    r.nb[3] = r.nb[2] * (size_t)ne[2];
    for (int k = 0; k < 4; k++)
        r.ne[k] = ne[k];
    for (int k = 0; k < TSR_MAX_SRC; k++)
        r.src[k] = k < n_src ? src[k] : -1;
    if (op_params)
        memcpy(r.op_params, op_params, sizeof(r.op_params));
    snprintf(r.name, sizeof(r.name), "%s", name ? name : "");
    tsr__rpc_rec_encode(w, &r);
}

static void u64s(rpc_wr *w, const uint64_t *v, int n)
{
    for (int i = 0; i < n; i++)
        rpc_wr_u64(w, v[i]);
}

void rt_setup_frames(rpc_wr *w, bool hello)
{
    uint8_t p[64] = {0};
    rpc_wr q = {.p = p, .cap = sizeof(p)};
    if (hello) {
        rpc_wr_u16(&q, 1);
        rpc_wr_u16(&q, 1);
        rt_frame(w, RPC_CMD_HELLO, RPC_F_REPLY_WANTED, 1, p, 48);
    }
    q.len = 0;
    rpc_wr_u32(&q, 0);
    rpc_wr_u32(&q, 0);
    rpc_wr_u64(&q, RT_BUF_SIZE);
    rt_frame(w, RPC_CMD_BUF_ALLOC, RPC_F_REPLY_WANTED, 2, p, 16);
    q.len = 0;
    rpc_wr_u32(&q, 0);
    rpc_wr_u32(&q, 0);
    rt_frame(w, RPC_CMD_STREAM_OPEN, RPC_F_REPLY_WANTED, 3, p, 8);
    rt_frame(w, RPC_CMD_EVENT_NEW, RPC_F_REPLY_WANTED, 4, p, 8);
    q.len = 0;
    rpc_wr_u32(&q, 0);
    rpc_wr_u32(&q, 0);
    rpc_wr_u64(&q, RT_BUF_SIZE);
    rt_frame(w, RPC_CMD_BUF_ALLOC, RPC_F_REPLY_WANTED, 5, p, 16);
}

/* A small graph on the setup objects: x (leaf in A) → op → y (in A), plus
 * variants with a view, a product and a row gather. */
static void graph_payload(rpc_wr *g, int variant, uint64_t id)
{
    const float two = 2.0f, one = 1.0f;
    int32_t sp[TSR_MAX_OP_PARAMS] = {0};
    memcpy(&sp[0], &two, 4);
    memcpy(&sp[1], &one, 4);
    const int64_t v256[4] = {256, 1, 1, 1}, v128[4] = {128, 1, 1, 1};
    u64s(g, (const uint64_t[]){RT_H_STREAM, id}, 2);
    const uint32_t node = RPC_REC_NODE | TSR_TENSOR_FLAG_COMPUTE;
    switch (variant % 4) {
    case 0: /* y = 2x + 1 */
        rpc_wr_u32(g, 2);
        rpc_wr_u32(g, 0);
        rt_rec(g, TSR_TYPE_F32, TSR_OP_NONE, v256, NULL, 0, -1, 0, RT_H_BUF_A, 0, NULL, "x");
        rt_rec(g, TSR_TYPE_F32, TSR_OP_SCALE, v256, (const int32_t[]){0}, 1, -1, node, RT_H_BUF_A,
               1024, sp, "y");
        break;
    case 1: /* a view of x, then silu into B */
        rpc_wr_u32(g, 3);
        rpc_wr_u32(g, 0);
        rt_rec(g, TSR_TYPE_F32, TSR_OP_NONE, v256, NULL, 0, -1, 0, RT_H_BUF_A, 0, NULL, "x");
        rt_rec(g, TSR_TYPE_F32, TSR_OP_VIEW, v128, (const int32_t[]){0}, 1, 0, RPC_REC_NODE, 0, 0,
               NULL, "xv");
        rt_rec(g, TSR_TYPE_F32, TSR_OP_SILU, v128, (const int32_t[]){1}, 1, -1, node, RT_H_BUF_B, 0,
               NULL, "s");
        break;
    case 2: { /* w [16, 8] (B), x [16, 2] (B) → y = wᵀx [8, 2] (A) */
        rpc_wr_u32(g, 3);
        rpc_wr_u32(g, 0);
        rt_rec(g, TSR_TYPE_F32, TSR_OP_NONE, (const int64_t[]){16, 8, 1, 1}, NULL, 0, -1, 0,
               RT_H_BUF_B, 0, NULL, "w");
        rt_rec(g, TSR_TYPE_F32, TSR_OP_NONE, (const int64_t[]){16, 2, 1, 1}, NULL, 0, -1, 0,
               RT_H_BUF_B, 1024, NULL, "xm");
        rt_rec(g, TSR_TYPE_F32, TSR_OP_MUL_MAT, (const int64_t[]){8, 2, 1, 1},
               (const int32_t[]){0, 1}, 2, -1, node, RT_H_BUF_A, 2048, NULL, "ym");
        break;
    }
    default: { /* rows of a table by ids (ids in B may be out of range: a run-time error) */
        rpc_wr_u32(g, 3);
        rpc_wr_u32(g, 0);
        rt_rec(g, TSR_TYPE_F32, TSR_OP_NONE, (const int64_t[]){8, 16, 1, 1}, NULL, 0, -1, 0,
               RT_H_BUF_A, 0, NULL, "table");
        rt_rec(g, TSR_TYPE_I32, TSR_OP_NONE, (const int64_t[]){4, 1, 1, 1}, NULL, 0, -1, 0,
               RT_H_BUF_B, 2048, NULL, "ids");
        rt_rec(g, TSR_TYPE_F32, TSR_OP_GET_ROWS, (const int64_t[]){8, 4, 1, 1},
               (const int32_t[]){0, 1}, 2, -1, node, RT_H_BUF_A, 3072, NULL, "rows");
        break;
    }
    }
}

void rt_exercise_frames(rpc_wr *w, int variant)
{
    rpc_wr p = {0};
    uint64_t id = 100;
    const uint32_t R = RPC_F_REPLY_WANTED;
    /* Pipelined writes: the stream's buffer A, then B at an offset, 2-D. */
    uint8_t data[512];
    for (int i = 0; i < 512; i++)
        data[i] = (uint8_t)(i * 7 + variant);
    u64s(&p, (const uint64_t[]){RT_H_STREAM, RT_H_BUF_A, 0, 512}, 4);
    rpc_wr_bytes(&p, data, 512);
    rt_frame(w, RPC_CMD_TENSOR_SET, 0, id++, p.p, p.len);
    p.len = 0;
    u64s(&p, (const uint64_t[]){0, RT_H_BUF_B, 64, 16, 4, 64}, 6);
    rpc_wr_bytes(&p, data, 64);
    rt_frame(w, RPC_CMD_TENSOR_SET_2D, R, id++, p.p, p.len);
    /* A graph, then its recompute, then synchronize. */
    p.len = 0;
    graph_payload(&p, variant, 7);
    rt_frame(w, RPC_CMD_GRAPH_COMPUTE, variant & 4 ? R : 0, id++, p.p, p.len);
    p.len = 0;
    u64s(&p, (const uint64_t[]){RT_H_STREAM, 7}, 2);
    rt_frame(w, RPC_CMD_GRAPH_RECOMPUTE, 0, id++, p.p, p.len);
    p.len = 0;
    u64s(&p, (const uint64_t[]){RT_H_STREAM}, 1);
    rt_frame(w, RPC_CMD_SYNCHRONIZE, R, id++, p.p, p.len);
    /* Reads. */
    p.len = 0;
    u64s(&p, (const uint64_t[]){RT_H_STREAM, RT_H_BUF_A, 1024, 64}, 4);
    rt_frame(w, RPC_CMD_TENSOR_GET, R, id++, p.p, p.len);
    p.len = 0;
    u64s(&p, (const uint64_t[]){0, RT_H_BUF_B, 64, 16, 4, 64}, 6);
    rt_frame(w, RPC_CMD_TENSOR_GET_2D, R, id++, p.p, p.len);
    /* Memset, copy, clear. */
    p.len = 0;
    u64s(&p, (const uint64_t[]){0, RT_H_BUF_B, 256, 128, (uint64_t)variant}, 5);
    rt_frame(w, RPC_CMD_TENSOR_MEMSET, R, id++, p.p, p.len);
    p.len = 0;
    u64s(&p, (const uint64_t[]){RT_H_STREAM, 0, RT_H_BUF_A, 0, RT_H_BUF_B, 1024, 256}, 7);
    rt_frame(w, RPC_CMD_TENSOR_COPY, 0, id++, p.p, p.len);
    /* Events. */
    p.len = 0;
    u64s(&p, (const uint64_t[]){RT_H_EVENT, RT_H_STREAM}, 2);
    rt_frame(w, RPC_CMD_EVENT_RECORD, 0, id++, p.p, p.len);
    p.len = 0;
    u64s(&p, (const uint64_t[]){RT_H_STREAM, RT_H_EVENT}, 2);
    rt_frame(w, RPC_CMD_EVENT_WAIT, 0, id++, p.p, p.len);
    p.len = 0;
    u64s(&p, (const uint64_t[]){RT_H_EVENT}, 1);
    rt_frame(w, RPC_CMD_EVENT_SYNC, R, id++, p.p, p.len);
    /* Queries. */
    rt_frame(w, RPC_CMD_DEV_LIST, R, id++, NULL, 0);
    p.len = 0;
    rpc_wr_u32(&p, 0);
    rt_frame(w, RPC_CMD_DEV_DESC, R, id++, p.p, p.len);
    rt_frame(w, RPC_CMD_DEV_MEMORY, R, id++, p.p, p.len);
    rt_frame(w, RPC_CMD_DEV_CAPS, R, id++, p.p, p.len);
    rt_frame(w, RPC_CMD_PING, R, id++, data, 16);
    p.len = 0;
    u64s(&p, (const uint64_t[]){RT_H_BUF_B}, 1);
    rt_frame(w, RPC_CMD_BUF_BASE, R, id++, p.p, p.len);
    /* supports_op: an unplaced silu of an unplaced leaf. */
    p.len = 0;
    rpc_wr_u32(&p, 0);
    rpc_wr_u32(&p, 2);
    rt_rec(&p, TSR_TYPE_F32, TSR_OP_NONE, (const int64_t[]){64, 2, 1, 1}, NULL, 0, -1, 0, 0, 0,
           NULL, "a");
    rt_rec(&p, TSR_TYPE_F32, TSR_OP_SILU, (const int64_t[]){64, 2, 1, 1}, (const int32_t[]){0}, 1,
           -1, 0, 0, 0, NULL, "b");
    rt_frame(w, RPC_CMD_SUPPORTS_OP, R, id++, p.p, p.len);
    p.len = 0;
    u64s(&p, (const uint64_t[]){RT_H_BUF_B, (uint64_t)variant}, 2);
    rt_frame(w, RPC_CMD_BUF_CLEAR, R, id++, p.p, p.len);
    p.len = 0;
    u64s(&p, (const uint64_t[]){RT_H_STREAM}, 1);
    rt_frame(w, RPC_CMD_SYNCHRONIZE, R, id++, p.p, p.len);
    free(p.p);
}
