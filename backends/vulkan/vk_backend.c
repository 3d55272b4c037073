/* backends/vulkan/vk_backend.c — the stream (tsr_backend) and event entries
 * of the Vulkan backend: asynchronous set/get, copies from this device,
 * from other Vulkan streams and from other backends' host memory, graph
 * compute, synchronize, events.
 *
 * Not the machinery under them (vk_stream.c: batches, the staging ring,
 * waits). A copy into this device from another backend's host memory is
 * ordered after that backend's queued work by an event recorded there: the
 * stream's waiter copies the bytes into the ring once the event is reached
 * and the GPU copy follows — one host copy, no host wait. Copies out of
 * this device into another backend's memory are that backend's entry
 * (core falls back to a synchronized copy when it has none).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/vulkan/vk_impl.h"

typedef struct {
    vk_stream *s;
    char name[48];
} vk_backend_ctx;

static const struct tsr_backend_i vk_backend_iface;

bool tsr__vk_stream_is(tsr_backend *b) { return b && b->iface == &vk_backend_iface; }
bool tsr_backend_is_vulkan(tsr_backend *backend) { return tsr__vk_stream_is(backend); }
vk_stream *tsr__vk_stream_of(tsr_backend *b) { return ((vk_backend_ctx *)b->context)->s; }

static const char *vk_be_name(tsr_backend *b) { return ((vk_backend_ctx *)b->context)->name; }

static void vk_be_free(tsr_backend *b)
{
    tsr__vk_stream_free(tsr__vk_stream_of(b));
    free(b->context);
    free(b);
}

/* The tensor's memory when it lives in this stream's device. */
static vk_buffer *own_buffer(vk_stream *s, const tsr_tensor *t)
{
    if (!tsr__vk_is_buffer(t->buffer) || tsr__vk_buffer_of(t)->d != tsr__vk_stream_device(s))
        return NULL;
    return tsr__vk_buffer_of(t);
}

static tsr_status not_here(vk_stream *s, const tsr_tensor *t)
{
    return tsr__error(TSR_EUNSUPPORTED, "%s: tensor '%s' is not in %s memory",
                      tsr__vk_stream_name(s), t->name, tsr__vk_stream_device(s)->name);
}

static tsr_status vk_be_set_2d(tsr_backend *b, tsr_tensor *t, const void *data, size_t offset,
                               size_t row, size_t n_rows, size_t t_stride, size_t d_stride)
{
    vk_stream *s = tsr__vk_stream_of(b);
    vk_buffer *vb = own_buffer(s, t);
    if (!vb)
        return not_here(s, t);
    const size_t off = tsr__vk_offset(t) + offset;
    tsr__vk_stream_lock(s);
    tsr__vk_settle_host_locked(s, data, (n_rows - 1) * d_stride + row);
    for (size_t i = 0; i < n_rows; i++)
        tsr__vk_upload_locked(s, &vb->m, off + i * t_stride, (const char *)data + i * d_stride,
                              row);
    tsr__vk_stream_unlock(s);
    return TSR_OK;
}

static tsr_status vk_be_get_2d(tsr_backend *b, const tsr_tensor *t, void *data, size_t offset,
                               size_t row, size_t n_rows, size_t t_stride, size_t d_stride)
{
    vk_stream *s = tsr__vk_stream_of(b);
    vk_buffer *vb = own_buffer(s, t);
    if (!vb)
        return not_here(s, t);
    const size_t off = tsr__vk_offset(t) + offset;
    tsr__vk_stream_lock(s);
    for (size_t i = 0; i < n_rows; i++)
        tsr__vk_download_locked(s, &vb->m, off + i * t_stride, (char *)data + i * d_stride, row);
    tsr__vk_stream_unlock(s);
    return TSR_OK;
}

static tsr_status vk_be_set(tsr_backend *b, tsr_tensor *t, const void *data, size_t offset,
                            size_t size)
{
    return vk_be_set_2d(b, t, data, offset, size, 1, size, size);
}

