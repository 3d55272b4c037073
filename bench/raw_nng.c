/* bench/raw_nng.c — the raw NNG baseline of the RPC benchmarks: a forked
 * peer process that echoes, sinks or sources bytes over an NNG byte stream
 * (the transport under tessera's RPC), and the client side of it.
 *
 * Not tessera's protocol: just the bytes, with buffers reused on both ends,
 * so a benchmark can put tessera's figures beside what the transport alone
 * does, on the same transport, in the same run.
 */
#define _GNU_SOURCE
#include "raw_nng.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int raw_io(raw *r, void *p, size_t n, bool send)
{
    char *c = p;
    while (n > 0) {
        nng_iov iov = {.iov_buf = c, .iov_len = n};
        nng_aio_set_iov(r->aio, 1, &iov);
        nng_aio_set_timeout(r->aio, r->timeout_ms ? r->timeout_ms : NNG_DURATION_INFINITE);
        if (send)
            nng_stream_send(r->s, r->aio);
        else
            nng_stream_recv(r->s, r->aio);
        nng_aio_wait(r->aio);
        if (nng_aio_result(r->aio) != 0)
            return -1;
        c += nng_aio_count(r->aio);
        n -= nng_aio_count(r->aio);
    }
    return 0;
}

/* The peer's buffered reader: one receive takes whatever has arrived (up
 * to 64 KiB), so a small request costs one receive, as in the RPC server;
 * large remainders go straight into their destination. */
typedef struct {
    raw *r;
    char buf[64 << 10];
    size_t pos, end;
} raw_reader;

static int raw_read(raw_reader *rd, void *dst, size_t n)
{
    char *d = dst;
    while (n > 0) {
        if (rd->end > rd->pos) {
            const size_t k = rd->end - rd->pos < n ? rd->end - rd->pos : n;
            memcpy(d, rd->buf + rd->pos, k);
            rd->pos += k;
            d += k;
            n -= k;
            continue;
        }
        if (n >= sizeof(rd->buf) / 2)
            return raw_io(rd->r, d, n, false);
        nng_iov iov = {.iov_buf = rd->buf, .iov_len = sizeof(rd->buf)};
        nng_aio_set_iov(rd->r->aio, 1, &iov);
        nng_aio_set_timeout(rd->r->aio, NNG_DURATION_INFINITE);
        nng_stream_recv(rd->r->s, rd->r->aio);
        nng_aio_wait(rd->r->aio);
        if (nng_aio_result(rd->r->aio) != 0)
            return -1;
        rd->pos = 0;
        rd->end = nng_aio_count(rd->r->aio);
    }
    return 0;
}

/* The peer: every request is {u64 op, u64 size} (+ size bytes for ECHO
 * and SINK); ECHO returns the bytes, SINK answers 1 byte, SOURCE answers
 * size bytes. One buffer, grown once, reused; one connection at a time. */
static void raw_peer(nng_stream_listener *l)
{
    nng_aio *aio;
    nng_aio_alloc(&aio, NULL, NULL);
    char *buf = NULL;
    size_t cap = 0;
    static raw_reader rd;
    for (;;) {
        nng_stream_listener_accept(l, aio);
        nng_aio_wait(aio);
        if (nng_aio_result(aio) != 0)
            break;
        raw r = {.s = nng_aio_get_output(aio, 0)};
        nng_aio_alloc(&r.aio, NULL, NULL);
        nng_stream_set_bool(r.s, NNG_OPT_TCP_NODELAY, true);
        rd.r = &r;
        rd.pos = rd.end = 0;
        uint64_t h[2];
        char b1 = 0;
        while (raw_read(&rd, h, sizeof(h)) == 0) {
            if (h[1] > cap) {
                free(buf);
                cap = h[1];
                buf = malloc(cap);
                memset(buf, 1, cap);
            }
            int rc;
            if (h[0] == RAW_ECHO)
                rc = raw_read(&rd, buf, h[1]) || raw_io(&r, buf, h[1], true);
            else if (h[0] == RAW_SINK)
                rc = raw_read(&rd, buf, h[1]) || raw_io(&r, &b1, 1, true);
            else
                rc = raw_io(&r, buf, h[1], true);
            if (rc)
                break;
        }
        nng_aio_free(r.aio);
        nng_stream_free(r.s);
    }
    _exit(0);
}

