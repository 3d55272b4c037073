/* backends/rpc/rpc_io.c — the NNG byte-stream transport of the RPC protocol
 * (rpc_io.h): dialing and listening on tcp://, ipc:// and tls+tcp://, TLS
 * configuration, sends and receives with timeouts, and the buffered reader.
 *
 * Not the framing or the commands. Each connection owns one receive and one
 * send aio, reused for every operation (no allocation per call).
 */
#include "backends/rpc/rpc_io.h"

#include <ctype.h>
#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

/* ---- the buffered reader --------------------------------------------------------------------- */

bool tsr__rpc_reader_init(rpc_reader *r, rpc_io *io, size_t cap)
{
    *r = (rpc_reader){.io = io, .cap = cap};
    r->buf = malloc(cap);
    return r->buf != NULL;
}

void tsr__rpc_reader_free(rpc_reader *r)
{
    free(r->buf);
    r->buf = NULL;
}

tsr_status tsr__rpc_read(rpc_reader *r, void *dst, size_t n, int timeout_ms)
{
    uint8_t *d = dst;
    while (n > 0) {
        const size_t have = r->end - r->pos;
        if (have > 0) {
            const size_t k = TSR_MIN(have, n);
            memcpy(d, r->buf + r->pos, k);
            r->pos += k;
            d += k;
            n -= k;
            continue;
        }
        long got;
        if (n >= r->cap / 2) {
            /* A large remainder goes straight into its destination. */
            got = r->io->recv_some(r->io, d, n, timeout_ms);
            if (got < 0)
                return (tsr_status)got;
            d += got;
            n -= (size_t)got;
            continue;
        }
        got = r->io->recv_some(r->io, r->buf, r->cap, timeout_ms);
        if (got < 0)
            return (tsr_status)got;
        r->pos = 0;
        r->end = (size_t)got;
    }
    return TSR_OK;
}

tsr_status tsr__rpc_skip(rpc_reader *r, uint64_t n, int timeout_ms)
{
    while (n > 0) {
        if (r->end == r->pos) {
            const long got = r->io->recv_some(r->io, r->buf, r->cap, timeout_ms);
            if (got < 0)
                return (tsr_status)got;
            r->pos = 0;
            r->end = (size_t)got;
        }
        const size_t k = (size_t)TSR_MIN((uint64_t)(r->end - r->pos), n);
        r->pos += k;
        n -= k;
    }
    return TSR_OK;
}

/* ---- endpoints ------------------------------------------------------------------------------- */

tsr_status tsr__rpc_endpoint_url(const char *endpoint, char *url, size_t size)
{
    if (!endpoint || !*endpoint)
        return tsr__error(TSR_EINVAL, "rpc: empty endpoint");
    for (const char *p = endpoint; *p; p++)
        if (!isgraph((unsigned char)*p))
            return tsr__error(TSR_EINVAL, "rpc: endpoint '%s' contains a space or control byte",
                              endpoint);
    const char *sep = strstr(endpoint, "://");
    int n;
    if (!sep) {
        if (!strchr(endpoint, ':'))
            return tsr__error(TSR_EINVAL,
                              "rpc: endpoint '%s' has no port (use host:port, tcp://host:port, "
                              "ipc:///path or tls+tcp://host:port)",
                              endpoint);
        n = snprintf(url, size, "tcp://%s", endpoint);
    } else {
        const size_t slen = (size_t)(sep - endpoint);
        if (!((slen == 3 && strncmp(endpoint, "tcp", 3) == 0) ||
              (slen == 4 && strncmp(endpoint, "tcp4", 4) == 0) ||
              (slen == 4 && strncmp(endpoint, "tcp6", 4) == 0) ||
              (slen == 3 && strncmp(endpoint, "ipc", 3) == 0) ||
              (slen == 7 && strncmp(endpoint, "tls+tcp", 7) == 0)))
            return tsr__error(TSR_EINVAL,
                              "rpc: endpoint '%s': unknown scheme (tcp://, ipc://, tls+tcp://)",
                              endpoint);
        n = snprintf(url, size, "%s", endpoint);
    }
    if (n < 0 || (size_t)n >= size)
        return tsr__error(TSR_EINVAL, "rpc: endpoint '%.64s...' is longer than %zu bytes", endpoint,
                          size - 1);
    return TSR_OK;
}

