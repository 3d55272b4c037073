/* backends/rpc/rpc_backend.c — the RPC registry, remote devices, their
 * buffer type, buffers, streams and events: the common interface filled by
 * sending commands to a tessera-rpc-server.
 *
 * Not the wire (rpc_conn.c, rpc_proto.h) nor graph encoding (rpc_graph.c).
 * Key design choice: remote objects are held by server handles only; a
 * buffer's base address is a process-unique fake address that is never
 * dereferenced, so tensor offsets survive unchanged (data - base) and
 * buffers of different servers never look like they overlap. Writes that
 * need no answer are pipelined; reads, synchronizations and blocking buffer
 * calls wait for the server's reply.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/rpc/rpc_client.h"
#include "core/internal.h"
#include "tessera/rpc.h"

#define RPC_MAX_DEVICES 256

typedef struct rpc_dev {
    tsr_dev dev;
    tsr_buft buft;
    rpc_conn *conn;
    rpc_dev_info info;
    char name[16];
    char who[300]; /* "rpc0 (cpu0 at tcp://...)" for messages */
    char desc[400];
} rpc_dev;

typedef struct {
    rpc_dev *d;
    uint64_t handle;
    uintptr_t base;
} rpc_buf_ctx;

typedef struct {
    rpc_dev *d;
    uint64_t handle;
    rpc_sync sy; /* busy, synchronization state (rpc_conn.c) */
    rpc_ser ser;
    rpc_graph_cache cache; /* graphs the server holds for this stream */
} rpc_stream;

typedef struct {
    uint64_t handle;
} rpc_event_ctx;

static const struct tsr_dev_i rpc_dev_iface;
static const struct tsr_buft_i rpc_buft_iface;
static const struct tsr_buf_i rpc_buf_iface;
static const struct tsr_backend_i rpc_backend_iface;

static tsr_reg rpc_reg;
static rpc_dev *rpc_devs[RPC_MAX_DEVICES];
static _Atomic size_t rpc_n_devs;
static pthread_mutex_t rpc_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uintptr_t rpc_next_base = (uintptr_t)1 << 40;

static rpc_dev *dev_of(tsr_dev *d) { return d->context; }

/* ---- helpers ----------------------------------------------------------------------------------
 */

static void lock(rpc_conn *c) { pthread_mutex_lock(&c->mu); }
static void unlock(rpc_conn *c) { pthread_mutex_unlock(&c->mu); }

/* Whether buf is a buffer of this connection; its handle and base. */
static bool own_buf(void *ctx, const tsr_buf *buf, uint64_t *handle, uintptr_t *base)
{
    const rpc_conn *c = ctx;
    if (!buf || buf->iface != &rpc_buf_iface)
        return false;
    const rpc_buf_ctx *b = buf->context;
    if (b->d->conn != c)
        return false;
    *handle = b->handle;
    *base = b->base;
    return true;
}

/* A reply with no payload expected, after the request was sent. */
static tsr_status finish(rpc_conn *c, const char *who, uint64_t id, uint16_t cmd)
{
    uint64_t len;
    tsr_status st = tsr__rpc_reply_begin(c, who, id, cmd, &len);
    if (st == TSR_OK && len != 0) {
        snprintf(c->io->err, sizeof(c->io->err), "%llu unexpected bytes", (unsigned long long)len);
        uint8_t junk[64];
        st = tsr__rpc_reply_read(c, who, junk, (size_t)TSR_MIN(len, sizeof(junk)));
        return tsr__error(TSR_EPROTO, "%s: %s replied with %llu unexpected bytes", who,
                          tsr__rpc_cmd_name(cmd), (unsigned long long)len);
    }
    return st;
}

/* ---- buffers ----------------------------------------------------------------------------------
 */

static const rpc_buf_ctx *bctx(const tsr_buf *b) { return b->context; }

static uint64_t tensor_off(const tsr_tensor *t, size_t offset)
{
    return (uint64_t)((uintptr_t)t->data - bctx(t->buffer)->base) + offset;
}

static void rpc_buf_free(tsr_buf *buf)
{
    rpc_buf_ctx *b = buf->context;
    rpc_conn *c = b->d->conn;
    lock(c);
    if (tsr__rpc_alive(c, b->d->who) == TSR_OK) {
        uint8_t f[8];
        rpc_put_u64s(f, &b->handle, 1);
        /* Pipelined: a failure is reported at the next synchronize. */
        tsr__rpc_send(c, b->d->who, RPC_CMD_BUF_FREE, false, false, f, 8, NULL, 0, NULL);
    }
    c->epoch++; /* the server drops its cached graphs too */
    unlock(c);
    free(b);
    free(buf);
}

static void *rpc_buf_base(tsr_buf *buf) { return (void *)bctx(buf)->base; }

