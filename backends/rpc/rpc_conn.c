/* backends/rpc/rpc_conn.c — a client's connection to one RPC server:
 * connecting, the handshake (HELLO, AUTH, the device list), sending frames
 * with batching, reading replies, timeouts and the dead-connection state.
 *
 * Not the interface tables (rpc_backend.c) nor graph serialization
 * (rpc_graph.c). Callers hold c->mu around a request and its reply; replies
 * come back in request order because the server runs a connection's
 * commands in order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/rpc/rpc_auth.h"
#include "backends/rpc/rpc_client.h"
#include "core/internal.h"

#define SMALL_FRAME (64u << 10) /* frames up to this are copied into the batch */
#define BATCH_MAX (64u << 10)   /* a batch this large goes out: the server starts on it */
#define READ_BUF (64u << 10)

int tsr__rpc_timeout(const rpc_conn *c)
{
    return c->busy > 0 ? c->compute_timeout_ms : c->timeout_ms;
}

/* Records the first transport failure; the connection is unusable after it. */
static tsr_status die(rpc_conn *c, tsr_status io_st, const char *who, const char *what,
                      uint16_t cmd)
{
    const tsr_status st = io_st == TSR_ETIMEDOUT ? TSR_ETIMEDOUT : TSR_EDEVICE;
    const char *name = cmd ? tsr__rpc_cmd_name(cmd) : "a command";
    char reason[sizeof(c->dead_msg)];
    if (io_st == TSR_ETIMEDOUT)
        snprintf(reason, sizeof(reason),
                 "%s %s: no progress within %d ms (%s); the connection is closed", what, name,
                 tsr__rpc_timeout(c), c->io->err);
    else if (io_st == TSR_EPROTO)
        snprintf(reason, sizeof(reason), "%s %s: %s; the connection is closed", what, name,
                 c->io->err);
    else
        snprintf(reason, sizeof(reason), "connection lost %s %s (%s)", what, name, c->io->err);
    if (c->dead == TSR_OK) {
        c->dead = TSR_EDEVICE;
        snprintf(c->dead_msg, sizeof(c->dead_msg), "%s", reason);
        c->io->shutdown(c->io);
    }
    return tsr__error(st, "%s: %s", who, reason);
}

tsr_status tsr__rpc_alive(rpc_conn *c, const char *who)
{
    if (c->dead == TSR_OK)
        return TSR_OK;
    return tsr__error(TSR_EDEVICE, "%s: the server connection failed earlier: %s", who,
                      c->dead_msg);
}

static tsr_status send_batch(rpc_conn *c, const char *who, uint16_t cmd)
{
    if (c->batch.len == 0)
        return TSR_OK;
    const rpc_iov iov = {c->batch.p, c->batch.len};
    const tsr_status st = c->io->send_all(c->io, &iov, 1, tsr__rpc_timeout(c));
    c->batch.len = 0;
    c->sent = true;
    return st == TSR_OK ? st : die(c, st, who, "while sending", cmd);
}

tsr_status tsr__rpc_send(rpc_conn *c, const char *who, uint16_t cmd, bool want_reply, bool flush,
                         const void *fields, size_t flen, const void *data, size_t dlen,
                         uint64_t *id)
{
    tsr_status st = tsr__rpc_alive(c, who);
    if (st != TSR_OK)
        return st;
    const rpc_hdr h = {.magic = RPC_MAGIC,
                       .version = c->version ? c->version : 1,
                       .cmd = cmd,
                       .id = ++c->next_id,
                       .flags = want_reply ? RPC_F_REPLY_WANTED : 0,
                       .length = flen + dlen};
    if (id)
        *id = h.id;
    if (RPC_HDR_SIZE + flen + dlen <= SMALL_FRAME) {
        const size_t need = RPC_HDR_SIZE + flen + dlen;
        if (c->batch.cap - c->batch.len < need && !tsr__rpc_wr_reserve(&c->batch, need)) {
            c->batch.bad = false;
            c->batch.len = 0;
            snprintf(c->io->err, sizeof(c->io->err), "out of memory");
            return die(c, TSR_EIO, who, "batching", cmd);
        }
        uint8_t *p = c->batch.p + c->batch.len;
        rpc_hdr_put(&h, p);
        if (flen)
            memcpy(p + RPC_HDR_SIZE, fields, flen);
        if (dlen)
            memcpy(p + RPC_HDR_SIZE + flen, data, dlen);
        c->batch.len += RPC_HDR_SIZE + flen + dlen;
        if ((want_reply && !c->hold) || flush || c->batch.len >= BATCH_MAX)
            return send_batch(c, who, cmd);
        return TSR_OK;
    }
    /* A large frame: the batch, the header and the fields, then the data
     * straight from the caller's memory. */
    uint8_t hb[RPC_HDR_SIZE];
    tsr__rpc_hdr_encode(&h, hb);
    const rpc_iov iov[4] = {
        {c->batch.p, c->batch.len}, {hb, sizeof(hb)}, {fields, flen}, {data, dlen}};
    st = c->io->send_all(c->io, iov, 4, tsr__rpc_timeout(c));
    c->batch.len = 0;
    c->sent = true;
    return st == TSR_OK ? st : die(c, st, who, "while sending", cmd);
}