static bool url_is_tls(const char *url) { return strncmp(url, "tls+", 4) == 0; }
static bool url_is_tcp(const char *url) { return strncmp(url, "tcp", 3) == 0 || url_is_tls(url); }

/* The host part of a tcp-like URL ("[::1]" loses its brackets). */
static void url_host(const char *url, char *host, size_t size)
{
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    size_t n;
    if (*p == '[') {
        const char *e = strchr(p, ']');
        p++;
        n = e ? (size_t)(e - p) : strlen(p);
    } else {
        const char *e = strrchr(p, ':');
        n = e ? (size_t)(e - p) : strlen(p);
    }
    snprintf(host, size, "%.*s", (int)TSR_MIN(n, size - 1), p);
}

/* Reads a small text file (PEM, token) whole, NUL-terminated. */
static tsr_status read_small_file(const char *path, const char *what, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return tsr__error(TSR_EIO, "rpc: cannot open %s '%s'", what, path);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        const size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        if (cap >= (1u << 20)) {
            free(buf);
            fclose(f);
            return tsr__error(TSR_ERANGE, "rpc: %s '%s' is larger than 1 MiB", what, path);
        }
        char *nb = realloc(buf, 2 * cap + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    const bool err = ferror(f);
    fclose(f);
    if (!buf)
        return tsr__error(TSR_ENOMEM, "rpc: reading %s '%s'", what, path);
    if (err) {
        free(buf);
        return tsr__error(TSR_EIO, "rpc: cannot read %s '%s'", what, path);
    }
    buf[n] = '\0';
    *out = buf;
    if (len)
        *len = n;
    return TSR_OK;
}

static tsr_status nng_fail(int rv, const char *what, const char *url)
{
    const tsr_status st = rv == NNG_ETIMEDOUT                        ? TSR_ETIMEDOUT
                          : rv == NNG_ECRYPTO || rv == NNG_EPEERAUTH ? TSR_EAUTH
                          : rv == NNG_EADDRINVAL || rv == NNG_EINVAL ? TSR_EINVAL
                          : rv == NNG_ENOMEM                         ? TSR_ENOMEM
                                                                     : TSR_EDEVICE;
    return tsr__error(st, "rpc: %s %s: %s", what, url, nng_strerror(rv));
}

/* Loads the own certificate and key (PEM files) into a TLS configuration. */
static tsr_status tls_own_cert(nng_tls_config *cfg, const char *cert, const char *key,
                               const char *url)
{
    char *c = NULL, *k = NULL;
    tsr_status st = read_small_file(cert, "TLS certificate", &c, NULL);
    if (st == TSR_OK)
        st = read_small_file(key, "TLS key", &k, NULL);
    if (st == TSR_OK) {
        const int rv = nng_tls_config_own_cert(cfg, c, k, NULL);
        if (rv != 0)
            st = tsr__error(TSR_EINVAL, "rpc: %s: certificate '%s' with key '%s': %s", url, cert,
                            key, nng_strerror(rv));
    }
    free(c);
    free(k);
    return st;
}

/* A TLS configuration, or NNG's refusal as a clear error. */
static tsr_status tls_alloc(nng_tls_config **cfg, bool server, const char *url)
{
    const int rv = nng_tls_config_alloc(cfg, server ? NNG_TLS_MODE_SERVER : NNG_TLS_MODE_CLIENT);
    if (rv == NNG_ENOTSUP)
        return tsr__error(TSR_EUNSUPPORTED,
                          "rpc: %s: this NNG library was built without TLS support; use tcp:// "
                          "or ipc:// (behind a tunnel) instead",
                          url);
    if (rv != 0)
        return nng_fail(rv, "TLS setup for", url);
    return TSR_OK;
}

/* ---- the NNG connection ---------------------------------------------------------------------- */

/* `closed` and the start of every operation are guarded by `mu`: NNG 1.5's
 * TCP stream accepts a receive issued after nng_stream_close and never
 * completes it, so shutdown aborts whatever is in flight and later
 * operations fail before they reach NNG. */
typedef struct {
    rpc_io io;
    nng_stream *s;
    nng_aio *raio, *saio;
    pthread_mutex_t mu;
    bool closed;
    /* A started send (send_start): small ones are sent at once, large ones
     * go on in the background (caio's callback sends what is left). */
    rpc_iov pend[4];
    int n_pend, pend_timeout;
    bool pend_active, pend_async, pend_done;
    int pend_rv;
    nng_aio *caio;
    pthread_cond_t pend_cv;
} nng_io;

/* Starts op on aio unless the connection is shut; false when it is. */
static bool io_start(nng_io *c, nng_aio *aio, bool recv)
{
    pthread_mutex_lock(&c->mu);
    const bool ok = !c->closed;
    if (ok) {
        if (recv)
            nng_stream_recv(c->s, aio);
        else
            nng_stream_send(c->s, aio);
    }
    pthread_mutex_unlock(&c->mu);
    return ok;
}

static tsr_status map_io_error(nng_io *c, int rv, const char *what)
{
    snprintf(c->io.err, sizeof(c->io.err), "%s: %s", what, nng_strerror(rv));
    if (rv == NNG_ETIMEDOUT)
        return TSR_ETIMEDOUT;
    if (rv == NNG_ECLOSED || rv == NNG_ECONNSHUT || rv == NNG_ECONNRESET ||
        rv == NNG_ECONNABORTED || rv == NNG_ECANCELED)
        return TSR_ECLOSED;
    return TSR_EIO;
}

static long nng_io_recv_some(rpc_io *io, void *dst, size_t max, int timeout_ms)
{
    nng_io *c = (nng_io *)io;
    nng_iov iov = {.iov_buf = dst, .iov_len = max};
    nng_aio_set_iov(c->raio, 1, &iov);
    nng_aio_set_timeout(c->raio, timeout_ms < 0 ? NNG_DURATION_INFINITE : timeout_ms);
    if (!io_start(c, c->raio, true)) {
        snprintf(c->io.err, sizeof(c->io.err), "receive: the connection was shut down");
        return TSR_ECLOSED;
    }
    nng_aio_wait(c->raio);
    const int rv = nng_aio_result(c->raio);
    if (rv != 0)
        return map_io_error(c, rv, "receive");
    const size_t n = nng_aio_count(c->raio);
    if (n == 0) {
        snprintf(c->io.err, sizeof(c->io.err), "receive: the peer closed the connection");
        return TSR_ECLOSED;
    }
    return (long)n;
}

static tsr_status nng_io_send_all(rpc_io *io, const rpc_iov *iov, int n, int timeout_ms)
{
    nng_io *c = (nng_io *)io;
    int i = 0;
    size_t off = 0; /* bytes of iov[i] already sent */
    while (i < n) {
        nng_iov v[4];
        unsigned k = 0;
        for (int j = i; j < n && k < 4; j++) {
            const size_t skip = j == i ? off : 0;
            if (iov[j].n > skip)
                v[k++] = (nng_iov){.iov_buf = (char *)iov[j].p + skip, .iov_len = iov[j].n - skip};
        }
        if (k == 0)
            break;
        nng_aio_set_iov(c->saio, k, v);
        nng_aio_set_timeout(c->saio, timeout_ms < 0 ? NNG_DURATION_INFINITE : timeout_ms);
        if (!io_start(c, c->saio, false)) {
            snprintf(c->io.err, sizeof(c->io.err), "send: the connection was shut down");
            return TSR_ECLOSED;
        }
        nng_aio_wait(c->saio);
        const int rv = nng_aio_result(c->saio);
        if (rv != 0)
            return map_io_error(c, rv, "send");
        size_t sent = nng_aio_count(c->saio);
        while (sent > 0 && i < n) {
            const size_t rest = iov[i].n - off;
            if (sent < rest) {
                off += sent;
                sent = 0;
            } else {
                sent -= rest;
                i++;
                off = 0;
            }
        }
        while (i < n && iov[i].n == off) {
            i++;
            off = 0;
        }
    }
    return TSR_OK;
}

/* Skips `sent` bytes of pend[]; true while some are left (v/k: the rest). */
static bool pend_advance(nng_io *c, size_t sent, nng_iov *v, unsigned *k)
{
    int n = 0;
    for (int i = 0; i < c->n_pend; i++) {
        const size_t skip = sent < c->pend[i].n ? sent : c->pend[i].n;
        sent -= skip;
        if (c->pend[i].n > skip)
            c->pend[n++] = (rpc_iov){(const char *)c->pend[i].p + skip, c->pend[i].n - skip};
    }
    c->n_pend = n;
    *k = 0;
    for (int i = 0; i < n; i++)
        v[(*k)++] = (nng_iov){.iov_buf = (void *)c->pend[i].p, .iov_len = c->pend[i].n};
    return n > 0;
}

/* A large started send: on NNG's thread, sends what is left. */
static void nng_io_send_more(void *arg)
{
    nng_io *c = arg;
    pthread_mutex_lock(&c->mu);
    const int rv = nng_aio_result(c->caio);
    nng_iov v[4];
    unsigned k;
    if (rv == 0 && pend_advance(c, nng_aio_count(c->caio), v, &k) && !c->closed) {
        nng_aio_set_iov(c->caio, k, v);
        nng_stream_send(c->s, c->caio);
    } else {
        c->pend_rv = rv ? rv : c->n_pend ? NNG_ECLOSED : 0;
        c->pend_done = true;
        pthread_cond_broadcast(&c->pend_cv);
    }
    pthread_mutex_unlock(&c->mu);
}

#define SEND_AT_ONCE (64u << 10) /* smaller sends fit the sockets' buffers: sent at once */

static tsr_status nng_io_send_start(rpc_io *io, const rpc_iov *iov, int n, int timeout_ms)
{
    nng_io *c = (nng_io *)io;
    size_t total = 0;
    c->n_pend = n < 4 ? n : 4;
    for (int i = 0; i < c->n_pend; i++) {
        c->pend[i] = iov[i];
        total += iov[i].n;
    }
    c->pend_timeout = timeout_ms;
    if (total <= SEND_AT_ONCE)
        return nng_io_send_all(io, c->pend, c->n_pend, timeout_ms);
    if (!c->caio && nng_aio_alloc(&c->caio, nng_io_send_more, c) != 0)
        return nng_io_send_all(io, c->pend, c->n_pend, timeout_ms);
    nng_iov v[4];
    unsigned k;
    pend_advance(c, 0, v, &k);
    nng_aio_set_iov(c->caio, k, v);
    nng_aio_set_timeout(c->caio, timeout_ms < 0 ? NNG_DURATION_INFINITE : timeout_ms);
    c->pend_done = false;
    c->pend_rv = 0;
    if (!io_start(c, c->caio, false)) {
        snprintf(c->io.err, sizeof(c->io.err), "send: the connection was shut down");
        return TSR_ECLOSED;
    }
    c->pend_active = true;
    return TSR_OK;
}

static tsr_status nng_io_send_wait(rpc_io *io)
{
    nng_io *c = (nng_io *)io;
    if (!c->pend_active)
        return TSR_OK;
    c->pend_active = false;
    pthread_mutex_lock(&c->mu);
    while (!c->pend_done)
        pthread_cond_wait(&c->pend_cv, &c->mu);
    const int rv = c->pend_rv;
    pthread_mutex_unlock(&c->mu);
    return rv ? map_io_error(c, rv, "send") : TSR_OK;
}

static void nng_io_shutdown(rpc_io *io)
{
    nng_io *c = (nng_io *)io;
    pthread_mutex_lock(&c->mu);
    c->closed = true;
    nng_aio_abort(c->raio, NNG_ECLOSED);
    nng_aio_abort(c->saio, NNG_ECLOSED);
    if (c->caio)
        nng_aio_abort(c->caio, NNG_ECLOSED);
    pthread_mutex_unlock(&c->mu);
    nng_stream_close(c->s);
}

static void nng_io_free(rpc_io *io)
{
    nng_io *c = (nng_io *)io;
    if (!c)
        return;
    nng_io_shutdown(io);
    if (c->caio)
        nng_aio_stop(c->caio);
    nng_stream_free(c->s);
    nng_aio_free(c->raio);
    nng_aio_free(c->saio);
    if (c->caio)
        nng_aio_free(c->caio);
    pthread_cond_destroy(&c->pend_cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static tsr_status wrap_stream(nng_stream *s, const char *url, rpc_io **out)
{
    nng_io *c = calloc(1, sizeof(*c));
    if (!c || nng_aio_alloc(&c->raio, NULL, NULL) != 0 ||
        nng_aio_alloc(&c->saio, NULL, NULL) != 0) {
        if (c) {
            nng_aio_free(c->raio);
            free(c);
        }
        nng_stream_free(s);
        return tsr__error(TSR_ENOMEM, "rpc: %s: connection objects", url);
    }
    c->s = s;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->pend_cv, NULL);
    c->io = (rpc_io){.recv_some = nng_io_recv_some,
                     .send_all = nng_io_send_all,
                     .send_start = nng_io_send_start,
                     .send_wait = nng_io_send_wait,
                     .shutdown = nng_io_shutdown,
                     .free = nng_io_free};
    /* Small frames go out at once: the protocol batches them itself. */
    if (url_is_tcp(url))
        nng_stream_set_bool(s, NNG_OPT_TCP_NODELAY, true);
    *out = &c->io;
    return TSR_OK;
}

static tsr_status client_tls(nng_stream_dialer *d, const tsr_rpc_options *opt, const char *url)
{
    nng_tls_config *cfg;
    tsr_status st = tls_alloc(&cfg, false, url);
    if (st != TSR_OK)
        return st;
    char host[256];
    url_host(url, host, sizeof(host));
    int rv = nng_tls_config_server_name(cfg, opt->tls_server_name ? opt->tls_server_name : host);
    if (rv == 0 && opt->tls_ca_file) {
        rv = nng_tls_config_ca_file(cfg, opt->tls_ca_file);
        if (rv != 0)
            st = tsr__error(TSR_EINVAL, "rpc: %s: CA file '%s': %s", url, opt->tls_ca_file,
                            nng_strerror(rv));
    } else if (rv == 0) {
        TSR_LOG_W("rpc: %s: no TLS CA given (TSR_RPC_TLS_CA): the server's certificate is not "
                  "verified",
                  url);
        rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_NONE);
    }
    if (st == TSR_OK && rv != 0)
        st = nng_fail(rv, "TLS setup for", url);
    if (st == TSR_OK && (opt->tls_cert_file || opt->tls_key_file)) {
        if (!opt->tls_cert_file || !opt->tls_key_file)
            st = tsr__error(TSR_EINVAL, "rpc: %s: a client certificate needs both cert and key",
                            url);
        else
            st = tls_own_cert(cfg, opt->tls_cert_file, opt->tls_key_file, url);
    }
    if (st == TSR_OK && (rv = nng_stream_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg)) != 0)
        st = nng_fail(rv, "TLS setup for", url);
    nng_tls_config_free(cfg);
    return st;
}