static tsr_status vk_be_get(tsr_backend *b, const tsr_tensor *t, void *data, size_t offset,
                            size_t size)
{
    return vk_be_get_2d(b, t, data, offset, size, 1, size, size);
}

static tsr_status vk_be_cpy_async(tsr_backend *src_b, tsr_backend *dst_b, const tsr_tensor *src,
                                  tsr_tensor *dst)
{
    vk_stream *s = tsr__vk_stream_of(dst_b);
    vk_buffer *db = own_buffer(s, dst);
    if (!db)
        return TSR_ENOTHANDLED;
    const size_t n = tsr_nbytes(src);
    vk_buffer *sb = own_buffer(s, src);
    if (sb) {
        /* Device to device: after the source stream's queued work. */
        if (tsr__vk_stream_is(src_b) && tsr__vk_stream_of(src_b) != s) {
            vk_stream *o = tsr__vk_stream_of(src_b);
            if (tsr__vk_stream_device(o) != tsr__vk_stream_device(s))
                return TSR_ENOTHANDLED;
            tsr__vk_stream_lock(o);
            const uint64_t v = tsr__vk_stream_flush_locked(o);
            tsr__vk_stream_unlock(o);
            tsr__vk_stream_lock(s);
            tsr__vk_wait_stream_locked(s, o, v);
        } else if (!tsr__vk_stream_is(src_b)) {
            return TSR_ENOTHANDLED;
        } else {
            tsr__vk_stream_lock(s);
        }
        tsr__vk_copy_locked(s, &sb->m, tsr__vk_offset(src), &db->m, tsr__vk_offset(dst), n);
        tsr__vk_stream_unlock(s);
        return TSR_OK;
    }
    if (!tsr_buf_is_host(src->buffer))
        return TSR_ENOTHANDLED;
    if (src_b == dst_b)
        return vk_be_set(dst_b, dst, src->data, 0, n);
    /* Host memory of another backend: once its stream has reached this
     * point, the waiter copies the bytes into the ring and the batch that
     * copies them to the device follows. */
    tsr_dev *sd = tsr_backend_dev(src_b);
    if (!tsr_dev_get_caps(sd).events)
        return TSR_ENOTHANDLED;
    tsr_event *e = NULL;
    tsr_status st = tsr_event_new(sd, &e);
    if (st == TSR_OK)
        st = tsr_event_record(e, src_b);
    if (st != TSR_OK) {
        tsr_event_free(e);
        return st;
    }
    tsr__vk_stream_lock(s);
    tsr__vk_settle_host_locked(s, src->data, n);
    tsr__vk_wait_event_locked(s, e, true);
    tsr__vk_upload_deferred_locked(s, &db->m, tsr__vk_offset(dst), src->data, n);
    tsr__vk_stream_unlock(s);
    return TSR_OK;
}

static tsr_status vk_be_graph_compute(tsr_backend *b, tsr_graph *g)
{
    vk_stream *s = tsr__vk_stream_of(b);
    tsr_status st = tsr__vk_graph_prepare(tsr__vk_stream_device(s), g);
    if (st != TSR_OK)
        return st;
    tsr__vk_stream_lock(s);
    for (size_t i = 0; i < tsr_graph_n_nodes(g); i++) {
        tsr_tensor *n = tsr_graph_node(g, i);
        if ((n->flags & TSR_TENSOR_FLAG_COMPUTE) && n->op != TSR_OP_NONE &&
            !tsr_op_is_view(n->op) && tsr_nelements(n) > 0)
            tsr__vk_record_node(s, n);
    }
    tsr__vk_stream_flush_locked(s);
    tsr__vk_stream_unlock(s);
    return TSR_OK;
}

static tsr_status vk_be_sync(tsr_backend *b) { return tsr__vk_stream_sync(tsr__vk_stream_of(b)); }

/* ---- events --------------------------------------------------------------------------------- */

