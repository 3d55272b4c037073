/* meta/device.c — the meta device: creation, the device interface (memory is
 * the sum, caps the intersection, an op is supported when every sub-device
 * supports it), events spanning the sub-streams, and the meta stream's
 * lifecycle.
 *
 * Not the buffer (meta/buffer.c) nor graph execution (meta/compute.c). A
 * meta device is recognized by its device type and its interface table,
 * never by comparing a sub-device's functions; it is not listed in any
 * registry (it is created by the application and freed by it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meta/meta_impl.h"

static const struct tsr_dev_i meta_dev_iface;
static const struct tsr_backend_i meta_backend_iface;

static const char *meta_reg_name(tsr_reg *r)
{
    (void)r;
    return "meta";
}

static size_t meta_reg_count(tsr_reg *r)
{
    (void)r;
    return 0; /* meta devices belong to the application that made them */
}

static tsr_dev *meta_reg_dev(tsr_reg *r, size_t i)
{
    (void)r;
    (void)i;
    return NULL;
}

static const struct tsr_reg_i meta_reg_iface = {
    .get_name = meta_reg_name,
    .get_dev_count = meta_reg_count,
    .get_dev = meta_reg_dev,
};
static tsr_reg meta_reg = {.iface = &meta_reg_iface};

meta_dev *tsr__meta_dev(tsr_dev *dev)
{
    return dev && dev->iface == &meta_dev_iface ? dev->context : NULL;
}

bool tsr_dev_is_meta(tsr_dev *dev) { return tsr__meta_dev(dev) != NULL; }
int tsr_meta_n_devices(tsr_dev *meta) { return tsr__meta_dev(meta) ? tsr__meta_dev(meta)->n : 0; }

tsr_dev *tsr_meta_sub_device(tsr_dev *meta, int j)
{
    meta_dev *md = tsr__meta_dev(meta);
    return md && j >= 0 && j < md->n ? md->devs[j] : NULL;
}

/* ---- device interface ------------------------------------------------------------- */

static meta_dev *md_of(tsr_dev *d) { return d->context; }
static const char *meta_dev_name(tsr_dev *d) { return md_of(d)->name; }
static const char *meta_dev_desc(tsr_dev *d) { return md_of(d)->desc; }

static tsr_dev_type meta_dev_type(tsr_dev *d)
{
    (void)d;
    return TSR_DEV_META;
}

static void meta_dev_memory(tsr_dev *d, size_t *free_bytes, size_t *total_bytes)
{
    meta_dev *md = md_of(d);
    *free_bytes = *total_bytes = 0;
    for (int j = 0; j < md->n; j++) {
        size_t f, t;
        tsr_dev_memory(md->devs[j], &f, &t);
        *free_bytes += f;
        *total_bytes += t;
    }
}

static tsr_dev_caps meta_dev_caps(tsr_dev *d)
{
    meta_dev *md = md_of(d);
    tsr_dev_caps c = {.async = true, .events = true, .host_buffer = false};
    for (int j = 0; j < md->n; j++) {
        const tsr_dev_caps s = tsr_dev_get_caps(md->devs[j]);
        c.async &= s.async;
        c.events &= s.events;
    }
    return c;
}

static tsr_buft *meta_dev_buft(tsr_dev *d) { return &md_of(d)->buft; }

static bool meta_dev_supports_op(tsr_dev *d, const tsr_tensor *op)
{
    meta_dev *md = md_of(d);
    for (int j = 0; j < md->n; j++)
        if (!tsr_dev_supports_op(md->devs[j], op))
            return false;
    return true;
}

/* Its own buffers, and memory every sub-device can read (used mirrored). */
static bool meta_dev_supports_buft(tsr_dev *d, tsr_buft *buft)
{
    meta_dev *md = md_of(d);
    if (buft == &md->buft)
        return true;
    for (int j = 0; j < md->n; j++)
        if (!tsr_dev_supports_buft(md->devs[j], buft))
            return false;
    return true;
}

/* ---- events: one sub-event per sub-device ------------------------------------------ */

typedef struct {
    tsr_event *subs[TSR_META_MAX_DEVICES];
} meta_event;