tsr_status tsr__rpc_dial(const char *url, const tsr_rpc_options *opt, int timeout_ms, rpc_io **out)
{
    *out = NULL;
    nng_stream_dialer *d;
    int rv = nng_stream_dialer_alloc(&d, url);
    if (rv != 0)
        return nng_fail(rv, "cannot use endpoint", url);
    tsr_status st = TSR_OK;
    if (url_is_tls(url))
        st = client_tls(d, opt, url);
    nng_aio *aio = NULL;
    if (st == TSR_OK && nng_aio_alloc(&aio, NULL, NULL) != 0)
        st = tsr__error(TSR_ENOMEM, "rpc: %s: dial aio", url);
    if (st == TSR_OK) {
        nng_aio_set_timeout(aio, timeout_ms);
        nng_stream_dialer_dial(d, aio);
        nng_aio_wait(aio);
        rv = nng_aio_result(aio);
        if (rv != 0)
            st = nng_fail(rv, "cannot connect to", url);
        else
            st = wrap_stream(nng_aio_get_output(aio, 0), url, out);
    }
    nng_aio_free(aio);
    nng_stream_dialer_free(d);
    return st;
}

/* ---- listening ------------------------------------------------------------------------------- */

struct rpc_listener {
    nng_stream_listener *l;
    nng_aio *aio;
    char url[256];
};