tsr_status tsr__rpc_reply_read(rpc_conn *c, const char *who, void *dst, size_t n)
{
    const tsr_status st = tsr__rpc_read(&c->rd, dst, n, tsr__rpc_timeout(c));
    return st == TSR_OK ? st : die(c, st, who, "while reading the reply to", 0);
}

static tsr_status reply_hdr(rpc_conn *c, const char *who, uint64_t id, uint16_t cmd, uint64_t *len)
{
    *len = 0;
    tsr_status st = tsr__rpc_alive(c, who);
    if (st != TSR_OK)
        return st;
    uint8_t hb[RPC_HDR_SIZE];
    st = tsr__rpc_read(&c->rd, hb, sizeof(hb), tsr__rpc_timeout(c));
    if (st != TSR_OK)
        return die(c, st, who, "while waiting for the reply to", cmd);
    rpc_hdr h;
    tsr__rpc_hdr_decode(hb, &h);
    if (h.magic != RPC_MAGIC || !(h.flags & RPC_F_REPLY) || h.id != id || h.cmd != cmd) {
        snprintf(c->io->err, sizeof(c->io->err),
                 "got a frame (magic 0x%08x, command 0x%x, id %llu) that is not its reply", h.magic,
                 h.cmd, (unsigned long long)h.id);
        return die(c, TSR_EPROTO, who, "waiting for the reply to", cmd);
    }
    if (h.status == TSR_OK) {
        *len = h.length;
        return TSR_OK;
    }
    /* An error reply: u16 length, then the reason. */
    char reason[RPC_REASON_MAX + 1] = {0};
    uint8_t lb[2];
    if (h.length < 2 || h.length > 2 + RPC_REASON_MAX) {
        snprintf(c->io->err, sizeof(c->io->err), "an error reply of %llu bytes",
                 (unsigned long long)h.length);
        return die(c, TSR_EPROTO, who, "reading the reply to", cmd);
    }
    if ((st = tsr__rpc_reply_read(c, who, lb, 2)) != TSR_OK ||
        (st = tsr__rpc_reply_read(c, who, reason, (size_t)h.length - 2)) != TSR_OK)
        return st;
    const size_t rl = (size_t)(lb[0] | lb[1] << 8);
    reason[TSR_MIN(rl, (size_t)h.length - 2)] = '\0';
    const tsr_status got = (tsr_status)h.status;
    const bool known = strcmp(tsr_status_name(got), "UNKNOWN") != 0;
    return tsr__error(known ? got : TSR_EPROTO, "%s: %s", who, reason);
}

/* Reads the replies of the reads in flight into their destinations. A
 * failed read is kept for the next synchronize; a broken connection ends it. */