static void meta_event_free(tsr_dev *d, tsr_event *e)
{
    meta_event *me = e->context;
    for (int j = 0; me && j < md_of(d)->n; j++)
        tsr_event_free(me->subs[j]);
    free(me);
    free(e);
}

static tsr_status meta_event_new(tsr_dev *d, tsr_event **out)
{
    meta_dev *md = md_of(d);
    tsr_event *e = calloc(1, sizeof(*e));
    meta_event *me = calloc(1, sizeof(*me));
    if (!e || !me) {
        free(e);
        free(me);
        return tsr__error(TSR_ENOMEM, "%s: event", md->name);
    }
    e->dev = d;
    e->context = me;
    for (int j = 0; j < md->n; j++) {
        tsr_status st = tsr_event_new(md->devs[j], &me->subs[j]);
        if (st != TSR_OK) {
            meta_event_free(d, e);
            return st;
        }
    }
    *out = e;
    return TSR_OK;
}

static tsr_status meta_event_sync(tsr_dev *d, tsr_event *e)
{
    meta_event *me = e->context;
    tsr_status st = TSR_OK;
    for (int j = 0; j < md_of(d)->n; j++) {
        tsr_status s = tsr_event_synchronize(me->subs[j]);
        if (st == TSR_OK)
            st = s;
    }
    return st;
}

/* ---- streams ------------------------------------------------------------------------ */

static meta_backend *mb_of(tsr_backend *b) { return b->context; }
static const char *meta_backend_name(tsr_backend *b) { return mb_of(b)->name; }

tsr_status tsr__meta_sync_subs(meta_backend *mb)
{
    tsr_status st = TSR_OK;
    for (int j = 0; j < mb->md->n; j++) {
        tsr_status s = tsr_backend_synchronize(mb->subs[j]);
        if (st == TSR_OK && s != TSR_OK)
            st = tsr__error(s, "%s: device %d (%s): %s", mb->name, j, tsr_dev_name(mb->md->devs[j]),
                            tsr_last_error());
    }
    mb->in_flight = false;
    return st;
}

static tsr_status meta_backend_sync(tsr_backend *b) { return tsr__meta_sync_subs(mb_of(b)); }

static void meta_backend_free(tsr_backend *b)
{
    meta_backend *mb = mb_of(b);
    tsr__meta_sync_subs(mb);
    tsr_allreduce_free(mb->ar);
    for (int j = 0; j < mb->md->n; j++)
        tsr_backend_free(mb->subs[j]);
    tsr__meta_scratch_free(&mb->sc);
    free(mb);
    free(b);
}

static tsr_status meta_event_record(tsr_backend *b, tsr_event *e)
{
    meta_backend *mb = mb_of(b);
    meta_event *me = e->context;
    tsr_status st = TSR_OK;
    for (int j = 0; j < mb->md->n && st == TSR_OK; j++)
        st = tsr_event_record(me->subs[j], mb->subs[j]);
    return st;
}

/* Every sub-stream waits for the whole event: all sub-events of a meta
 * event, or the foreign event. */
static tsr_status meta_event_wait(tsr_backend *b, tsr_event *e)
{
    meta_backend *mb = mb_of(b);
    meta_dev *emd = tsr__meta_dev(e->dev);
    tsr_status st = TSR_OK;
    for (int j = 0; j < mb->md->n && st == TSR_OK; j++) {
        if (!emd) {
            st = tsr_event_wait(mb->subs[j], e);
            continue;
        }
        const meta_event *me = e->context;
        for (int k = 0; k < emd->n && st == TSR_OK; k++)
            st = tsr_event_wait(mb->subs[j], me->subs[k]);
    }
    return st;
}

/* Host ↔ tensor copies enqueued on the sub-streams (a write to a stored
 * partial falls back to waiting, then the blocking write). */
static tsr_status meta_set_async(tsr_backend *b, tsr_tensor *t, const void *data, size_t offset,
                                 size_t size)
{
    meta_backend *mb = mb_of(b);
    tsr_status st = tsr__meta_io_async(mb->subs, t, (void *)data, offset, size, false);
    if (st == TSR_ENOTHANDLED && (st = meta_backend_sync(b)) == TSR_OK)
        st = tsr_tensor_set(t, data, offset, size);
    return st;
}

