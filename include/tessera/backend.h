/* tessera/backend.h — the common backend interface as seen by users:
 * registries, devices, buffer types, buffers, streams (tsr_backend) and
 * events.
 *
 * Every backend (CPU, CUDA, Vulkan, RPC, meta) is used through these calls
 * alone; the function tables behind them are in core/backend_impl.h and only
 * core/backend.c calls through them. Calls check their arguments and return a
 * tsr_status; a failing call leaves nothing half-done.
 *
 * Asynchrony: a tsr_backend is an in-order stream. The *_async calls enqueue
 * and return; host memory passed to them must stay valid and unchanged until
 * the stream is synchronized (or an event recorded after them completes).
 * Errors that happen while enqueued work runs are returned by the next
 * tsr_backend_synchronize.
 */
#ifndef TESSERA_BACKEND_H
#define TESSERA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsr_reg tsr_reg;
typedef struct tsr_dev tsr_dev;
typedef struct tsr_buft tsr_buft;
typedef struct tsr_buf tsr_buf;
typedef struct tsr_backend tsr_backend;
typedef struct tsr_event tsr_event;

typedef enum tsr_dev_type {
    TSR_DEV_CPU = 0,    /* host memory, host cores */
    TSR_DEV_GPU = 1,    /* a discrete accelerator */
    TSR_DEV_IGPU = 2,   /* an integrated accelerator sharing host memory */
    TSR_DEV_REMOTE = 3, /* a device on another machine (RPC) */
    TSR_DEV_META = 4,   /* a virtual device spanning several others */
} tsr_dev_type;

const char *tsr_dev_type_name(tsr_dev_type type); /* "cpu", "gpu", ... */

typedef struct tsr_dev_caps {
    bool async;       /* set/get/copy/compute really run in the background */
    bool events;      /* tsr_event_new works on this device */
    bool host_buffer; /* tsr_dev_host_buft returns pinned host memory */
} tsr_dev_caps;

typedef enum tsr_buf_usage {
    TSR_BUF_USAGE_ANY = 0,
    TSR_BUF_USAGE_WEIGHTS = 1, /* long-lived, read-mostly */
    TSR_BUF_USAGE_COMPUTE = 2, /* intermediates of a graph */
} tsr_buf_usage;

/* ---- registries ----------------------------------------------------------- */
/* One registry per backend family ("cpu", "cuda", "vulkan", "rpc", "meta").
 * Built-in registries register themselves on first use of any of these calls.
 * Registry and device pointers stay valid until the process ends. */

size_t tsr_reg_count(void);
tsr_reg *tsr_reg_get(size_t i);             /* NULL when i is out of range */
tsr_reg *tsr_reg_by_name(const char *name); /* NULL when absent */
const char *tsr_reg_name(tsr_reg *reg);
size_t tsr_reg_dev_count(tsr_reg *reg);
tsr_dev *tsr_reg_dev_get(tsr_reg *reg, size_t i);
/* An extension function by name (e.g. "tsr_comm_init",
 * "tsr_cpu_set_n_threads"), or NULL when the registry has none. Cast it to the
 * typedef of that name given in its header. */
void *tsr_reg_get_proc(tsr_reg *reg, const char *name);
/* Adds a registry created at run time (e.g. by a backend loaded later).
 * TSR_EBUSY when one of that name is already registered. */
tsr_status tsr_reg_add(tsr_reg *reg);

/* ---- devices --------------------------------------------------------------- */

/* Every device of every registry, in registry order. */
size_t tsr_dev_count(void);
tsr_dev *tsr_dev_get(size_t i);
tsr_dev *tsr_dev_by_name(const char *name); /* e.g. "cpu0"; NULL when absent */

