/* core/backend.c — the one caller of every backend function table.
 *
 * Each public tsr_* call here checks its arguments (objects present, tensors
 * placed, byte ranges inside the tensor with overflow-safe arithmetic, shapes
 * matching), applies the documented default when an optional entry is NULL,
 * and dispatches. Backends can therefore trust what they receive.
 *
 * Not here: the registry list (core/registry.c) and the graph allocator.
 */
#include <stdlib.h>
#include <string.h>

#include "core/backend_impl.h"
#include "core/graph_impl.h"
#include "core/internal.h"
#include "core/tensor_impl.h"

const char *tsr_dev_type_name(tsr_dev_type type)
{
    switch (type) {
    case TSR_DEV_CPU:
        return "cpu";
    case TSR_DEV_GPU:
        return "gpu";
    case TSR_DEV_IGPU:
        return "igpu";
    case TSR_DEV_REMOTE:
        return "remote";
    case TSR_DEV_META:
        return "meta";
    }
    return "?";
}

/* ---- devices ---------------------------------------------------------------------- */

const char *tsr_dev_name(tsr_dev *dev) { return dev->iface->get_name(dev); }

const char *tsr_dev_description(tsr_dev *dev)
{
    return dev->iface->get_description ? dev->iface->get_description(dev) : tsr_dev_name(dev);
}

tsr_dev_type tsr_dev_get_type(tsr_dev *dev) { return dev->iface->get_type(dev); }

void tsr_dev_memory(tsr_dev *dev, size_t *free_bytes, size_t *total_bytes)
{
    size_t f = 0, t = 0;
    dev->iface->get_memory(dev, &f, &t);
    if (free_bytes)
        *free_bytes = f;
    if (total_bytes)
        *total_bytes = t;
}

tsr_dev_caps tsr_dev_get_caps(tsr_dev *dev) { return dev->iface->get_caps(dev); }
tsr_reg *tsr_dev_reg(tsr_dev *dev) { return dev->reg; }
tsr_buft *tsr_dev_buft(tsr_dev *dev) { return dev->iface->get_buft(dev); }

tsr_buft *tsr_dev_host_buft(tsr_dev *dev)
{
    return dev->iface->get_host_buft ? dev->iface->get_host_buft(dev) : NULL;
}

bool tsr_dev_supports_op(tsr_dev *dev, const tsr_tensor *op)
{
    if (!dev || !op)
        return false;
    if (op->op == TSR_OP_NONE || tsr_op_is_view(op->op))
        return true;
    return dev->iface->supports_op(dev, op);
}

bool tsr_dev_supports_buft(tsr_dev *dev, tsr_buft *buft)
{
    if (!dev || !buft)
        return false;
    if (dev->iface->supports_buft)
        return dev->iface->supports_buft(dev, buft);
    return buft == tsr_dev_buft(dev) || buft == tsr_dev_host_buft(dev);
}

tsr_status tsr_backend_new(tsr_dev *dev, tsr_backend **out)
{
    if (!dev || !out)
        return tsr__error(TSR_EINVAL, "backend_new: NULL argument");
    *out = NULL;
    return dev->iface->backend_new(dev, out);
}

/* ---- buffer types ------------------------------------------------------------------- */

const char *tsr_buft_name(tsr_buft *buft) { return buft->iface->get_name(buft); }
tsr_dev *tsr_buft_dev(tsr_buft *buft) { return buft->dev; }
size_t tsr_buft_alignment(tsr_buft *buft) { return buft->iface->get_alignment(buft); }

size_t tsr_buft_max_size(tsr_buft *buft)
{
    return buft->iface->get_max_size ? buft->iface->get_max_size(buft) : SIZE_MAX;
}

size_t tsr_buft_alloc_size(tsr_buft *buft, const tsr_tensor *t)
{
    return buft->iface->get_alloc_size ? buft->iface->get_alloc_size(buft, t) : tsr_nbytes(t);
}

