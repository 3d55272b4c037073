/* rpc_server/session.c — one client connection: the frame loop, the
 * handshake (HELLO, version negotiation, AUTH), dispatch, replies and
 * deferred errors.
 *
 * Not the commands' work (session_objects.c, session_mem.c,
 * session_graph.c). Every header field is checked before it is used; a bad
 * request is answered with a status and a reason and the connection goes on
 * wherever the frame's length can still be trusted (bad magic or version,
 * or a refused payload larger than RPC_DISCARD_MAX, end it). A payload is
 * read into memory that grows with the bytes that actually arrive, never
 * to the size the header claims.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "rpc_server/server.h"

#define SRV_READ_BUF (256u << 10)

bool tsr__srv_session_init(srv_session *s, const srv_config *cfg, rpc_io *io)
{
    *s = (srv_session){.cfg = cfg, .io = io, .next_vbase = 1ull << 44};
    return tsr__rpc_reader_init(&s->rd, io, SRV_READ_BUF);
}

void tsr__srv_session_free(srv_session *s)
{
    tsr__srv_quiesce_all(s);
    tsr__srv_mesh_free(s->mesh);
    free(s->acc);
    tsr__srv_objects_free(s);
    tsr__srv_handles_free(&s->h);
    tsr__rpc_reader_free(&s->rd);
    free(s->msg);
    free(s->reply.p);
    free(s->staging);
    *s = (srv_session){0};
}

uint8_t *tsr__srv_staging(srv_session *s, size_t n)
{
    if (n <= s->staging_cap)
        return s->staging;
    uint8_t *p = realloc(s->staging, n);
    if (!p)
        return NULL;
    s->staging = p;
    s->staging_cap = n;
    return p;
}

/* ---- replies and deferred errors ------------------------------------------------------------ */

tsr_status tsr__srv_send_reply(srv_session *s, const rpc_hdr *req, tsr_status status,
                               const rpc_iov *iov, int n)
{
    uint64_t len = 0;
    for (int i = 0; i < n; i++)
        len += iov[i].n;
    const rpc_hdr h = {.magic = RPC_MAGIC,
                       .version = s->version ? s->version : 1,
                       .cmd = req->cmd,
                       .id = req->id,
                       .flags = RPC_F_REPLY,
                       .status = (int32_t)status,
                       .length = len};
    uint8_t hb[RPC_HDR_SIZE];
    tsr__rpc_hdr_encode(&h, hb);
    rpc_iov all[4] = {{hb, sizeof(hb)}};
    for (int i = 0; i < n && i < 3; i++)
        all[1 + i] = iov[i];
    const tsr_status st = s->io->send_all(s->io, all, 1 + (n < 3 ? n : 3), s->cfg->io_timeout_ms);
    if (st != TSR_OK)
        s->io_err = st;
    return st;
}

/* An error reply: the status in the header, "u16 length + text" as payload. */
static tsr_status send_error(srv_session *s, const rpc_hdr *req, tsr_status status,
                             const char *reason)
{
    const size_t n = strnlen(reason, RPC_REASON_MAX);
    uint8_t len[2] = {(uint8_t)(n & 0xff), (uint8_t)(n >> 8)};
    const rpc_iov iov[2] = {{len, 2}, {reason, n}};
    return tsr__srv_send_reply(s, req, status, iov, 2);
}

static void defer(srv_session *s, tsr_status st, const char *reason)
{
    if (s->cur_stream) {
        if (s->cur_stream->err == TSR_OK) {
            s->cur_stream->err = st;
            snprintf(s->cur_stream->err_msg, sizeof(s->cur_stream->err_msg), "%s", reason);
        }
    } else if (s->deferred == TSR_OK) {
        s->deferred = st;
        snprintf(s->deferred_msg, sizeof(s->deferred_msg), "%s", reason);
    }
}

/* ---- handshake ----------------------------------------------------------------------------- */

