/* rpc_server/session_objects.c — the commands that create, describe and
 * release a client's objects: devices (DEV_*), buffers (BUF_*), streams
 * (STREAM_*, SYNCHRONIZE) and events (EVENT_*), and the release of
 * everything when the client goes away.
 *
 * Not data movement (session_mem.c) nor graphs (session_graph.c). Every
 * handle is looked up in this connection's own table; a release first waits
 * for the work that may still use the object, so no queued kernel or event
 * wait can outlive what it reads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "rpc_server/server.h"
#include "tessera/cpu.h"

/* ---- streams: waiting for queued work -------------------------------------------------------- */

void tsr__srv_stream_quiesce(srv_stream *st)
{
    if (!st->busy)
        return;
    const tsr_status r = tsr_backend_synchronize(st->be);
    st->busy = false;
    if (r != TSR_OK && st->err == TSR_OK) {
        st->err = r;
        snprintf(st->err_msg, sizeof(st->err_msg), "%s", tsr_last_error());
    }
}

void tsr__srv_quiesce_all(srv_session *s)
{
    uint32_t i = 0;
    srv_stream *st;
    while ((st = tsr__srv_handle_next(&s->h, RPC_H_STREAM, &i, NULL)))
        tsr__srv_stream_quiesce(st);
}

tsr_status tsr__srv_stream_get(srv_session *s, uint64_t handle, bool may_be_none, srv_stream **out,
                               const char *what)
{
    *out = NULL;
    if (handle == 0 && may_be_none)
        return TSR_OK;
    *out = tsr__srv_handle_get(&s->h, handle, RPC_H_STREAM);
    if (!*out)
        return tsr__error(TSR_EINVAL, "%s 0x%016llx is not a stream of this connection", what,
                          (unsigned long long)handle);
    return TSR_OK;
}

static tsr_status dev_index(srv_session *s, uint32_t dev, const char *what)
{
    if (dev >= (uint32_t)s->cfg->n_devs)
        return tsr__error(TSR_EINVAL, "%s: device %u (this server has %d)", what, dev,
                          s->cfg->n_devs);
    return TSR_OK;
}

static tsr_status end_of_payload(srv_req *q)
{
    if (q->p.bad || rpc_rd_left(&q->p) != 0)
        return tsr__error(TSR_EPROTO, "payload of %zu bytes does not match the command's layout",
                          q->p.n);
    return TSR_OK;
}

/* ---- devices --------------------------------------------------------------------------------- */

static void wr_text(rpc_wr *w, const char *text, size_t max)
{
    const size_t n = strnlen(text, max);
    rpc_wr_u16(w, (uint16_t)n);
    rpc_wr_bytes(w, text, n);
}

tsr_status tsr__srv_dev_cmd(srv_session *s, srv_req *q)
{
    rpc_wr *w = &s->reply;
    if (q->hdr.cmd == RPC_CMD_DEV_LIST) {
        tsr_status st = end_of_payload(q);
        if (st != TSR_OK)
            return st;
        rpc_wr_u32(w, (uint32_t)s->cfg->n_devs);
        for (int i = 0; i < s->cfg->n_devs; i++) {
            tsr_dev *d = s->cfg->devs[i];
            char name[RPC_NAME_MAX] = {0};
            snprintf(name, sizeof(name), "%s", tsr_dev_name(d));
            rpc_wr_u32(w, (uint32_t)i);
            rpc_wr_u32(w, (uint32_t)tsr_dev_get_type(d));
            rpc_wr_bytes(w, name, sizeof(name));
        }
        return TSR_OK;
    }
    const uint32_t dev = rpc_rd_u32(&q->p);
    tsr_status st = end_of_payload(q);
    if (st == TSR_OK)
        st = dev_index(s, dev, tsr__rpc_cmd_name(q->hdr.cmd));
    if (st != TSR_OK)
        return st;
    tsr_dev *d = s->cfg->devs[dev];
    if (q->hdr.cmd == RPC_CMD_DEV_DESC) {
        wr_text(w, tsr_dev_description(d), RPC_DESC_MAX);
    } else if (q->hdr.cmd == RPC_CMD_DEV_MEMORY) {
        size_t free_b, total_b;
        tsr_dev_memory(d, &free_b, &total_b);
        rpc_wr_u64(w, free_b);
        rpc_wr_u64(w, total_b);
    } else {
        const tsr_dev_caps c = tsr_dev_get_caps(d);
        tsr_buft *bt = tsr_dev_buft(d);
        rpc_wr_u32(w, (c.async ? RPC_DEV_ASYNC : 0) | (c.events ? RPC_DEV_EVENTS : 0));
        rpc_wr_u32(w, 0);
        rpc_wr_u64(w, tsr_buft_alignment(bt));
        rpc_wr_u64(w, TSR_MIN((uint64_t)tsr_buft_max_size(bt), (uint64_t)INT64_MAX));
        rpc_wr_u64(w, s->cfg->op_mask[dev]);
    }
    return TSR_OK;
}