bool tsr_buft_is_host(tsr_buft *buft)
{
    return buft->iface->is_host ? buft->iface->is_host(buft) : false;
}

tsr_status tsr__buft_check_tensor(tsr_buft *buft, const tsr_tensor *t)
{
    return buft->iface->check_tensor ? buft->iface->check_tensor(buft, t) : TSR_OK;
}

int tsr_buft_n_lanes(tsr_buft *buft)
{
    return buft->iface->get_n_lanes ? buft->iface->get_n_lanes(buft) : 1;
}

size_t tsr_buft_alloc_size_lane(tsr_buft *buft, const tsr_tensor *t, int lane)
{
    if (tsr_buft_n_lanes(buft) == 1)
        return lane == 0 ? tsr_buft_alloc_size(buft, t) : 0;
    return buft->iface->get_alloc_size_lane(buft, t, lane);
}

tsr_status tsr_buft_alloc_lanes(tsr_buft *buft, const size_t *sizes, tsr_buf **out)
{
    if (!buft || !sizes || !out)
        return tsr__error(TSR_EINVAL, "buft_alloc: NULL argument");
    *out = NULL;
    const int n = tsr_buft_n_lanes(buft);
    if (n < 1 || n > TSR_MAX_LANES)
        return tsr__error(TSR_EINTERNAL, "%s: %d lanes", tsr_buft_name(buft), n);
    size_t ask[TSR_MAX_LANES], largest = 0;
    for (int i = 0; i < n; i++) {
        if (sizes[i] > tsr_buft_max_size(buft))
            return tsr__error(TSR_ENOMEM,
                              "%s: %zu bytes in lane %d exceed the largest allocation (%zu)",
                              tsr_buft_name(buft), sizes[i], i, tsr_buft_max_size(buft));
        ask[i] = sizes[i] ? sizes[i] : 1;
        largest = TSR_MAX(largest, sizes[i]);
    }
    tsr_buf *buf = NULL;
    tsr_status st =
        n == 1 ? buft->iface->alloc(buft, ask[0], &buf) : buft->iface->alloc_lanes(buft, ask, &buf);
    if (st != TSR_OK)
        return st;
    buf->buft = buft;
    buf->size = largest;
    buf->n_lanes = n;
    for (int i = 0; i < n; i++)
        buf->lane_size[i] = sizes[i];
    *out = buf;
    return TSR_OK;
}

tsr_status tsr_buft_alloc(tsr_buft *buft, size_t size, tsr_buf **out)
{
    if (!buft)
        return tsr__error(TSR_EINVAL, "buft_alloc: NULL buffer type");
    size_t sizes[TSR_MAX_LANES];
    for (int i = 0; i < TSR_MAX_LANES; i++)
        sizes[i] = size;
    return tsr_buft_alloc_lanes(buft, sizes, out);
}

/* ---- buffers ------------------------------------------------------------------------- */

void tsr_buf_free(tsr_buf *buf)
{
    if (buf)
        buf->iface->free(buf);
}

tsr_buft *tsr_buf_buft(tsr_buf *buf) { return buf->buft; }
int tsr_buf_n_lanes(tsr_buf *buf) { return buf->n_lanes; }

size_t tsr_buf_lane_size(tsr_buf *buf, int lane)
{
    return lane >= 0 && lane < buf->n_lanes ? buf->lane_size[lane] : 0;
}
size_t tsr_buf_size(tsr_buf *buf) { return buf->size; }
void *tsr_buf_base(tsr_buf *buf) { return buf->iface->get_base(buf); }
bool tsr_buf_is_host(tsr_buf *buf) { return tsr_buft_is_host(buf->buft); }
void tsr_buf_set_usage(tsr_buf *buf, tsr_buf_usage usage) { buf->usage = usage; }
tsr_buf_usage tsr_buf_get_usage(tsr_buf *buf) { return buf->usage; }

