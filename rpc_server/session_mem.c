/* rpc_server/session_mem.c — data movement: TENSOR_SET / _2D, TENSOR_GET /
 * _2D, TENSOR_MEMSET and TENSOR_COPY.
 *
 * Not graphs or object lifetimes. Every byte range is checked against the
 * buffer's size with overflow-checked arithmetic before anything moves; a
 * request naming a stream first waits for that stream's queued work, one
 * naming none waits for all of the client's streams. Key design choice: for
 * buffers in host memory the bytes go straight between the socket and the
 * buffer (no staging copy); other memories go through a bounded staging
 * area in chunks.
 */
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "rpc_server/server.h"

#define CHUNK (4u << 20)       /* staging chunk for non-host memory */
#define PACK (1u << 20)        /* rows smaller than this are packed into staging to send */
#define DIRECT_ROW (64u << 10) /* rows at least this big are sent from memory one by one */

static uint8_t *host_ptr(const srv_buf *b, uint64_t off) { return b->host ? b->host + off : NULL; }

static void quiesce_for(srv_session *s, srv_stream *a, srv_stream *b)
{
    if (!a && !b) {
        tsr__srv_quiesce_all(s);
        return;
    }
    if (a)
        tsr__srv_stream_quiesce(a);
    if (b && b != a)
        tsr__srv_stream_quiesce(b);
}

/* Rows i < n at off + i·stride, each row bytes long, inside the buffer;
 * *packed = n·row. Overlapping rows are refused (as tsr_tensor_set_2d does). */
static tsr_status range_2d(srv_session *s, uint64_t handle, uint64_t off, uint64_t row, uint64_t n,
                           uint64_t stride, uint64_t *packed, srv_buf **out, const char *what)
{
    if (__builtin_mul_overflow(row, n, packed))
        return tsr__error(TSR_ERANGE, "%s: %llu rows of %llu bytes overflow", what,
                          (unsigned long long)n, (unsigned long long)row);
    if (n == 0 || row == 0)
        return tsr__srv_buf_range(s, handle, off, 0, out, what);
    uint64_t last;
    if (__builtin_mul_overflow(n - 1, stride, &last) || __builtin_add_overflow(off, last, &last))
        return tsr__error(TSR_ERANGE, "%s: %llu rows of stride %llu overflow", what,
                          (unsigned long long)n, (unsigned long long)stride);
    if (n > 1 && row > stride)
        return tsr__error(TSR_EINVAL, "%s: rows of %llu bytes overlap at stride %llu", what,
                          (unsigned long long)row, (unsigned long long)stride);
    return tsr__srv_buf_range(s, handle, last, row, out, what);
}

/* ---- set ------------------------------------------------------------------------------------- */

/* Receives `size` bytes from the connection into [off, off + size) of b. */
static tsr_status recv_into(srv_session *s, srv_buf *b, uint64_t off, uint64_t size,
                            uint64_t *unread)
{
    const int t = s->cfg->io_timeout_ms;
    uint8_t *dst = host_ptr(b, off);
    if (dst) {
        const tsr_status st = tsr__rpc_read(&s->rd, dst, (size_t)size, t);
        if (st != TSR_OK)
            return s->io_err = st;
        *unread -= size;
        return TSR_OK;
    }
    uint8_t *tmp = tsr__srv_staging(s, (size_t)TSR_MIN(size, (uint64_t)CHUNK));
    if (!tmp)
        return tsr__error(TSR_ENOMEM, "staging of %u bytes", CHUNK);
    for (uint64_t done = 0; done < size;) {
        const size_t k = (size_t)TSR_MIN(size - done, (uint64_t)CHUNK);
        tsr_status st = tsr__rpc_read(&s->rd, tmp, k, t);
        if (st != TSR_OK)
            return s->io_err = st;
        *unread -= k;
        if ((st = tsr_tensor_set(&b->span, tmp, (size_t)(off + done), k)) != TSR_OK)
            return st;
        done += k;
    }
    return TSR_OK;
}

/* The fields common to TENSOR_SET(_2D) and TENSOR_GET(_2D): stream,
 * buffer, offset, row (and rows, stride for 2-D), resolved. */
typedef struct {
    srv_stream *sp;
    srv_buf *b;
    uint64_t off, row, n, stride;
    uint64_t packed; /* n · row */
} xfer;

/* Reads those fields from r, which must hold nothing more, makes the stream
 * the current one and checks the range. */
static tsr_status xfer_open(srv_session *s, rpc_rd *r, bool two_d, const char *what, xfer *x)
{
    const uint64_t sh = rpc_rd_u64(r), bh = rpc_rd_u64(r);
    x->off = rpc_rd_u64(r);
    x->row = rpc_rd_u64(r);
    x->n = two_d ? rpc_rd_u64(r) : 1;
    x->stride = two_d ? rpc_rd_u64(r) : x->row;
    if (r->bad || rpc_rd_left(r) != 0)
        return tsr__error(TSR_EPROTO, "payload of %zu bytes does not match the layout", r->n);
    tsr_status st = tsr__srv_stream_get(s, sh, true, &x->sp, "stream");
    if (st != TSR_OK)
        return st;
    s->cur_stream = x->sp;
    return range_2d(s, bh, x->off, x->row, x->n, x->stride, &x->packed, &x->b, what);
}

