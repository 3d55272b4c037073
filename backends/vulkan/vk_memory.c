/* backends/vulkan/vk_memory.c — device memory: the buffer type of each
 * Vulkan device, its buffers, and their blocking transfers.
 *
 * Not the asynchronous transfers (vk_stream.c). A buffer is one VkBuffer
 * with its own allocation, in the device-local memory type chosen by
 * vk_device.c, addressed by shaders through its device address. Its
 * tensors' data pointers point into an address range reserved (never
 * mapped) for the buffer, so pointers of different buffers never collide and
 * a stray host dereference faults at once. Allocations above
 * maxMemoryAllocationSize (or the heap) are refused by the buffer type's
 * max size, with the limit named; no binding range applies (shaders use
 * addresses, see shaders/common.glsl).
 *
 * Blocking transfers: memcpy through the mapping when tensor memory is
 * host-visible (lavapipe, integrated GPUs), else a staged copy on the
 * device's private transfer stream.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backends/vulkan/vk_impl.h"

static const struct tsr_buf_i vk_buf_iface;

/* ---- raw memory ------------------------------------------------------------------------ */

tsr_status tsr__vk_mem_new(vk_device *d, size_t size, bool host, vk_mem *out)
{
    memset(out, 0, sizeof(*out));
    const VkBufferCreateInfo bi = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .size = size,
        .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                 VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT |
                 VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT,
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
    };
    VkResult r = VKF.vkCreateBuffer(d->dev, &bi, NULL, &out->buf);
    if (r != VK_SUCCESS)
        return tsr__vk_fail(d, r, "vkCreateBuffer (%zu bytes)", size);
    VkMemoryRequirements req;
    VKF.vkGetBufferMemoryRequirements(d->dev, out->buf, &req);
    const uint32_t type = host ? d->mt_host : d->mt_device;
    if (!(req.memoryTypeBits & (1u << type))) {
        VKF.vkDestroyBuffer(d->dev, out->buf, NULL);
        return tsr__error(TSR_EDEVICE, "%s: buffers cannot use memory type %u (allowed mask %#x)",
                          d->name, type, req.memoryTypeBits);
    }
    const VkMemoryAllocateFlagsInfo fi = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
                                          .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT};
    const VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                     .pNext = &fi,
                                     .allocationSize = req.size,
                                     .memoryTypeIndex = type};
    r = VKF.vkAllocateMemory(d->dev, &ai, NULL, &out->mem);
    if (r != VK_SUCCESS) {
        VKF.vkDestroyBuffer(d->dev, out->buf, NULL);
        return tsr__vk_fail(d, r, "vkAllocateMemory (%zu bytes of %s memory)", size,
                            host ? "host-visible" : "device");
    }
    r = VKF.vkBindBufferMemory(d->dev, out->buf, out->mem, 0);
    if (r == VK_SUCCESS && (host || d->device_mappable))
        r = VKF.vkMapMemory(d->dev, out->mem, 0, VK_WHOLE_SIZE, 0, &out->map);
    if (r != VK_SUCCESS) {
        VKF.vkDestroyBuffer(d->dev, out->buf, NULL);
        VKF.vkFreeMemory(d->dev, out->mem, NULL);
        return tsr__vk_fail(d, r, "binding or mapping %zu bytes", size);
    }
    const VkBufferDeviceAddressInfo bda = {.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO,
                                           .buffer = out->buf};
    out->addr = VKF.vkGetBufferDeviceAddress(d->dev, &bda);
    out->size = size;
    out->host = host;
    if (!host)
        atomic_fetch_add(&d->allocated, size);
    return TSR_OK;
}

void tsr__vk_mem_free(vk_device *d, vk_mem *m)
{
    if (!m->buf)
        return;
    VKF.vkDestroyBuffer(d->dev, m->buf, NULL);
    if (m->map)
        VKF.vkUnmapMemory(d->dev, m->mem);
    VKF.vkFreeMemory(d->dev, m->mem, NULL);
    if (!m->host)
        atomic_fetch_sub(&d->allocated, m->size);
    memset(m, 0, sizeof(*m));
}

/* ---- tensors in buffers ------------------------------------------------------------------ */

bool tsr__vk_is_buffer(const tsr_buf *buf) { return buf && buf->iface == &vk_buf_iface; }
vk_buffer *tsr__vk_buffer_of(const tsr_tensor *t) { return t->buffer->context; }

size_t tsr__vk_offset(const tsr_tensor *t)
{
    return (size_t)((const char *)t->data - tsr__vk_buffer_of(t)->base);
}

uint64_t tsr__vk_addr(const tsr_tensor *t)
{
    return tsr__vk_buffer_of(t)->m.addr + tsr__vk_offset(t);
}