tsr_status tsr_buf_clear(tsr_buf *buf, uint8_t value)
{
    if (!buf)
        return tsr__error(TSR_EINVAL, "buf_clear: NULL buffer");
    return buf->iface->clear(buf, value);
}

tsr_status tsr_buf_place_tensor_lanes(tsr_buf *buf, tsr_tensor *t, const size_t *offsets)
{
    if (!buf || !t || !offsets)
        return tsr__error(TSR_EINVAL, "buf_place_tensor: NULL argument");
    if (t->view_src)
        return tsr__error(TSR_EINVAL, "buf_place_tensor: '%s' is a view; place its source",
                          tsr__tname(t));
    if (t->buffer)
        return tsr__error(TSR_EBUSY, "buf_place_tensor: '%s' is already placed", tsr__tname(t));
    const size_t align = tsr_buft_alignment(buf->buft);
    for (int i = 0; i < buf->n_lanes; i++) {
        if (offsets[i] % align != 0)
            return tsr__error(TSR_EINVAL,
                              "buf_place_tensor: '%s' at offset %zu (lane %d) is not %zu-aligned",
                              tsr__tname(t), offsets[i], i, align);
        const size_t need = tsr_buft_alloc_size_lane(buf->buft, t, i);
        size_t end;
        if (!tsr__add_ok(offsets[i], need, &end) || end > buf->lane_size[i])
            return tsr__error(
                TSR_ERANGE,
                "buf_place_tensor: '%s' needs %zu bytes at offset %zu of lane %d; the "
                "lane has %zu",
                tsr__tname(t), need, offsets[i], i, buf->lane_size[i]);
    }
    t->buffer = buf;
    t->data = (char *)tsr_buf_base(buf) + offsets[0];
    tsr_status st = TSR_OK;
    if (buf->iface->init_tensor_lanes)
        st = buf->iface->init_tensor_lanes(buf, t, offsets);
    else if (buf->iface->init_tensor)
        st = buf->iface->init_tensor(buf, t);
    if (st != TSR_OK) {
        t->buffer = NULL;
        t->data = NULL;
    }
    return st;
}

tsr_status tsr_buf_place_tensor(tsr_buf *buf, tsr_tensor *t, size_t offset)
{
    size_t offsets[TSR_MAX_LANES];
    for (int i = 0; i < TSR_MAX_LANES; i++)
        offsets[i] = offset;
    return tsr_buf_place_tensor_lanes(buf, t, offsets);
}

tsr_status tsr_view_init(tsr_tensor *view)
{
    if (!view || !view->view_src)
        return tsr__error(TSR_EINVAL, "view_init: not a view");
    const tsr_tensor *root = view->view_src;
    if (!root->buffer)
        return tsr__error(TSR_EINVAL, "view_init: source '%s' of '%s' is not placed",
                          tsr__tname(root), tsr__tname(view));
    view->buffer = root->buffer;
    view->data = (char *)root->data + view->view_offs;
    if (root->buffer->iface->init_tensor)
        return root->buffer->iface->init_tensor(root->buffer, view);
    return TSR_OK;
}