typedef struct {
    vk_stream *s; /* NULL: never recorded */
    uint64_t value;
} vk_event_ctx;

static tsr_status vk_be_event_record(tsr_backend *b, tsr_event *e)
{
    vk_stream *s = tsr__vk_stream_of(b);
    vk_event_ctx *ec = e->context;
    tsr__vk_stream_lock(s);
    ec->value = tsr__vk_stream_flush_locked(s);
    ec->s = s;
    tsr__vk_stream_unlock(s);
    return TSR_OK;
}

static tsr_status vk_be_event_wait(tsr_backend *b, tsr_event *e)
{
    vk_stream *s = tsr__vk_stream_of(b);
    tsr__vk_stream_lock(s);
    if (tsr__vk_is_device(e->dev)) {
        const vk_event_ctx *ec = e->context;
        if (ec->s)
            tsr__vk_wait_stream_locked(s, ec->s, ec->value);
        tsr__vk_stream_unlock(s);
        return TSR_OK;
    }
    tsr__vk_stream_unlock(s);
    /* Another device's event: the waiter thread waits on a copy of its mark
     * (owned by the job), so re-recording the event does not move the
     * wait; devices that cannot copy marks are waited on as they are. */
    tsr_event *copy = NULL;
    tsr_status st = tsr__event_snapshot(e, &copy);
    if (st != TSR_OK && st != TSR_ENOTHANDLED)
        return st;
    tsr__vk_stream_lock(s);
    tsr__vk_wait_event_locked(s, copy ? copy : e, copy != NULL);
    tsr__vk_stream_unlock(s);
    return TSR_OK;
}

tsr_status tsr__vk_event_new(vk_device *d, tsr_event **out)
{
    tsr_event *e = calloc(1, sizeof(*e));
    vk_event_ctx *ec = calloc(1, sizeof(*ec));
    if (!e || !ec) {
        free(e);
        free(ec);
        return tsr__error(TSR_ENOMEM, "%s: event", d->name);
    }
    e->dev = &d->tdev;
    e->context = ec;
    *out = e;
    return TSR_OK;
}

void tsr__vk_event_free(tsr_event *e)
{
    free(e->context);
    free(e);
}

tsr_status tsr__vk_event_copy(tsr_event *dst, const tsr_event *src)
{
    *(vk_event_ctx *)dst->context = *(const vk_event_ctx *)src->context;
    return TSR_OK;
}

tsr_status tsr__vk_event_sync(tsr_event *e)
{
    const vk_event_ctx *ec = e->context;
    if (!ec->s)
        return TSR_OK;
    return tsr__vk_stream_wait(ec->s, ec->value);
}

static const struct tsr_backend_i vk_backend_iface = {
    .get_name = vk_be_name,
    .free = vk_be_free,
    .set_tensor_async = vk_be_set,
    .get_tensor_async = vk_be_get,
    .set_tensor_2d_async = vk_be_set_2d,
    .get_tensor_2d_async = vk_be_get_2d,
    .cpy_tensor_async = vk_be_cpy_async,
    .graph_compute = vk_be_graph_compute,
    .synchronize = vk_be_sync,
    .event_record = vk_be_event_record,
    .event_wait = vk_be_event_wait,
};

tsr_status tsr__vk_backend_new(vk_device *d, tsr_backend **out)
{
    tsr_backend *b = calloc(1, sizeof(*b));
    vk_backend_ctx *bc = calloc(1, sizeof(*bc));
    if (!b || !bc) {
        free(b);
        free(bc);
        return tsr__error(TSR_ENOMEM, "%s: stream objects", d->name);
    }
    snprintf(bc->name, sizeof(bc->name), "%s", d->name);
    tsr_status st = tsr__vk_stream_new(d, d->name, &bc->s);
    if (st != TSR_OK) {
        free(b);
        free(bc);
        return st;
    }
    b->iface = &vk_backend_iface;
    b->dev = &d->tdev;
    b->context = bc;
    *out = b;
    return TSR_OK;
}