/* ---- blocking transfers --------------------------------------------------------------------- */

/* Runs fn on the device's private transfer stream and waits for it. */
typedef void (*vk_xfer_fn)(vk_stream *s, void *arg);

static tsr_status vk_xfer(vk_device *d, vk_xfer_fn fn, void *arg)
{
    pthread_mutex_lock(&d->xfer_lock);
    tsr_status st = TSR_OK;
    if (!d->xfer)
        st = tsr__vk_stream_new(d, "transfer", &d->xfer);
    if (st == TSR_OK) {
        tsr__vk_stream_lock(d->xfer);
        fn(d->xfer, arg);
        tsr__vk_stream_unlock(d->xfer);
        st = tsr__vk_stream_sync(d->xfer);
    }
    pthread_mutex_unlock(&d->xfer_lock);
    return st;
}

typedef struct {
    const vk_mem *m;
    size_t off, row, n_rows, t_stride, h_stride;
    char *host;
    bool write;
    uint8_t value;
    const vk_mem *src;
    size_t src_off;
} vk_xfer_args;

static void vk_xfer_rows(vk_stream *s, void *arg)
{
    vk_xfer_args *a = arg;
    for (size_t i = 0; i < a->n_rows; i++) {
        if (a->write)
            tsr__vk_upload_locked(s, a->m, a->off + i * a->t_stride, a->host + i * a->h_stride,
                                  a->row);
        else
            tsr__vk_download_locked(s, a->m, a->off + i * a->t_stride, a->host + i * a->h_stride,
                                    a->row);
    }
}

static void vk_xfer_fill(vk_stream *s, void *arg)
{
    vk_xfer_args *a = arg;
    tsr__vk_fill_locked(s, a->m, a->off, a->row, a->value);
}

static void vk_xfer_copy(vk_stream *s, void *arg)
{
    vk_xfer_args *a = arg;
    tsr__vk_copy_locked(s, a->src, a->src_off, a->m, a->off, a->row);
}

static tsr_status vk_rows(tsr_buf *buf, const tsr_tensor *t, char *host, size_t offset, size_t row,
                          size_t n_rows, size_t t_stride, size_t h_stride, bool write)
{
    vk_buffer *b = buf->context;
    const size_t off = tsr__vk_offset(t) + offset;
    if (b->m.map) {
        char *dev = (char *)b->m.map + off;
        for (size_t i = 0; i < n_rows; i++) {
            if (write)
                memcpy(dev + i * t_stride, host + i * h_stride, row);
            else
                memcpy(host + i * h_stride, dev + i * t_stride, row);
        }
        return TSR_OK;
    }
    vk_xfer_args a = {.m = &b->m,
                      .off = off,
                      .row = row,
                      .n_rows = n_rows,
                      .t_stride = t_stride,
                      .h_stride = h_stride,
                      .host = host,
                      .write = write};
    return vk_xfer(b->d, vk_xfer_rows, &a);
}

/* ---- buffer entries ---------------------------------------------------------------------- */

static void vk_buf_free(tsr_buf *buf)
{
    vk_buffer *b = buf->context;
    /* Queued work may still use the memory: wait for every stream. */
    tsr__vk_device_drain(b->d);
    tsr__vk_buffer_views_free(b);
    tsr__vk_mem_free(b->d, &b->m);
    munmap(b->base, b->reserved);
    atomic_fetch_sub(&b->d->n_buffers, 1);
    free(b);
    free(buf);
}

static void *vk_buf_base(tsr_buf *buf) { return ((vk_buffer *)buf->context)->base; }

static tsr_status vk_buf_set(tsr_buf *buf, tsr_tensor *t, const void *data, size_t offset,
                             size_t size)
{
    return vk_rows(buf, t, (char *)data, offset, size, 1, size, size, true);
}

static tsr_status vk_buf_get(tsr_buf *buf, const tsr_tensor *t, void *data, size_t offset,
                             size_t size)
{
    return vk_rows(buf, t, data, offset, size, 1, size, size, false);
}

static tsr_status vk_buf_set_2d(tsr_buf *buf, tsr_tensor *t, const void *data, size_t offset,
                                size_t row_size, size_t n_rows, size_t t_stride, size_t data_stride)
{
    return vk_rows(buf, t, (char *)data, offset, row_size, n_rows, t_stride, data_stride, true);
}

static tsr_status vk_buf_get_2d(tsr_buf *buf, const tsr_tensor *t, void *data, size_t offset,
                                size_t row_size, size_t n_rows, size_t t_stride, size_t data_stride)
{
    return vk_rows(buf, t, data, offset, row_size, n_rows, t_stride, data_stride, false);
}