static tsr_status drain(rpc_conn *c, const char *who)
{
    while (c->n_pend > 0) {
        const rpc_pending p = c->pend[c->pend_head];
        c->pend_head = (c->pend_head + 1) % c->cap_pend;
        c->n_pend--;
        uint64_t len;
        tsr_status st = reply_hdr(c, who, p.id, p.cmd, &len);
        if (st == TSR_OK && len != p.n) {
            snprintf(c->io->err, sizeof(c->io->err), "%llu bytes for %zu requested",
                     (unsigned long long)len, p.n);
            return die(c, TSR_EPROTO, who, "reading the reply to", p.cmd);
        }
        if (st == TSR_OK)
            st = tsr__rpc_reply_read(c, who, p.dst, p.n);
        if (st != TSR_OK && c->dead != TSR_OK)
            return st;
        if (st != TSR_OK && c->pend_err == TSR_OK) {
            c->pend_err = st;
            snprintf(c->pend_msg, sizeof(c->pend_msg), "%s", tsr_last_error());
        }
    }
    return TSR_OK;
}

tsr_status tsr__rpc_reply_begin(rpc_conn *c, const char *who, uint64_t id, uint16_t cmd,
                                uint64_t *len)
{
    *len = 0;
    tsr_status st = tsr__rpc_alive(c, who);
    if (st != TSR_OK)
        return st;
    /* A wait after something was sent is one blocking round trip. */
    if (c->sent) {
        c->round_trips++;
        c->sent = false;
    }
    if ((st = drain(c, who)) != TSR_OK)
        return st;
    return reply_hdr(c, who, id, cmd, len);
}

tsr_status tsr__rpc_get_later(rpc_conn *c, const char *who, const void *fields, size_t flen,
                              void *dst, size_t n)
{
    if (c->n_pend == c->cap_pend) {
        const size_t cap = c->cap_pend ? 2 * c->cap_pend : 16;
        rpc_pending *p = malloc(cap * sizeof(*p));
        if (!p)
            return tsr__error(TSR_ENOMEM, "%s: reads in flight", who);
        for (size_t i = 0; i < c->n_pend; i++)
            p[i] = c->pend[(c->pend_head + i) % c->cap_pend];
        free(c->pend);
        c->pend = p;
        c->pend_head = 0;
        c->cap_pend = cap;
    }
    uint64_t id;
    const tsr_status st =
        tsr__rpc_send(c, who, RPC_CMD_TENSOR_GET, true, true, fields, flen, NULL, 0, &id);
    if (st == TSR_OK)
        c->pend[(c->pend_head + c->n_pend++) % c->cap_pend] =
            (rpc_pending){.id = id, .cmd = RPC_CMD_TENSOR_GET, .dst = dst, .n = n};
    return st;
}

/* ---- streams and synchronization ------------------------------------------------------------ */

bool tsr__rpc_stream_add(rpc_conn *c, rpc_sync *s)
{
    if (c->n_streams == c->cap_streams) {
        const size_t cap = c->cap_streams ? 2 * c->cap_streams : 8;
        rpc_sync **p = realloc(c->streams, cap * sizeof(*p));
        if (!p)
            return false;
        c->streams = p;
        c->cap_streams = cap;
    }
    c->streams[c->n_streams++] = s;
    s->synced_at = c->next_id;
    return true;
}

void tsr__rpc_stream_remove(rpc_conn *c, rpc_sync *s)
{
    tsr__rpc_set_busy(c, s, false);
    for (size_t i = 0; i < c->n_streams; i++)
        if (c->streams[i] == s) {
            c->streams[i] = c->streams[--c->n_streams];
            break;
        }
}

void tsr__rpc_set_busy(rpc_conn *c, rpc_sync *s, bool busy)
{
    if (s->busy != busy)
        c->busy += busy ? 1 : -1;
    s->busy = busy;
}

#define SYNC_MAX 64 /* streams synchronized together; more take a round trip each */