static tsr_status server_tls(nng_stream_listener *l, const rpc_tls_server *tls, const char *url)
{
    if (!tls || !tls->cert_file || !tls->key_file)
        return tsr__error(TSR_EINVAL, "rpc server: %s needs --tls-cert and --tls-key", url);
    nng_tls_config *cfg;
    tsr_status st = tls_alloc(&cfg, true, url);
    if (st != TSR_OK)
        return st;
    st = tls_own_cert(cfg, tls->cert_file, tls->key_file, url);
    int rv = 0;
    if (st == TSR_OK && tls->ca_file) {
        if ((rv = nng_tls_config_ca_file(cfg, tls->ca_file)) != 0)
            st = tsr__error(TSR_EINVAL, "rpc server: CA file '%s': %s", tls->ca_file,
                            nng_strerror(rv));
        else if ((rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED)) != 0)
            st = nng_fail(rv, "TLS setup for", url);
    }
    if (st == TSR_OK && (rv = nng_stream_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, cfg)) != 0)
        st = nng_fail(rv, "TLS setup for", url);
    nng_tls_config_free(cfg);
    return st;
}

tsr_status tsr__rpc_listen(const char *url, const rpc_tls_server *tls, rpc_listener **out)
{
    *out = NULL;
    rpc_listener *L = calloc(1, sizeof(*L));
    if (!L)
        return tsr__error(TSR_ENOMEM, "rpc server: listener");
    snprintf(L->url, sizeof(L->url), "%s", url);
    int rv = nng_stream_listener_alloc(&L->l, url);
    tsr_status st = rv ? nng_fail(rv, "cannot listen on", url) : TSR_OK;
    if (st == TSR_OK && url_is_tls(url))
        st = server_tls(L->l, tls, url);
    else if (st == TSR_OK && tls && (tls->cert_file || tls->key_file || tls->ca_file))
        st = tsr__error(TSR_EINVAL, "rpc server: TLS options given but %s is not tls+tcp://", url);
    if (st == TSR_OK && (rv = nng_stream_listener_listen(L->l)) != 0)
        st = nng_fail(rv, "cannot listen on", url);
    if (st == TSR_OK && nng_aio_alloc(&L->aio, NULL, NULL) != 0)
        st = tsr__error(TSR_ENOMEM, "rpc server: accept aio");
    if (st != TSR_OK) {
        tsr__rpc_listener_free(L);
        return st;
    }
    *out = L;
    return TSR_OK;
}

