/* core/backend_impl.h — the function tables every backend fills.
 *
 * Each object is {table, owner, context}. Only core/backend.c calls through a
 * table: it has already checked the arguments (non-NULL objects, tensors
 * allocated in a buffer of the right kind, offsets and sizes inside the
 * tensor, matching shapes), so an entry only does its job. Entries marked
 * "optional" may be NULL; the default that core/backend.c applies is stated.
 * Tables are filled with designated initializers.
 *
 * Contract vocabulary: "blocks" = returns when done; "async" = enqueues on the
 * stream and returns; host pointers passed to async entries stay valid until
 * the stream is synchronized.
 */
#ifndef TESSERA_CORE_BACKEND_IMPL_H
#define TESSERA_CORE_BACKEND_IMPL_H

#include "tessera/backend.h"

/* ---- registry ---------------------------------------------------------------- */

struct tsr_reg_i {
    /* Static name ("cpu"). Required. */
    const char *(*get_name)(tsr_reg *reg);
    /* Number of devices now; may grow over time (RPC). Required. */
    size_t (*get_dev_count)(tsr_reg *reg);
    /* Device i < count; owned by the registry, valid forever. Required. */
    tsr_dev *(*get_dev)(tsr_reg *reg, size_t i);
    /* Extension function by name, or NULL. Optional: default NULL. */
    void *(*get_proc)(tsr_reg *reg, const char *name);
};

struct tsr_reg {
    const struct tsr_reg_i *iface;
    void *context;
};

/* ---- device ------------------------------------------------------------------ */

struct tsr_dev_i {
    /* Short unique name ("cpu0", "vulkan1", "rpc0:cpu0"). Required. */
    const char *(*get_name)(tsr_dev *dev);
    /* Human-readable description. Optional: default = name. */
    const char *(*get_description)(tsr_dev *dev);
    /* Device kind. Required. */
    tsr_dev_type (*get_type)(tsr_dev *dev);
    /* Free and total bytes; blocks briefly. Required. */
    void (*get_memory)(tsr_dev *dev, size_t *free_bytes, size_t *total_bytes);
    /* Capabilities. Required. */
    tsr_dev_caps (*get_caps)(tsr_dev *dev);
    /* Default buffer type, owned by the device. Required. */
    tsr_buft *(*get_buft)(tsr_dev *dev);
    /* Pinned host buffer type. Optional: default NULL. */
    tsr_buft *(*get_host_buft)(tsr_dev *dev);
    /* Can the device compute this node? Must not block or allocate. Required. */
    bool (*supports_op)(tsr_dev *dev, const tsr_tensor *op);
    /* Can kernels read buffers of this type? Optional: default = only the
     * device's own buffer types (default and host). */
    bool (*supports_buft)(tsr_dev *dev, tsr_buft *buft);
    /* Creates a stream; *out owned by the caller (freed via the backend's
     * free). Returns TSR_ENOMEM / TSR_EDEVICE on failure. Required. */
    tsr_status (*backend_new)(tsr_dev *dev, tsr_backend **out);
    /* Creates an event for streams of this device. Optional: NULL means the
     * device has no events; core then emulates them by synchronizing. */
    tsr_status (*event_new)(tsr_dev *dev, tsr_event **out);
    /* Frees an event created by event_new. Required with event_new. */
    void (*event_free)(tsr_dev *dev, tsr_event *event);
    /* Blocks until the event's mark is reached. Required with event_new. */
    tsr_status (*event_synchronize)(tsr_dev *dev, tsr_event *event);
    /* Copies src's mark into dst (both events of this device), so that a wait
     * on dst waits for what src marked at the time of the copy whatever src
     * is re-recorded to later. Optional: without it, streams that wait on
     * this device's events hold the event itself. */
    tsr_status (*event_copy)(tsr_dev *dev, tsr_event *dst, const tsr_event *src);
};

struct tsr_dev {
    const struct tsr_dev_i *iface;
    tsr_reg *reg;
    void *context;
};

/* ---- buffer type ---------------------------------------------------------- */