tsr_status tsr__rpc_sync(rpc_conn *c, rpc_sync *me)
{
    tsr_status st = tsr__rpc_alive(c, me->who);
    if (st != TSR_OK)
        return st;
    if (me->err == TSR_OK && me->synced_at == c->next_id && c->n_pend == 0 &&
        c->pend_err == TSR_OK) {
        tsr__rpc_set_busy(c, me, false);
        return TSR_OK;
    }
    rpc_sync *all[SYNC_MAX];
    uint64_t ids[SYNC_MAX];
    size_t n = 0;
    for (size_t i = 0; i < c->n_streams && n + 1 < SYNC_MAX; i++)
        if (c->streams[i] != me)
            all[n++] = c->streams[i];
    all[n++] = me;
    /* One batch: every stream's SYNCHRONIZE, the caller's last. */
    c->hold = true;
    for (size_t i = 0; i < n && st == TSR_OK; i++) {
        uint8_t f[8];
        const uint64_t le = rpc_le64(all[i]->handle);
        memcpy(f, &le, 8);
        c->hold = i + 1 < n;
        st = tsr__rpc_send(c, me->who, RPC_CMD_SYNCHRONIZE, true, i + 1 == n, f, 8, NULL, 0,
                           &ids[i]);
    }
    c->hold = false;
    if (st != TSR_OK)
        return st;
    const uint64_t now = c->next_id;
    tsr_status mine = TSR_OK;
    for (size_t i = 0; i < n; i++) {
        uint64_t len;
        tsr_status r = tsr__rpc_reply_begin(c, all[i]->who, ids[i], RPC_CMD_SYNCHRONIZE, &len);
        if (r == TSR_OK && len != 0) {
            snprintf(c->io->err, sizeof(c->io->err), "%llu unexpected bytes",
                     (unsigned long long)len);
            r = die(c, TSR_EPROTO, all[i]->who, "reading the reply to", RPC_CMD_SYNCHRONIZE);
        }
        if (c->dead != TSR_OK)
            return r != TSR_OK ? r : tsr__rpc_alive(c, me->who);
        all[i]->synced_at = now;
        tsr__rpc_set_busy(c, all[i], false);
        if (all[i] == me) {
            mine = r;
        } else if (r != TSR_OK && all[i]->err == TSR_OK) {
            all[i]->err = r;
            snprintf(all[i]->msg, sizeof(all[i]->msg), "%s", tsr_last_error());
        }
    }
    if (mine == TSR_OK && me->err != TSR_OK) {
        mine = tsr__error(me->err, "%s", me->msg);
        me->err = TSR_OK;
    }
    if (mine == TSR_OK && c->pend_err != TSR_OK) {
        mine = tsr__error(c->pend_err, "%s", c->pend_msg);
        c->pend_err = TSR_OK;
    }
    return mine;
}

tsr_status tsr__rpc_call(rpc_conn *c, const char *who, uint16_t cmd, const void *fields,
                         size_t flen, void *out, size_t cap, size_t *got)
{
    uint64_t id, len;
    tsr_status st = tsr__rpc_send(c, who, cmd, true, true, fields, flen, NULL, 0, &id);
    if (st == TSR_OK)
        st = tsr__rpc_reply_begin(c, who, id, cmd, &len);
    if (st != TSR_OK)
        return st;
    if (len > cap) {
        snprintf(c->io->err, sizeof(c->io->err), "a reply of %llu bytes (at most %zu expected)",
                 (unsigned long long)len, cap);
        return die(c, TSR_EPROTO, who, "reading the reply to", cmd);
    }
    if (got)
        *got = (size_t)len;
    return tsr__rpc_reply_read(c, who, out, (size_t)len);
}

/* ---- connecting ---------------------------------------------------------------------------- */

static tsr_status load_token(const tsr_rpc_options *opt, rpc_token *tok)
{
    tok->len = 0;
    if (opt->token && opt->token_len) {
        if (opt->token_len > RPC_TOKEN_MAX)
            return tsr__error(TSR_ERANGE, "rpc: a token of %zu bytes (at most %d)", opt->token_len,
                              RPC_TOKEN_MAX);
        memcpy(tok->bytes, opt->token, opt->token_len);
        tok->len = opt->token_len;
        return TSR_OK;
    }
    const char *path = opt->token_file ? opt->token_file : getenv("TSR_RPC_TOKEN_FILE");
    return path && *path ? tsr__rpc_token_read(path, tok) : TSR_OK;
}