static tsr_status meta_get_async(tsr_backend *b, const tsr_tensor *t, void *data, size_t offset,
                                 size_t size)
{
    return tsr__meta_io_async(mb_of(b)->subs, t, data, offset, size, true);
}

static const struct tsr_backend_i meta_backend_iface = {
    .get_name = meta_backend_name,
    .free = meta_backend_free,
    .set_tensor_async = meta_set_async,
    .get_tensor_async = meta_get_async,
    .graph_compute = tsr__meta_graph_compute,
    .synchronize = meta_backend_sync,
    .event_record = meta_event_record,
    .event_wait = meta_event_wait,
};

static tsr_status meta_dev_backend_new(tsr_dev *d, tsr_backend **out)
{
    meta_dev *md = md_of(d);
    tsr_backend *b = calloc(1, sizeof(*b));
    meta_backend *mb = calloc(1, sizeof(*mb));
    tsr_status st = b && mb ? TSR_OK : tsr__error(TSR_ENOMEM, "%s: stream", md->name);
    if (mb) {
        mb->md = md;
        snprintf(mb->name, sizeof(mb->name), "%s", md->name);
        mb->stats.path = TSR_ALLREDUCE_AUTO;
    }
    for (int j = 0; j < md->n && st == TSR_OK; j++)
        st = tsr_backend_new(md->devs[j], &mb->subs[j]);
    if (st == TSR_OK)
        st = tsr_allreduce_new(mb->subs, md->n, &mb->ar);
    if (st != TSR_OK) {
        for (int j = 0; mb && j < md->n; j++)
            tsr_backend_free(mb->subs[j]);
        free(mb);
        free(b);
        return st;
    }
    b->iface = &meta_backend_iface;
    b->dev = d;
    b->context = mb;
    *out = b;
    return TSR_OK;
}

tsr_backend *tsr_meta_sub_backend(tsr_backend *backend, int j)
{
    if (!backend || backend->iface != &meta_backend_iface)
        return NULL;
    meta_backend *mb = mb_of(backend);
    return j >= 0 && j < mb->md->n ? mb->subs[j] : NULL;
}

tsr_status tsr_meta_slice(const tsr_tensor *t, int j, tsr_tensor *out, int64_t *start)
{
    if (!t || !out || !t->buffer || !tsr__meta_is_buf(t->buffer) || t->view_src || !t->extra)
        return tsr__error(TSR_EINVAL, "meta_slice: '%s' is not a tensor placed in a meta buffer",
                          t ? t->name : "(null)");
    const meta_tensor *mt = t->extra;
    if (j < 0 || j >= mt->split.n_devices)
        return tsr__error(TSR_EINVAL, "meta_slice: device %d of %d", j, mt->split.n_devices);
    tsr_status st = tsr__meta_simple_placed(t, j, out);
    if (st != TSR_OK || !start)
        return st;
    *start = 0;
    if (tsr_split_is_axis(&mt->split)) {
        if (mt->split.n_segments != 1 || mt->split.nr[0] != 1)
            return tsr__error(TSR_EUNSUPPORTED, "meta_slice: '%s' has several segments", t->name);
        for (int d = 0; d < j; d++)
            *start += mt->split.ne[0][d];
    }
    return TSR_OK;
}

tsr_status tsr_meta_stats_get(tsr_backend *backend, tsr_meta_stats *out)
{
    if (!backend || !out || backend->iface != &meta_backend_iface)
        return tsr__error(TSR_EINVAL, "meta_stats_get: not a meta stream");
    *out = mb_of(backend)->stats;
    return TSR_OK;
}

static const struct tsr_dev_i meta_dev_iface = {
    .get_name = meta_dev_name,
    .get_description = meta_dev_desc,
    .get_type = meta_dev_type,
    .get_memory = meta_dev_memory,
    .get_caps = meta_dev_caps,
    .get_buft = meta_dev_buft,
    .supports_op = meta_dev_supports_op,
    .supports_buft = meta_dev_supports_buft,
    .backend_new = meta_dev_backend_new,
    .event_new = meta_event_new,
    .event_free = meta_event_free,
    .event_synchronize = meta_event_sync,
};