struct tsr_buft_i {
    /* Static name. Required. */
    const char *(*get_name)(tsr_buft *buft);
    /* Allocates size ≥ 1 bytes (core handles size 0 by asking for 1); fills
     * *out. TSR_ENOMEM when the memory is not there. Required. */
    tsr_status (*alloc)(tsr_buft *buft, size_t size, tsr_buf **out);
    /* Alignment of data addresses and of tensor offsets. Required. */
    size_t (*get_alignment)(tsr_buft *buft);
    /* Largest single allocation. Optional: default SIZE_MAX. */
    size_t (*get_max_size)(tsr_buft *buft);
    /* Bytes a tensor needs (≥ tsr_nbytes). Optional: default tsr_nbytes. */
    size_t (*get_alloc_size)(tsr_buft *buft, const tsr_tensor *t);
    /* Host-addressable memory. Optional: default false. */
    bool (*is_host)(tsr_buft *buft);
    /* Number of separately placed memories ("lanes") a buffer of this type
     * spans, e.g. one per sub-device of a meta device; at most TSR_MAX_LANES.
     * Optional: default 1. The entries below are required when it is > 1. */
    int (*get_n_lanes)(tsr_buft *buft);
    /* Bytes t needs in lane i (may be 0). */
    size_t (*get_alloc_size_lane)(tsr_buft *buft, const tsr_tensor *t, int lane);
    /* Allocates sizes[i] bytes in each lane i (core passes at least 1). */
    tsr_status (*alloc_lanes)(tsr_buft *buft, const size_t *sizes, tsr_buf **out);
    /* Whether t (a tensor to place, or a view of one) can live in this buffer
     * type; an error names why (e.g. a meta device's split rules). Called by
     * the allocators before sizing. Optional: default TSR_OK. */
    tsr_status (*check_tensor)(tsr_buft *buft, const tsr_tensor *t);
};

struct tsr_buft {
    const struct tsr_buft_i *iface;
    tsr_dev *dev;
    void *context;
};

/* ---- buffer ------------------------------------------------------------------ */

struct tsr_buf_i {
    /* Releases the memory and the tsr_buf itself; blocks until no queued
     * work uses it. Required. */
    void (*free)(tsr_buf *buf);
    /* Base address (host or device address space). Required. */
    void *(*get_base)(tsr_buf *buf);
    /* Called when a tensor is placed in the buffer (e.g. to set extra).
     * Optional: default nothing. */
    tsr_status (*init_tensor)(tsr_buf *buf, tsr_tensor *t);
    /* Blocking byte writes/reads at offset within t. Required. */
    tsr_status (*set_tensor)(tsr_buf *buf, tsr_tensor *t, const void *data, size_t offset,
                             size_t size);
    tsr_status (*get_tensor)(tsr_buf *buf, const tsr_tensor *t, void *data, size_t offset,
                             size_t size);
    /* Blocking strided writes/reads (see tsr_tensor_set_2d). Optional:
     * default = one set/get per row. */
    tsr_status (*set_tensor_2d)(tsr_buf *buf, tsr_tensor *t, const void *data, size_t offset,
                                size_t row_size, size_t n_rows, size_t t_stride,
                                size_t data_stride);
    tsr_status (*get_tensor_2d)(tsr_buf *buf, const tsr_tensor *t, void *data, size_t offset,
                                size_t row_size, size_t n_rows, size_t t_stride,
                                size_t data_stride);
    /* Blocking fill of [offset, offset+size) of t. Required. */
    tsr_status (*memset_tensor)(tsr_buf *buf, tsr_tensor *t, uint8_t value, size_t offset,
                                size_t size);
    /* Blocking copy from src (in any buffer) into dst (in this buffer).
     * Returns TSR_ENOTHANDLED when it has no direct path; core then copies
     * through host memory. Optional: default = through host memory. */
    tsr_status (*cpy_tensor)(tsr_buf *buf, const tsr_tensor *src, tsr_tensor *dst);
    /* Blocking fill of the whole buffer. Required. */
    tsr_status (*clear)(tsr_buf *buf, uint8_t value);
    /* Places t at offsets[i] of each lane i; core has set t->buffer and
     * t->data (lane 0's address space). Required for multi-lane buffers;
     * when present it is called instead of init_tensor for non-view
     * tensors. */
    tsr_status (*init_tensor_lanes)(tsr_buf *buf, tsr_tensor *t, const size_t *offsets);
    /* Forgets the per-tensor state of every tensor placed so far (the memory
     * stays): the graph allocator calls it before placing a graph anew.
     * Optional: default nothing. */
    void (*reset)(tsr_buf *buf);
};

