/* meta/buffer.c — the meta buffer type and buffer: one lane (a real buffer)
 * per sub-device, a record per placed tensor, and the data movement that
 * splits writes across devices and gathers reads.
 *
 * Not the compute side (meta/compute.c). Key choice: the meta buffer has no
 * memory of its own. Its addresses are virtual; each placed tensor records
 * its split and its offset in every lane, so each device holds exactly its
 * slice (the graph allocator plans every lane with that lane's sizes). Views
 * get no record: their slices are derived from their root when needed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor_impl.h"
#include "meta/meta_impl.h"

/* The virtual base: never dereferenced (the buffer type is not host). */
#define META_BASE ((void *)(uintptr_t)0x100000)
#define META_CHUNK 256 /* records per chunk */

static const struct tsr_buf_i meta_buf_iface;

bool tsr__meta_is_buf(const tsr_buf *buf) { return buf && buf->iface == &meta_buf_iface; }
meta_buf *tsr__meta_buf(const tsr_buf *buf) { return tsr__meta_is_buf(buf) ? buf->context : NULL; }

static meta_dev *md_of_buft(tsr_buft *buft) { return buft->context; }

/* ---- simple tensors of placed tensors and of views --------------------------- */

tsr_status tsr__meta_simple_placed(const tsr_tensor *t, int j, tsr_tensor *out)
{
    const meta_buf *mb = tsr__meta_buf(t->buffer);
    const meta_tensor *mt = t->extra;
    if (!mb || !mt || t->view_src)
        return tsr__error(TSR_EINTERNAL, "meta: '%s' has no per-device record", t->name);
    memset(out, 0, sizeof(*out));
    out->type = t->type;
    tsr__meta_simple_shape(t, &mt->split, j, out->ne);
    tsr__set_contiguous_strides(out);
    out->buffer = mb->bufs[j];
    out->data = (char *)tsr_buf_base(mb->bufs[j]) + mt->offs[j];
    out->flags =
        t->flags & (TSR_TENSOR_FLAG_INPUT | TSR_TENSOR_FLAG_OUTPUT | TSR_TENSOR_FLAG_PARAM);
    snprintf(out->name, sizeof(out->name), "%s", t->name);
    return TSR_OK;
}

/* The slices of t (placed, or a view of a placed root) on every device, and
 * t's split. `roots` receives the roots' simple tensors (views point at
 * them), so it must outlive `simple`. */
static tsr_status meta_slices(meta_dev *md, const tsr_tensor *t, tsr_split *split,
                              tsr_tensor *roots, tsr_tensor *simple)
{
    const tsr_tensor *root = t->view_src ? t->view_src : t;
    tsr_status st = TSR_OK;
    for (int j = 0; j < md->n && st == TSR_OK; j++)
        st = tsr__meta_simple_placed(root, j, &roots[j]);
    if (st != TSR_OK)
        return st;
    const tsr_split *rs = &((const meta_tensor *)root->extra)->split;
    if (!t->view_src) {
        *split = *rs;
        memcpy(simple, roots, (size_t)md->n * sizeof(tsr_tensor));
        return TSR_OK;
    }
    for (int j = 0; j < md->n && st == TSR_OK; j++) {
        size_t offs;
        simple[j] = roots[j];
        st = tsr__meta_view(t, root, rs, j, split, simple[j].ne, simple[j].nb, &offs);
        simple[j].view_src = &roots[j];
        simple[j].view_offs = offs;
        simple[j].data = (char *)roots[j].data + offs;
        simple[j].type = t->type;
    }
    return st;
}

/* ---- moving bytes between a host array and the slices ------------------------------ */

typedef struct {
    int kind; /* 0 set, 1 get, 2 memset */
    char *host;
    uint8_t value;
    tsr_backend *const *subs; /* set/get enqueued on these streams; NULL: blocking */
} piece_io;

/* One piece: n_rows rows of `bytes` at simple_off (stride ss) in device j's
 * slice and host_off (stride hs) in the host array. */