/* ---- buffers --------------------------------------------------------------------------------- */

tsr_status tsr__srv_buf_range(srv_session *s, uint64_t handle, uint64_t off, uint64_t size,
                              srv_buf **out, const char *what)
{
    *out = tsr__srv_handle_get(&s->h, handle, RPC_H_BUFFER);
    if (!*out)
        return tsr__error(TSR_EINVAL, "%s 0x%016llx is not a buffer of this connection", what,
                          (unsigned long long)handle);
    uint64_t end;
    if (__builtin_add_overflow(off, size, &end) || end > (*out)->size)
        return tsr__error(TSR_ERANGE, "%s: bytes [%llu, +%llu) outside the %llu-byte buffer", what,
                          (unsigned long long)off, (unsigned long long)size,
                          (unsigned long long)(*out)->size);
    return TSR_OK;
}

/* Drops every stream's cached graphs: they may refer to a freed buffer.
 * (The client forgets its copies of them at the same moment.) */
static void invalidate_graphs(srv_session *s)
{
    uint32_t i = 0;
    srv_stream *st;
    while ((st = tsr__srv_handle_next(&s->h, RPC_H_STREAM, &i, NULL)))
        for (int k = 0; k < RPC_GRAPH_SLOTS; k++)
            st->slot[k].valid = false;
}

static void buf_release(srv_session *s, srv_buf *b)
{
    s->mem_used -= b->size;
    tsr_buf_free(b->buf);
    free(b);
}