static tsr_status hello(srv_session *s, srv_req *q)
{
    const uint16_t vmin = rpc_rd_u16(&q->p), vmax = rpc_rd_u16(&q->p);
    const uint32_t reserved = rpc_rd_u32(&q->p);
    const uint64_t caps = rpc_rd_u64(&q->p);
    const uint8_t *nonce = rpc_rd_bytes(&q->p, RPC_NONCE_SIZE);
    (void)caps;
    s->close = true; /* unless it succeeds */
    if (q->p.bad || rpc_rd_left(&q->p) != 0 || reserved != 0)
        return tsr__error(TSR_EPROTO, "a HELLO payload is 48 bytes with a zero reserved field");
    if (s->version != 0)
        return tsr__error(TSR_EPROTO, "HELLO sent twice");
    const uint16_t lo = TSR_MAX(vmin, RPC_VERSION_MIN), hi = TSR_MIN(vmax, RPC_VERSION_MAX);
    if (lo > hi)
        return tsr__error(TSR_EPROTO,
                          "no common protocol version: the client speaks %u..%u, this server "
                          "%u..%u",
                          vmin, vmax, RPC_VERSION_MIN, RPC_VERSION_MAX);
    memcpy(s->client_nonce, nonce, RPC_NONCE_SIZE);
    tsr_status st = tsr__rpc_random(s->server_nonce, RPC_NONCE_SIZE);
    if (st != TSR_OK)
        return st;
    s->version = hi;
    s->authed = s->cfg->token.len == 0;
    s->close = false;
    rpc_wr *w = &s->reply;
    rpc_wr_u16(w, hi);
    rpc_wr_u16(w, s->cfg->token.len ? RPC_AUTH_HMAC_SHA256 : RPC_AUTH_NONE);
    rpc_wr_u32(w, 0);
    rpc_wr_u64(w, hi >= 2 ? RPC_CAPS_V2 : RPC_CAPS_V1);
    rpc_wr_bytes(w, s->server_nonce, RPC_NONCE_SIZE);
    rpc_wr_u32(w, (uint32_t)s->cfg->n_devs);
    rpc_wr_u32(w, 0);
    rpc_wr_u64(w, RPC_GRAPH_MAX_BYTES);
    return TSR_OK;
}

static tsr_status auth(srv_session *s, srv_req *q)
{
    const uint8_t *mac = rpc_rd_bytes(&q->p, RPC_MAC_SIZE);
    if (q->p.bad || rpc_rd_left(&q->p) != 0) {
        s->close = true;
        return tsr__error(TSR_EPROTO, "an AUTH payload is %d bytes", RPC_MAC_SIZE);
    }
    if (s->cfg->token.len == 0)
        return tsr__error(TSR_EPROTO, "this server takes no token");
    if (s->authed)
        return tsr__error(TSR_EPROTO, "already authenticated");
    uint8_t want[RPC_MAC_SIZE];
    tsr_status st =
        tsr__rpc_auth_mac(&s->cfg->token, false, s->client_nonce, s->server_nonce, want);
    if (st == TSR_OK && !tsr__rpc_mac_equal(mac, want))
        st = tsr__error(TSR_EAUTH, "authentication failed: wrong token");
    if (st != TSR_OK) {
        s->close = true;
        return st;
    }
    uint8_t proof[RPC_MAC_SIZE];
    if ((st = tsr__rpc_auth_mac(&s->cfg->token, true, s->client_nonce, s->server_nonce, proof)) !=
        TSR_OK)
        return st;
    s->authed = true;
    rpc_wr_bytes(&s->reply, proof, RPC_MAC_SIZE);
    return TSR_OK;
}

/* ---- dispatch -------------------------------------------------------------------------------- */

static tsr_status ping(srv_session *s, srv_req *q)
{
    rpc_wr_bytes(&s->reply, q->p.p, q->p.n);
    return TSR_OK;
}