/* TENSOR_SET or TENSOR_SET_2D with the data. */
static tsr_status set_rows(const rpc_buf_ctx *b, uint64_t stream, bool want_reply, uint64_t off,
                           const void *data, size_t row, size_t n_rows, size_t t_stride,
                           size_t d_stride)
{
    rpc_conn *c = b->d->conn;
    const char *who = b->d->who;
    uint8_t f[48];
    uint64_t id = 0;
    tsr_status st;
    const bool one_d = n_rows == 1 || (d_stride == row && t_stride == row);
    lock(c);
    if (one_d) {
        const uint64_t v[4] = {stream, b->handle, off, (uint64_t)row * n_rows};
        rpc_put_u64s(f, v, 4);
        st = tsr__rpc_send(c, who, RPC_CMD_TENSOR_SET, want_reply, false, f, 32, data, row * n_rows,
                           &id);
    } else {
        const uint64_t v[6] = {stream, b->handle, off, row, n_rows, t_stride};
        rpc_put_u64s(f, v, 6);
        if (d_stride == row) {
            st = tsr__rpc_send(c, who, RPC_CMD_TENSOR_SET_2D, want_reply, false, f, 48, data,
                               row * n_rows, &id);
        } else {
            /* Pack the rows (2-D writes with a host stride are small in practice). */
            const size_t packed = row * n_rows;
            uint8_t *tmp = malloc(packed > 0 ? packed : 1);
            if (!tmp) {
                unlock(c);
                return tsr__error(TSR_ENOMEM, "%s: packing %zu rows", who, n_rows);
            }
            for (size_t i = 0; i < n_rows; i++)
                memcpy(tmp + i * row, (const char *)data + i * d_stride, row);
            st = tsr__rpc_send(c, who, RPC_CMD_TENSOR_SET_2D, want_reply, false, f, 48, tmp,
                               row * n_rows, &id);
            free(tmp);
        }
    }
    if (st == TSR_OK && want_reply)
        st = finish(c, who, id, one_d ? RPC_CMD_TENSOR_SET : RPC_CMD_TENSOR_SET_2D);
    unlock(c);
    return st;
}

/* TENSOR_GET or TENSOR_GET_2D; rows are read straight into the host memory. */
static tsr_status get_rows(const rpc_buf_ctx *b, uint64_t stream, uint64_t off, void *data,
                           size_t row, size_t n_rows, size_t t_stride, size_t d_stride)
{
    rpc_conn *c = b->d->conn;
    const char *who = b->d->who;
    const bool two_d = n_rows > 1 && !(t_stride == row && d_stride == row);
    const uint16_t cmd = two_d ? RPC_CMD_TENSOR_GET_2D : RPC_CMD_TENSOR_GET;
    uint8_t f[48];
    const uint64_t v[6] = {stream, b->handle, off, two_d ? row : row * n_rows, n_rows, t_stride};
    rpc_put_u64s(f, v, 6);
    uint64_t id, len;
    lock(c);
    tsr_status st = tsr__rpc_send(c, who, cmd, true, true, f, two_d ? 48 : 32, NULL, 0, &id);
    if (st == TSR_OK)
        st = tsr__rpc_reply_begin(c, who, id, cmd, &len);
    if (st == TSR_OK && len != (uint64_t)row * n_rows) {
        snprintf(c->io->err, sizeof(c->io->err), "%llu bytes for %zu requested",
                 (unsigned long long)len, row * n_rows);
        c->dead = TSR_EDEVICE;
        snprintf(c->dead_msg, sizeof(c->dead_msg), "%s replied %.200s", tsr__rpc_cmd_name(cmd),
                 c->io->err);
        c->io->shutdown(c->io);
        st = tsr__error(TSR_EPROTO, "%s: %s", who, c->dead_msg);
    }
    if (st == TSR_OK) {
        if (!two_d || d_stride == row)
            st = tsr__rpc_reply_read(c, who, data, row * n_rows);
        else
            for (size_t i = 0; i < n_rows && st == TSR_OK; i++)
                st = tsr__rpc_reply_read(c, who, (char *)data + i * d_stride, row);
    }
    unlock(c);
    return st;
}

static tsr_status rpc_buf_set(tsr_buf *buf, tsr_tensor *t, const void *data, size_t offset,
                              size_t size)
{
    return set_rows(bctx(buf), 0, true, tensor_off(t, offset), data, size, 1, size, size);
}

static tsr_status rpc_buf_get(tsr_buf *buf, const tsr_tensor *t, void *data, size_t offset,
                              size_t size)
{
    return get_rows(bctx(buf), 0, tensor_off(t, offset), data, size, 1, size, size);
}

static tsr_status rpc_buf_set_2d(tsr_buf *buf, tsr_tensor *t, const void *data, size_t offset,
                                 size_t row_size, size_t n_rows, size_t t_stride,
                                 size_t data_stride)
{
    return set_rows(bctx(buf), 0, true, tensor_off(t, offset), data, row_size, n_rows, t_stride,
                    data_stride);
}

static tsr_status rpc_buf_get_2d(tsr_buf *buf, const tsr_tensor *t, void *data, size_t offset,
                                 size_t row_size, size_t n_rows, size_t t_stride,
                                 size_t data_stride)
{
    return get_rows(bctx(buf), 0, tensor_off(t, offset), data, row_size, n_rows, t_stride,
                    data_stride);
}