/* ---- creation ------------------------------------------------------------------------ */

tsr_status tsr_meta_device_new(tsr_dev *const *devs, int n, tsr_split_fn split_fn, void *userdata,
                               tsr_dev **out)
{
    if (!devs || !out)
        return tsr__error(TSR_EINVAL, "meta_device_new: NULL argument");
    *out = NULL;
    if (n < 1 || n > TSR_META_MAX_DEVICES)
        return tsr__error(TSR_EINVAL, "meta_device_new: %d devices (1..%d allowed)", n,
                          TSR_META_MAX_DEVICES);
    for (int j = 0; j < n; j++) {
        if (!devs[j])
            return tsr__error(TSR_EINVAL, "meta_device_new: device %d is NULL", j);
        if (tsr_dev_get_type(devs[j]) == TSR_DEV_META)
            return tsr__error(TSR_EINVAL,
                              "meta_device_new: device %d (%s) is itself a meta device; "
                              "meta devices do not nest",
                              j, tsr_dev_name(devs[j]));
        for (int k = 0; k < j; k++)
            if (devs[k] == devs[j])
                return tsr__error(TSR_EINVAL,
                                  "meta_device_new: %s is listed twice (devices %d and %d)",
                                  tsr_dev_name(devs[j]), k, j);
    }
    meta_dev *md = calloc(1, sizeof(*md));
    meta_cache_entry *cache = calloc(META_CACHE_SIZE, sizeof(*cache));
    if (!md || !cache) {
        free(md);
        free(cache);
        return tsr__error(TSR_ENOMEM, "meta_device_new: %zu bytes", sizeof(*md));
    }
    md->n = n;
    memcpy(md->devs, devs, (size_t)n * sizeof(*devs));
    md->split_fn = split_fn;
    md->userdata = userdata;
    md->cache = cache;
    pthread_mutex_init(&md->cache_lock, NULL);
    size_t o = (size_t)snprintf(md->name, sizeof(md->name), "meta");
    size_t od = (size_t)snprintf(md->desc, sizeof(md->desc), "meta device over %d:", n);
    for (int j = 0; j < n; j++) {
        if (o < sizeof(md->name))
            o += (size_t)snprintf(md->name + o, sizeof(md->name) - o, "%c%s", j ? ',' : '(',
                                  tsr_dev_name(devs[j]));
        if (od < sizeof(md->desc))
            od += (size_t)snprintf(md->desc + od, sizeof(md->desc) - od, " %s (%s)",
                                   tsr_dev_name(devs[j]), tsr_dev_description(devs[j]));
    }
    if (o < sizeof(md->name))
        snprintf(md->name + o, sizeof(md->name) - o, ")");
    md->dev = (tsr_dev){.iface = &meta_dev_iface, .reg = &meta_reg, .context = md};
    md->buft = (tsr_buft){.iface = &tsr__meta_buft_iface, .dev = &md->dev, .context = md};
    *out = &md->dev;
    return TSR_OK;
}

void tsr_meta_device_free(tsr_dev *meta)
{
    meta_dev *md = tsr__meta_dev(meta);
    if (!md)
        return;
    pthread_mutex_destroy(&md->cache_lock);
    free(md->cache);
    free(md);
}

tsr_status tsr_meta_split_of(tsr_dev *meta, const tsr_tensor *t, tsr_split *out)
{
    meta_dev *md = tsr__meta_dev(meta);
    if (!md || !t || !out)
        return tsr__error(TSR_EINVAL, "meta_split_of: %s",
                          md ? "NULL argument" : "not a meta device");
    return tsr__meta_split(md, t, out);
}

tsr_status tsr_meta_check_graph(tsr_dev *meta, tsr_graph *g)
{
    meta_dev *md = tsr__meta_dev(meta);
    if (!md || !g)
        return tsr__error(TSR_EINVAL, "meta_check_graph: %s",
                          md ? "NULL graph" : "not a meta device");
    tsr_split s;
    tsr_status st = TSR_OK;
    for (size_t i = 0; i < tsr_graph_n_nodes(g) && st == TSR_OK; i++)
        st = tsr__meta_split(md, tsr_graph_node(g, i), &s);
    return st;
}