static tsr_status dispatch(srv_session *s, srv_req *q, bool *replied)
{
    switch ((rpc_cmd)q->hdr.cmd) {
    case RPC_CMD_HELLO:
        return hello(s, q);
    case RPC_CMD_AUTH:
        return auth(s, q);
    case RPC_CMD_PING:
        return ping(s, q);
    case RPC_CMD_DEV_LIST:
    case RPC_CMD_DEV_DESC:
    case RPC_CMD_DEV_MEMORY:
    case RPC_CMD_DEV_CAPS:
        return tsr__srv_dev_cmd(s, q);
    case RPC_CMD_SUPPORTS_OP:
        return tsr__srv_supports_op(s, q);
    case RPC_CMD_BUF_ALLOC:
    case RPC_CMD_BUF_FREE:
    case RPC_CMD_BUF_BASE:
    case RPC_CMD_BUF_CLEAR:
        return tsr__srv_buf_cmd(s, q);
    case RPC_CMD_TENSOR_GET:
        return tsr__srv_tensor_get(s, q, false, replied);
    case RPC_CMD_TENSOR_GET_2D:
        return tsr__srv_tensor_get(s, q, true, replied);
    case RPC_CMD_TENSOR_MEMSET:
        return tsr__srv_tensor_memset(s, q);
    case RPC_CMD_TENSOR_COPY:
        return tsr__srv_tensor_copy(s, q);
    case RPC_CMD_STREAM_OPEN:
    case RPC_CMD_STREAM_CLOSE:
    case RPC_CMD_SYNCHRONIZE:
        return tsr__srv_stream_cmd(s, q);
    case RPC_CMD_GRAPH_COMPUTE:
        return tsr__srv_graph_compute(s, q);
    case RPC_CMD_GRAPH_RECOMPUTE:
        return tsr__srv_graph_recompute(s, q);
    case RPC_CMD_EVENT_NEW:
    case RPC_CMD_EVENT_FREE:
    case RPC_CMD_EVENT_RECORD:
    case RPC_CMD_EVENT_WAIT:
    case RPC_CMD_EVENT_SYNC:
        return tsr__srv_event_cmd(s, q);
    case RPC_CMD_MESH_JOIN:
        return tsr__srv_mesh_join(s, q);
    case RPC_CMD_PEER_ATTACH:
        *replied = true; /* it answers itself (before the link's traffic) or fails */
        {
            const tsr_status st = tsr__srv_peer_attach(s, q);
            *replied = s->handed_over;
            return st;
        }
    case RPC_CMD_PEER_SEND:
    case RPC_CMD_PEER_RECV:
        return tsr__srv_peer_copy(s, q);
    case RPC_CMD_ALLREDUCE:
        return tsr__srv_allreduce(s, q);
    case RPC_CMD_PEER_DATA:
        return tsr__error(TSR_EPROTO, "PEER_DATA outside a peer link");
    case RPC_CMD_TENSOR_SET:
    case RPC_CMD_TENSOR_SET_2D:
        break; /* handled before the payload is read */
    }
    return tsr__error(TSR_EINTERNAL, "command 0x%x has no handler", q->hdr.cmd);
}

/* Reads the whole payload into s->msg, growing it only as bytes arrive. */
static tsr_status read_payload(srv_session *s, uint64_t len)
{
    size_t got = 0;
    while (got < len) {
        if (got == s->msg_cap) {
            size_t cap = s->msg_cap ? 2 * s->msg_cap : 4096;
            cap = (size_t)TSR_MIN((uint64_t)cap, len);
            uint8_t *p = realloc(s->msg, cap);
            if (!p)
                return tsr__error(TSR_ENOMEM, "a %llu-byte payload", (unsigned long long)len);
            s->msg = p;
            s->msg_cap = cap;
        }
        const size_t k = (size_t)TSR_MIN((uint64_t)(s->msg_cap - got), len - got);
        const tsr_status st = tsr__rpc_read(&s->rd, s->msg + got, k, s->cfg->io_timeout_ms);
        if (st != TSR_OK) {
            s->io_err = st;
            return st;
        }
        got += k;
    }
    return TSR_OK;
}