tsr_status tsr_ctx_alloc_tensors(tsr_ctx *ctx, tsr_buft *buft, tsr_buf **out)
{
    if (!ctx || !buft || !out)
        return tsr__error(TSR_EINVAL, "ctx_alloc_tensors: NULL argument");
    *out = NULL;
    const size_t align = tsr_buft_alignment(buft);
    const int lanes = tsr_buft_n_lanes(buft);
    size_t total[TSR_MAX_LANES] = {0};
    const size_t n = tsr_ctx_n_tensors(ctx);
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        tsr_tensor *t = tsr_ctx_tensor(ctx, i);
        if (t->buffer || t->view_src)
            continue;
        tsr_status cst = tsr__buft_check_tensor(buft, t);
        if (cst != TSR_OK)
            return cst;
        any = true;
        for (int l = 0; l < lanes; l++) {
            const size_t sz = tsr__align_up(tsr_buft_alloc_size_lane(buft, t, l), align);
            if (!tsr__add_ok(total[l], sz, &total[l]))
                return tsr__error(TSR_ERANGE, "ctx_alloc_tensors: total size overflows");
        }
    }
    if (!any)
        return TSR_OK;
    tsr_buf *buf;
    tsr_status st = tsr_buft_alloc_lanes(buft, total, &buf);
    if (st != TSR_OK)
        return st;
    size_t off[TSR_MAX_LANES] = {0};
    for (size_t i = 0; i < n && st == TSR_OK; i++) {
        tsr_tensor *t = tsr_ctx_tensor(ctx, i);
        if (t->buffer || t->view_src)
            continue;
        st = tsr_buf_place_tensor_lanes(buf, t, off);
        for (int l = 0; l < lanes; l++)
            off[l] += tsr__align_up(tsr_buft_alloc_size_lane(buft, t, l), align);
    }
    for (size_t i = 0; i < n && st == TSR_OK; i++) {
        tsr_tensor *t = tsr_ctx_tensor(ctx, i);
        if (t->view_src && !t->buffer && t->view_src->buffer == buf)
            st = tsr_view_init(t);
    }
    if (st != TSR_OK) {
        for (size_t i = 0; i < n; i++) {
            tsr_tensor *t = tsr_ctx_tensor(ctx, i);
            if (t->buffer == buf) {
                t->buffer = NULL;
                t->data = NULL;
            }
        }
        tsr_buf_free(buf);
        return st;
    }
    *out = buf;
    return TSR_OK;
}

/* ---- tensor data ------------------------------------------------------------------- */

/* The common checks of a byte range [offset, offset+size) of t. */
static tsr_status check_range(const tsr_tensor *t, size_t offset, size_t size, const char *what)
{
    if (!t)
        return tsr__error(TSR_EINVAL, "%s: NULL tensor", what);
    if (!t->buffer)
        return tsr__error(TSR_EINVAL, "%s: tensor '%s' is not allocated", what, tsr__tname(t));
    size_t end;
    if (!tsr__add_ok(offset, size, &end) || end > tsr_nbytes(t))
        return tsr__error(TSR_ERANGE, "%s: bytes [%zu, +%zu) outside '%s' (%zu bytes)", what,
                          offset, size, tsr__tname(t), tsr_nbytes(t));
    return TSR_OK;
}

/* Rows i < n_rows at offset + i·stride, each row_size bytes, must lie in t. */
static tsr_status check_range_2d(const tsr_tensor *t, size_t offset, size_t row_size, size_t n_rows,
                                 size_t t_stride, const char *what)
{
    if (n_rows == 0)
        return check_range(t, offset, 0, what);
    size_t last;
    if (!tsr__mul_ok(n_rows - 1, t_stride, &last) || !tsr__add_ok(offset, last, &last))
        return tsr__error(TSR_ERANGE, "%s: %zu rows of stride %zu overflow", what, n_rows,
                          t_stride);
    if (row_size > t_stride && n_rows > 1)
        return tsr__error(TSR_EINVAL, "%s: rows of %zu bytes overlap at stride %zu", what, row_size,
                          t_stride);
    return check_range(t, last, row_size, what);
}

tsr_status tsr_tensor_set(tsr_tensor *t, const void *data, size_t offset, size_t size)
{
    tsr_status st = check_range(t, offset, size, "tensor_set");
    if (st != TSR_OK || size == 0)
        return st;
    if (!data)
        return tsr__error(TSR_EINVAL, "tensor_set: NULL data for '%s'", tsr__tname(t));
    return t->buffer->iface->set_tensor(t->buffer, t, data, offset, size);
}

tsr_status tsr_tensor_get(const tsr_tensor *t, void *data, size_t offset, size_t size)
{
    tsr_status st = check_range(t, offset, size, "tensor_get");
    if (st != TSR_OK || size == 0)
        return st;
    if (!data)
        return tsr__error(TSR_EINVAL, "tensor_get: NULL data for '%s'", tsr__tname(t));
    return t->buffer->iface->get_tensor(t->buffer, t, data, offset, size);
}