struct tsr_buf {
    const struct tsr_buf_i *iface;
    tsr_buft *buft;
    void *context;
    size_t size; /* the largest lane */
    int n_lanes; /* set by core */
    size_t lane_size[TSR_MAX_LANES];
    tsr_buf_usage usage;
};

/* ---- backend (stream) -------------------------------------------------------- */

struct tsr_backend_i {
    /* Static or backend-owned name. Required. */
    const char *(*get_name)(tsr_backend *backend);
    /* Waits for queued work, then releases the stream and the tsr_backend
     * itself. Required. */
    void (*free)(tsr_backend *backend);
    /* Async host→tensor and tensor→host byte copies. Optional: default =
     * synchronize the stream, then the blocking buffer entry. */
    tsr_status (*set_tensor_async)(tsr_backend *backend, tsr_tensor *t, const void *data,
                                   size_t offset, size_t size);
    tsr_status (*get_tensor_async)(tsr_backend *backend, const tsr_tensor *t, void *data,
                                   size_t offset, size_t size);
    /* Async strided forms. Optional: default = one async call per row. */
    tsr_status (*set_tensor_2d_async)(tsr_backend *backend, tsr_tensor *t, const void *data,
                                      size_t offset, size_t row_size, size_t n_rows,
                                      size_t t_stride, size_t data_stride);
    tsr_status (*get_tensor_2d_async)(tsr_backend *backend, const tsr_tensor *t, void *data,
                                      size_t offset, size_t row_size, size_t n_rows,
                                      size_t t_stride, size_t data_stride);
    /* Async copy src → dst, called on the *destination* backend; ordered
     * after the work queued so far on both backends and before dst_backend's
     * later work (see tsr_backend_copy_async). Returns TSR_ENOTHANDLED when this pair
     * has no async path (core then synchronizes src_backend and copies
     * through the blocking path). Optional: default = that fallback. */
    tsr_status (*cpy_tensor_async)(tsr_backend *src_backend, tsr_backend *dst_backend,
                                   const tsr_tensor *src, tsr_tensor *dst);
    /* Enqueues every node of g flagged TSR_TENSOR_FLAG_COMPUTE. Async.
     * Required. */
    tsr_status (*graph_compute)(tsr_backend *backend, tsr_graph *g);
    /* Blocks until queued work is done; returns (and clears) the first error
     * raised by queued work. Required. */
    tsr_status (*synchronize)(tsr_backend *backend);
    /* Marks the queue's current end in event (which belongs to this device).
     * Async. Required when the device has event_new. */
    tsr_status (*event_record)(tsr_backend *backend, tsr_event *event);
    /* Later work waits for event, which may come from any device or family.
     * Async. Optional: default = tsr_event_synchronize on the host. */
    tsr_status (*event_wait)(tsr_backend *backend, tsr_event *event);
};

struct tsr_backend {
    const struct tsr_backend_i *iface;
    tsr_dev *dev;
    void *context;
};

/* ---- event ---------------------------------------------------------------------- */

struct tsr_event {
    tsr_dev *dev;
    void *context;
    /* For devices without events, core records the backend to synchronize. */
    tsr_backend *emulated;
};

/* ---- helpers for backends ----------------------------------------------------- */

/* Registers a built-in registry's constructor; called by core/registry.c. */
typedef tsr_reg *(*tsr__reg_init_fn)(void);

/* The checks every op constructor already applied: node n has a known op,
 * valid sources and shapes. Backends use this for a "supports everything"
 * answer. */
bool tsr__node_is_well_formed(const tsr_tensor *n);
/* A new event of src's device holding src's current mark (see event_copy),
 * for a stream that waits on src later; TSR_ENOTHANDLED when the device
 * cannot copy marks (the waiter then holds src itself). */
tsr_status tsr__event_snapshot(const tsr_event *src, tsr_event **out);
/* Copies src's mark into dst, an event of the same device. */
tsr_status tsr__event_copy(tsr_event *dst, const tsr_event *src);

#endif /* TESSERA_CORE_BACKEND_IMPL_H */