const char *tsr_dev_name(tsr_dev *dev);
const char *tsr_dev_description(tsr_dev *dev);
tsr_dev_type tsr_dev_get_type(tsr_dev *dev);
void tsr_dev_memory(tsr_dev *dev, size_t *free_bytes, size_t *total_bytes);
tsr_dev_caps tsr_dev_get_caps(tsr_dev *dev);
tsr_reg *tsr_dev_reg(tsr_dev *dev);
tsr_buft *tsr_dev_buft(tsr_dev *dev);      /* the device's default buffer type */
tsr_buft *tsr_dev_host_buft(tsr_dev *dev); /* pinned host memory, or NULL */
/* Whether the device can compute this node (its op, types and shapes). */
bool tsr_dev_supports_op(tsr_dev *dev, const tsr_tensor *op);
/* Whether the device's kernels can read tensors in buffers of this type. */
bool tsr_dev_supports_buft(tsr_dev *dev, tsr_buft *buft);
/* Opens a new stream on the device. */
tsr_status tsr_backend_new(tsr_dev *dev, tsr_backend **out);

/* ---- buffer types -------------------------------------------------------- */
/* A buffer may span several separately placed memories ("lanes"): a meta
 * device's buffer has one lane per sub-device, so that each device holds
 * exactly its share. Ordinary buffers have one lane. The graph allocator and
 * tsr_ctx_alloc_tensors plan every lane separately. */

#define TSR_MAX_LANES 16

const char *tsr_buft_name(tsr_buft *buft);
tsr_dev *tsr_buft_dev(tsr_buft *buft);
/* Allocates `size` bytes (0 is allowed and gives a valid empty buffer). */
tsr_status tsr_buft_alloc(tsr_buft *buft, size_t size, tsr_buf **out);
size_t tsr_buft_alignment(tsr_buft *buft);
size_t tsr_buft_max_size(tsr_buft *buft);
/* Bytes a tensor takes in this buffer type (≥ tsr_nbytes; padding included). */
size_t tsr_buft_alloc_size(tsr_buft *buft, const tsr_tensor *t);
bool tsr_buft_is_host(tsr_buft *buft); /* data pointers are host addresses */
int tsr_buft_n_lanes(tsr_buft *buft);
/* Bytes t takes in lane i of this buffer type (tsr_buft_alloc_size for 1 lane). */
size_t tsr_buft_alloc_size_lane(tsr_buft *buft, const tsr_tensor *t, int lane);
/* Allocates sizes[i] bytes in each lane i (sizes has tsr_buft_n_lanes
 * entries). tsr_buft_alloc(buft, size) gives `size` bytes in every lane. */
tsr_status tsr_buft_alloc_lanes(tsr_buft *buft, const size_t *sizes, tsr_buf **out);

/* ---- buffers ---------------------------------------------------------------- */

void tsr_buf_free(tsr_buf *buf); /* NULL is allowed */
tsr_buft *tsr_buf_buft(tsr_buf *buf);
size_t tsr_buf_size(tsr_buf *buf);
void *tsr_buf_base(tsr_buf *buf);
bool tsr_buf_is_host(tsr_buf *buf);
int tsr_buf_n_lanes(tsr_buf *buf);
size_t tsr_buf_lane_size(tsr_buf *buf, int lane); /* 0 for a lane out of range */
void tsr_buf_set_usage(tsr_buf *buf, tsr_buf_usage usage);
tsr_buf_usage tsr_buf_get_usage(tsr_buf *buf);
/* Fills the whole buffer with `value` (blocking). */
tsr_status tsr_buf_clear(tsr_buf *buf, uint8_t value);
/* Places t (not a view) at `offset` in buf: sets t->buffer and t->data.
 * TSR_ERANGE when it does not fit, TSR_EINVAL when misaligned. */
tsr_status tsr_buf_place_tensor(tsr_buf *buf, tsr_tensor *t, size_t offset);
/* Places t at offsets[i] in each lane i of a multi-lane buffer (checked for
 * fit and alignment per lane). tsr_buf_place_tensor on such a buffer uses the
 * same offset in every lane. */
tsr_status tsr_buf_place_tensor_lanes(tsr_buf *buf, tsr_tensor *t, const size_t *offsets);
/* Gives a view its buffer and data from its view_src (after that is placed). */
tsr_status tsr_view_init(tsr_tensor *view);
/* Allocates one buffer holding every unallocated non-view tensor of ctx and
 * initializes the views; *out is NULL when there was nothing to allocate. */
tsr_status tsr_ctx_alloc_tensors(tsr_ctx *ctx, tsr_buft *buft, tsr_buf **out);