static tsr_status simple_call(rpc_dev *d, uint16_t cmd, const void *f, size_t flen)
{
    rpc_conn *c = d->conn;
    uint64_t id;
    lock(c);
    tsr_status st = tsr__rpc_send(c, d->who, cmd, true, true, f, flen, NULL, 0, &id);
    if (st == TSR_OK)
        st = finish(c, d->who, id, cmd);
    unlock(c);
    return st;
}

static tsr_status rpc_buf_memset(tsr_buf *buf, tsr_tensor *t, uint8_t value, size_t offset,
                                 size_t size)
{
    const rpc_buf_ctx *b = bctx(buf);
    uint8_t f[40] = {0};
    const uint64_t v[4] = {0, b->handle, tensor_off(t, offset), size};
    rpc_put_u64s(f, v, 4);
    f[32] = value;
    return simple_call(b->d, RPC_CMD_TENSOR_MEMSET, f, sizeof(f));
}

/* A copy between two buffers of the same server runs there; anything else
 * is TSR_ENOTHANDLED (core then copies through host memory). */
static tsr_status copy_cmd(rpc_dev *d, uint64_t src_stream, uint64_t dst_stream,
                           const tsr_tensor *src, tsr_tensor *dst, bool want_reply)
{
    uint64_t sh, dh;
    uintptr_t sbase, dbase;
    if (!own_buf(d->conn, src->buffer, &sh, &sbase) || !own_buf(d->conn, dst->buffer, &dh, &dbase))
        return TSR_ENOTHANDLED;
    uint8_t f[56];
    const uint64_t v[7] = {src_stream,
                           dst_stream,
                           sh,
                           (uintptr_t)src->data - sbase,
                           dh,
                           (uintptr_t)dst->data - dbase,
                           tsr_nbytes(src)};
    rpc_put_u64s(f, v, 7);
    if (want_reply)
        return simple_call(d, RPC_CMD_TENSOR_COPY, f, sizeof(f));
    lock(d->conn);
    const tsr_status st =
        tsr__rpc_send(d->conn, d->who, RPC_CMD_TENSOR_COPY, false, true, f, 56, NULL, 0, NULL);
    unlock(d->conn);
    return st;
}

static tsr_status rpc_buf_cpy(tsr_buf *buf, const tsr_tensor *src, tsr_tensor *dst)
{
    return copy_cmd(bctx(buf)->d, 0, 0, src, dst, true);
}

static tsr_status rpc_buf_clear(tsr_buf *buf, uint8_t value)
{
    const rpc_buf_ctx *b = bctx(buf);
    uint8_t f[16] = {0};
    rpc_put_u64s(f, &b->handle, 1);
    f[8] = value;
    return simple_call(b->d, RPC_CMD_BUF_CLEAR, f, sizeof(f));
}

static const struct tsr_buf_i rpc_buf_iface = {
    .free = rpc_buf_free,
    .get_base = rpc_buf_base,
    .set_tensor = rpc_buf_set,
    .get_tensor = rpc_buf_get,
    .set_tensor_2d = rpc_buf_set_2d,
    .get_tensor_2d = rpc_buf_get_2d,
    .memset_tensor = rpc_buf_memset,
    .cpy_tensor = rpc_buf_cpy,
    .clear = rpc_buf_clear,
};

/* ---- buffer type ------------------------------------------------------------------------------
 */

static const char *rpc_buft_name(tsr_buft *buft) { return dev_of(buft->dev)->name; }

static tsr_status rpc_buft_alloc(tsr_buft *buft, size_t size, tsr_buf **out)
{
    rpc_dev *d = dev_of(buft->dev);
    uint8_t f[16], reply[24];
    rpc_wr w = {.p = f, .cap = sizeof(f)};
    rpc_wr_u32(&w, d->info.index);
    rpc_wr_u32(&w, 0);
    rpc_wr_u64(&w, size);
    size_t got;
    lock(d->conn);
    tsr_status st =
        tsr__rpc_call(d->conn, d->who, RPC_CMD_BUF_ALLOC, f, sizeof(f), reply, sizeof(reply), &got);
    unlock(d->conn);
    if (st != TSR_OK)
        return st;
    rpc_rd r = rpc_rd_init(reply, got);
    const uint64_t handle = rpc_rd_u64(&r);
    rpc_rd_u64(&r); /* the server's base: this process uses its own */
    const uint64_t rsize = rpc_rd_u64(&r);
    if (r.bad || rsize != size)
        return tsr__error(TSR_EPROTO, "%s: BUF_ALLOC reply of %zu bytes for %zu bytes", d->who, got,
                          size);
    tsr_buf *buf = calloc(1, sizeof(*buf));
    rpc_buf_ctx *b = calloc(1, sizeof(*b));
    if (!buf || !b) {
        free(buf);
        free(b);
        return tsr__error(TSR_ENOMEM, "%s: buffer object", d->who);
    }
    b->d = d;
    b->handle = handle;
    /* Unique per process, aligned, with a gap: never dereferenced. */
    const uintptr_t span = tsr__align_up(size, 1u << 20) + (1u << 20);
    b->base = atomic_fetch_add(&rpc_next_base, span);
    buf->iface = &rpc_buf_iface;
    buf->context = b;
    *out = buf;
    return TSR_OK;
}