tsr_status tsr_tensor_set_2d(tsr_tensor *t, const void *data, size_t offset, size_t row_size,
                             size_t n_rows, size_t t_stride, size_t data_stride)
{
    tsr_status st = check_range_2d(t, offset, row_size, n_rows, t_stride, "tensor_set_2d");
    if (st != TSR_OK || n_rows == 0 || row_size == 0)
        return st;
    if (!data)
        return tsr__error(TSR_EINVAL, "tensor_set_2d: NULL data");
    tsr_buf *b = t->buffer;
    if (b->iface->set_tensor_2d)
        return b->iface->set_tensor_2d(b, t, data, offset, row_size, n_rows, t_stride, data_stride);
    for (size_t i = 0; i < n_rows && st == TSR_OK; i++)
        st = b->iface->set_tensor(b, t, (const char *)data + i * data_stride, offset + i * t_stride,
                                  row_size);
    return st;
}

tsr_status tsr_tensor_get_2d(const tsr_tensor *t, void *data, size_t offset, size_t row_size,
                             size_t n_rows, size_t t_stride, size_t data_stride)
{
    tsr_status st = check_range_2d(t, offset, row_size, n_rows, t_stride, "tensor_get_2d");
    if (st != TSR_OK || n_rows == 0 || row_size == 0)
        return st;
    if (!data)
        return tsr__error(TSR_EINVAL, "tensor_get_2d: NULL data");
    tsr_buf *b = t->buffer;
    if (b->iface->get_tensor_2d)
        return b->iface->get_tensor_2d(b, t, data, offset, row_size, n_rows, t_stride, data_stride);
    for (size_t i = 0; i < n_rows && st == TSR_OK; i++)
        st = b->iface->get_tensor(b, t, (char *)data + i * data_stride, offset + i * t_stride,
                                  row_size);
    return st;
}

tsr_status tsr_tensor_memset(tsr_tensor *t, uint8_t value, size_t offset, size_t size)
{
    tsr_status st = check_range(t, offset, size, "tensor_memset");
    if (st != TSR_OK || size == 0)
        return st;
    return t->buffer->iface->memset_tensor(t->buffer, t, value, offset, size);
}

/* A per-thread staging buffer for copies through host memory; grown, never
 * shrunk, so repeated copies do not allocate. */
static _Thread_local void *staging;
static _Thread_local size_t staging_size;

static void *staging_get(size_t size)
{
    if (size <= staging_size)
        return staging;
    void *p = realloc(staging, size);
    if (!p)
        return NULL;
    staging = p;
    staging_size = size;
    return p;
}

static tsr_status check_copy(const tsr_tensor *src, const tsr_tensor *dst, const char *what)
{
    if (!src || !dst)
        return tsr__error(TSR_EINVAL, "%s: NULL tensor", what);
    if (!src->buffer || !dst->buffer)
        return tsr__error(TSR_EINVAL, "%s: '%s' is not allocated", what,
                          tsr__tname(src->buffer ? dst : src));
    char s1[64], s2[64];
    if (src->type != dst->type || !tsr_same_shape(src, dst))
        return tsr__error(TSR_ESHAPE, "%s: '%s' %s %s into '%s' %s %s", what, tsr__tname(src),
                          tsr_type_name(src->type), tsr_shape_str(src, s1, 64), tsr__tname(dst),
                          tsr_type_name(dst->type), tsr_shape_str(dst, s2, 64));
    if (!tsr_is_contiguous(src) || !tsr_is_contiguous(dst))
        return tsr__error(TSR_EINVAL, "%s: '%s' or '%s' is not contiguous", what, tsr__tname(src),
                          tsr__tname(dst));
    return TSR_OK;
}