static tsr_status handshake(rpc_conn *c, const rpc_token *tok)
{
    const char *who = c->url;
    uint8_t cn[RPC_NONCE_SIZE];
    tsr_status st = tsr__rpc_random(cn, sizeof(cn));
    if (st != TSR_OK)
        return st;
    uint8_t hello[48], reply[64];
    rpc_wr w = {.p = hello, .cap = sizeof(hello)};
    rpc_wr_u16(&w, RPC_VERSION_MIN);
    rpc_wr_u16(&w, RPC_VERSION_MAX);
    rpc_wr_u32(&w, 0);
    rpc_wr_u64(&w, RPC_CAPS_V2);
    rpc_wr_bytes(&w, cn, sizeof(cn));
    size_t got;
    st = tsr__rpc_call(c, who, RPC_CMD_HELLO, hello, sizeof(hello), reply, sizeof(reply), &got);
    if (st != TSR_OK)
        return st == TSR_EDEVICE
                   ? tsr__error(TSR_EPROTO, "%s (is it a tessera-rpc-server?)", tsr_last_error())
                   : st;
    rpc_rd r = rpc_rd_init(reply, got);
    c->version = rpc_rd_u16(&r);
    const uint16_t auth = rpc_rd_u16(&r);
    rpc_rd_u32(&r);
    c->server_caps = rpc_rd_u64(&r);
    const uint8_t *sn = rpc_rd_bytes(&r, RPC_NONCE_SIZE);
    if (r.bad || c->version < RPC_VERSION_MIN || c->version > RPC_VERSION_MAX)
        return tsr__error(TSR_EPROTO, "%s: HELLO reply of %zu bytes, version %u", who, got,
                          c->version);
    if (auth == RPC_AUTH_NONE)
        return TSR_OK;
    if (auth != RPC_AUTH_HMAC_SHA256)
        return tsr__error(TSR_EPROTO, "%s: unknown authentication scheme %u", who, auth);
    if (tok->len == 0)
        return tsr__error(TSR_EAUTH,
                          "%s: the server requires a token (options.token_file or "
                          "TSR_RPC_TOKEN_FILE)",
                          who);
    uint8_t mac[RPC_MAC_SIZE], proof[RPC_MAC_SIZE], want[RPC_MAC_SIZE];
    if ((st = tsr__rpc_auth_mac(tok, false, cn, sn, mac)) != TSR_OK)
        return st;
    st = tsr__rpc_call(c, who, RPC_CMD_AUTH, mac, sizeof(mac), proof, sizeof(proof), &got);
    if (st != TSR_OK)
        return st;
    if ((st = tsr__rpc_auth_mac(tok, true, cn, sn, want)) != TSR_OK)
        return st;
    if (got != sizeof(proof) || !tsr__rpc_mac_equal(proof, want))
        return tsr__error(TSR_EAUTH, "%s: the server did not prove it holds the token", who);
    return TSR_OK;
}