static size_t rpc_buft_alignment(tsr_buft *buft)
{
    return (size_t)dev_of(buft->dev)->info.alignment;
}

static size_t rpc_buft_max_size(tsr_buft *buft)
{
    const uint64_t m = dev_of(buft->dev)->info.max_size;
    return m > SIZE_MAX ? SIZE_MAX : (size_t)m;
}

static const struct tsr_buft_i rpc_buft_iface = {
    .get_name = rpc_buft_name,
    .alloc = rpc_buft_alloc,
    .get_alignment = rpc_buft_alignment,
    .get_max_size = rpc_buft_max_size,
};

/* ---- streams ----------------------------------------------------------------------------------
 */

static rpc_stream *sctx(tsr_backend *b) { return b->context; }

bool tsr_backend_is_rpc(tsr_backend *backend)
{
    return backend && backend->iface == &rpc_backend_iface;
}

static const char *rpc_backend_name(tsr_backend *b) { return sctx(b)->d->name; }

static void set_busy(rpc_stream *s, bool busy) { tsr__rpc_set_busy(s->d->conn, &s->sy, busy); }

static void rpc_backend_free(tsr_backend *b)
{
    rpc_stream *s = sctx(b);
    rpc_conn *c = s->d->conn;
    uint8_t f[8];
    rpc_put_u64s(f, &s->handle, 1);
    lock(c);
    if (tsr__rpc_alive(c, s->d->who) == TSR_OK) {
        uint64_t id;
        if (tsr__rpc_send(c, s->d->who, RPC_CMD_STREAM_CLOSE, true, true, f, 8, NULL, 0, &id) ==
                TSR_OK &&
            finish(c, s->d->who, id, RPC_CMD_STREAM_CLOSE) != TSR_OK)
            TSR_LOG_W("%s", tsr_last_error());
    }
    tsr__rpc_stream_remove(c, &s->sy);
    unlock(c);
    tsr__rpc_ser_free(&s->ser);
    tsr__rpc_cache_free(&s->cache);
    free(s);
    free(b);
}

static bool same_conn(const rpc_stream *s, const tsr_tensor *t)
{
    uint64_t h;
    uintptr_t base;
    return own_buf(s->d->conn, t->buffer, &h, &base);
}

/* ---- for rpc_mesh.c -------------------------------------------------------------------------- */

bool tsr__rpc_tensor_where(const tsr_tensor *t, rpc_conn **conn, uint64_t *buf, uint64_t *off)
{
    if (!t->buffer || t->buffer->iface != &rpc_buf_iface)
        return false;
    const rpc_buf_ctx *b = bctx(t->buffer);
    *conn = b->d->conn;
    *buf = b->handle;
    *off = tensor_off(t, 0);
    return true;
}

bool tsr__rpc_stream_where(tsr_backend *b, rpc_conn **conn, uint64_t *stream, const char **who)
{
    if (!tsr_backend_is_rpc(b))
        return false;
    *conn = sctx(b)->d->conn;
    *stream = sctx(b)->handle;
    if (who)
        *who = sctx(b)->d->who;
    return true;
}

void tsr__rpc_stream_set_busy(tsr_backend *b) { set_busy(sctx(b), true); }

size_t tsr__rpc_conn_list(rpc_conn **out, size_t max)
{
    size_t n = 0;
    const rpc_conn *prev = NULL;
    const size_t nd = atomic_load(&rpc_n_devs);
    for (size_t i = 0; i < nd; i++) {
        rpc_conn *c = rpc_devs[i]->conn;
        if (c == prev)
            continue; /* a server's devices are consecutive */
        if (n < max)
            out[n] = c;
        prev = c;
        n++;
    }
    return n;
}

static tsr_status foreign(const rpc_stream *s, const tsr_tensor *t)
{
    return tsr__error(TSR_EUNSUPPORTED, "%s: tensor '%s' is not in this server's memory", s->d->who,
                      t->name);
}

static tsr_status rpc_set_async(tsr_backend *b, tsr_tensor *t, const void *data, size_t offset,
                                size_t size)
{
    rpc_stream *s = sctx(b);
    if (!same_conn(s, t))
        return foreign(s, t);
    return set_rows(bctx(t->buffer), s->handle, false, tensor_off(t, offset), data, size, 1, size,
                    size);
}