tsr_status tsr__srv_tensor_set(srv_session *s, const rpc_hdr *h, bool two_d, uint64_t *unread)
{
    const char *what = two_d ? "TENSOR_SET_2D" : "TENSOR_SET";
    const size_t fixed = two_d ? 48 : 32;
    if (h->length < fixed)
        return tsr__error(TSR_EPROTO, "payload of %llu bytes (at least %zu)",
                          (unsigned long long)h->length, fixed);
    uint8_t f[48];
    tsr_status st = tsr__rpc_read(&s->rd, f, fixed, s->cfg->io_timeout_ms);
    if (st != TSR_OK)
        return s->io_err = st;
    *unread -= fixed;
    rpc_rd r = rpc_rd_init(f, fixed);
    xfer x;
    if ((st = xfer_open(s, &r, two_d, what, &x)) != TSR_OK)
        return st;
    if (*unread != x.packed)
        return tsr__error(TSR_EPROTO, "%llu data bytes declared but the frame carries %llu",
                          (unsigned long long)x.packed, (unsigned long long)*unread);
    quiesce_for(s, x.sp, NULL);
    if (!two_d || x.stride == x.row)
        return recv_into(s, x.b, x.off, x.packed, unread);
    for (uint64_t i = 0; i < x.n && st == TSR_OK; i++)
        st = recv_into(s, x.b, x.off + i * x.stride, x.row, unread);
    return st;
}

/* ---- get ------------------------------------------------------------------------------------- */

static tsr_status send_hdr(srv_session *s, const rpc_hdr *req, uint64_t len)
{
    const rpc_hdr h = {.magic = RPC_MAGIC,
                       .version = s->version,
                       .cmd = req->cmd,
                       .id = req->id,
                       .flags = RPC_F_REPLY,
                       .length = len};
    uint8_t hb[RPC_HDR_SIZE];
    tsr__rpc_hdr_encode(&h, hb);
    const rpc_iov iov = {hb, sizeof(hb)};
    const tsr_status st = s->io->send_all(s->io, &iov, 1, s->cfg->io_timeout_ms);
    return st == TSR_OK ? st : (s->io_err = st);
}

static tsr_status send_bytes(srv_session *s, const void *p, size_t n)
{
    const rpc_iov iov = {p, n};
    const tsr_status st = s->io->send_all(s->io, &iov, 1, s->cfg->io_timeout_ms);
    return st == TSR_OK ? st : (s->io_err = st);
}

/* Reads everything first (into staging where needed), so a failure can
 * still be answered with an error reply; then sends. Host memory needs no
 * staging for contiguous reads or large rows. */
tsr_status tsr__srv_tensor_get(srv_session *s, srv_req *q, bool two_d, bool *replied)
{
    const char *what = two_d ? "TENSOR_GET_2D" : "TENSOR_GET";
    xfer x;
    tsr_status st = xfer_open(s, &q->p, two_d, what, &x);
    if (st != TSR_OK)
        return st;
    const uint64_t off = x.off, row = x.row, n = x.n, stride = x.stride, packed = x.packed;
    srv_buf *b = x.b;
    if (!(q->hdr.flags & RPC_F_REPLY_WANTED))
        return TSR_OK; /* nobody would read the data */
    quiesce_for(s, x.sp, NULL);
    if (packed == 0) {
        *replied = true;
        return send_hdr(s, &q->hdr, 0);
    }
    const uint8_t *src = host_ptr(b, off);
    const bool contiguous = !two_d || stride == row || n <= 1;
    if (src && (contiguous || row >= DIRECT_ROW)) {
        *replied = true;
        if ((st = send_hdr(s, &q->hdr, packed)) != TSR_OK)
            return st;
        if (contiguous)
            return send_bytes(s, src, (size_t)packed);
        for (uint64_t i = 0; i < n && st == TSR_OK; i++)
            st = send_bytes(s, src + i * stride, (size_t)row);
        return st;
    }
    /* Non-host memory, or small strided rows: pack into staging by chunks.
     * For non-host memory the whole read happens first, so an error can
     * still be reported properly. */
    if (!src) {
        uint8_t *tmp = tsr__srv_staging(s, (size_t)packed);
        if (!tmp && packed)
            return tsr__error(TSR_ENOMEM, "%s: staging of %llu bytes", what,
                              (unsigned long long)packed);
        for (uint64_t i = 0; i < n && st == TSR_OK && row; i++)
            st = tsr_tensor_get(&b->span, tmp + i * row, (size_t)(off + i * stride), (size_t)row);
        if (st != TSR_OK)
            return st;
        *replied = true;
        if ((st = send_hdr(s, &q->hdr, packed)) == TSR_OK)
            st = send_bytes(s, tmp, (size_t)packed);
        return st;
    }
    uint8_t *tmp = tsr__srv_staging(s, PACK);
    if (!tmp)
        return tsr__error(TSR_ENOMEM, "%s: staging of %u bytes", what, PACK);
    *replied = true;
    if ((st = send_hdr(s, &q->hdr, packed)) != TSR_OK)
        return st;
    const uint64_t per = PACK / row;
    for (uint64_t i = 0; i < n && st == TSR_OK; i += per) {
        const uint64_t k = TSR_MIN(per, n - i);
        for (uint64_t j = 0; j < k; j++)
            memcpy(tmp + j * row, src + (i + j) * stride, (size_t)row);
        st = send_bytes(s, tmp, (size_t)(k * row));
    }
    return st;
}