tsr_status tsr_tensor_copy(const tsr_tensor *src, tsr_tensor *dst)
{
    tsr_status st = check_copy(src, dst, "tensor_copy");
    if (st != TSR_OK)
        return st;
    const size_t n = tsr_nbytes(src);
    if (n == 0 || src == dst)
        return TSR_OK;
    tsr_buf *db = dst->buffer;
    if (db->iface->cpy_tensor) {
        st = db->iface->cpy_tensor(db, src, dst);
        if (st != TSR_ENOTHANDLED)
            return st;
    }
    if (tsr_buf_is_host(src->buffer))
        return db->iface->set_tensor(db, dst, src->data, 0, n);
    if (tsr_buf_is_host(db))
        return src->buffer->iface->get_tensor(src->buffer, src, dst->data, 0, n);
    void *tmp = staging_get(n);
    if (!tmp)
        return tsr__error(TSR_ENOMEM, "tensor_copy: %zu-byte staging buffer", n);
    st = src->buffer->iface->get_tensor(src->buffer, src, tmp, 0, n);
    if (st == TSR_OK)
        st = db->iface->set_tensor(db, dst, tmp, 0, n);
    return st;
}

/* ---- streams ------------------------------------------------------------------------- */

void tsr_backend_free(tsr_backend *backend)
{
    if (backend)
        backend->iface->free(backend);
}

const char *tsr_backend_name(tsr_backend *backend) { return backend->iface->get_name(backend); }
tsr_dev *tsr_backend_dev(tsr_backend *backend) { return backend->dev; }

tsr_status tsr_backend_synchronize(tsr_backend *backend)
{
    if (!backend)
        return tsr__error(TSR_EINVAL, "backend_synchronize: NULL backend");
    return backend->iface->synchronize(backend);
}

tsr_status tsr_backend_set_async(tsr_backend *backend, tsr_tensor *t, const void *data,
                                 size_t offset, size_t size)
{
    if (!backend)
        return tsr__error(TSR_EINVAL, "backend_set_async: NULL backend");
    tsr_status st = check_range(t, offset, size, "backend_set_async");
    if (st != TSR_OK || size == 0)
        return st;
    if (!data)
        return tsr__error(TSR_EINVAL, "backend_set_async: NULL data");
    if (backend->iface->set_tensor_async)
        return backend->iface->set_tensor_async(backend, t, data, offset, size);
    st = tsr_backend_synchronize(backend);
    return st == TSR_OK ? t->buffer->iface->set_tensor(t->buffer, t, data, offset, size) : st;
}

tsr_status tsr_backend_get_async(tsr_backend *backend, const tsr_tensor *t, void *data,
                                 size_t offset, size_t size)
{
    if (!backend)
        return tsr__error(TSR_EINVAL, "backend_get_async: NULL backend");
    tsr_status st = check_range(t, offset, size, "backend_get_async");
    if (st != TSR_OK || size == 0)
        return st;
    if (!data)
        return tsr__error(TSR_EINVAL, "backend_get_async: NULL data");
    if (backend->iface->get_tensor_async)
        return backend->iface->get_tensor_async(backend, t, data, offset, size);
    st = tsr_backend_synchronize(backend);
    return st == TSR_OK ? t->buffer->iface->get_tensor(t->buffer, t, data, offset, size) : st;
}

tsr_status tsr_backend_set_2d_async(tsr_backend *backend, tsr_tensor *t, const void *data,
                                    size_t offset, size_t row_size, size_t n_rows, size_t t_stride,
                                    size_t data_stride)
{
    if (!backend)
        return tsr__error(TSR_EINVAL, "backend_set_2d_async: NULL backend");
    tsr_status st = check_range_2d(t, offset, row_size, n_rows, t_stride, "backend_set_2d_async");
    if (st != TSR_OK || n_rows == 0 || row_size == 0)
        return st;
    if (!data)
        return tsr__error(TSR_EINVAL, "backend_set_2d_async: NULL data");
    if (backend->iface->set_tensor_2d_async)
        return backend->iface->set_tensor_2d_async(backend, t, data, offset, row_size, n_rows,
                                                   t_stride, data_stride);
    for (size_t i = 0; i < n_rows && st == TSR_OK; i++)
        st = tsr_backend_set_async(backend, t, (const char *)data + i * data_stride,
                                   offset + i * t_stride, row_size);
    return st;
}