static tsr_status rpc_get_async(tsr_backend *b, const tsr_tensor *t, void *data, size_t offset,
                                size_t size)
{
    rpc_stream *s = sctx(b);
    if (!same_conn(s, t))
        return foreign(s, t);
    /* Sent now, read at the next wait (a synchronize at the latest). */
    uint8_t f[32];
    const uint64_t v[4] = {s->handle, bctx(t->buffer)->handle, tensor_off(t, offset), size};
    rpc_put_u64s(f, v, 4);
    lock(s->d->conn);
    const tsr_status st = tsr__rpc_get_later(s->d->conn, s->d->who, f, sizeof(f), data, size);
    unlock(s->d->conn);
    return st;
}

static tsr_status rpc_set_2d_async(tsr_backend *b, tsr_tensor *t, const void *data, size_t offset,
                                   size_t row_size, size_t n_rows, size_t t_stride,
                                   size_t data_stride)
{
    rpc_stream *s = sctx(b);
    if (!same_conn(s, t))
        return foreign(s, t);
    return set_rows(bctx(t->buffer), s->handle, false, tensor_off(t, offset), data, row_size,
                    n_rows, t_stride, data_stride);
}

static tsr_status rpc_get_2d_async(tsr_backend *b, const tsr_tensor *t, void *data, size_t offset,
                                   size_t row_size, size_t n_rows, size_t t_stride,
                                   size_t data_stride)
{
    rpc_stream *s = sctx(b);
    if (!same_conn(s, t))
        return foreign(s, t);
    return get_rows(bctx(t->buffer), s->handle, tensor_off(t, offset), data, row_size, n_rows,
                    t_stride, data_stride);
}

/* Same server: a TENSOR_COPY ordered after both streams. From host memory:
 * the source stream is drained, then the bytes go as a pipelined write. */
static tsr_status rpc_cpy_async(tsr_backend *src_b, tsr_backend *dst_b, const tsr_tensor *src,
                                tsr_tensor *dst)
{
    rpc_stream *s = sctx(dst_b);
    if (!same_conn(s, dst))
        return TSR_ENOTHANDLED;
    if (src->buffer && src->buffer->iface == &rpc_buf_iface && !same_conn(s, src))
        return tsr__rpc_copy_between(src_b, dst_b, src, dst);
    if (same_conn(s, src)) {
        const uint64_t sh = tsr_backend_is_rpc(src_b) && sctx(src_b)->d->conn == s->d->conn
                                ? sctx(src_b)->handle
                                : s->handle;
        if (!tsr_backend_is_rpc(src_b) || sctx(src_b)->d->conn != s->d->conn) {
            const tsr_status st = tsr_backend_synchronize(src_b);
            if (st != TSR_OK)
                return st;
        }
        return copy_cmd(s->d, sh, s->handle, src, dst, false);
    }
    if (!tsr_buf_is_host(src->buffer))
        return TSR_ENOTHANDLED;
    if (src_b != dst_b) {
        const tsr_status st = tsr_backend_synchronize(src_b);
        if (st != TSR_OK)
            return st;
    }
    const size_t n = tsr_nbytes(src);
    return set_rows(bctx(dst->buffer), s->handle, false, tensor_off(dst, 0), src->data, n, 1, n, n);
}

static tsr_status rpc_graph_compute(tsr_backend *b, tsr_graph *g)
{
    rpc_stream *s = sctx(b);
    rpc_conn *c = s->d->conn;
    lock(c);
    tsr_status st = tsr__rpc_alive(c, s->d->who);
    if (st == TSR_OK)
        st = tsr__rpc_serialize(&s->ser, g, own_buf, c, s->d->who);
    if (st != TSR_OK) {
        unlock(c);
        return st;
    }
    const rpc_wr *w = &s->ser.w;
    /* A version-2 server keeps RPC_GRAPH_SLOTS graphs in slots the client
     * names; a version-1 server the last one. */
    const int n_slots = c->version >= 2 ? RPC_GRAPH_SLOTS : 1;
    const uint64_t cached = tsr__rpc_cache_find(&s->cache, n_slots, w, c->epoch);
    uint8_t f[24];
    rpc_wr fw = {.p = f, .cap = sizeof(f)};
    rpc_wr_u64(&fw, s->handle);
    if (cached) {
        rpc_wr_u64(&fw, cached);
        st =
            tsr__rpc_send(c, s->d->who, RPC_CMD_GRAPH_RECOMPUTE, false, true, f, 16, NULL, 0, NULL);
        c->graphs_by_ref++;
    } else {
        const uint64_t id = ++c->next_graph;
        const uint32_t slot = tsr__rpc_cache_put(&s->cache, n_slots, w, id, c->epoch);
        rpc_wr_u64(&fw, id);
        rpc_wr_u32(&fw, s->ser.n);
        rpc_wr_u32(&fw, c->version >= 2 ? slot : 0);
        st = tsr__rpc_send(c, s->d->who, RPC_CMD_GRAPH_COMPUTE, false, true, f, 24, w->p, w->len,
                           NULL);
        c->graphs_sent++;
    }
    if (st == TSR_OK)
        set_busy(s, true);
    unlock(c);
    return st;
}