int tsr__rpc_listener_port(rpc_listener *l)
{
    int port = 0;
    if (url_is_tcp(l->url) && nng_stream_listener_get_int(l->l, NNG_OPT_TCP_BOUND_PORT, &port))
        port = 0;
    return port;
}

tsr_status tsr__rpc_accept(rpc_listener *l, rpc_io **out)
{
    *out = NULL;
    for (;;) {
        nng_stream_listener_accept(l->l, l->aio);
        nng_aio_wait(l->aio);
        const int rv = nng_aio_result(l->aio);
        if (rv == 0)
            return wrap_stream(nng_aio_get_output(l->aio, 0), l->url, out);
        if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
            return tsr__error(TSR_ECLOSED, "rpc server: listener closed");
        /* A failed handshake (TLS) or an aborted connection ends that
         * connection only. */
        TSR_LOG_I("rpc server: %s: a connection failed: %s", l->url, nng_strerror(rv));
    }
}

void tsr__rpc_listener_close(rpc_listener *l)
{
    if (l && l->l)
        nng_stream_listener_close(l->l);
}

void tsr__rpc_listener_free(rpc_listener *l)
{
    if (!l)
        return;
    if (l->l) {
        nng_stream_listener_close(l->l);
        nng_stream_listener_free(l->l);
    }
    nng_aio_free(l->aio);
    free(l);
}