tsr_status tsr_backend_get_2d_async(tsr_backend *backend, const tsr_tensor *t, void *data,
                                    size_t offset, size_t row_size, size_t n_rows, size_t t_stride,
                                    size_t data_stride)
{
    if (!backend)
        return tsr__error(TSR_EINVAL, "backend_get_2d_async: NULL backend");
    tsr_status st = check_range_2d(t, offset, row_size, n_rows, t_stride, "backend_get_2d_async");
    if (st != TSR_OK || n_rows == 0 || row_size == 0)
        return st;
    if (!data)
        return tsr__error(TSR_EINVAL, "backend_get_2d_async: NULL data");
    if (backend->iface->get_tensor_2d_async)
        return backend->iface->get_tensor_2d_async(backend, t, data, offset, row_size, n_rows,
                                                   t_stride, data_stride);
    for (size_t i = 0; i < n_rows && st == TSR_OK; i++)
        st = tsr_backend_get_async(backend, t, (char *)data + i * data_stride,
                                   offset + i * t_stride, row_size);
    return st;
}

tsr_status tsr_backend_copy_async(tsr_backend *src_backend, tsr_backend *dst_backend,
                                  const tsr_tensor *src, tsr_tensor *dst)
{
    if (!src_backend || !dst_backend)
        return tsr__error(TSR_EINVAL, "backend_copy_async: NULL backend");
    tsr_status st = check_copy(src, dst, "backend_copy_async");
    if (st != TSR_OK || tsr_nbytes(src) == 0 || src == dst)
        return st;
    if (dst_backend->iface->cpy_tensor_async) {
        st = dst_backend->iface->cpy_tensor_async(src_backend, dst_backend, src, dst);
        if (st != TSR_ENOTHANDLED)
            return st;
    }
    /* No async path for this pair: order by waiting on both streams. */
    if ((st = tsr_backend_synchronize(src_backend)) != TSR_OK)
        return st;
    if (dst_backend != src_backend && (st = tsr_backend_synchronize(dst_backend)) != TSR_OK)
        return st;
    return tsr_tensor_copy(src, dst);
}

/* Every node the backend will run must be placed, in memory the device can
 * read, and supported; the first offender is named. */
static tsr_status check_graph(tsr_backend *backend, tsr_graph *g)
{
    tsr_dev *dev = backend->dev;
    for (size_t i = 0; i < g->n_nodes; i++) {
        tsr_tensor *n = g->nodes[i];
        if (!(n->flags & TSR_TENSOR_FLAG_COMPUTE) || tsr_op_is_view(n->op) || n->op == TSR_OP_NONE)
            continue;
        if (!n->buffer)
            return tsr__error(TSR_EINVAL,
                              "graph_compute on %s: node %zu '%s' (%s) is not allocated",
                              tsr_dev_name(dev), i, tsr__tname(n), tsr_op_name(n->op));
        for (int s = 0; s < TSR_MAX_SRC; s++) {
            const tsr_tensor *src = n->src[s];
            if (!src)
                continue;
            if (!src->buffer)
                return tsr__error(
                    TSR_EINVAL, "graph_compute on %s: source %d '%s' of node '%s' is not allocated",
                    tsr_dev_name(dev), s, tsr__tname(src), tsr__tname(n));
            if (!tsr_dev_supports_buft(dev, src->buffer->buft))
                return tsr__error(TSR_EUNSUPPORTED,
                                  "graph_compute on %s: source '%s' of '%s' lives in %s memory",
                                  tsr_dev_name(dev), tsr__tname(src), tsr__tname(n),
                                  tsr_buft_name(src->buffer->buft));
        }
        if (!dev->iface->supports_op(dev, n)) {
            char s[64];
            return tsr__error(TSR_EUNSUPPORTED, "graph_compute on %s: %s node '%s' %s %s",
                              tsr_dev_name(dev), tsr_op_name(n->op), tsr__tname(n),
                              tsr_type_name(n->type), tsr_shape_str(n, s, sizeof(s)));
        }
    }
    return TSR_OK;
}