static tsr_status rpc_synchronize(tsr_backend *b)
{
    rpc_stream *s = sctx(b);
    rpc_conn *c = s->d->conn;
    lock(c);
    const tsr_status st = tsr__rpc_sync(c, &s->sy);
    unlock(c);
    return st;
}

static bool is_rpc_event(const tsr_event *e) { return e->dev->iface == &rpc_dev_iface; }

static tsr_status event_cmd(rpc_dev *d, uint16_t cmd, uint64_t a, uint64_t b, int n)
{
    uint8_t f[16];
    const uint64_t v[2] = {a, b};
    rpc_put_u64s(f, v, n);
    lock(d->conn);
    const tsr_status st =
        tsr__rpc_send(d->conn, d->who, cmd, false, false, f, (size_t)n * 8, NULL, 0, NULL);
    unlock(d->conn);
    return st;
}

static tsr_status rpc_event_record(tsr_backend *b, tsr_event *e)
{
    rpc_stream *s = sctx(b);
    return event_cmd(s->d, RPC_CMD_EVENT_RECORD, ((rpc_event_ctx *)e->context)->handle, s->handle,
                     2);
}

/* An event of the same server is waited for there; any other event is
 * waited for on the host, now (the wait blocks the caller). */
static tsr_status rpc_event_wait(tsr_backend *b, tsr_event *e)
{
    rpc_stream *s = sctx(b);
    if (is_rpc_event(e) && dev_of(e->dev)->conn == s->d->conn) {
        const tsr_status st = event_cmd(s->d, RPC_CMD_EVENT_WAIT, s->handle,
                                        ((rpc_event_ctx *)e->context)->handle, 2);
        if (st == TSR_OK) {
            lock(s->d->conn);
            set_busy(s, true);
            unlock(s->d->conn);
        }
        return st;
    }
    return tsr_event_synchronize(e);
}

static const struct tsr_backend_i rpc_backend_iface = {
    .get_name = rpc_backend_name,
    .free = rpc_backend_free,
    .set_tensor_async = rpc_set_async,
    .get_tensor_async = rpc_get_async,
    .set_tensor_2d_async = rpc_set_2d_async,
    .get_tensor_2d_async = rpc_get_2d_async,
    .cpy_tensor_async = rpc_cpy_async,
    .graph_compute = rpc_graph_compute,
    .synchronize = rpc_synchronize,
    .event_record = rpc_event_record,
    .event_wait = rpc_event_wait,
};

/* ---- devices ----------------------------------------------------------------------------------
 */

static const char *rpc_dev_name(tsr_dev *d) { return dev_of(d)->name; }
static const char *rpc_dev_desc(tsr_dev *d) { return dev_of(d)->desc; }

static tsr_dev_type rpc_dev_type(tsr_dev *d)
{
    (void)d;
    return TSR_DEV_REMOTE;
}

static void rpc_dev_memory(tsr_dev *dev, size_t *free_bytes, size_t *total_bytes)
{
    rpc_dev *d = dev_of(dev);
    uint8_t f[4], reply[16];
    rpc_wr w = {.p = f, .cap = 4};
    rpc_wr_u32(&w, d->info.index);
    size_t got = 0;
    *free_bytes = *total_bytes = 0;
    lock(d->conn);
    const tsr_status st =
        tsr__rpc_call(d->conn, d->who, RPC_CMD_DEV_MEMORY, f, 4, reply, sizeof(reply), &got);
    unlock(d->conn);
    rpc_rd r = rpc_rd_init(reply, got);
    const uint64_t fr = rpc_rd_u64(&r), to = rpc_rd_u64(&r);
    if (st == TSR_OK && !r.bad) {
        *free_bytes = (size_t)fr;
        *total_bytes = (size_t)to;
    }
}

static tsr_dev_caps rpc_dev_caps(tsr_dev *d)
{
    (void)d;
    return (tsr_dev_caps){.async = true, .events = true, .host_buffer = false};
}

static tsr_buft *rpc_dev_buft(tsr_dev *d) { return &dev_of(d)->buft; }

/* Answered locally (this entry must not block): the ops the remote device
 * runs at all. A shape or type it declines is reported, naming the node, by
 * the next synchronize. */
static bool rpc_dev_supports_op(tsr_dev *d, const tsr_tensor *op)
{
    return (int)op->op > TSR_OP_NONE && op->op < TSR_OP_COUNT &&
           (dev_of(d)->info.op_mask >> op->op & 1);
}

/* STREAM_OPEN or EVENT_NEW on d: the server's handle of the new object.
 * The caller holds the connection's mutex. */
static tsr_status new_handle(rpc_dev *d, uint16_t cmd, uint64_t *handle)
{
    uint8_t f[8] = {0}, reply[8];
    rpc_wr w = {.p = f, .cap = 8};
    rpc_wr_u32(&w, d->info.index);
    size_t got;
    tsr_status st = tsr__rpc_call(d->conn, d->who, cmd, f, 8, reply, sizeof(reply), &got);
    rpc_rd r = rpc_rd_init(reply, st == TSR_OK ? got : 0);
    *handle = rpc_rd_u64(&r);
    if (st == TSR_OK && r.bad)
        st = tsr__error(TSR_EPROTO, "%s: %s reply of %zu bytes", d->who, tsr__rpc_cmd_name(cmd),
                        got);
    return st;
}