static tsr_status list_devices(rpc_conn *c, rpc_dev_info **infos, uint32_t *n)
{
    const char *who = c->url;
    enum { MAXD = 256, ENTRY = 8 + RPC_NAME_MAX };
    uint8_t *buf = malloc(4 + MAXD * ENTRY);
    size_t got;
    if (!buf)
        return tsr__error(TSR_ENOMEM, "rpc: device list");
    tsr_status st = tsr__rpc_call(c, who, RPC_CMD_DEV_LIST, NULL, 0, buf, 4 + MAXD * ENTRY, &got);
    rpc_rd r = rpc_rd_init(buf, st == TSR_OK ? got : 0);
    const uint32_t count = rpc_rd_u32(&r);
    if (st == TSR_OK && (r.bad || count > MAXD || got != 4 + (size_t)count * ENTRY))
        st = tsr__error(TSR_EPROTO, "%s: a device list of %zu bytes for %u devices", who, got,
                        count);
    rpc_dev_info *v = st == TSR_OK ? calloc(count ? count : 1, sizeof(*v)) : NULL;
    if (st == TSR_OK && !v)
        st = tsr__error(TSR_ENOMEM, "rpc: device list");
    for (uint32_t i = 0; st == TSR_OK && i < count; i++) {
        v[i].index = rpc_rd_u32(&r);
        v[i].type = rpc_rd_u32(&r);
        memcpy(v[i].name, rpc_rd_bytes(&r, RPC_NAME_MAX), RPC_NAME_MAX);
        for (char *p = v[i].name; *p; p++)
            if (*p < 0x20 || *p >= 0x7f)
                *p = '?';
        uint8_t f[4], caps[32], desc[2 + RPC_DESC_MAX];
        rpc_wr w = {.p = f, .cap = 4};
        rpc_wr_u32(&w, v[i].index);
        st = tsr__rpc_call(c, who, RPC_CMD_DEV_DESC, f, 4, desc, sizeof(desc), &got);
        if (st == TSR_OK) {
            const size_t dl = got >= 2 ? TSR_MIN((size_t)(desc[0] | desc[1] << 8), got - 2) : 0;
            for (size_t k = 0; k < dl; k++)
                v[i].desc[k] = desc[2 + k] >= 0x20 && desc[2 + k] < 0x7f ? (char)desc[2 + k] : '?';
            st = tsr__rpc_call(c, who, RPC_CMD_DEV_CAPS, f, 4, caps, sizeof(caps), &got);
        }
        if (st == TSR_OK) {
            rpc_rd cr = rpc_rd_init(caps, got);
            v[i].caps = rpc_rd_u32(&cr);
            rpc_rd_u32(&cr);
            v[i].alignment = rpc_rd_u64(&cr);
            v[i].max_size = rpc_rd_u64(&cr);
            v[i].op_mask = rpc_rd_u64(&cr);
            if (cr.bad || v[i].alignment == 0 || v[i].alignment > 4096 ||
                (v[i].alignment & (v[i].alignment - 1)))
                st =
                    tsr__error(TSR_EPROTO, "%s: device %u: caps reply of %zu bytes, alignment %llu",
                               who, i, got, (unsigned long long)v[i].alignment);
        }
    }
    free(buf);
    if (st != TSR_OK) {
        free(v);
        return st;
    }
    *infos = v;
    *n = count;
    return TSR_OK;
}

static int env_ms(const char *name, int set, int def)
{
    if (set > 0)
        return set;
    const long v = tsr__env_long(name, def);
    return v > 0 && v < (1L << 30) ? (int)v : def;
}

tsr_status tsr__rpc_conn_open(const char *url, const tsr_rpc_options *opt, rpc_conn **out,
                              rpc_dev_info **infos, uint32_t *n)
{
    *out = NULL;
    rpc_token *tok = malloc(sizeof(*tok));
    rpc_conn *c = calloc(1, sizeof(*c));
    if (!c || !tok) {
        free(c);
        free(tok);
        return tsr__error(TSR_ENOMEM, "rpc: %s: connection", url);
    }
    snprintf(c->url, sizeof(c->url), "%s", url);
    c->mesh_rank = -1;
    pthread_mutex_init(&c->mu, NULL);
    c->timeout_ms = env_ms("TSR_RPC_TIMEOUT_MS", opt->timeout_ms, 5000);
    c->compute_timeout_ms = env_ms("TSR_RPC_COMPUTE_TIMEOUT_MS", opt->compute_timeout_ms, 30000);
    tsr_status st = load_token(opt, tok);
    if (st == TSR_OK)
        st = tsr__rpc_dial(url, opt, c->timeout_ms, &c->io);
    if (st == TSR_OK && !tsr__rpc_reader_init(&c->rd, c->io, READ_BUF))
        st = tsr__error(TSR_ENOMEM, "rpc: %s: reader", url);
    if (st == TSR_OK)
        st = handshake(c, tok);
    if (st == TSR_OK)
        st = list_devices(c, infos, n);
    free(tok);
    if (st != TSR_OK) {
        if (c->io)
            c->io->free(c->io);
        tsr__rpc_reader_free(&c->rd);
        free(c->batch.p);
        pthread_mutex_destroy(&c->mu);
        free(c);
        return st;
    }
    *out = c;
    return TSR_OK;
}

rpc_io *tsr__rpc_conn_detach(rpc_conn *c)
{
    rpc_io *io = c->io;
    tsr__rpc_reader_free(&c->rd);
    free(c->batch.p);
    free(c->streams);
    free(c->pend);
    pthread_mutex_destroy(&c->mu);
    free(c);
    return io;
}