static tsr_status buf_alloc(srv_session *s, srv_req *q)
{
    const uint32_t dev = rpc_rd_u32(&q->p), usage = rpc_rd_u32(&q->p);
    const uint64_t size = rpc_rd_u64(&q->p);
    tsr_status st = end_of_payload(q);
    if (st == TSR_OK)
        st = dev_index(s, dev, "BUF_ALLOC");
    if (st != TSR_OK)
        return st;
    if (usage > TSR_BUF_USAGE_COMPUTE)
        return tsr__error(TSR_EINVAL, "usage %u (0..2)", usage);
    tsr_dev *d = s->cfg->devs[dev];
    tsr_buft *bt = tsr_dev_buft(d);
    size_t free_b, total_b;
    tsr_dev_memory(d, &free_b, &total_b);
    const uint64_t limit = s->cfg->max_memory ? s->cfg->max_memory : total_b;
    const uint64_t rounded = tsr__align_up(size ? size : 1, 64);
    if (size > (uint64_t)INT64_MAX / 2 || rounded > tsr_buft_max_size(bt))
        return tsr__error(TSR_ENOMEM, "%llu bytes exceed the device's largest allocation (%zu)",
                          (unsigned long long)size, tsr_buft_max_size(bt));
    if (s->mem_used + rounded > limit)
        return tsr__error(TSR_ENOMEM,
                          "%llu bytes would bring this client to %llu of its %llu-byte limit",
                          (unsigned long long)size, (unsigned long long)(s->mem_used + rounded),
                          (unsigned long long)limit);
    srv_buf *b = calloc(1, sizeof(*b));
    if (!b)
        return tsr__error(TSR_ENOMEM, "buffer record");
    st = tsr_buft_alloc(bt, (size_t)rounded, &b->buf);
    if (st != TSR_OK) {
        free(b);
        return st;
    }
    tsr_buf_set_usage(b->buf, (tsr_buf_usage)usage);
    b->dev = (int)dev;
    b->size = size;
    b->span = (tsr_tensor){.type = TSR_TYPE_I32, .ne = {(int64_t)(rounded / 4), 1, 1, 1}};
    b->span.nb[0] = 4;
    b->span.nb[1] = b->span.nb[2] = b->span.nb[3] = rounded;
    st = tsr_buf_place_tensor(b->buf, &b->span, 0);
    b->host = tsr_buf_is_host(b->buf) ? (uint8_t *)tsr_buf_base(b->buf) : NULL;
    const uint64_t h = st == TSR_OK ? tsr__srv_handle_new(&s->h, RPC_H_BUFFER, b) : 0;
    if (h == 0) {
        tsr_buf_free(b->buf);
        free(b);
        return st != TSR_OK ? st : TSR_ENOMEM;
    }
    s->mem_used += b->size;
    /* Client-visible addresses: distinct ranges, never a server pointer. */
    b->vbase = s->next_vbase;
    s->next_vbase += tsr__align_up(rounded, 1ull << 20) + (1ull << 20);
    rpc_wr_u64(&s->reply, h);
    rpc_wr_u64(&s->reply, b->vbase);
    rpc_wr_u64(&s->reply, size);
    return TSR_OK;
}

tsr_status tsr__srv_buf_cmd(srv_session *s, srv_req *q)
{
    if (q->hdr.cmd == RPC_CMD_BUF_ALLOC)
        return buf_alloc(s, q);
    const uint64_t h = rpc_rd_u64(&q->p);
    uint8_t value = 0;
    if (q->hdr.cmd == RPC_CMD_BUF_CLEAR) {
        value = rpc_rd_u8(&q->p);
        const uint8_t *pad = rpc_rd_bytes(&q->p, 7);
        if (pad && memcmp(pad, "\0\0\0\0\0\0\0", 7) != 0)
            return tsr__error(TSR_EPROTO, "non-zero padding");
    }
    tsr_status st = end_of_payload(q);
    if (st != TSR_OK)
        return st;
    srv_buf *b = tsr__srv_handle_get(&s->h, h, RPC_H_BUFFER);
    if (!b)
        return tsr__error(TSR_EINVAL, "0x%016llx is not a buffer of this connection",
                          (unsigned long long)h);
    if (q->hdr.cmd == RPC_CMD_BUF_BASE) {
        rpc_wr_u64(&s->reply, b->vbase);
        return TSR_OK;
    }
    tsr__srv_quiesce_all(s);
    if (q->hdr.cmd == RPC_CMD_BUF_CLEAR)
        return tsr_buf_clear(b->buf, value);
    invalidate_graphs(s);
    tsr__srv_handle_drop(&s->h, h);
    buf_release(s, b);
    return TSR_OK;
}

/* ---- streams --------------------------------------------------------------------------------- */

void tsr__srv_graphs_free(srv_stream *st)
{
    for (int k = 0; k < RPC_GRAPH_SLOTS; k++) {
        srv_graph *g = &st->slot[k];
        tsr_ctx_free(g->ctx);
        tsr_graph_free(g->g);
        free(g->map);
        tsr_event_free(g->done);
        *g = (srv_graph){0};
    }
}