static tsr_status piece_apply(const piece_io *io, tsr_tensor *simple, int j, size_t simple_off,
                              size_t host_off, size_t bytes, size_t n_rows, size_t ss, size_t hs)
{
    tsr_tensor *sj = &simple[j];
    switch (io->kind) {
    case 0:
        if (io->subs)
            return tsr_backend_set_2d_async(io->subs[j], sj, io->host + host_off, simple_off, bytes,
                                            n_rows, ss, hs);
        return tsr_tensor_set_2d(sj, io->host + host_off, simple_off, bytes, n_rows, ss, hs);
    case 1:
        if (io->subs)
            return tsr_backend_get_2d_async(io->subs[j], sj, io->host + host_off, simple_off, bytes,
                                            n_rows, ss, hs);
        return tsr_tensor_get_2d(sj, io->host + host_off, simple_off, bytes, n_rows, ss, hs);
    default: {
        tsr_status st = TSR_OK;
        for (size_t r = 0; r < n_rows && st == TSR_OK; r++)
            st = tsr_tensor_memset(sj, io->value, simple_off + r * ss, bytes);
        return st;
    }
    }
}

/* Any byte range: within every outer row it touches, each device's part of
 * each block that intersects the range is one piece (slower than whole rows,
 * which move as 2-D copies; used by row-by-row uploads). */
static tsr_status split_io_ranges(meta_dev *md, const tsr_split *s, tsr_tensor *simple,
                                  size_t chunk, const size_t *chunk_j, int64_t ublk, size_t ub,
                                  size_t offset, size_t size, const piece_io *io)
{
    const size_t end = offset + size;
    for (size_t r = offset / chunk; r * chunk < end; r++) {
        const size_t lo = TSR_MAX(offset, r * chunk) - r * chunk;
        const size_t hi = TSR_MIN(end, (r + 1) * chunk) - r * chunk;
        size_t full = 0, block_j[TSR_META_MAX_DEVICES] = {0};
        for (int seg = 0; seg < s->n_segments; seg++)
            for (int rep = 0; rep < s->nr[seg]; rep++)
                for (int j = 0; j < md->n; j++) {
                    const size_t bytes = (size_t)(s->ne[seg][j] / ublk) * ub;
                    const size_t a = TSR_MAX(lo, full), b = TSR_MIN(hi, full + bytes);
                    if (a < b) {
                        tsr_status st =
                            piece_apply(io, simple, j, r * chunk_j[j] + block_j[j] + (a - full),
                                        r * chunk + a - offset, b - a, 1, 0, 0);
                        if (st != TSR_OK)
                            return st;
                    }
                    full += bytes;
                    block_j[j] += bytes;
                }
    }
    return TSR_OK;
}

/* Walks the blocks of an axis split: for rows [offset, offset + size) of the
 * full tensor (whole rows of the split axis), every device's part of every
 * block is one strided piece. */
static tsr_status split_io(meta_dev *md, const tsr_tensor *t, const tsr_split *s,
                           tsr_tensor *simple, size_t offset, size_t size, const piece_io *io)
{
    const int a = (int)s->axis;
    if (!tsr_is_contiguous(t))
        return tsr__error(TSR_EUNSUPPORTED,
                          "meta: '%s' is split and not contiguous: read or write "
                          "its root",
                          t->name);
    const int64_t ublk = a == 0 ? tsr_type_block_size(t->type) : 1;
    const size_t ub = a == 0 ? tsr_type_size(t->type) : t->nb[a];
    const size_t chunk = a < 3 ? t->nb[a + 1] : tsr_nbytes(t);
    if (chunk == 0)
        return TSR_OK;
    size_t chunk_j[TSR_META_MAX_DEVICES], block_j[TSR_META_MAX_DEVICES] = {0};
    for (int j = 0; j < md->n; j++)
        chunk_j[j] = a < 3 ? simple[j].nb[a + 1] : tsr_nbytes(&simple[j]);
    if (offset % chunk || size % chunk)
        return split_io_ranges(md, s, simple, chunk, chunk_j, ublk, ub, offset, size, io);
    const size_t row0 = offset / chunk, n_rows = size / chunk;
    size_t full = 0;
    for (int seg = 0; seg < s->n_segments; seg++)
        for (int rep = 0; rep < s->nr[seg]; rep++)
            for (int j = 0; j < md->n; j++) {
                const size_t bytes = (size_t)(s->ne[seg][j] / ublk) * ub;
                if (bytes) {
                    tsr_status st = piece_apply(io, simple, j, row0 * chunk_j[j] + block_j[j], full,
                                                bytes, n_rows, chunk_j[j], chunk);
                    if (st != TSR_OK)
                        return st;
                }
                full += bytes;
                block_j[j] += bytes;
            }
    return TSR_OK;
}