/* Forks the peer before this process touches NNG (NNG is not fork-safe);
 * the peer listens and reports its URL through a pipe. */
raw_server raw_start(const char *listen)
{
    raw_server rs = {0};
    int fds[2];
    if (pipe(fds) != 0)
        exit(1);
    rs.pid = fork();
    if (rs.pid == 0) {
        close(fds[0]);
        nng_stream_listener *l;
        char url[300] = "";
        int port = 0;
        if (nng_stream_listener_alloc(&l, listen) == 0 && nng_stream_listener_listen(l) == 0) {
            if (strncmp(listen, "tcp", 3) == 0) {
                nng_stream_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port);
                snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
            } else {
                snprintf(url, sizeof(url), "%s", listen);
            }
        }
        if (write(fds[1], url, sizeof(url)) != (ssize_t)sizeof(url) || !url[0])
            _exit(1);
        close(fds[1]);
        raw_peer(l);
    }
    close(fds[1]);
    if (read(fds[0], rs.url, sizeof(rs.url)) != (ssize_t)sizeof(rs.url) || !rs.url[0]) {
        fprintf(stderr, "bench_rpc: the raw NNG peer on %s did not start\n", listen);
        exit(1);
    }
    close(fds[0]);
    return rs;
}

void raw_stop(raw_server *rs)
{
    kill(rs->pid, SIGKILL);
    waitpid(rs->pid, NULL, 0);
}

raw raw_connect(const char *url)
{
    raw r = {.timeout_ms = 30000};
    nng_stream_dialer *d;
    nng_aio_alloc(&r.aio, NULL, NULL);
    if (nng_stream_dialer_alloc(&d, url) != 0)
        exit(1);
    nng_stream_dialer_dial(d, r.aio);
    nng_aio_wait(r.aio);
    if (nng_aio_result(r.aio) != 0) {
        fprintf(stderr, "bench_rpc: raw connect %s failed\n", url);
        exit(1);
    }
    r.s = nng_aio_get_output(r.aio, 0);
    nng_stream_dialer_free(d);
    nng_stream_set_bool(r.s, NNG_OPT_TCP_NODELAY, true);
    return r;
}

/* One raw request and its answer: the header and data go out in one send. */
void raw_req(raw *r, uint64_t op, void *data, size_t size)
{
    uint64_t h[2] = {op, size};
    nng_iov iov[2] = {{.iov_buf = h, .iov_len = sizeof(h)}, {.iov_buf = data, .iov_len = size}};
    nng_aio_set_iov(r->aio, op == RAW_SOURCE ? 1 : 2, iov);
    nng_aio_set_timeout(r->aio, r->timeout_ms);
    nng_stream_send(r->s, r->aio);
    nng_aio_wait(r->aio);
    size_t sent = nng_aio_count(r->aio);
    const size_t total = sizeof(h) + (op == RAW_SOURCE ? 0 : size);
    if (nng_aio_result(r->aio) != 0 ||
        (sent < total && raw_io(r, (char *)data + (sent - sizeof(h)), total - sent, true))) {
        fprintf(stderr, "bench_rpc: raw send failed\n");
        exit(1);
    }
    char b1;
    if (op == RAW_SINK ? raw_io(r, &b1, 1, false) : raw_io(r, data, size, false)) {
        fprintf(stderr, "bench_rpc: raw receive failed\n");
        exit(1);
    }
}

void raw_close(raw *r)
{
    nng_stream_free(r->s);
    nng_aio_free(r->aio);
}