/* ---- tensor data, blocking ------------------------------------------------ */
/* Offsets and sizes are in bytes within the tensor's extent (tsr_nbytes);
 * out-of-range requests return TSR_ERANGE. */

tsr_status tsr_tensor_set(tsr_tensor *t, const void *data, size_t offset, size_t size);
tsr_status tsr_tensor_get(const tsr_tensor *t, void *data, size_t offset, size_t size);
/* n_rows rows of row_size bytes: row i at offset + i·t_stride in the tensor,
 * at data + i·data_stride on the host. */
tsr_status tsr_tensor_set_2d(tsr_tensor *t, const void *data, size_t offset, size_t row_size,
                             size_t n_rows, size_t t_stride, size_t data_stride);
tsr_status tsr_tensor_get_2d(const tsr_tensor *t, void *data, size_t offset, size_t row_size,
                             size_t n_rows, size_t t_stride, size_t data_stride);
tsr_status tsr_tensor_memset(tsr_tensor *t, uint8_t value, size_t offset, size_t size);
/* Copies all of src into dst (same type and shape, both contiguous); works
 * between any two buffers, through host memory when no direct path exists. */
tsr_status tsr_tensor_copy(const tsr_tensor *src, tsr_tensor *dst);

/* ---- streams (backends) ----------------------------------------------------- */

void tsr_backend_free(tsr_backend *backend); /* waits for queued work; NULL allowed */
const char *tsr_backend_name(tsr_backend *backend);
tsr_dev *tsr_backend_dev(tsr_backend *backend);

tsr_status tsr_backend_set_async(tsr_backend *backend, tsr_tensor *t, const void *data,
                                 size_t offset, size_t size);
tsr_status tsr_backend_get_async(tsr_backend *backend, const tsr_tensor *t, void *data,
                                 size_t offset, size_t size);
tsr_status tsr_backend_set_2d_async(tsr_backend *backend, tsr_tensor *t, const void *data,
                                    size_t offset, size_t row_size, size_t n_rows, size_t t_stride,
                                    size_t data_stride);
tsr_status tsr_backend_get_2d_async(tsr_backend *backend, const tsr_tensor *t, void *data,
                                    size_t offset, size_t row_size, size_t n_rows, size_t t_stride,
                                    size_t data_stride);
/* Copies src (written by work on src_backend) into dst (on dst_backend),
 * ordered after the work already queued on src_backend and on dst_backend,
 * and before the work queued later on dst_backend. Work queued later on
 * src_backend is NOT ordered after the copy: before overwriting src there,
 * make src_backend wait on an event recorded on dst_backend after the copy.
 * Same type and shape, both contiguous. */
tsr_status tsr_backend_copy_async(tsr_backend *src_backend, tsr_backend *dst_backend,
                                  const tsr_tensor *src, tsr_tensor *dst);
/* Enqueues every node of g; g and its tensors must stay alive and unchanged
 * until the work completes. TSR_EUNSUPPORTED names the first node the device
 * cannot run. */
tsr_status tsr_backend_graph_compute_async(tsr_backend *backend, tsr_graph *g);
/* graph_compute_async + synchronize. */
tsr_status tsr_backend_graph_compute(tsr_backend *backend, tsr_graph *g);
/* Waits for all queued work; returns the first error it raised (and clears it). */
tsr_status tsr_backend_synchronize(tsr_backend *backend);

/* ---- events ---------------------------------------------------------------- */

tsr_status tsr_event_new(tsr_dev *dev, tsr_event **out);
/* NULL allowed. Work queued on any stream that waits on the event must be
 * finished first (synchronize those streams): an event outlives its waits. */
void tsr_event_free(tsr_event *event);
/* Marks the current end of backend's queue. The backend must be on the
 * event's device. Re-recording moves the mark. */
tsr_status tsr_event_record(tsr_event *event, tsr_backend *backend);
/* Makes backend's later work wait until the event's mark, as recorded when
 * this is called, is reached: re-recording the event afterwards does not
 * move what this waits for. The event may belong to another device or
 * backend family. Never-recorded events are complete. */
tsr_status tsr_event_wait(tsr_backend *backend, tsr_event *event);
/* Blocks the host until the event's mark is reached. */
tsr_status tsr_event_synchronize(tsr_event *event);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_BACKEND_H */