tsr_status tsr_backend_graph_compute_async(tsr_backend *backend, tsr_graph *g)
{
    if (!backend || !g)
        return tsr__error(TSR_EINVAL, "graph_compute: NULL argument");
    tsr_status st = check_graph(backend, g);
    if (st != TSR_OK)
        return st;
    return backend->iface->graph_compute(backend, g);
}

tsr_status tsr_backend_graph_compute(tsr_backend *backend, tsr_graph *g)
{
    tsr_status st = tsr_backend_graph_compute_async(backend, g);
    if (st != TSR_OK)
        return st;
    return tsr_backend_synchronize(backend);
}

/* ---- events ------------------------------------------------------------------------- */

tsr_status tsr_event_new(tsr_dev *dev, tsr_event **out)
{
    if (!dev || !out)
        return tsr__error(TSR_EINVAL, "event_new: NULL argument");
    *out = NULL;
    if (dev->iface->event_new)
        return dev->iface->event_new(dev, out);
    /* Emulated: recording remembers the stream, waiting synchronizes it. */
    tsr_event *e = calloc(1, sizeof(*e));
    if (!e)
        return tsr__error(TSR_ENOMEM, "event_new: %zu bytes", sizeof(*e));
    e->dev = dev;
    *out = e;
    return TSR_OK;
}

void tsr_event_free(tsr_event *event)
{
    if (!event)
        return;
    if (event->dev->iface->event_new)
        event->dev->iface->event_free(event->dev, event);
    else
        free(event);
}

tsr_status tsr_event_record(tsr_event *event, tsr_backend *backend)
{
    if (!event || !backend)
        return tsr__error(TSR_EINVAL, "event_record: NULL argument");
    if (backend->dev != event->dev)
        return tsr__error(TSR_EINVAL, "event_record: event of %s recorded on a stream of %s",
                          tsr_dev_name(event->dev), tsr_dev_name(backend->dev));
    if (!event->dev->iface->event_new) {
        event->emulated = backend;
        return TSR_OK;
    }
    return backend->iface->event_record(backend, event);
}

tsr_status tsr__event_copy(tsr_event *dst, const tsr_event *src)
{
    if (src->dev != dst->dev || !src->dev->iface->event_copy)
        return TSR_ENOTHANDLED;
    return src->dev->iface->event_copy(src->dev, dst, src);
}

tsr_status tsr__event_snapshot(const tsr_event *src, tsr_event **out)
{
    *out = NULL;
    if (!src->dev->iface->event_new || !src->dev->iface->event_copy)
        return TSR_ENOTHANDLED;
    tsr_event *e;
    tsr_status st = tsr_event_new(src->dev, &e);
    if (st == TSR_OK && (st = tsr__event_copy(e, src)) != TSR_OK)
        tsr_event_free(e);
    if (st == TSR_OK)
        *out = e;
    return st;
}

tsr_status tsr_event_synchronize(tsr_event *event)
{
    if (!event)
        return tsr__error(TSR_EINVAL, "event_synchronize: NULL event");
    if (!event->dev->iface->event_new)
        return event->emulated ? tsr_backend_synchronize(event->emulated) : TSR_OK;
    return event->dev->iface->event_synchronize(event->dev, event);
}

tsr_status tsr_event_wait(tsr_backend *backend, tsr_event *event)
{
    if (!backend || !event)
        return tsr__error(TSR_EINVAL, "event_wait: NULL argument");
    if (backend->iface->event_wait && event->dev->iface->event_new)
        return backend->iface->event_wait(backend, event);
    return tsr_event_synchronize(event);
}