static tsr_status rpc_dev_backend_new(tsr_dev *dev, tsr_backend **out)
{
    rpc_dev *d = dev_of(dev);
    tsr_backend *b = calloc(1, sizeof(*b));
    rpc_stream *s = calloc(1, sizeof(*s));
    if (!b || !s) {
        free(b);
        free(s);
        return tsr__error(TSR_ENOMEM, "%s: stream objects", d->who);
    }
    lock(d->conn);
    tsr_status st = new_handle(d, RPC_CMD_STREAM_OPEN, &s->handle);
    s->sy = (rpc_sync){.handle = s->handle, .who = d->who};
    if (st == TSR_OK && !tsr__rpc_stream_add(d->conn, &s->sy))
        st = tsr__error(TSR_ENOMEM, "%s: stream list", d->who); /* the server frees it at exit */
    unlock(d->conn);
    if (st != TSR_OK) {
        free(b);
        free(s);
        return st;
    }
    s->d = d;
    b->iface = &rpc_backend_iface;
    b->dev = dev;
    b->context = s;
    *out = b;
    return TSR_OK;
}

static tsr_status rpc_dev_event_new(tsr_dev *dev, tsr_event **out)
{
    rpc_dev *d = dev_of(dev);
    tsr_event *e = calloc(1, sizeof(*e));
    rpc_event_ctx *ec = calloc(1, sizeof(*ec));
    if (!e || !ec) {
        free(e);
        free(ec);
        return tsr__error(TSR_ENOMEM, "%s: event", d->who);
    }
    lock(d->conn);
    tsr_status st = new_handle(d, RPC_CMD_EVENT_NEW, &ec->handle);
    unlock(d->conn);
    if (st != TSR_OK) {
        free(e);
        free(ec);
        return st;
    }
    e->dev = dev;
    e->context = ec;
    *out = e;
    return TSR_OK;
}

static void rpc_dev_event_free(tsr_dev *dev, tsr_event *e)
{
    rpc_dev *d = dev_of(dev);
    rpc_event_ctx *ec = e->context;
    lock(d->conn);
    if (tsr__rpc_alive(d->conn, d->who) == TSR_OK) {
        uint8_t f[8];
        rpc_put_u64s(f, &ec->handle, 1);
        tsr__rpc_send(d->conn, d->who, RPC_CMD_EVENT_FREE, false, false, f, 8, NULL, 0, NULL);
    }
    unlock(d->conn);
    free(ec);
    free(e);
}

static tsr_status rpc_dev_event_sync(tsr_dev *dev, tsr_event *e)
{
    uint8_t f[8];
    rpc_put_u64s(f, &((rpc_event_ctx *)e->context)->handle, 1);
    return simple_call(dev_of(dev), RPC_CMD_EVENT_SYNC, f, 8);
}

static const struct tsr_dev_i rpc_dev_iface = {
    .get_name = rpc_dev_name,
    .get_description = rpc_dev_desc,
    .get_type = rpc_dev_type,
    .get_memory = rpc_dev_memory,
    .get_caps = rpc_dev_caps,
    .get_buft = rpc_dev_buft,
    .supports_op = rpc_dev_supports_op,
    .backend_new = rpc_dev_backend_new,
    .event_new = rpc_dev_event_new,
    .event_free = rpc_dev_event_free,
    .event_synchronize = rpc_dev_event_sync,
};

/* ---- registry ----------------------------------------------------------------------------------
 */

static tsr_status add_server(const char *endpoint, const tsr_rpc_options *options, size_t *first,
                             size_t *n);

static pthread_once_t env_once = PTHREAD_ONCE_INIT;

/* TSR_RPC_SERVERS: connected the first time the registry is asked for its
 * devices; a server that cannot be reached is a warning. */
static void env_servers(void)
{
    const char *list = getenv("TSR_RPC_SERVERS");
    if (!list)
        return;
    for (const char *p = list; *p;) {
        const char *q = strchr(p, ',');
        const size_t len = q ? (size_t)(q - p) : strlen(p);
        char ep[256];
        if (len > 0 && len < sizeof(ep)) {
            memcpy(ep, p, len);
            ep[len] = '\0';
            if (add_server(ep, NULL, NULL, NULL) != TSR_OK)
                TSR_LOG_W("TSR_RPC_SERVERS: %s", tsr_last_error());
        }
        p = q ? q + 1 : p + len;
    }
}

static const char *rpc_reg_name(tsr_reg *r)
{
    (void)r;
    return "rpc";
}

static size_t rpc_reg_dev_count(tsr_reg *r)
{
    (void)r;
    pthread_once(&env_once, env_servers);
    return atomic_load(&rpc_n_devs);
}