static void stream_release(srv_stream *st)
{
    tsr__srv_stream_quiesce(st);
    tsr__srv_graphs_free(st);
    tsr_backend_free(st->be);
    free(st);
}

/* Events recorded on a closed stream are replaced by fresh ones (complete,
 * like a never-recorded event): the backend's event may point at the stream. */
static void forget_stream_events(srv_session *s, uint64_t stream)
{
    uint32_t i = 0;
    srv_event *e;
    while ((e = tsr__srv_handle_next(&s->h, RPC_H_EVENT, &i, NULL))) {
        if (e->recorded_on != stream)
            continue;
        tsr_event *fresh;
        if (tsr_event_new(s->cfg->devs[e->dev], &fresh) == TSR_OK) {
            tsr_event_free(e->ev);
            e->ev = fresh;
        }
        e->recorded_on = 0;
    }
}

static tsr_status stream_open(srv_session *s, srv_req *q)
{
    const uint32_t dev = rpc_rd_u32(&q->p), pad = rpc_rd_u32(&q->p);
    tsr_status st = end_of_payload(q);
    if (st == TSR_OK && pad != 0)
        st = tsr__error(TSR_EPROTO, "non-zero padding");
    if (st == TSR_OK)
        st = dev_index(s, dev, "STREAM_OPEN");
    if (st != TSR_OK)
        return st;
    srv_stream *sp = calloc(1, sizeof(*sp));
    if (!sp)
        return tsr__error(TSR_ENOMEM, "stream record");
    tsr_dev *d = s->cfg->devs[dev];
    if ((st = tsr_backend_new(d, &sp->be)) != TSR_OK) {
        free(sp);
        return st;
    }
    sp->dev = (int)dev;
    if (s->cfg->threads > 0) {
        tsr_cpu_set_n_threads_fn set =
            (tsr_cpu_set_n_threads_fn)tsr_reg_get_proc(tsr_dev_reg(d), "tsr_cpu_set_n_threads");
        if (set)
            set(sp->be, s->cfg->threads);
    }
    const uint64_t h = tsr__srv_handle_new(&s->h, RPC_H_STREAM, sp);
    if (h == 0) {
        tsr_backend_free(sp->be);
        free(sp);
        return TSR_ENOMEM;
    }
    rpc_wr_u64(&s->reply, h);
    return TSR_OK;
}

tsr_status tsr__srv_stream_cmd(srv_session *s, srv_req *q)
{
    if (q->hdr.cmd == RPC_CMD_STREAM_OPEN)
        return stream_open(s, q);
    const uint64_t h = rpc_rd_u64(&q->p);
    tsr_status st = end_of_payload(q);
    srv_stream *sp = NULL;
    if (st == TSR_OK)
        st = tsr__srv_stream_get(s, h, false, &sp, "stream");
    if (st != TSR_OK)
        return st;
    if (q->hdr.cmd == RPC_CMD_STREAM_CLOSE) {
        /* Another stream's queued wait or copy may refer to this one. */
        tsr__srv_quiesce_all(s);
        tsr__srv_handle_drop(&s->h, h);
        stream_release(sp);
        forget_stream_events(s, h);
        return TSR_OK;
    }
    /* SYNCHRONIZE: the stream's first error, else the connection's. */
    tsr__srv_stream_quiesce(sp);
    if (sp->err != TSR_OK) {
        st = tsr__error(sp->err, "%s", sp->err_msg);
        sp->err = TSR_OK;
    } else if (s->deferred != TSR_OK) {
        st = tsr__error(s->deferred, "%s", s->deferred_msg);
        s->deferred = TSR_OK;
    }
    return st;
}

/* ---- events ---------------------------------------------------------------------------------- */