/* Writes a stored partial tensor: value/c on each of its c contributors,
 * zeros elsewhere, so that the sum over devices gives the value. */
static tsr_status partial_set(meta_dev *md, const tsr_tensor *t, const tsr_split *s,
                              tsr_tensor *simple, const void *data, size_t offset, size_t size)
{
    if (!tsr_type_is_float(t->type))
        return tsr__error(TSR_ETYPE, "meta: partial tensor '%s' must be f32, f16 or bf16", t->name);
    const size_t es = tsr_type_size(t->type);
    if (offset % es || size % es)
        return tsr__error(TSR_EINVAL, "meta: write to '%s' splits an element", t->name);
    int c = 0;
    for (int j = 0; j < md->n; j++)
        c += s->ne[0][j] != 0;
    const int64_t n = (int64_t)(size / es);
    float *f = malloc((size_t)(n ? n : 1) * sizeof(float));
    void *conv = malloc(size ? size : 1);
    tsr_status st = f && conv ? tsr_row_to_f32(t->type, data, f, n) : TSR_ENOMEM;
    if (st == TSR_OK && c > 0) {
        for (int64_t i = 0; i < n; i++)
            f[i] /= (float)c;
        st = tsr_row_from_f32(t->type, f, conv, n);
    }
    for (int j = 0; j < md->n && st == TSR_OK; j++)
        st = s->ne[0][j] || c == 0 ? tsr_tensor_set(&simple[j], c ? conv : data, offset, size)
                                   : tsr_tensor_memset(&simple[j], 0, offset, size);
    free(f);
    free(conv);
    return st == TSR_ENOMEM ? tsr__error(st, "meta: %zu-byte staging for '%s'", size, t->name) : st;
}

static tsr_status meta_io(tsr_buf *buf, const tsr_tensor *t, piece_io *io, size_t offset,
                          size_t size)
{
    meta_buf *mb = buf->context;
    meta_dev *md = mb->md;
    tsr_split s;
    tsr_tensor roots[TSR_META_MAX_DEVICES], simple[TSR_META_MAX_DEVICES];
    tsr_status st = meta_slices(md, t, &s, roots, simple);
    if (st != TSR_OK)
        return st;
    if (s.axis == TSR_SPLIT_MIRRORED) {
        /* Every device holds the same values: read device 0's. */
        for (int j = 0; j < (io->kind == 1 ? 1 : md->n) && st == TSR_OK; j++)
            st = piece_apply(io, simple, j, offset, 0, size, 1, size, size);
        return st;
    }
    if (s.axis == TSR_SPLIT_PARTIAL) {
        if (io->kind == 1)
            return tsr__error(TSR_EINVAL,
                              "meta: '%s' holds partial sums: it has no value to read "
                              "until it is reduced",
                              t->name);
        if (io->kind == 2) {
            for (int j = 0; j < md->n && st == TSR_OK; j++)
                st = tsr_tensor_memset(&simple[j], io->value, offset, size);
            return st;
        }
        if (io->subs) /* the scaled copies are staged: no async form */
            return TSR_ENOTHANDLED;
        return partial_set(md, t, &s, simple, io->host, offset, size);
    }
    return split_io(md, t, &s, simple, offset, size, io);
}

tsr_status tsr__meta_io_async(tsr_backend *const *subs, const tsr_tensor *t, void *data,
                              size_t offset, size_t size, bool get)
{
    if (!tsr__meta_is_buf(t->buffer))
        return tsr__error(TSR_EINVAL, "meta: '%s' is not in a meta buffer", t->name);
    piece_io io = {.kind = get ? 1 : 0, .host = data, .subs = subs};
    return meta_io(t->buffer, t, &io, offset, size);
}