/* ---- memset and copy ------------------------------------------------------------------------- */

tsr_status tsr__srv_tensor_memset(srv_session *s, srv_req *q)
{
    const uint64_t sh = rpc_rd_u64(&q->p), bh = rpc_rd_u64(&q->p), off = rpc_rd_u64(&q->p);
    const uint64_t size = rpc_rd_u64(&q->p);
    const uint8_t value = rpc_rd_u8(&q->p);
    const uint8_t *pad = rpc_rd_bytes(&q->p, 7);
    if (q->p.bad || rpc_rd_left(&q->p) != 0 || memcmp(pad, "\0\0\0\0\0\0\0", 7) != 0)
        return tsr__error(TSR_EPROTO, "a TENSOR_MEMSET payload is 40 bytes, zero padded");
    srv_stream *sp;
    tsr_status st = tsr__srv_stream_get(s, sh, true, &sp, "stream");
    if (st != TSR_OK)
        return st;
    s->cur_stream = sp;
    srv_buf *b;
    if ((st = tsr__srv_buf_range(s, bh, off, size, &b, "TENSOR_MEMSET")) != TSR_OK)
        return st;
    quiesce_for(s, sp, NULL);
    uint8_t *dst = host_ptr(b, off);
    if (dst) {
        memset(dst, value, (size_t)size);
        return TSR_OK;
    }
    return size ? tsr_tensor_memset(&b->span, value, (size_t)off, (size_t)size) : TSR_OK;
}

tsr_status tsr__srv_tensor_copy(srv_session *s, srv_req *q)
{
    const uint64_t ssh = rpc_rd_u64(&q->p), dsh = rpc_rd_u64(&q->p);
    const uint64_t sbh = rpc_rd_u64(&q->p), soff = rpc_rd_u64(&q->p);
    const uint64_t dbh = rpc_rd_u64(&q->p), doff = rpc_rd_u64(&q->p);
    const uint64_t size = rpc_rd_u64(&q->p);
    if (q->p.bad || rpc_rd_left(&q->p) != 0)
        return tsr__error(TSR_EPROTO, "a TENSOR_COPY payload is 56 bytes");
    srv_stream *ss, *ds;
    tsr_status st = tsr__srv_stream_get(s, dsh, true, &ds, "destination stream");
    s->cur_stream = ds;
    if (st == TSR_OK)
        st = tsr__srv_stream_get(s, ssh, true, &ss, "source stream");
    srv_buf *sb, *db;
    if (st == TSR_OK)
        st = tsr__srv_buf_range(s, sbh, soff, size, &sb, "TENSOR_COPY source");
    if (st == TSR_OK)
        st = tsr__srv_buf_range(s, dbh, doff, size, &db, "TENSOR_COPY destination");
    if (st != TSR_OK)
        return st;
    quiesce_for(s, ss, ds);
    uint8_t *src = host_ptr(sb, soff), *dst = host_ptr(db, doff);
    if (src && dst) {
        memmove(dst, src, (size_t)size);
        return TSR_OK;
    }
    uint8_t *tmp = tsr__srv_staging(s, (size_t)TSR_MIN(size, (uint64_t)CHUNK));
    if (!tmp && size)
        return tsr__error(TSR_ENOMEM, "TENSOR_COPY: staging of %u bytes", CHUNK);
    /* Backwards when an overlapping destination lies after the source. */
    const bool back = sb == db && doff > soff && doff < soff + size;
    for (uint64_t done = 0; done < size && st == TSR_OK;) {
        const uint64_t k = TSR_MIN(size - done, (uint64_t)CHUNK);
        const uint64_t at = back ? size - done - k : done;
        st = tsr_tensor_get(&sb->span, tmp, (size_t)(soff + at), (size_t)k);
        if (st == TSR_OK)
            st = tsr_tensor_set(&db->span, tmp, (size_t)(doff + at), (size_t)k);
        done += k;
    }
    return st;
}