tsr_status tsr__srv_event_cmd(srv_session *s, srv_req *q)
{
    if (q->hdr.cmd == RPC_CMD_EVENT_NEW) {
        const uint32_t dev = rpc_rd_u32(&q->p), pad = rpc_rd_u32(&q->p);
        tsr_status st = end_of_payload(q);
        if (st == TSR_OK && pad != 0)
            st = tsr__error(TSR_EPROTO, "non-zero padding");
        if (st == TSR_OK)
            st = dev_index(s, dev, "EVENT_NEW");
        if (st != TSR_OK)
            return st;
        srv_event *e = calloc(1, sizeof(*e));
        if (!e)
            return tsr__error(TSR_ENOMEM, "event record");
        if ((st = tsr_event_new(s->cfg->devs[dev], &e->ev)) != TSR_OK) {
            free(e);
            return st;
        }
        e->dev = (int)dev;
        const uint64_t h = tsr__srv_handle_new(&s->h, RPC_H_EVENT, e);
        if (h == 0) {
            tsr_event_free(e->ev);
            free(e);
            return TSR_ENOMEM;
        }
        rpc_wr_u64(&s->reply, h);
        return TSR_OK;
    }
    uint64_t eh, sh = 0;
    if (q->hdr.cmd == RPC_CMD_EVENT_WAIT) {
        sh = rpc_rd_u64(&q->p);
        eh = rpc_rd_u64(&q->p);
    } else {
        eh = rpc_rd_u64(&q->p);
        if (q->hdr.cmd == RPC_CMD_EVENT_RECORD)
            sh = rpc_rd_u64(&q->p);
    }
    tsr_status st = end_of_payload(q);
    srv_stream *sp = NULL;
    const bool needs_stream =
        q->hdr.cmd == RPC_CMD_EVENT_WAIT || q->hdr.cmd == RPC_CMD_EVENT_RECORD;
    if (st == TSR_OK && needs_stream)
        st = tsr__srv_stream_get(s, sh, false, &sp, "stream");
    s->cur_stream = sp;
    srv_event *e = st == TSR_OK ? tsr__srv_handle_get(&s->h, eh, RPC_H_EVENT) : NULL;
    if (st == TSR_OK && !e)
        st = tsr__error(TSR_EINVAL, "0x%016llx is not an event of this connection",
                        (unsigned long long)eh);
    if (st != TSR_OK)
        return st;
    switch ((rpc_cmd)q->hdr.cmd) {
    case RPC_CMD_EVENT_FREE:
        /* A queued wait may hold the backend's event: let it finish first. */
        tsr__srv_quiesce_all(s);
        tsr__srv_handle_drop(&s->h, eh);
        tsr_event_free(e->ev);
        free(e);
        return TSR_OK;
    case RPC_CMD_EVENT_RECORD:
        st = tsr_event_record(e->ev, sp->be);
        if (st == TSR_OK)
            e->recorded_on = sh;
        return st;
    case RPC_CMD_EVENT_WAIT:
        st = tsr_event_wait(sp->be, e->ev);
        if (st == TSR_OK)
            sp->busy = true;
        return st;
    default:
        return tsr_event_synchronize(e->ev);
    }
}

/* ---- the end of a session ------------------------------------------------------------------- */

void tsr__srv_objects_free(srv_session *s)
{
    tsr__srv_quiesce_all(s);
    uint32_t i = 0;
    uint64_t h;
    srv_stream *st;
    while ((st = tsr__srv_handle_next(&s->h, RPC_H_STREAM, &i, &h))) {
        tsr__srv_handle_drop(&s->h, h);
        stream_release(st);
    }
    i = 0;
    srv_event *e;
    while ((e = tsr__srv_handle_next(&s->h, RPC_H_EVENT, &i, &h))) {
        tsr__srv_handle_drop(&s->h, h);
        tsr_event_free(e->ev);
        free(e);
    }
    i = 0;
    srv_buf *b;
    while ((b = tsr__srv_handle_next(&s->h, RPC_H_BUFFER, &i, &h))) {
        tsr__srv_handle_drop(&s->h, h);
        buf_release(s, b);
    }
}