static tsr_status meta_set(tsr_buf *buf, tsr_tensor *t, const void *data, size_t offset,
                           size_t size)
{
    piece_io io = {.kind = 0, .host = (char *)data};
    return meta_io(buf, t, &io, offset, size);
}

static tsr_status meta_get(tsr_buf *buf, const tsr_tensor *t, void *data, size_t offset,
                           size_t size)
{
    piece_io io = {.kind = 1, .host = data};
    return meta_io(buf, t, &io, offset, size);
}

static tsr_status meta_memset(tsr_buf *buf, tsr_tensor *t, uint8_t value, size_t offset,
                              size_t size)
{
    piece_io io = {.kind = 2, .value = value};
    return meta_io(buf, t, &io, offset, size);
}

/* ---- buffer ------------------------------------------------------------------------------ */

static void meta_buf_free(tsr_buf *buf)
{
    meta_buf *mb = buf->context;
    for (int j = 0; j < mb->md->n; j++)
        tsr_buf_free(mb->bufs[j]);
    for (size_t i = 0; i < mb->n_chunks; i++)
        free(mb->chunks[i]);
    free(mb->chunks);
    free(mb);
    free(buf);
}

static void *meta_buf_base(tsr_buf *buf)
{
    (void)buf;
    return META_BASE;
}

static meta_tensor *record_new(meta_buf *mb)
{
    const size_t chunk = mb->used / META_CHUNK, slot = mb->used % META_CHUNK;
    if (chunk == mb->n_chunks) {
        meta_tensor **c = realloc(mb->chunks, (mb->n_chunks + 1) * sizeof(*c));
        if (!c)
            return NULL;
        mb->chunks = c;
        c[mb->n_chunks] = malloc(META_CHUNK * sizeof(meta_tensor));
        if (!c[mb->n_chunks])
            return NULL;
        mb->n_chunks++;
    }
    mb->used++;
    return &mb->chunks[chunk][slot];
}

static tsr_status meta_init_view(tsr_buf *buf, tsr_tensor *t)
{
    (void)buf;
    (void)t; /* views are derived from their root when used */
    return TSR_OK;
}

static tsr_status meta_init_lanes(tsr_buf *buf, tsr_tensor *t, const size_t *offsets)
{
    meta_buf *mb = buf->context;
    tsr_split s;
    t->extra = NULL;
    tsr_status st = tsr__meta_split(mb->md, t, &s);
    if (st != TSR_OK)
        return st;
    meta_tensor *mt = record_new(mb);
    if (!mt)
        return tsr__error(TSR_ENOMEM, "meta: record for '%s'", t->name);
    mt->split = s;
    memcpy(mt->offs, offsets, (size_t)mb->md->n * sizeof(size_t));
    t->extra = mt;
    if (tsr__log_enabled(TSR_LOG_DEBUG)) {
        char sb[200];
        size_t o = 0;
        char sizes[200] = "";
        for (int j = 0; j < mb->md->n && o < sizeof(sizes); j++)
            o += (size_t)snprintf(sizes + o, sizeof(sizes) - o, "%s%zu", j ? "," : "",
                                  tsr_buft_alloc_size_lane(buf->buft, t, j));
        TSR_LOG_D("meta: '%s' %s: bytes per device %s", t->name, tsr_split_str(&s, sb, sizeof(sb)),
                  sizes);
    }
    return TSR_OK;
}

static void meta_buf_reset(tsr_buf *buf) { ((meta_buf *)buf->context)->used = 0; }

static tsr_status meta_buf_clear(tsr_buf *buf, uint8_t value)
{
    meta_buf *mb = buf->context;
    tsr_status st = TSR_OK;
    for (int j = 0; j < mb->md->n && st == TSR_OK; j++)
        st = tsr_buf_clear(mb->bufs[j], value);
    return st;
}

static const struct tsr_buf_i meta_buf_iface = {
    .free = meta_buf_free,
    .get_base = meta_buf_base,
    .init_tensor = meta_init_view,
    .set_tensor = meta_set,
    .get_tensor = meta_get,
    .memset_tensor = meta_memset,
    .clear = meta_buf_clear,
    .init_tensor_lanes = meta_init_lanes,
    .reset = meta_buf_reset,
};

/* ---- buffer type ------------------------------------------------------------------------- */