/* One frame whose header has been read. Returns non-OK to end the session. */
static tsr_status frame(srv_session *s, const rpc_hdr *h)
{
    if (h->magic != RPC_MAGIC)
        return tsr__error(TSR_EPROTO, "frame %llu: bad magic 0x%08x", (unsigned long long)s->frames,
                          h->magic);
    if (s->version == 0 && (h->cmd != RPC_CMD_HELLO || h->version != 1)) {
        tsr__error(TSR_EPROTO, "expected HELLO (version 1) first, got command 0x%x version %u",
                   h->cmd, h->version);
        send_error(s, h, TSR_EPROTO, tsr_last_error());
        return TSR_EPROTO;
    }
    if (s->version != 0 && h->cmd != RPC_CMD_HELLO && h->version != s->version) {
        tsr__error(TSR_EPROTO, "frame of version %u on a version-%u connection", h->version,
                   s->version);
        send_error(s, h, TSR_EPROTO, tsr_last_error());
        return TSR_EPROTO;
    }
    const char *name = "?";
    uint64_t max = 0;
    const bool known = tsr__rpc_cmd_info(h->cmd, &name, &max);
    s->cur_stream = NULL;
    s->reply.len = 0;
    s->reply.bad = false;
    s->io_err = TSR_OK;
    bool replied = false, raw_reason = false;
    uint64_t unread = h->length;
    tsr_status st;
    if (h->flags & ~(uint32_t)RPC_F_REPLY_WANTED)
        st = tsr__error(TSR_EPROTO, "flags 0x%x (a request may only set REPLY_WANTED)", h->flags);
    else if (h->status != 0)
        st = tsr__error(TSR_EPROTO, "a request carries status %d", h->status);
    else if (!known)
        st = tsr__error(TSR_EUNSUPPORTED, "unknown command 0x%04x", h->cmd);
    else if (!s->authed && h->cmd != RPC_CMD_HELLO && h->cmd != RPC_CMD_AUTH) {
        st = tsr__error(TSR_EAUTH, "this server requires authentication (AUTH) first");
        s->close = true;
    } else if (h->cmd >= RPC_FIRST_V2_CMD && s->version < 2) {
        st = tsr__error(TSR_EUNSUPPORTED, "%s needs protocol version 2 (this connection: %u)", name,
                        s->version);
    } else if (h->cmd == RPC_CMD_TENSOR_SET || h->cmd == RPC_CMD_TENSOR_SET_2D) {
        st = tsr__srv_tensor_set(s, h, h->cmd == RPC_CMD_TENSOR_SET_2D, &unread);
    } else if (h->length > max) {
        st = tsr__error(TSR_EPROTO, "payload of %llu bytes; %s takes at most %llu",
                        (unsigned long long)h->length, name, (unsigned long long)max);
    } else {
        st = read_payload(s, h->length);
        if (st == TSR_OK) {
            unread = 0;
            srv_req q = {.hdr = *h, .p = rpc_rd_init(s->msg, (size_t)h->length)};
            st = dispatch(s, &q, &replied);
            raw_reason = h->cmd == RPC_CMD_SYNCHRONIZE;
        }
    }
    if (s->io_err != TSR_OK)
        return s->io_err;
    if (st == TSR_OK && s->reply.bad)
        st = tsr__error(TSR_ENOMEM, "reply of %zu bytes", s->reply.len);
    char reason[RPC_REASON_MAX];
    if (st != TSR_OK)
        snprintf(reason, sizeof(reason), "%s%s%s", raw_reason ? "" : name, raw_reason ? "" : ": ",
                 tsr_last_error());
    if (unread > 0) {
        if (unread > RPC_DISCARD_MAX) {
            s->close = true;
        } else {
            const tsr_status sk = tsr__rpc_skip(&s->rd, unread, s->cfg->io_timeout_ms);
            if (sk != TSR_OK)
                return sk;
        }
    }
    const bool answer =
        (h->flags & RPC_F_REPLY_WANTED) || h->cmd == RPC_CMD_HELLO || h->cmd == RPC_CMD_AUTH;
    if (!replied && answer) {
        if (st == TSR_OK) {
            const rpc_iov iov = {s->reply.p, s->reply.len};
            tsr__srv_send_reply(s, h, TSR_OK, &iov, 1);
        } else {
            send_error(s, h, st, reason);
        }
    } else if (!replied && st != TSR_OK) {
        defer(s, st, reason);
    }
    if (st != TSR_OK)
        TSR_LOG_D("rpc server: %s", reason);
    if (s->io_err != TSR_OK)
        return s->io_err;
    return s->close ? (st != TSR_OK ? st : TSR_ECLOSED) : TSR_OK;
}

tsr_status tsr__srv_session_run(srv_session *s)
{
    for (;;) {
        uint8_t hb[RPC_HDR_SIZE];
        const int timeout = s->authed ? -1 : s->cfg->handshake_timeout_ms;
        tsr_status st = tsr__rpc_read(&s->rd, hb, sizeof(hb), timeout);
        if (st != TSR_OK)
            return st;
        rpc_hdr h;
        tsr__rpc_hdr_decode(hb, &h);
        s->frames++;
        st = frame(s, &h);
        if (st != TSR_OK)
            return st;
    }
}