static tsr_dev *rpc_reg_dev(tsr_reg *r, size_t i)
{
    (void)r;
    return i < atomic_load(&rpc_n_devs) ? &rpc_devs[i]->dev : NULL;
}

static void *rpc_reg_get_proc(tsr_reg *r, const char *name)
{
    (void)r;
    if (strcmp(name, "tsr_rpc_add_server") == 0)
        return (void *)(tsr_rpc_add_server_fn)tsr_rpc_add_server;
    if (strcmp(name, "tsr_rpc_round_trips") == 0)
        return (void *)(tsr_rpc_round_trips_fn)tsr_rpc_round_trips;
    return tsr__rpc_comm_proc(name);
}

static const struct tsr_reg_i rpc_reg_iface = {
    .get_name = rpc_reg_name,
    .get_dev_count = rpc_reg_dev_count,
    .get_dev = rpc_reg_dev,
    .get_proc = rpc_reg_get_proc,
};

tsr_reg *tsr_rpc_reg(void)
{
    rpc_reg.iface = &rpc_reg_iface;
    return &rpc_reg;
}

static tsr_status add_server(const char *endpoint, const tsr_rpc_options *options, size_t *first,
                             size_t *n)
{
    tsr_rpc_options opt = options ? *options : (tsr_rpc_options){0};
    if (!opt.tls_ca_file)
        opt.tls_ca_file = getenv("TSR_RPC_TLS_CA");
    if (!opt.tls_cert_file)
        opt.tls_cert_file = getenv("TSR_RPC_TLS_CERT");
    if (!opt.tls_key_file)
        opt.tls_key_file = getenv("TSR_RPC_TLS_KEY");
    char url[256];
    tsr_status st = tsr__rpc_endpoint_url(endpoint, url, sizeof(url));
    rpc_conn *c = NULL;
    rpc_dev_info *infos = NULL;
    uint32_t count = 0;
    if (st == TSR_OK)
        st = tsr__rpc_conn_open(url, &opt, &c, &infos, &count);
    if (st != TSR_OK)
        return st;
    pthread_mutex_lock(&rpc_reg_lock);
    const size_t base = atomic_load(&rpc_n_devs);
    if (base + count > RPC_MAX_DEVICES) {
        pthread_mutex_unlock(&rpc_reg_lock);
        free(infos);
        /* The connection stays open but unused: devices are never removed. */
        return tsr__error(TSR_ENOMEM, "rpc: %s: %u more devices exceed the limit of %d", url, count,
                          RPC_MAX_DEVICES);
    }
    for (uint32_t i = 0; i < count && st == TSR_OK; i++) {
        rpc_dev *d = calloc(1, sizeof(*d));
        if (!d) {
            st = tsr__error(TSR_ENOMEM, "rpc: device record");
            break;
        }
        d->conn = c;
        d->info = infos[i];
        snprintf(d->name, sizeof(d->name), "rpc%zu", base + i);
        snprintf(d->who, sizeof(d->who), "%s (%.32s at %.200s)", d->name, d->info.name, url);
        snprintf(d->desc, sizeof(d->desc), "%.32s at %.100s: %.200s", d->info.name, url,
                 d->info.desc);
        d->dev = (tsr_dev){.iface = &rpc_dev_iface, .reg = tsr_rpc_reg(), .context = d};
        d->buft = (tsr_buft){.iface = &rpc_buft_iface, .dev = &d->dev};
        rpc_devs[base + i] = d;
    }
    if (st == TSR_OK)
        atomic_store(&rpc_n_devs, base + count);
    pthread_mutex_unlock(&rpc_reg_lock);
    free(infos);
    if (st != TSR_OK)
        return st;
    if (first)
        *first = base;
    if (n)
        *n = count;
    TSR_LOG_I("rpc: %s: %u device(s) added as rpc%zu..", url, count, base);
    return TSR_OK;
}

tsr_status tsr_rpc_add_server(const char *endpoint, const tsr_rpc_options *options, size_t *first,
                              size_t *n)
{
    /* The built-in registries (and TSR_RPC_SERVERS) come first. */
    tsr_reg_count();
    pthread_once(&env_once, env_servers);
    return add_server(endpoint, options, first, n);
}

uint64_t tsr_rpc_round_trips(tsr_dev *dev)
{
    if (!dev || dev->iface != &rpc_dev_iface)
        return 0;
    rpc_conn *c = dev_of(dev)->conn;
    lock(c);
    const uint64_t n = c->round_trips;
    unlock(c);
    return n;
}

void tsr_rpc_stats_get(tsr_dev *dev, tsr_rpc_stats *out)
{
    *out = (tsr_rpc_stats){0};
    if (!dev || dev->iface != &rpc_dev_iface)
        return;
    rpc_conn *c = dev_of(dev)->conn;
    lock(c);
    *out = (tsr_rpc_stats){c->round_trips, c->graphs_sent, c->graphs_by_ref};
    unlock(c);
}