static tsr_status vk_fill(vk_buffer *b, size_t off, size_t size, uint8_t value)
{
    if (b->m.map) {
        memset((char *)b->m.map + off, value, size);
        return TSR_OK;
    }
    vk_xfer_args a = {.m = &b->m, .off = off, .row = size, .value = value};
    return vk_xfer(b->d, vk_xfer_fill, &a);
}

static tsr_status vk_buf_memset(tsr_buf *buf, tsr_tensor *t, uint8_t value, size_t offset,
                                size_t size)
{
    return vk_fill(buf->context, tsr__vk_offset(t) + offset, size, value);
}

static tsr_status vk_buf_cpy(tsr_buf *buf, const tsr_tensor *src, tsr_tensor *dst)
{
    vk_buffer *b = buf->context;
    const size_t n = tsr_nbytes(src);
    if (tsr__vk_is_buffer(src->buffer) && tsr__vk_buffer_of(src)->d == b->d) {
        vk_buffer *sb = tsr__vk_buffer_of(src);
        if (b->m.map && sb->m.map) {
            memmove((char *)b->m.map + tsr__vk_offset(dst),
                    (const char *)sb->m.map + tsr__vk_offset(src), n);
            return TSR_OK;
        }
        vk_xfer_args a = {.m = &b->m,
                          .off = tsr__vk_offset(dst),
                          .row = n,
                          .src = &sb->m,
                          .src_off = tsr__vk_offset(src)};
        return vk_xfer(b->d, vk_xfer_copy, &a);
    }
    if (tsr_buf_is_host(src->buffer))
        return vk_buf_set(buf, dst, src->data, 0, n);
    return TSR_ENOTHANDLED;
}

static tsr_status vk_buf_clear(tsr_buf *buf, uint8_t value)
{
    vk_buffer *b = buf->context;
    return vk_fill(b, 0, b->m.size, value);
}

static const struct tsr_buf_i vk_buf_iface = {
    .free = vk_buf_free,
    .get_base = vk_buf_base,
    .set_tensor = vk_buf_set,
    .get_tensor = vk_buf_get,
    .set_tensor_2d = vk_buf_set_2d,
    .get_tensor_2d = vk_buf_get_2d,
    .memset_tensor = vk_buf_memset,
    .cpy_tensor = vk_buf_cpy,
    .clear = vk_buf_clear,
};

/* ---- buffer type ------------------------------------------------------------------------------
 */

static const char *vk_buft_name(tsr_buft *buft) { return ((vk_device *)buft->context)->name; }

static tsr_status vk_buft_alloc(tsr_buft *buft, size_t size, tsr_buf **out)
{
    vk_device *d = buft->context;
    tsr_status st = tsr__vk_device_ready(d);
    if (st != TSR_OK)
        return st;
    if (size > d->max_alloc)
        return tsr__error(TSR_ENOMEM,
                          "%s: %zu bytes exceed the largest allocation (%llu bytes: "
                          "maxMemoryAllocationSize and the heap)",
                          d->name, size, (unsigned long long)d->max_alloc);
    vk_buffer *b = calloc(1, sizeof(*b));
    tsr_buf *buf = calloc(1, sizeof(*buf));
    if (!b || !buf) {
        free(b);
        free(buf);
        return tsr__error(TSR_ENOMEM, "%s: buffer object", d->name);
    }
    b->d = d;
    b->reserved = tsr__align_up(size, 4096);
    void *base =
        mmap(NULL, b->reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        free(b);
        free(buf);
        return tsr__error(TSR_ENOMEM, "%s: reserving %zu bytes of address space", d->name, size);
    }
    b->base = base;
    st = tsr__vk_mem_new(d, size, false, &b->m);
    if (st != TSR_OK) {
        munmap(base, b->reserved);
        free(b);
        free(buf);
        return st;
    }
    if (d->cpu_like)
        tsr__vk_buffer_views_init(b);
    st = tsr__vk_validation_check();
    if (st != TSR_OK) {
        tsr__vk_buffer_views_free(b);
        tsr__vk_mem_free(d, &b->m);
        munmap(base, b->reserved);
        free(b);
        free(buf);
        return st;
    }
    buf->iface = &vk_buf_iface;
    buf->context = b;
    atomic_fetch_add(&d->n_buffers, 1);
    *out = buf;
    return TSR_OK;
}

static size_t vk_buft_alignment(tsr_buft *buft)
{
    (void)buft;
    return VK_ALIGN;
}

static size_t vk_buft_max_size(tsr_buft *buft) { return ((vk_device *)buft->context)->max_alloc; }

const struct tsr_buft_i tsr__vk_buft_iface = {
    .get_name = vk_buft_name,
    .alloc = vk_buft_alloc,
    .get_alignment = vk_buft_alignment,
    .get_max_size = vk_buft_max_size,
};