static const char *meta_buft_name(tsr_buft *buft) { return md_of_buft(buft)->name; }

static tsr_status meta_buft_alloc_lanes(tsr_buft *buft, const size_t *sizes, tsr_buf **out)
{
    meta_dev *md = md_of_buft(buft);
    meta_buf *mb = calloc(1, sizeof(*mb));
    tsr_buf *buf = calloc(1, sizeof(*buf));
    tsr_status st = mb && buf ? TSR_OK : tsr__error(TSR_ENOMEM, "meta: buffer object");
    if (mb)
        mb->md = md;
    for (int j = 0; j < md->n && st == TSR_OK; j++) {
        st = tsr_buft_alloc(tsr_dev_buft(md->devs[j]), sizes[j], &mb->bufs[j]);
        if (st != TSR_OK)
            st = tsr__error(st, "meta: %zu bytes on %s (device %d): %s", sizes[j],
                            tsr_dev_name(md->devs[j]), j, tsr_last_error());
    }
    if (st != TSR_OK) {
        for (int j = 0; mb && j < md->n; j++)
            tsr_buf_free(mb->bufs[j]);
        free(mb);
        free(buf);
        return st;
    }
    buf->iface = &meta_buf_iface;
    buf->context = mb;
    *out = buf;
    return TSR_OK;
}

static tsr_status meta_buft_alloc(tsr_buft *buft, size_t size, tsr_buf **out)
{
    size_t sizes[TSR_META_MAX_DEVICES];
    for (int j = 0; j < TSR_META_MAX_DEVICES; j++)
        sizes[j] = size;
    return meta_buft_alloc_lanes(buft, sizes, out);
}

static size_t meta_buft_alignment(tsr_buft *buft)
{
    meta_dev *md = md_of_buft(buft);
    size_t a = 1;
    for (int j = 0; j < md->n; j++)
        a = TSR_MAX(a, tsr_buft_alignment(tsr_dev_buft(md->devs[j])));
    return a;
}

static size_t meta_buft_max_size(tsr_buft *buft)
{
    meta_dev *md = md_of_buft(buft);
    size_t m = SIZE_MAX;
    for (int j = 0; j < md->n; j++)
        m = TSR_MIN(m, tsr_buft_max_size(tsr_dev_buft(md->devs[j])));
    return m;
}

static int meta_buft_n_lanes(tsr_buft *buft) { return md_of_buft(buft)->n; }

/* Bytes of t's slice on device `lane` (views never ask). An inference error
 * gives SIZE_MAX, which no lane holds: placement then fails and the error
 * is in tsr_last_error. */
static size_t meta_buft_alloc_size_lane(tsr_buft *buft, const tsr_tensor *t, int lane)
{
    meta_dev *md = md_of_buft(buft);
    tsr_split s;
    if (tsr__meta_split(md, t, &s) != TSR_OK)
        return SIZE_MAX / 2;
    tsr_tensor probe = {.type = t->type};
    tsr__meta_simple_shape(t, &s, lane, probe.ne);
    tsr__set_contiguous_strides(&probe);
    return tsr_buft_alloc_size(tsr_dev_buft(md->devs[lane]), &probe);
}

static size_t meta_buft_alloc_size(tsr_buft *buft, const tsr_tensor *t)
{
    size_t m = 0;
    for (int j = 0; j < md_of_buft(buft)->n; j++)
        m = TSR_MAX(m, meta_buft_alloc_size_lane(buft, t, j));
    return m;
}

static tsr_status meta_buft_check(tsr_buft *buft, const tsr_tensor *t)
{
    tsr_split s;
    return tsr__meta_split(md_of_buft(buft), t, &s);
}

const struct tsr_buft_i tsr__meta_buft_iface = {
    .check_tensor = meta_buft_check,
    .get_name = meta_buft_name,
    .alloc = meta_buft_alloc,
    .get_alignment = meta_buft_alignment,
    .get_max_size = meta_buft_max_size,
    .get_alloc_size = meta_buft_alloc_size,
    .get_n_lanes = meta_buft_n_lanes,
    .get_alloc_size_lane = meta_buft_alloc_size_lane,
    .alloc_lanes = meta_buft_alloc_lanes,
};
